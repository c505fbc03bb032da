"""Issue 44: how far the tune search's additive prediction (``search.additive_step``) is from the compiled
step, on the placements tunes actually compiled.

    .venv/bin/python -m benchmarks.additive_error TUNE_OUT/tune.json [...]

For every pair of fitting placements over the same names that one tune compiled (its search's and its
presets with placements), one change apart (one name placed otherwise), and not both the resting
candidate or a name moved alone (those are exact by construction), the second's step is predicted from
the first's compiled step and the two placements' effects alone, as the screen predicts a one-change
round; the error is (predicted - compiled) / compiled.  With ``--paths`` the greedy path's kind of
prediction is added: each placement with two or more names moved, predicted from the resting step and
the moves' effects alone.  Prints each pair and the median, 90th percentile and largest absolute error.
A tune with ``--no-screen`` compiles more one-change neighbours, so more pairs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from profiler.tune.candidate import Candidate
from profiler.tune.evaluate import Outcome
from profiler.tune.search import Tried, additive_step


def tried_of(row: dict[str, Any]) -> Tried:
    """A tune document's candidate row as the search's Tried (step and fit are what the prediction reads)."""
    step = row["predicted_step_ns"]
    out = Outcome(step, 0, step, {}, {}, row.get("device_bytes"), row.get("host_bytes"), bool(row.get("fits")))
    return Tried(Candidate.of(row["placements"]), out, row.get("stage") or "", row.get("compile_no"))


def pairs(doc: dict[str, Any], paths: bool = False) -> list[tuple[str, str, int, int]]:
    """(from, to, predicted ns, compiled ns) for the document's pairs one change apart (and, with *paths*,
    its placements of two or more moves predicted from the resting one)."""
    rows = [r for r in doc["candidates"] + doc.get("presets", []) if r.get("predicted_step_ns") and r.get("fits")]
    rows = [r for r in rows if r.get("placements")]
    base_row = next((r for r in rows if r.get("stage") == "bounds" and r["label"] == "recompute all"), None)
    if base_row is None:
        return []
    rest = base_row["placements"]
    rows = [r for r in rows if set(r["placements"]) == set(rest)]
    base = tried_of(base_row)
    moved = {id(r): [n for n in rest if r["placements"][n] != rest[n]] for r in rows}
    alone = {(moved[id(r)][0], r["placements"][moved[id(r)][0]]): tried_of(r) for r in rows if len(moved[id(r)]) == 1}
    out, seen = [], set()
    for a in rows:
        for b in rows:
            diff = [n for n in rest if a["placements"][n] != b["placements"][n]]
            if len(diff) != 1 or (len(moved[id(a)]) <= 1 and len(moved[id(b)]) <= 1):
                continue
            key = (json.dumps(a["placements"], sort_keys=True), json.dumps(b["placements"], sort_keys=True))
            if key in seen:
                continue
            seen.add(key)
            pred = additive_step(Candidate.of(b["placements"]), tried_of(a), base, alone)
            if pred is not None:
                out.append((a["label"], b["label"], pred, b["predicted_step_ns"]))
    if paths:
        for r in rows:
            if len(moved[id(r)]) >= 2:
                pred = additive_step(Candidate.of(r["placements"]), base, base, alone)
                if pred is not None:
                    out.append(("(resting, added)", r["label"], pred, r["predicted_step_ns"]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("docs", nargs="+", type=Path, help="tune.json files (tune --out DIR writes DIR/tune.json)")
    p.add_argument("--paths", action="store_true", help="also placements of several moves, from the resting one")
    args = p.parse_args(argv)
    errors = []
    for f in args.docs:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError) as exc:
            print(f"{f}: not a tune document ({exc.__class__.__name__}: {exc})", file=sys.stderr)
            return 2
        for a, b, pred, got in pairs(doc, args.paths):
            err = (pred - got) / got
            errors.append(abs(err))
            print(f"{f.parent.name:<14} {a[:40]:<40} -> {b[:48]:<48} {pred:>12} {got:>12} {100 * err:+7.2f}%")
    if not errors:
        print("no pairs one change apart in these documents", file=sys.stderr)
        return 1
    errors.sort()
    q = lambda x: errors[min(len(errors) - 1, int(x * len(errors)))]  # noqa: E731
    print(f"{len(errors)} pairs: median {100 * q(0.5):.2f}%, 90% within {100 * q(0.9):.2f}%, "
          f"largest {100 * errors[-1]:.2f}%")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
