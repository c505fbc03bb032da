"""The tune search's rules on outcomes given by hand (no compiler: the search is a pure function of
what each placement predicts), and the verdict's tie rule.

The table below is built so that the greedy search is *not* monotone in the link: on a fast link,
offloading ``c`` alone wins the most, so the search takes it first; keeping ``a`` beside it then
removes the recomputation that hid ``c``'s copies, and ``b`` no longer fits: it stops at a local
optimum slower than what it chose on the slow link (``a`` and ``b`` kept), although that
placement only gains from a faster link.  Seeded with the slow link's choice, it is monotone.
"""

from __future__ import annotations

from profiler.analysis.accuracy import ROOFLINE
from profiler.tune.candidate import Candidate, Name
from profiler.tune.evaluate import Outcome
from profiler.tune.explain import tie_line
from profiler.tune.search import SCREEN, Search, Tried, best_of, search, usable_seeds

MS = 1_000_000
NAMES = [Name("a"), Name("b"), Name("c")]
LIMIT = 11  # device units: a and b kept fit; either beside c offloaded, plus the other, does not


def outcome(place: dict[str, str], fast: bool) -> Outcome:
    """The table: the step in ms and the device memory in units of one placement on a slow or fast link."""
    dev = 5 + sum({"device": 3, "offload": 1, "remat": 0}[place[n]] for n in "ab")
    dev += {"device": 7, "offload": 1, "remat": 0}[place["c"]]
    step = 100 - sum(10 if place[n] == "device" else (-3 if place[n] == "offload" else 0) for n in "ab")
    if place["c"] == "device":
        step -= 12
    elif place["c"] == "offload":
        kept = "device" in (place["a"], place["b"])
        step += (-12 + (5 if kept else 0)) if fast else 5  # keeping a or b takes away what hid c's copies
    return Outcome(step * MS, 0, step * MS, {}, {}, dev, 0, dev <= LIMIT)


class Table:
    """The search's evaluator over the table: counts each placement's first evaluation as a compile."""

    def __init__(self) -> None:
        self.fast = False
        self.compiled: set[str] = set()
        self.compiles = 0

    def cached(self, c: Candidate) -> bool:
        return c.key() in self.compiled

    def __call__(self, c: Candidate) -> Outcome:
        if c.key() not in self.compiled:
            self.compiled.add(c.key())
            self.compiles += 1
        return outcome(c.place(), self.fast)


def choose(table: Table, fast: bool, seeds: list[Candidate] = (), budget: int = 40) -> Tried:
    table.fast = fast
    choice = best_of(search(NAMES, table, budget=budget, echo=lambda s: None, seeds=seeds).tried)
    assert choice is not None
    return choice


def test_the_greedy_search_alone_is_not_monotone_in_the_link():
    table = Table()
    slow, fast = choose(table, False), choose(table, True)
    assert slow.candidate.place() == {"a": "device", "b": "device", "c": "remat"} and slow.outcome.step_ns == 80 * MS
    assert fast.candidate.place() == {"a": "device", "b": "remat", "c": "offload"}
    assert fast.outcome.step_ns == 83 * MS > slow.outcome.step_ns


def test_seeded_with_the_slower_links_choice_it_is_monotone():
    table = Table()
    slow = choose(table, False)
    fast = choose(table, True, seeds=[slow.candidate])
    assert fast.outcome.step_ns <= slow.outcome.step_ns
    assert fast.candidate == slow.candidate and fast.stage == "seed"
    assert fast.compile_no is None  # compiled for the slow link: on the fast one a replay, not a compile


def test_a_seed_is_tried_before_the_budget_runs_out():
    """With a budget of the two bounds and the seed, the search is cut short, says so, and still has
    the seed's step: a budget cut never costs the incumbent."""
    table = Table()
    slow = choose(table, False)
    fresh = Table()  # nothing compiled: the seed costs a compile too
    fresh.fast = True
    result = search(NAMES, fresh, budget=3, echo=lambda s: None, seeds=[slow.candidate])
    assert result.budget_cut and "budget ran out" in result.stop
    assert best_of(result.tried).candidate == slow.candidate


def test_seeds_that_do_not_fit_the_names_are_left_out():
    ok = Candidate.of({"a": "device", "b": "remat", "c": "offload"})
    other = Candidate.of({"a": "device", "z": "remat"})
    assert usable_seeds(NAMES, [ok, other, ok, Candidate.jax("dots_saveable")], None) == [ok]
    assert usable_seeds(NAMES, [ok], {"a"}) == []  # it moves c, which --names a keeps where it rests
    assert usable_seeds(NAMES, [ok], {"a", "c"}) == [ok]


def _tried(places: dict[str, str], step_ms: int, device: int, stage: str = "together") -> Tried:
    return Tried(Candidate.of(places), Outcome(step_ms * MS, 0, step_ms * MS, {}, {}, device, 0, True), stage, None)


def test_a_tie_with_a_preset_names_the_lighter_one_and_a_same_program_is_no_tie():
    """The verdict's tie: presets count (the choice is the best of the search and the presets), and a
    candidate that compiled to the choice's own program is the choice, not a tie."""
    names = [Name("a"), Name("b")]
    gib = 2**30
    choice = _tried({"a": "device", "b": "device"}, 100, 40 * gib)
    twin = _tried({"a": "device", "b": "remat"}, 100, 40 * gib)  # the same program as the choice
    out = Outcome(105 * MS, 0, 105 * MS, {}, {}, 20 * gib, 0, True)
    preset = Tried(Candidate.jax("dots_saveable"), out, "preset", 9)
    program = {choice.candidate.key(): "p1", twin.candidate.key(): "p1", preset.candidate.key(): "p2"}
    line = tie_line(choice, Search(tried=[choice, twin]), names, ROOFLINE, [preset], lambda c: program[c.key()])
    assert line is not None and line.startswith("a tie: 1 other fitting placement is predicted within 10% of it")
    assert line.endswith(
        "of them jax:dots_saveable (+5.0% predicted) leaves 20.0 GiB more device memory free: pick it for headroom"
    )
    # within 10% of the choice's own step, as the line says: 10.5% slower is no tie (though 9.5% of the slower)
    edge = Tried(Candidate.jax("x"), Outcome(110_500_000, 0, 0, {}, {}, 1, 0, True), "preset", 10)
    assert tie_line(choice, Search(tried=[choice]), names, ROOFLINE, [edge], lambda c: None) is None
    # without the preset, only the twin is close: the same program, no tie
    assert tie_line(choice, Search(tried=[choice, twin]), names, ROOFLINE, [], lambda c: program[c.key()]) is None


class AheadTable(Table):
    """The table with ``prefetch`` as the compiler's ``--jobs``: what it is asked for ahead is 'compiled'
    then, but counted only when the search takes it; it keeps every batch and what was never taken."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead: set[str] = set()
        self.batches: list[tuple[int, int]] = []  # (candidates asked ahead, room given)

    def prefetch(self, cands: list[Candidate], room: int | None = None) -> None:
        todo = list(dict.fromkeys(c.key() for c in cands if not self.cached(c) and c.key() not in self.ahead))
        todo = todo if room is None else todo[:room]
        self.batches.append((len(todo), room))
        self.ahead.update(todo)

    def __call__(self, c: Candidate) -> Outcome:
        self.ahead.discard(c.key())
        return super().__call__(c)


def test_compiling_a_round_ahead_changes_nothing():
    """Side by side (``prefetch``): the same candidates in the same order with the same compile numbers,
    the same choice and stop, under every budget; everything asked ahead taken (within the budget left:
    past it the search would not have compiled it)."""
    for fast in (False, True):
        for budget in range(2, 30):
            one, ahead = Table(), AheadTable()
            one.fast = ahead.fast = fast
            a = search(NAMES, one, budget=budget, echo=lambda s: None)
            b = search(NAMES, ahead, budget=budget, echo=lambda s: None)
            assert [(t.candidate, t.stage, t.compile_no) for t in a.tried] == [
                (t.candidate, t.stage, t.compile_no) for t in b.tried
            ]
            assert (a.stop, a.budget_cut, a.compiles) == (b.stop, b.budget_cut, b.compiles)
            assert not ahead.ahead, f"asked ahead and never taken: {ahead.ahead}"
            assert any(n > 1 for n, _ in ahead.batches)


ADDITIVE = [Name(n) for n in "defg"]
EFFECT = {  # per name and place: (ms of step, device units), added to the resting 100 ms and 10 units
    "d": {"device": (-20, 4), "offload": (-12, 1)},
    "e": {"device": (-15, 4), "offload": (-9, 1)},
    "f": {"device": (-8, 3), "offload": (-6, 1)},
    "g": {"device": (-4, 3), "offload": (2, 1)},
}


class Additive(Table):
    """Each name's effect on the step and the memory adds up exactly (the screen's assumption); 20 units fit."""

    def __call__(self, c: Candidate) -> Outcome:
        if c.key() not in self.compiled:
            self.compiled.add(c.key())
            self.compiles += 1
        moves = [EFFECT[n][p] for n, p in c.place().items() if p != "remat"]
        step, dev = 100 + sum(m[0] for m in moves), 10 + sum(m[1] for m in moves)
        return Outcome(step * MS, 0, step * MS, {}, {}, dev, 0, dev <= 20)


def test_the_screen_compiles_less_and_chooses_the_same():
    """On effects that add up, the screen leaves out changes (each predicted exactly, and slower than the
    incumbent by more than its margin) and the search chooses what it chooses compiling every change."""
    full = search(ADDITIVE, Additive(), budget=60, echo=lambda s: None, screen=None)
    table = Additive()
    screened = search(ADDITIVE, table, budget=60, echo=lambda s: None)
    assert not full.screened and screened.screened
    assert screened.compiles < full.compiles
    assert screened.best.candidate == full.best.candidate and screened.best.outcome == full.best.outcome
    for s in screened.screened:
        place = s["placements"]
        step = 100 + sum(EFFECT[n][p][0] for n, p in place.items() if p != "remat")
        assert s["predicted_step_ns"] == step * MS >= s["incumbent_step_ns"] * (1 - SCREEN)


MINIMAL = Candidate.of({"d": "device", "e": "offload", "f": "remat", "g": "remat"}, preset="maxtext:minimal")


def kept(c: Candidate, step_ms: int) -> Tried:
    """A preset an earlier tune compiled, as ``run.kept_presets`` reads it from the record."""
    return Tried(c, Outcome(step_ms * MS, 0, step_ms * MS, {}, {}, 12, 0, True), "preset", None)


def test_a_kept_preset_screens_what_cannot_beat_it():
    """A preset of the names an earlier tune compiled (``known``, read for free) is the step to beat: the
    greedy path, whose end (the names' best gains added) is not under it, is not built, and no one-change
    neighbour predicted no better than it is compiled; the search never starts from the preset."""
    table = Additive()
    s = search(ADDITIVE, table, budget=60, echo=lambda s: None, known=[kept(MINIMAL, 50)])
    assert s.known == 1
    assert table.compiles == s.compiles == 2 + 8  # the bounds and each move alone
    assert [t.stage for t in s.tried].count("together") == 0
    assert s.screened[0]["candidate"] == "the greedy path to keep all"
    assert s.screened[0]["predicted_step_ns"] == (100 - 20 - 15 - 8 - 4) * MS
    assert {x["incumbent"] for x in s.screened} == {"maxtext:minimal"}
    assert all(x["predicted_step_ns"] >= 50 * MS * (1 - SCREEN) for x in s.screened)
    assert MINIMAL.key() not in {t.candidate.key() for t in s.tried}
    without = search(ADDITIVE, Additive(), budget=60, echo=lambda s: None)
    assert without.compiles > s.compiles and any(t.stage == "together" for t in without.tried)


def test_a_jax_policy_is_not_the_step_to_beat():
    """A JAX policy (dots_saveable) saves values the names do not tag: no placement of the names can reach
    it, and the best placement of the names is printed beside it, so the screen never compares with it."""
    jax_preset = kept(Candidate.jax("dots_saveable"), 50)
    with_it = search(ADDITIVE, Additive(), budget=60, echo=lambda s: None, known=[jax_preset])
    without = search(ADDITIVE, Additive(), budget=60, echo=lambda s: None)
    assert with_it.known == 0
    assert [t.candidate for t in with_it.tried] == [t.candidate for t in without.tried]
    assert with_it.screened == without.screened


def test_a_compiled_placement_is_never_screened():
    """What an earlier tune compiled (here: each candidate of the full search, as if kept in the record)
    costs no compile: the screen leaves none of it out, the greedy path is walked through it, and the
    search tries what the full search tried, compiling nothing."""
    full = search(ADDITIVE, Additive(), budget=60, echo=lambda s: None, screen=None)
    table = Additive()
    table.compiled = {t.candidate.key() for t in full.tried}
    again = search(ADDITIVE, table, budget=60, echo=lambda s: None, known=[kept(MINIMAL, 50)])
    assert table.compiles == 0 and not again.screened
    assert {t.candidate.key() for t in again.tried} == {t.candidate.key() for t in full.tried}
    assert again.best.candidate == full.best.candidate


# Three names where keeping all (a bound) beats the greedy path: x kept alone gains 1 ms, y or z kept alone loses
# 1 ms (not promising), all kept gain 10 ms (as MaxText's tiny step on PCIe Gen5: `keep all` 5.03 µs against
# `keep out_proj` 5.14 µs, every other move alone pruned); an offload is slower.
BOUND = [Name("x"), Name("y"), Name("z")]
BOUND_STEP = {"RRR": 100, "DRR": 99, "RDR": 101, "RRD": 101, "DDD": 90}


class BoundTable(Table):
    def __call__(self, c: Candidate) -> Outcome:
        if c.key() not in self.compiled:
            self.compiled.add(c.key())
            self.compiles += 1
        place = c.place()
        key = "".join(place[n][0].upper() for n in "xyz")
        step = (105 if "O" in key else BOUND_STEP.get(key, 102)) * MS
        return Outcome(step, 0, step, {}, {}, 1, 0, True)


def test_the_local_search_starts_from_a_bound_better_than_the_greedy_path():
    """The one-change rounds start from `keep all` when it beats the greedy path, so the choice is a local
    optimum explored in this tune: the same tune again, seeded with that choice, compiles nothing."""
    table = BoundTable()
    first = search(BOUND, table, budget=40, echo=lambda s: None)
    assert first.best.candidate.place() == {"x": "device", "y": "device", "z": "device"}
    # its one neighbour moving a promising name, x recomputed, is predicted at 91 ms (90 + 1): screened
    assert not [t for t in first.tried if t.stage == "one change"]
    assert [(x["placements"], x["predicted_step_ns"]) for x in first.screened] == [
        ({"x": "remat", "y": "device", "z": "device"}, 91 * MS)
    ]
    full = search(BOUND, BoundTable(), budget=40, echo=lambda s: None, screen=None)
    assert [t.candidate.place() for t in full.tried if t.stage == "one change"] == [
        {"x": "remat", "y": "device", "z": "device"}
    ]
    assert full.best.candidate == first.best.candidate
    compiles = table.compiles
    again = search(BOUND, table, budget=40, echo=lambda s: None, seeds=[first.best.candidate])
    assert table.compiles == compiles and again.compiles == 0
    assert again.best.candidate == first.best.candidate
