"""Memory of a compiled module from its buffer assignment, as ``compiled.memory_analysis()``
reports it, but read from an XLA dump.

XLA sums the buffer allocations (PjRt's compiled memory stats): an entry
parameter counts as argument (and as alias when it is also live out), a
``maybe-live-out`` allocation as output, any other allocation that is neither
thread-local nor constant as temp; allocations in memory space 5 count in the
``host_*`` fields instead.  The dump's ``*-buffer-assignment.txt`` lists them as
``allocation N: size S[, color C][, parameter P, shape |...| at ShapeIndex {}]
[, output shape is |...|][, constant][, thread-local][, maybe-live-out]...:``.
"""

from __future__ import annotations

import re
from typing import Any

from profiler.xla.shapes import HOST_MEMORY_SPACE

_ALLOC = re.compile(r"^allocation (\d+): size (\d+)(.*):\s*$")
_COLOR = re.compile(r", color (\d+)")
_PARAM = re.compile(r", parameter (\d+)")
_SHAPE = re.compile(r"\|[^|]*\|")

MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
    "host_argument_size_in_bytes",
    "host_output_size_in_bytes",
    "host_alias_size_in_bytes",
    "host_temp_size_in_bytes",
    "host_generated_code_size_in_bytes",
)


def parse_buffer_assignment(text: str) -> list[dict[str, Any]]:
    """The allocations of a ``*-buffer-assignment.txt`` (its ``value:`` lines are skipped)."""
    out = []
    for line in text.splitlines():
        m = _ALLOC.match(line)
        if not m:
            continue
        flags = _SHAPE.sub("", m.group(3))  # shapes may hold commas and words
        color = _COLOR.search(flags)
        param = _PARAM.search(flags)
        out.append(
            {
                "size": int(m.group(2)),
                "color": int(color.group(1)) if color else 0,
                "parameter": param is not None,
                "parameter_number": int(param.group(1)) if param else None,
                "live_out": "maybe-live-out" in flags,
                "thread_local": "thread-local" in flags,
                "constant": ", constant" in flags,
            }
        )
    return out


def memory_stats(allocations: list[dict[str, Any]]) -> dict[str, int]:
    """``memory_analysis()``'s fields from allocations (generated code size is not in a dump: 0).

    A parameter that is also live out is counted as aliased (what donation gives).
    """
    stats = dict.fromkeys(MEMORY_FIELDS, 0)
    for a in allocations:
        pre = "host_" if a.get("color") == HOST_MEMORY_SPACE else ""
        size = int(a["size"])
        if a.get("parameter"):
            stats[pre + "argument_size_in_bytes"] += size
            if a.get("live_out"):
                stats[pre + "alias_size_in_bytes"] += size
        if a.get("live_out"):
            stats[pre + "output_size_in_bytes"] += size
        if not (a.get("parameter") or a.get("live_out") or a.get("thread_local") or a.get("constant")):
            stats[pre + "temp_size_in_bytes"] += size
    return stats


def resident_bytes(stats: dict[str, Any], tpu: bool) -> int | None:
    """What one execution of a compiled step keeps on the device: ``device_bytes``, except on a TPU,
    where XLA's own peak of the program (``peak_memory_in_bytes``) is: there the temporaries' size
    counts buffers that are never live at once (the H200 example's step scanned, remat: 17.4 GiB of
    temporaries and a 13.9 GiB peak, on a 15.75 GiB chip where it ran)."""
    peak = stats.get("peak_memory_in_bytes")
    if tpu and isinstance(peak, int) and peak > 0:
        return peak
    return device_bytes(stats)


def device_bytes(stats: dict[str, Any], host: bool = False) -> int | None:
    """What one execution keeps resident: arguments + outputs not aliased to them + temporaries."""
    pre = "host_" if host else ""
    try:
        return (
            int(stats[pre + "argument_size_in_bytes"])
            + int(stats[pre + "output_size_in_bytes"])
            - int(stats[pre + "alias_size_in_bytes"])
            + int(stats[pre + "temp_size_in_bytes"])
        )
    except (KeyError, TypeError, ValueError):
        return None
