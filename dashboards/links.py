"""The host link drawn against achieved copy bandwidth: the named links of ``analysis.links`` (one
definition, shared with the what-if) and the default for a trace's GPUs, with the reason shown."""

from __future__ import annotations

from profiler.analysis.links import LINKS as NAMED
from profiler.analysis.links import Link, link_of_gpu

LINKS: tuple[Link, ...] = tuple(NAMED.values())
BY_KEY = NAMED
CUSTOM = "custom"
FALLBACK = "pcie4"


def label(link: Link) -> str:
    return f"{link.name} ({link.gbps:g} GB/s per direction)"


def default_link(gpu_names: list[str]) -> tuple[Link, str]:
    """The link to compare against for these GPUs, and why (a sentence for the page)."""
    for name in gpu_names:
        link = link_of_gpu(name)
        if link is not None:
            return link, f"{label(link)}: the host link of the device model ({name})"
    link = BY_KEY[FALLBACK]
    known = f" ({', '.join(gpu_names)})" if gpu_names else ""
    return link, f"{label(link)}: assumed, the device model{known} is not in the table of known GPUs"
