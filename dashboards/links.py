"""The host link drawn against achieved copy bandwidth: the named links of ``analysis.links`` (one
definition, shared with the what-if) and the default for a trace's GPUs (``analysis.links.run_link``,
the rule the CLI follows too), with the reason shown."""

from __future__ import annotations

from profiler.analysis import links
from profiler.analysis.links import ASSUMED, Link, host_link, without_hint
from profiler.analysis.links import LINKS as NAMED
from profiler.stored.summary import RunSummary

LINKS: tuple[Link, ...] = tuple(NAMED.values())
BY_KEY = NAMED
CUSTOM = "custom"
FALLBACK = ASSUMED


def label(link: Link) -> str:
    return f"{link.name} ({link.gbps:g} GB/s per direction)"


def default_link(gpu_names: list[str]) -> tuple[Link, str]:
    """The link to compare against for these GPUs, and why (a sentence for the page): the rule of
    ``analysis.links.host_link``; on the page the link menu chooses another."""
    chosen = host_link(gpu_names)
    return chosen.link, f"{label(chosen.link)}: {without_hint(chosen.why)}"


def run_link(run: RunSummary, device: str | None) -> tuple[Link, str]:
    """The link of one GPU of a run (``analysis.links.run_link``: its own model when the export names it,
    else the run's), and why, for the page."""
    names = run.device_names or {f"gpu-{i}": n for i, n in enumerate(run.gpus)}  # no ids: the run's names
    chosen = links.run_link(names, device)
    return chosen.link, f"{label(chosen.link)}: {without_hint(chosen.why)}"
