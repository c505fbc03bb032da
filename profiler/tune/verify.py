"""``tune --verify``: the choice and the best preset captured under nsys, as ``profile-step run`` does.

The candidate's policy reaches the script's ``jax.checkpoint`` calls through the start-up hook
(``$PROFILE_STEP_TUNE_POLICY``: the same substitution as the compiles), the script's own policy
stays what ``--policy`` gave.  Each run folder (``<tune folder>/verify/``) keeps the trace, the
step's compiled module (from the XLA dump) and ``tune_prediction.json`` (what tune predicted for
that candidate on its target and link).  What is checked here: both runs ran, and their steps
compiled to different programs (their HLO fingerprints).  On a GPU, ``profile-step analyze
<the two runs>`` predicts each run's own compiled step and sets it against the measured step
and exposed copy time, the error in %, per policy (docs/plan.md, "Prediction").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiler.conventions import POLICY_ENV, TUNE_POLICY_ENV
from profiler.stored import folder


def policy_doc(row: dict[str, Any]) -> dict[str, Any]:
    """The policy document of a tune row (``profiler.xla.policy_swap.build`` reads it)."""
    if row.get("jax_policy"):
        return {"jax": row["jax_policy"]}
    place = row.get("placements") or {}
    return {
        "saved": sorted(n for n, p in place.items() if p == "device"),
        "offloaded": sorted(n for n, p in place.items() if p == "offload"),
    }


def best_preset(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The fastest fitting preset that is not the choice's program."""
    choice = doc.get("choice") or {}
    rows = [r for r in doc["presets"] if r["fits"] and r["fingerprint"] != choice.get("fingerprint")]
    return min(rows, key=lambda r: r["predicted_step_ns"]) if rows else None


def backend_of(manifest: dict[str, Any]) -> str | None:
    """The platform whose XLA compiled a run's programs (``cpu``, ``gpu``), from the devices JAX saw
    (the start-up hook's facts); None when the run recorded none."""
    kinds = sorted({str(d.get("platform")) for d in manifest.get("devices") or [] if d.get("platform")})
    return "+".join(kinds) if kinds else None


def verify(
    doc: dict[str, Any],
    script: Path,
    script_args: list[str],
    script_policy: str | None,
    python: str | None,
    echo: Callable[[str], None],
) -> dict[str, Any]:
    """Capture the choice and the best preset; returns the ``verify`` document."""
    from profiler.capture.run import RunRequest, check_request, run_policy
    from profiler.trace.nsys import nsys_version

    out = Path(doc["out_dir"]) / "verify"
    pairs = [("tune-choice", doc["choice"])]
    preset = best_preset(doc)
    if preset is not None:
        pairs.append(("tune-preset", preset))
    results = []
    nsys = None
    for role, row in pairs:
        env = {TUNE_POLICY_ENV: json.dumps(policy_doc(row))}
        if script_policy:
            env[POLICY_ENV] = script_policy
        req = RunRequest(script=script, script_args=script_args, policies=[role], runs_dir=out, python=python, env=env)
        if nsys is None:
            nsys = check_request(req)
        echo(f"tune --verify: {role} ({row['label']}) under nsys")
        res = run_policy(req, role, nsys, nsys_version(nsys), echo=lambda s: None)
        told = {"tune": doc["out_dir"], "candidate": row, "link": doc["link"], "target": doc["target"]}
        folder.write_json(res.run_dir / folder.TUNE_PREDICTION, told)
        comp = res.manifest.get("compiled") or {}
        results.append(
            {
                "role": role,
                "label": row["label"],
                "run_dir": str(res.run_dir),
                "status": res.status,
                "exit_code": res.exit_code,
                "step_module": comp.get("step_module"),
                "backend": backend_of(res.manifest),
                "fingerprint": comp.get("fingerprint"),
                "predicted_step_ns": row["predicted_step_ns"],
                "predicted_exposed_ns": row["predicted_exposed_ns"],
            }
        )
    prints = [r["fingerprint"] for r in results]
    ran = all(r["status"] == "ok" for r in results)
    different = len(results) == 2 and None not in prints and prints[0] != prints[1]
    backends = sorted({r["backend"] for r in results if r["backend"]})
    return {
        "backend": "+".join(backends) if backends else None,
        "runs": results,
        "ran": ran,
        "different_programs": different if len(results) == 2 else None,
        "analyze": "profile-step analyze " + " ".join(r["run_dir"] for r in results),
    }
