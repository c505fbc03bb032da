"""The compiler's offload plan in the attribution's terms: layer and activation of each planned
movement, and bytes per layer and activation.

Names come from the movements' ``op_name`` evidence (see ``profiler.xla.plan``)
parsed exactly as XLA thunk ranges are (``profiler.xla.names.parse_xla``), so a planned
layer is named as the trace's layers are.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from profiler.xla.names import DEFAULT_LAYER_PATTERN, parse_xla


def _parse_paths(paths: list[str], layer_pattern: str | None) -> dict[str, tuple[str | None, str | None]]:
    """op_name path -> (layer, activation), through the thunk-range parser."""
    uniq = list(dict.fromkeys(paths))
    if not uniq:
        return {}
    frame = pl.DataFrame({"path": uniq}).with_columns(
        pl.format("Thunk:#name={},hlo_op=plan#", pl.col("path").str.replace_all("#", "", literal=True)).alias("name")
    )
    parsed = parse_xla(frame, "name", None, layer_pattern).select("path", "layer", "activation")
    return {p: (lay, act) for p, lay, act in parsed.iter_rows()}


def label(plan: dict[str, Any] | None, layer_pattern: str | None = None) -> dict[str, Any] | None:
    """A copy of *plan* whose movements carry ``layer`` and ``activation`` (None when unknown);
    the evidence lists are dropped."""
    if plan is None:
        return None
    pattern = layer_pattern or DEFAULT_LAYER_PATTERN
    paths = [p for m in plan["movements"] for p in m.get("layer_evidence", []) + m.get("activation_evidence", [])]
    parsed = _parse_paths(paths, pattern)
    moves = []
    for m in plan["movements"]:
        layer = next((parsed[p][0] for p in m.get("layer_evidence", []) if parsed.get(p, (None,))[0]), None)
        act = next((parsed[p][1] for p in m.get("activation_evidence", []) if parsed.get(p, (None, None))[1]), None)
        if act is None:  # an activation named only on the layer side (e.g. the host buffer's users)
            act = next((parsed[p][1] for p in m.get("layer_evidence", []) if parsed.get(p, (None, None))[1]), None)
        moves.append(
            {
                **{k: v for k, v in m.items() if k not in ("layer_evidence", "activation_evidence")},
                "layer": layer,
                "activation": act,
            }
        )
    return {**plan, "movements": moves}


def by_layer(plan: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Planned bytes per step by (layer, activation): d2h, h2d, and the instructions moving them.
    Movements with an unknown repeat count contribute their bytes per execution, flagged."""
    if not plan:
        return []
    rows: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    for m in plan["movements"]:
        key = (m.get("layer"), m.get("activation"))
        r = rows.setdefault(
            key,
            {"layer": key[0], "activation": key[1], "d2h_bytes": 0, "h2d_bytes": 0, "instructions": [], "exact": True},
        )
        per_step = m["bytes_per_step"]
        if per_step is None:
            per_step = m["bytes"]
            r["exact"] = False
        r[m["direction"] + "_bytes"] += per_step
        r["instructions"].append(m["instruction"])
    from profiler.units import natural_key

    return sorted(rows.values(), key=lambda r: (natural_key(r["layer"] or "~"), r["activation"] or "~"))
