"""Which compiled program is the training step: the one rule every command calls.

A *program* is one compiled XLA executable: its module name and its program id
(``program_id`` in XLA's ``XlaModule`` ranges; the ``NNNN`` of ``module_NNNN.<name>.*`` in
the dump; the start-up hook records it on every backend).  One jit name can be several
programs: a static argument (a logging variant every few steps), a second compile for a memory
printout, inputs whose types change after the first step.  The rule:

1. the programs that ran (autotuning and other compile work left out by the caller); where the
   script named its step (``annotate.compiled_step``), only the programs of that name;
2. the programs of one jit name are counted together (a training step compiled as two programs,
   27 and 24 executions, ran 51 times); the names that ran more than once (all of them, if none
   did): a function run once (an initialization, a blocking collective before the loop) is not
   the step while another repeats;
3. of those, the name with the most work: its FLOPs (per program, from XLA's cost analysis,
   times its executions) where they are known, then the most GPU time, the most executions, the
   most host time, the earliest first run; so a helper jitted once per step (a learning-rate
   schedule: 51 executions, 16 FLOPs) never wins by its count;
4. of that name's programs, the step's is the one that repeats, with the most GPU time, the most
   executions, the most host time, the earliest first run;
5. where no execution is known at all: the largest program in the XLA dump (of the named one,
   if named).

The other programs of the step's name are said once ("jit_step also ran as another program
3 times: not the step"): their executions are not steps and their HLO gives no number.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from profiler.units import si


@dataclass(frozen=True)
class Program:
    """One compiled program and what is known of its runs."""

    name: str
    program_id: int | None = None
    executions: int = 0
    gpu_ns: int = 0
    host_ns: int = 0
    first_ns: int = 0
    size: int = 0  # bytes of its optimized HLO in the dump (the fallback when nothing ran)
    flops: float | None = None  # per execution, XLA's cost analysis of its module (None: not known)


@dataclass(frozen=True)
class StepProgram:
    """The step's program (``name`` None: none), and how it was chosen, in one sentence."""

    name: str | None
    program_id: int | None
    executions: int
    how: str
    others: str | None = None  # the other programs of the same name, said once

    @property
    def label(self) -> str | None:
        return program_label(self.name, self.program_id) if self.name else None

    @property
    def sentence(self) -> str:
        """How the step was chosen and, once, the other programs of its name."""
        return self.how + (f"; {self.others}" if self.others else "")

    def is_program(self, name: str | None, program_id: int | None) -> bool:
        """Whether (*name*, *program_id*) is this program (an unknown id on either side: by name)."""
        if name != self.name:
            return False
        return program_id is None or self.program_id is None or int(program_id) == self.program_id

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "program_id": self.program_id, "executions": self.executions, "how": self.sentence}


NO_PROGRAM = StepProgram(None, None, 0, "no compiled program ran, and the XLA dump holds none")


def program_label(name: str | None, program_id: int | None) -> str:
    """``jit_step (program 48)``: how a program is named everywhere (the name alone without an id)."""
    return f"{name} (program {program_id})" if program_id is not None else str(name)


def _times(n: int) -> str:
    return "once" if n == 1 else ("twice" if n == 2 else f"{n} times")


def _rank_key(p: Program) -> tuple[bool, int, int, int, int, str, int]:
    """Within one jit name: the program that repeats, then GPU time, executions, host time, first run."""
    return (p.executions <= 1, -p.gpu_ns, -p.executions, -p.host_ns, p.first_ns, p.name, p.program_id or 0)


@dataclass(frozen=True)
class NameRuns:
    """The programs of one jit name that ran, counted together."""

    name: str
    programs: tuple[Program, ...]  # ranked by ``_rank_key``: the first is the step's program

    @property
    def executions(self) -> int:
        return sum(p.executions for p in self.programs)

    @property
    def repeats(self) -> bool:
        """Whether one of its programs ran more than once (two programs run once each do not repeat)."""
        return any(p.executions > 1 for p in self.programs)

    @property
    def work(self) -> float:
        """FLOPs over every execution of its programs whose FLOPs are known (0 when none is)."""
        return float(sum(p.executions * p.flops for p in self.programs if p.flops))

    @property
    def gpu_ns(self) -> int:
        return sum(p.gpu_ns for p in self.programs)

    @property
    def host_ns(self) -> int:
        return sum(p.host_ns for p in self.programs)

    @property
    def first_ns(self) -> int:
        return min(p.first_ns for p in self.programs)

    def key(self) -> tuple[bool, float, int, int, int, int, str]:
        """Rule 2 and 3: repeats, then work, GPU time, executions, host time, first run."""
        return (not self.repeats, -self.work, -self.gpu_ns, -self.executions, -self.host_ns, self.first_ns, self.name)


def by_name(ran: Iterable[Program]) -> list[NameRuns]:
    """The programs that ran, grouped by jit name, the step's name first (rule 2 and 3)."""
    groups: dict[str, list[Program]] = {}
    for p in ran:
        groups.setdefault(p.name, []).append(p)
    names = [NameRuns(n, tuple(sorted(ps, key=_rank_key))) for n, ps in groups.items()]
    return sorted(names, key=NameRuns.key)


def _criterion(step: NameRuns, rivals: list[NameRuns], declared: bool) -> str:
    """Why *step*'s name beat *rivals* (the other names that ran), in a few words."""
    head = "the step the script handed to annotate.compiled_step" if declared else ""
    noun = "jit name" if len(step.programs) > 1 else "program"
    if not rivals:
        return head or (_within(step) if len(step.programs) > 1 else "the only program that ran")
    repeated = [r for r in rivals if r.repeats]
    pool = repeated if step.repeats and repeated else rivals
    of = f" of the {noun}s that ran more than once" if step.repeats else ""
    if step.repeats and not repeated:
        why = f"the only {noun} that ran more than once"
    elif step.work and all(r.work < step.work for r in pool):
        why = f"the most work ({si(step.work)}FLOP in all){of}"
    elif step.gpu_ns and any(r.gpu_ns < step.gpu_ns for r in pool):
        why = f"the most GPU time{of}"
    elif any(r.executions == step.executions for r in pool):
        why = "as often as another, with the most host time"
    else:
        why = f"the {noun} that ran most often"
    return f"{head}, {why}" if head else why


def _within(name: NameRuns) -> str:
    """Why the step's program beat the other programs of its name (rule 4), in a few words."""
    step, others = name.programs[0], name.programs[1:]
    if step.executions > 1 and all(o.executions <= 1 for o in others):
        return "the only one of its programs that ran more than once"
    if step.gpu_ns and all(o.gpu_ns < step.gpu_ns for o in others):
        return "the most GPU time of its programs"
    return "the one of its programs that ran most often"


def _counted_together(step: NameRuns) -> str:
    """`` (9 times with its other programs)``: a name's executions counted together, when it has several."""
    if len(step.programs) < 2:
        return ""
    return f" ({_times(step.executions)} with its other program{'s' if len(step.programs) > 2 else ''})"


def _others_of_name(step: Program, ran: list[Program]) -> str | None:
    same = [p for p in ran if p.name == step.name and p is not step]
    if not same:
        return None
    counts = sorted((p.executions for p in same), reverse=True)
    if len(same) == 1:
        return f"{step.name} also ran as another program {_times(counts[0])}: not the step"
    said = ", ".join(_times(c) for c in counts[:-1]) + f" and {_times(counts[-1])}"
    return f"{step.name} also ran as {len(same)} other programs, {said}: not the step"


def _rivals_text(rivals: list[NameRuns]) -> str:
    """`` (jit_data ran 5 times, jit_scanned ran as 2 programs, once each)``: the other names, by rank."""
    if not rivals:
        return ""
    shown = []
    for r in rivals[:2]:
        counts = sorted((p.executions for p in r.programs), reverse=True)
        if len(counts) == 1:
            shown.append(f"{r.name} ran {_times(counts[0])}")
        elif len(set(counts)) == 1:
            shown.append(f"{r.name} ran as {len(counts)} programs, {_times(counts[0])} each")
        else:
            said = ", ".join(_times(c) for c in counts[:-1]) + f" and {_times(counts[-1])}"
            shown.append(f"{r.name} ran as {len(counts)} programs, {said}")
    if len(rivals) > 2:
        more = len(rivals) - 2
        shown.append(f"{more} more program name{'s' if more > 1 else ''}")
    return f" ({', '.join(shown)})"


def choose(programs: Iterable[Program], declared: str | None = None) -> StepProgram:
    """The step's program by the rule of the module docstring."""
    progs = list(programs)
    ran = [p for p in progs if p.executions > 0]
    named = [p for p in ran if declared and p.name == declared]
    names = by_name(named or ran)
    if names:
        top = names[0]
        step = top.programs[0]
        rivals = names[1:] if not named else [n for n in by_name(ran) if n.name != top.name]
        how = (
            f"{program_label(step.name, step.program_id)}: ran {_times(step.executions)}{_counted_together(top)}, "
            f"{_criterion(top, names[1:], bool(named))}{_rivals_text(rivals)}"
        )
        return StepProgram(step.name, step.program_id, step.executions, how, _others_of_name(step, list(top.programs)))
    dumped = [p for p in progs if p.size > 0]
    dumped = [p for p in dumped if declared and p.name == declared] or dumped
    if not dumped:
        return NO_PROGRAM
    best = max(dumped, key=lambda p: (p.size, p.program_id or 0))
    what = "the step the script handed to annotate.compiled_step, " if declared and best.name == declared else ""
    how = (
        f"{program_label(best.name, best.program_id)}: {what}the largest program in the XLA dump "
        "(no execution of any program was recorded)"
    )
    return StepProgram(best.name, best.program_id, 0, how)


def module_flops(compiled: dict[str, Any] | None) -> dict[tuple[str, int], float]:
    """(module name, program id) -> FLOPs per execution, from a run folder's ``compiled.json``
    (its modules' cost analysis); empty without one."""
    out: dict[tuple[str, int], float] = {}
    for m in (compiled or {}).get("modules") or []:
        flops = (m.get("cost") or {}).get("flops")
        if m.get("name") and isinstance(m.get("id"), int) and m["id"] >= 0 and isinstance(flops, (int, float)):
            out[(str(m["name"]), int(m["id"]))] = float(flops)
    return out


def with_flops(programs: Iterable[Program], flops: dict[tuple[str, int], float]) -> list[Program]:
    """*programs* with their FLOPs per execution from *flops* (by name and program id) where known."""
    return [
        replace(p, flops=flops.get((p.name, p.program_id))) if p.program_id is not None and p.flops is None else p
        for p in programs
    ]
