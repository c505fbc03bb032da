"""What tune's page says of its search, from the search's own records (no compiler): the screen's line,
and the reason a move alone was pruned."""

from __future__ import annotations

from profiler.report.tune_text import _screen_text
from profiler.tune.candidate import Candidate, Name
from profiler.tune.document import _pruned
from profiler.tune.evaluate import Outcome
from profiler.tune.search import Search, Tried

NAMES = [Name("a"), Name("b")]


def entry(kind: str, place: dict[str, str], best: str = "maxtext:minimal") -> dict:
    return {"kind": kind, "candidate": "x", "placements": place, "predicted_step_ns": 2, "incumbent_step_ns": 1,
            "incumbent": best}  # fmt: skip


def test_the_screen_line_names_the_path_and_counts_the_changes():
    s = {"screen": 0.001, "screened": [entry("path", {"a": "device"}), entry("change", {"a": "offload"})]}
    assert _screen_text(s) == (
        ", the greedy path and 1 change not compiled (predicted from the names' effects alone not to beat the "
        "best known step (maxtext:minimal) by more than 0.1%; --no-screen compiles them)"
    )
    one = {"screen": 0.001, "screened": [entry("change", {"a": "offload"}, "keep all")]}
    assert _screen_text(one).endswith("(keep all) by more than 0.1%; --no-screen compiles it)")
    two_bests = {"screen": 0.001, "screened": [entry("change", {"a": "offload"}), entry("change", {"b": "x"}, "k")]}
    assert "2 changes not compiled" in _screen_text(two_bests) and "the best step known then" in _screen_text(two_bests)
    assert _screen_text({"screen": 0.001, "screened": []}) == ""


def tried(place: dict[str, str]) -> Tried:
    return Tried(Candidate.of(place), Outcome(1, 0, 1, {}, {}, 1, 0, True), "alone", None)


def test_a_move_that_compiled_to_the_resting_program_says_so():
    """A move pruned after trying it alone whose compiled program is the resting candidate's (XLA did not
    follow it) is "the same program as recompute all", not "no faster than recomputing it"."""
    s = Search()
    s.base = tried({"a": "remat", "b": "remat"})
    s.pruned = [{"name": "a", "place": "device", "why": "no faster than recomputing it"},
                {"name": "b", "place": "device", "why": "no faster than recomputing it"}]  # fmt: skip
    rows = [{"label": "recompute all", "fingerprint": "f1"}, {"label": "keep a", "fingerprint": "f1"},
            {"label": "keep b", "fingerprint": "f2"}]  # fmt: skip
    assert [p["why"] for p in _pruned(s, rows, NAMES)] == [
        "the same program as recompute all",
        "no faster than recomputing it",
    ]
