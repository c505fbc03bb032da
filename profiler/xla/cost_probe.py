"""XLA's cost analysis of dumped modules, run by a given Python: the script's own, whose jaxlib
wrote the dump and so reads its HLO syntax (a newer XLA writes text an older jaxlib cannot parse).

This file runs as a script under that Python (``python cost_probe.py < paths.json``), where
profile-step is not importable: the part below ``costs_in`` uses the standard library and the
interpreter's own jax only.  It prints ``{path: {"cost": {...}} or {"error": "..."}}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

COST_KEYS = ("flops", "transcendentals", "bytes accessed")
TIMEOUT_S = 300


def parse_error(exc: BaseException) -> str:
    """jaxlib's parse error in one line: its first specific line, not the generic heading."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    detail = next((ln for ln in lines[1:] if "error:" in ln), None)
    return (detail or (lines[0] if lines else type(exc).__name__))[:200]


def analyze_text(client: Any, hlo_text: str) -> dict[str, float]:
    """HloCostAnalysis of one module's text with this interpreter's jaxlib (raises on a parse error)."""
    import jaxlib._hlo as hlo
    from jax._src.lib import xla_client

    result = xla_client._xla.hlo_module_cost_analysis(client, hlo.hlo_module_from_text(hlo_text))
    return {k: float(result[k]) for k in COST_KEYS if k in result}


def costs_in(python: str, paths: list[Path]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Each module text's cost analysis run by *python*; ({}, why) when that Python cannot run it."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "JAX_PLATFORMS": "cpu"}
    env.pop("PYTHONPATH", None)  # the script's own jax, not one from profile-step's path
    try:
        proc = subprocess.run(
            [python, str(Path(__file__).resolve())],
            input=json.dumps([str(p) for p in paths]),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, f"{python} could not run the cost analysis ({exc})"
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
    except ValueError:
        doc = None
    if proc.returncode != 0 or not isinstance(doc, dict):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {}, f"{python} could not run the cost analysis ({last})"
    return doc, None


def main() -> int:
    paths = json.loads(sys.stdin.read())
    try:
        from jax._src.lib import xla_client

        client = xla_client.make_cpu_client()
    except Exception as exc:  # no jax here, or one without a CPU client
        print(f"no jaxlib CPU client: {exc}", file=sys.stderr)
        return 2
    out: dict[str, dict[str, Any]] = {}
    for p in paths:
        try:
            out[p] = {"cost": analyze_text(client, Path(p).read_text(errors="replace"))}
        except Exception as exc:  # jaxlib raises its own error types
            out[p] = {"error": parse_error(exc)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
