"""Which compiled program is the training step: the one rule every command calls.

A *program* is one compiled XLA executable: its module name and its program id
(``program_id`` in XLA's ``XlaModule`` ranges; the ``NNNN`` of ``module_NNNN.<name>.*`` in
the dump; the start-up hook records it on every backend).  One jit name can be several
programs: a static argument, a second compile for a memory printout, inputs whose types change
after the first step.  The rule:

1. the programs that ran (autotuning and other compile work left out by the caller); where the
   script named its step (``annotate.compiled_step``), only the programs of that name;
2. of those, the programs that ran more than once (all of them, if none did): a program run once
   (an initialization, a blocking collective before the loop) is not the step while another repeats;
3. then the most GPU time, the most executions, the most host time, the earliest first run;
4. where no execution is known at all: the largest program in the XLA dump (of the named one,
   if named).

The other programs of the step's name are said once ("jit_step also ran as another program
3 times: not the step"): their executions are not steps and their HLO gives no number.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


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
    return (p.executions <= 1, -p.gpu_ns, -p.executions, -p.host_ns, p.first_ns, p.name, p.program_id or 0)


def _criterion(step: Program, rivals: list[Program], declared: bool) -> str:
    """Why *step* beat *rivals* (the other programs that ran), in a few words."""
    head = "the step the script handed to annotate.compiled_step" if declared else ""
    if not rivals:
        return head or "the only program that ran"
    repeated = [r for r in rivals if r.executions > 1]
    if step.executions > 1 and not repeated:
        why = "the only program that ran more than once"
    elif step.gpu_ns and any(r.gpu_ns < step.gpu_ns for r in repeated or rivals):
        why = "the most GPU time" + (" of the programs that ran more than once" if step.executions > 1 else "")
    elif any(r.executions == step.executions for r in repeated or rivals):
        why = "as often as another, with the most host time"
    else:
        why = "the program that ran most often"
    return f"{head}, {why}" if head else why


def _others_of_name(step: Program, ran: list[Program]) -> str | None:
    same = [p for p in ran if p.name == step.name and p is not step]
    if not same:
        return None
    counts = sorted((p.executions for p in same), reverse=True)
    if len(same) == 1:
        return f"{step.name} also ran as another program {_times(counts[0])}: not the step"
    said = ", ".join(_times(c) for c in counts[:-1]) + f" and {_times(counts[-1])}"
    return f"{step.name} also ran as {len(same)} other programs, {said}: not the step"


def _rivals_text(rivals: list[Program], step_name: str) -> str:
    """`` (jit_data ran 5 times, jit_scanned ran as 2 programs, once each)``: the other names, by rank."""
    runs: dict[str, list[int]] = {}
    for p in rivals:
        if p.name != step_name:
            runs.setdefault(p.name, []).append(p.executions)
    if not runs:
        return ""
    shown = []
    for name, counts in list(runs.items())[:2]:
        if len(counts) == 1:
            shown.append(f"{name} ran {_times(counts[0])}")
        elif len(set(counts)) == 1:
            shown.append(f"{name} ran as {len(counts)} programs, {_times(counts[0])} each")
        else:
            said = ", ".join(_times(c) for c in counts[:-1]) + f" and {_times(counts[-1])}"
            shown.append(f"{name} ran as {len(counts)} programs, {said}")
    if len(runs) > 2:
        more = len(runs) - 2
        shown.append(f"{more} more program name{'s' if more > 1 else ''}")
    return f" ({', '.join(shown)})"


def choose(programs: Iterable[Program], declared: str | None = None) -> StepProgram:
    """The step's program by the rule of the module docstring."""
    progs = list(programs)
    ran = sorted((p for p in progs if p.executions > 0), key=_rank_key)
    named = [p for p in ran if declared and p.name == declared]
    pool = named or ran
    if pool:
        step = pool[0]
        how = (
            f"{program_label(step.name, step.program_id)}: ran {_times(step.executions)}, "
            f"{_criterion(step, pool[1:], bool(named))}{_rivals_text([p for p in ran if p is not step], step.name)}"
        )
        return StepProgram(step.name, step.program_id, step.executions, how, _others_of_name(step, ran))
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
