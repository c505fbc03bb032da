"""Thresholds of the findings, in one place, and how a user overrides them.

Every threshold is a named default here; a TOML file (``--findings-config``)
may override any of them and turn rules off::

    disabled = ["lhs-off"]

    [thresholds]
    slow_link_fraction = 0.4
    problem_share = 0.1    # a finding costing 10% of the window or more is a problem
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.analysis.links import Link, parse_link
from profiler.errors import InputError, ProfilerError

MIB = 1 << 20

THRESHOLDS: dict[str, float] = {
    # severity of a finding with a time cost, from its cost_share (cost_ns over the window, windows or
    # steps it is measured in): problem at or above problem_share, warning at or above warning_share,
    # info below; never above the severity its rule gives; and info whatever its share when it costs less
    # than severity_min_cost_ns (a GPU whose window is one 3 us copy is not a problem)
    "problem_share": 0.05,
    "warning_share": 0.01,
    "severity_min_cost_ns": 50_000,
    # gpu-records-lost: at least this many of XLA's thunk ranges, and this share of them, launched no GPU
    # work the trace recorded (the recording lost its CUDA activity)
    "lost_min_thunks": 100,
    "lost_thunks_share": 0.9,
    # offload-missing: a run whose policy name matches "offload" moving less than this per step
    "offload_min_bytes_per_step": MIB,
    # pageable-copies / sync-copies: how many it takes
    "pageable_min_count": 1,
    "sync_copy_min_count": 1,
    # copy-on-compute-stream: offload copies on a stream that ran at least this share of the device's
    # compute kernels (the compute stream, not one of many streams of a multi-stream pipeline)
    "compute_stream_share": 0.5,
    # exposed-at-boundaries: the first and last boundary_fraction of a step (or the first and last layer)
    # hold at least boundary_share of its exposed plus stalled copy time, which is at least
    # boundary_min_cost_fraction of the step
    "boundary_fraction": 0.1,
    "boundary_share": 0.5,
    "boundary_min_cost_fraction": 0.01,
    # exposed-copies: more than this fraction of a device's h2d/d2h copy busy time is exposed, and the
    # exposed time is at least exposed_copies_min_share of the device's window
    "exposed_copies_fraction": 0.25,
    "exposed_copies_min_share": 0.001,
    # lhs-off: more than this fraction of the copy busy time is exposed (and at least exposed_copies_min_share
    # of the windows)
    "lhs_exposed_fraction": 0.1,
    # slow-link: copies of 1 MiB or more running alone reach less than this fraction of the link
    "slow_link_fraction": 0.5,
    "slow_link_min_copies": 3,
    # copy-contention: GB/s alone / GB/s beside kernels above this, with enough copies in both
    "contention_slowdown": 1.5,
    "contention_min_copies": 3,
    # kernels-slowed-by-copies / nccl-slowed-by-copies: a (name, grid, block) group's lower-median duration
    # beside h2d/d2h copies / alone above this (METRICS.md "Kernels slowed by copies": 3 calls each)
    "kernel_slowdown": 1.1,
    "nccl_slowdown": 1.2,
    # stall-hotspot: one layer or one XLA instruction causes this share of the copy-caused stall time,
    # which is at least this many ns
    "hotspot_share": 0.5,
    "hotspot_min_stall_ns": 10_000,
}


_EPS = 1e-9  # ratios of integers land a rounding error off their limit: compare with this slack


def exceeds(x: float, limit: float) -> bool:
    """``x > limit``, not fooled by a rounding error at the limit."""
    return x > limit + _EPS * max(1.0, abs(limit))


def under(x: float, limit: float) -> bool:
    """``x < limit``, likewise."""
    return x < limit - _EPS * max(1.0, abs(limit))


def at_least(x: float, limit: float) -> bool:
    """``x >= limit``, likewise."""
    return not under(x, limit)


@dataclass(frozen=True)
class FindingsConfig:
    """The thresholds and the rules turned off (the host link is not here: it is an argument of the
    findings, ``run_findings(..., link=)``, resolved per GPU by ``links.run_link``)."""

    thresholds: dict[str, float] = field(default_factory=lambda: dict(THRESHOLDS))
    disabled: frozenset[str] = frozenset()

    def __getitem__(self, name: str) -> float:
        return self.thresholds[name]

    def with_(self, disabled: list[str] | None = None) -> FindingsConfig:
        return FindingsConfig(self.thresholds, self.disabled | frozenset(disabled or ()))


@dataclass(frozen=True)
class FindingsRequest:
    """What a command asks the findings for: the configuration, and the host link it names (``--link``,
    else the configuration file's ``link``; None: each GPU's own)."""

    config: FindingsConfig = field(default_factory=FindingsConfig)
    link: Link | None = None


def load_config(path: str | Path | None, known_rules: set[str]) -> FindingsRequest:
    """The defaults, overridden by the TOML file at *path* (unknown keys or rules are errors), with the
    link it names."""
    if path is None:
        return FindingsRequest()
    path = Path(path)
    try:
        doc: dict[str, Any] = tomllib.loads(path.read_text())
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, f"is not valid TOML ({exc})") from None
    extra = set(doc) - {"thresholds", "disabled", "link"}
    if extra:
        raise InputError(path, f"unknown keys {sorted(extra)}: expected thresholds, disabled, link")
    thresholds = dict(THRESHOLDS)
    for name, value in (doc.get("thresholds") or {}).items():
        if name not in THRESHOLDS:
            raise InputError(path, f"unknown threshold {name!r} (known: {', '.join(sorted(THRESHOLDS))})")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise InputError(path, f"threshold {name!r} must be a number, got {value!r}")
        thresholds[name] = float(value)
    disabled = doc.get("disabled") or []
    if not isinstance(disabled, list) or any(r not in known_rules for r in disabled):
        raise InputError(path, f"disabled must list rule ids among: {', '.join(sorted(known_rules))}")
    link = None
    if doc.get("link") is not None:
        try:
            link = parse_link(str(doc["link"]))
        except ValueError as exc:
            raise InputError(path, f"link: {exc}") from None
    return FindingsRequest(FindingsConfig(thresholds, frozenset(disabled)), link)


def configure(
    path: str | Path | None, disabled: list[str] | None, link: Link | None, known_rules: set[str]
) -> FindingsRequest:
    """What a command asks for: the defaults, the TOML file at *path*, and on top the rules it
    turns off (``--disable-finding``, checked before the file) and the host *link* (``--link``)."""
    unknown = [r for r in disabled or [] if r not in known_rules]
    if unknown:
        rules = ", ".join(sorted(known_rules))
        raise ProfilerError(f"--disable-finding: unknown rule {unknown[0]!r} (rules: {rules})")
    found = load_config(path, known_rules)
    return FindingsRequest(found.config.with_(disabled), link if link is not None else found.link)
