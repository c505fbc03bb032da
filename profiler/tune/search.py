"""Which placements to compile, in what order, and when to stop.

Every candidate costs a compile, so the search prunes before compiling:

1. *bounds*: every name recomputed (``resting``: inputs kept) and every name kept on the
   device.  Keeping everything is not always the fastest: a value XLA would fuse into its
   users must then be written out and read back (seen on the known-answer script, where
   keeping its large elementwise activation is slower than recomputing it), so the search
   goes on either way.  When recomputing everything does not fit, every name offloaded is
   tried too; when that does not fit either, nothing will: stop.
2. *alone*: each name moved alone from the resting candidate to the device and to host
   memory.  A move that is not faster (or, while nothing fits, not smaller) than the
   resting candidate is pruned: it is never tried in a combination.
3. *together*: the promising moves, the largest gain first, added one by one to the
   best candidate so far; a move that no longer helps (it does not fit beside the
   others, or its copy no longer hides) is left out, its name's other promising move
   tried instead.
4. *one change*: from the best candidate (the greedy path's, a bound's or a seed's), every
   single change of one promising name's placement; the best that helps is taken and the
   round repeats, until none helps (a local optimum) or the compile budget runs out.

*Incumbents* (``seeds``: the placements other searches of the same step chose, on other links or
limits, already compiled) are predicted here first, before any compile, and the one-change
rounds start from the best of them when it beats the greedy path.  A compiled placement only
gains from a faster link, so a faster link's search seeded with a slower link's choice never
chooses a slower step than that one (the search alone is greedy: it is not monotone in the link).

*Screen*: a change is compiled only when it is predicted to help over the best step known so far
(the search's, or a preset that places the names, MaxText's, an earlier tune compiled: ``known``,
free to read; never a JAX policy, which saves what the names do not tag and so is no placement the
search could reach).  A placement compiled already is never screened: it costs no compile.  The
prediction adds what each name did alone (step 2: its effect on the step is close to additive) to a
compiled placement: for a one-change round, the incumbent's step plus the difference of the moved name's
two placements' effects alone (measured on 106 compiled pairs of MaxText's tiny config, the example
and the known-answer script: median 0.09%, 90% within 0.34%, the largest 10.8%;
benchmarks/additive_error.py); for the together step, the resting candidate's step plus
the promising moves' gains (the greedy path's end: not built when even it cannot beat the best
known).  A change predicted no better than the best known by ``SCREEN`` of its step could only win
by the prediction's error, nine times in ten inside the tie the verdict calls (1% with XLA's own
kernel estimates, 10% for the roofline alone, 3% calibrated: docs/tune.md): it is not compiled
(``screened``), and ``--no-screen`` compiles it.

"Helps" means faster by more than ``TOLERANCE`` of the step (the model's numbers are
exact, its meaning is not), within the memory limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from profiler.tune.candidate import Candidate, Name, everywhere, resting
from profiler.tune.evaluate import Outcome

TOLERANCE = 0.001  # a change helps when it is faster by more than 0.1% of the step
SCREEN = TOLERANCE  # a change is compiled when predicted (per-name effects added) faster than the best known by this


class Evaluator(Protocol):
    compiles: int

    def __call__(self, c: Candidate) -> Outcome | None: ...

    def cached(self, c: Candidate) -> bool: ...


@dataclass
class Tried:
    candidate: Candidate
    outcome: Outcome | None
    stage: str  # bounds, alone, together, one change, preset
    compile_no: int | None  # the compile that made it (None: the same request was compiled before)


@dataclass
class Search:
    tried: list[Tried] = field(default_factory=list)
    best: Tried | None = None
    stop: str = ""
    pruned: list[dict[str, str]] = field(default_factory=list)
    alone: dict[tuple[str, str], Tried] = field(default_factory=dict)
    base: Tried | None = None
    compiles: int = 0
    only: set[str] | None = None  # the names searched (--names); None: all
    budget_cut: bool = False  # the compile budget stopped the search before a local optimum
    budget: int = 0
    screened: list[dict[str, Any]] = field(default_factory=list)  # changes not compiled: predicted not to help
    screen: float | None = SCREEN  # the predicted gain over the best known a change needs to be compiled
    known: int = 0  # kept presets of the names (compiled outside the search) the screen compared with


class OutOfBudget(Exception):
    pass


def helps(a: Outcome | None, b: Outcome | None) -> bool:
    """Whether *a* is better than *b* by the search's rule: fitting beats not fitting; between
    fitting ones faster by more than TOLERANCE; between others, less device memory."""
    if a is None:
        return False
    if b is None:
        return True
    if a.fits != b.fits:
        return a.fits
    if not a.fits:
        return (a.device_bytes or 0) < (b.device_bytes or 0)
    return a.step_ns < b.step_ns * (1 - TOLERANCE)


def gain(a: Outcome, b: Outcome) -> float:
    """How much better *a* is than *b*: ns of step (both fitting), else bytes of device memory."""
    if a.fits and b.fits:
        return b.step_ns - a.step_ns
    return float((b.device_bytes or 0) - (a.device_bytes or 0))


def best_of(tried: list[Tried]) -> Tried | None:
    """The fastest fitting candidate (less device memory on a tie); None when none fits."""
    fit = [t for t in tried if t.outcome is not None and t.outcome.fits]
    return min(fit, key=lambda t: (t.outcome.step_ns, t.outcome.device_bytes or 0)) if fit else None


class _Run:
    def __init__(self, names: list[Name], evaluate: Evaluator, budget: int, echo: Callable[[str], None]) -> None:
        self.names = names
        self.ev = evaluate
        self.budget = budget
        self.echo = echo
        self.out = Search()
        self.seen: dict[str, Tried] = {}
        self.only: set[str] | None = None
        self.seeds: list[Candidate] = []
        self.known: list[Tried] = []

    def free(self, c: Candidate) -> bool:
        """Whether *c* costs no compile: tried in this search, compiled in this tune or kept in the record."""
        return c.key() in self.seen or self.ev.cached(c)

    def best_known(self, current: Tried) -> Tried:
        """The fastest fitting placement compiled so far: *current*, the search's or a kept preset's."""
        return best_of([current, *self.out.tried, *self.known]) or current

    def seeded(self) -> list[Tried]:
        """The incumbents, the compiled ones first (a replay each, no compile)."""
        out = []
        for c in sorted(self.seeds, key=lambda c: not self.ev.cached(c)):
            try:
                out.append(self.get(c, "seed"))
            except OutOfBudget:
                break
        return out

    def ahead(self, cands: list[Candidate]) -> None:
        """Let the evaluator compile a round's candidates side by side (``--jobs``), as many as the budget
        allows; the round then takes them one by one, in this order, as it would compile them."""
        prefetch = getattr(self.ev, "prefetch", None)
        if prefetch is not None:
            prefetch(cands, self.budget - self.ev.compiles)

    def get(self, c: Candidate, stage: str) -> Tried:
        if c.key() in self.seen:
            return self.seen[c.key()]
        if not self.ev.cached(c) and self.ev.compiles >= self.budget:
            raise OutOfBudget
        before = self.ev.compiles
        outcome = self.ev(c)
        t = Tried(c, outcome, stage, self.ev.compiles if self.ev.compiles > before else None)
        self.seen[c.key()] = t
        self.out.tried.append(t)
        return t


def usable_seeds(names: list[Name], seeds: Iterable[Candidate], only: set[str] | None) -> list[Candidate]:
    """The seeds that place exactly these names, and (with *only*) move none of the others."""
    rest = {n.name: n.resting for n in names}
    out = []
    for c in seeds:
        place = c.place()
        if c.jax_policy or set(place) != set(rest):
            continue
        if only is not None and any(place[n] != rest[n] for n in rest if n not in only):
            continue
        if c not in out:
            out.append(c)
    return out


def search(
    names: list[Name],
    evaluate: Evaluator,
    budget: int = 48,
    echo: Callable[[str], None] = print,
    only: set[str] | None = None,
    seeds: Iterable[Candidate] = (),
    screen: float | None = SCREEN,
    known: Iterable[Tried] = (),
) -> Search:
    """The search of the module docstring over *names*; *evaluate* compiles (and caches); with
    *only*, just those names move (the others stay where they rest); *seeds*: incumbent placements
    (tried when they are compiled already, or while the budget allows); *screen*: the predicted gain
    a change needs to be compiled (None: every change compiled); *known*: placements compiled outside
    the search (kept presets), which the screen compares with but the search never starts from."""
    run = _Run(names, evaluate, budget, echo)
    run.only = only
    run.seeds = usable_seeds(names, seeds, only)
    run.known = [t for t in known if t.outcome is not None and not t.candidate.jax_policy]
    out = run.out
    out.only = only
    out.budget = budget
    out.screen = screen
    out.known = len(run.known)
    try:
        _search(run)
    except OutOfBudget:
        out.budget_cut = True
        out.stop = f"the compile budget ran out ({budget} compiles; --max-compiles raises it)"
    out.best = best_of(out.tried)
    out.compiles = sum(1 for t in out.tried if t.compile_no is not None)
    tried = {t.candidate.key() for t in out.tried}  # a screened change taken after all (compiled already)
    out.screened = [x for x in out.screened if x["kind"] == "path" or Candidate.of(x["placements"]).key() not in tried]
    return out


def _search(run: _Run) -> None:
    out, names = run.out, run.names
    if not names:
        out.stop = "the step's checkpoints name no activation: only the presets were compared"
        return
    run.ahead(bounds(names))
    base = out.base = run.get(resting(names), "bounds")
    if base.outcome is None:
        out.stop = "the step does not compile for the target with every named activation recomputed (see its error)"
        return
    run.get(everywhere(names, "device"), "bounds")
    seeded = [t for t in run.seeded() if t.outcome is not None]
    if base.outcome is not None and not base.outcome.fits:
        off = run.get(everywhere(names, "offload"), "bounds")
        if off.outcome is None or not off.outcome.fits:
            out.stop = "nothing fits: not even with every named activation recomputed or offloaded"
            return
    # 2. each name alone
    promising: list[tuple[float, str, str]] = []
    moved = _moves(names, run.only)
    run.ahead([base.candidate.with_(n.name, place) for n, place in moved])
    for n, place in moved:
        t = run.get(base.candidate.with_(n.name, place), "alone")
        out.alone[(n.name, place)] = t
        if helps(t.outcome, base.outcome):
            promising.append((gain(t.outcome, base.outcome), n.name, place))  # type: ignore[arg-type]
        else:
            why = _why_pruned(t.outcome, base.outcome, "keeping" if n.is_input else "recomputing")
            out.pruned.append({"name": n.name, "place": place, "why": why})
    if not promising and not seeded:
        out.stop = "no name moved alone to the device or to host memory helps: everything stays where it rests"
        return
    # 3. together, the largest gain first
    promising.sort(key=lambda g: -g[0])
    moves: dict[str, list[str]] = {}
    for _, name, place in promising:
        moves.setdefault(name, []).append(place)
    screened_path = path_screened(promising, run)
    current, skipped = _together(run, moves, base, free_only=screened_path)
    if screened_path and not skipped:  # every step of the path was compiled already: it was built after all
        out.screened = [x for x in out.screened if x["kind"] != "path"]
    # an incumbent or a bound (keeping everything) better than the greedy path: the local search starts
    # there, so that the choice is a local optimum explored here (a later tune seeded with it compiles nothing)
    for t in [*seeded, *(t for t in out.tried if t.stage == "bounds")]:
        if helps(t.outcome, current.outcome):
            current = t
    _one_change(run, moves, current)


def _moves(names: list[Name], only: set[str] | None) -> list[tuple[Name, str]]:
    """Step 2's moves: each name searched (*only*: those) to each place but where it rests."""
    return [(n, p) for n in names if only is None or n.name in only for p in n.options() if p != n.resting]


def bounds(names: list[Name]) -> list[Candidate]:
    """Step 1's candidates, compiled whatever happens next: every name where it rests, every name kept."""
    return [resting(names), everywhere(names, "device")]


def _together(run: _Run, moves: dict[str, list[str]], current: Tried, free_only: bool = False) -> tuple[Tried, int]:
    """Step 3: the promising moves added one by one; the greedy path's end, and how many of its steps were
    left out: with *free_only* (the screen left the path out) only the steps compiled already (in this tune
    or the record) are taken."""
    skipped = 0
    for name, places in moves.items():
        for place in places:
            c = current.candidate.with_(name, place)
            if free_only and not run.free(c):
                skipped += 1
                continue
            t = run.get(c, "together")
            if helps(t.outcome, current.outcome):
                current = t
                break
    return current, skipped


def _one_change(run: _Run, moves: dict[str, list[str]], current: Tried) -> None:
    """Step 4: one change at a time from *current*, until none helps."""
    out = run.out
    rest = {n.name: n.resting for n in run.names}
    while True:
        place_now = current.candidate.place()
        better = current
        changes = [
            current.candidate.with_(name, place)
            for name, places in moves.items()
            for place in dict.fromkeys([*places, rest[name]])
            if place != place_now[name]
        ]
        changes = screened(changes, current, run)
        run.ahead(changes)
        for c in changes:
            t = run.get(c, "one change")
            if helps(t.outcome, better.outcome):
                better = t
        if better is current:
            out.stop = (
                "no single change of one promising name's placement helps any more (a local optimum); "
                f"{len(out.pruned)} moves pruned after trying them alone"
            )
            return
        current = better


def additive_step(c: Candidate, ref: Tried, base: Tried, alone: dict[tuple[str, str], Tried]) -> int | None:
    """*c*'s step predicted from the compiled *ref*'s and each name's effect alone (its step minus the
    resting candidate's *base*), added over the names *c* places otherwise than *ref*; None when an
    effect is unknown (a move not tried alone, or one that failed)."""
    if ref.outcome is None or base.outcome is None:
        return None
    rest, now, then = base.candidate.place(), c.place(), ref.candidate.place()

    def effect(name: str, place: str) -> int | None:
        if place == rest[name]:
            return 0
        t = alone.get((name, place))
        return None if t is None or t.outcome is None else t.outcome.step_ns - base.outcome.step_ns  # type: ignore[union-attr]

    step = ref.outcome.step_ns
    for name in now:
        if now[name] == then.get(name):
            continue
        a, b = effect(name, now[name]), effect(name, then[name])
        if a is None or b is None:
            return None
        step += a - b
    return step


def _to_beat(run: _Run, current: Tried) -> tuple[int, Tried] | None:
    """The step a change must be predicted under to be compiled (the best known step less the screen's
    margin) and that best known placement; None when there is no screen or nothing fitting to compare with."""
    margin, ref = run.out.screen, run.best_known(current)
    if margin is None or ref.outcome is None or not ref.outcome.fits or run.out.base is None:
        return None
    return int(ref.outcome.step_ns * (1 - margin)), ref


def screened(changes: list[Candidate], current: Tried, run: _Run) -> list[Candidate]:
    """The changes worth compiling from the fitting incumbent *current*: those not yet tried whose additive
    step is under the best known step by the screen's margin (or cannot be predicted); the others go to
    ``screened``."""
    out = run.out
    beat = _to_beat(run, current)
    if beat is None or current.outcome is None or not current.outcome.fits:
        return changes
    needed, best = beat
    keep = []
    for c in changes:
        pred = None if run.free(c) else additive_step(c, current, out.base, out.alone)  # type: ignore[arg-type]
        if pred is not None and pred >= needed:
            _screen_out(run, "change", c.label(run.names), c.place(), pred, best)
        else:
            keep.append(c)
    return keep


def _screen_out(run: _Run, kind: str, label: str, place: dict[str, str], pred: int, best: Tried) -> None:
    """Say that a *kind* ("path": the greedy path, named by its end; "change": one placement) was not
    compiled; a change once (two rounds may screen the same placement: the latest prediction is kept)."""
    entry = {"kind": kind, "candidate": label, "placements": place, "predicted_step_ns": pred,
             "incumbent_step_ns": best.outcome.step_ns,  # type: ignore[union-attr]
             "incumbent": best.candidate.label(run.names)}  # fmt: skip
    for i, old in enumerate(run.out.screened):
        if kind == "change" and old["kind"] == "change" and old["placements"] == place:
            run.out.screened[i] = entry
            return
    run.out.screened.append(entry)


def path_screened(promising: list[tuple[float, str, str]], run: _Run) -> bool:
    """Whether the greedy path (step 3) is left out: its end, the resting step less each promising name's
    best gain alone (added), is not under the best known step by the screen's margin.  Said in ``screened``."""
    base = run.out.base
    beat = None if base is None else _to_beat(run, base)
    if beat is None or base is None or base.outcome is None or not base.outcome.fits:
        return False
    needed, best = beat
    best_move: dict[str, tuple[float, str]] = {}
    for g, name, where in promising:  # the largest gain first
        best_move.setdefault(name, (g, where))
    if len(best_move) < 2:
        return False  # a single move: compiled already, alone
    end = int(base.outcome.step_ns - sum(g for g, _ in best_move.values()))
    if end < needed:
        return False
    place = {**base.candidate.place(), **{n: w for n, (_, w) in best_move.items()}}
    label = f"the greedy path to {Candidate.of(place).label(run.names)}"
    _screen_out(run, "path", label, place, end, best)
    return True


def _why_pruned(t: Outcome | None, base: Outcome | None, resting: str = "recomputing") -> str:
    """Why a move alone was pruned; *resting*: what the name does otherwise (recomputing, keeping)."""
    if t is None:
        return "did not compile"
    if base is None:
        return "the resting candidate did not compile"
    if not t.fits and base.fits:
        return "does not fit"
    if not t.fits:
        return f"no less device memory than {resting} it"
    return f"no faster than {resting} it"
