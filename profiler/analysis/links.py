"""Host links and the copy-time scale factor of the what-if.

Bandwidths are per direction, in decimal GB/s (the unit of METRICS.md's
``gbps``): what one h2d or d2h stream of copies can move at best.  A
trace's link is told from its GPU's name (``TARGET_INFO_GPU``), and the
what-if scales every h2d/d2h copy's duration by ``F = from / to``: the
copies are assumed to run at the same fraction of whatever link they use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from profiler.errors import ProfilerError


@dataclass(frozen=True)
class Link:
    """A host link, parsed once where the user names it (``given_link``) and passed as this value."""

    key: str
    name: str
    gbps: float  # per direction, decimal GB/s

    def doc(self) -> dict[str, Any]:
        """The link in a JSON document (``from_doc`` reads it back)."""
        return {"key": self.key, "name": self.name, "gbps": self.gbps}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Link:
        return cls(doc["key"], doc["name"], doc["gbps"])


LINKS: dict[str, Link] = {
    link.key: link
    for link in (
        Link("pcie3", "PCIe Gen3 x16", 15.75),  # 8 GT/s x 16 lanes, 128b/130b
        Link("pcie4", "PCIe Gen4 x16", 31.5),
        Link("pcie5", "PCIe Gen5 x16", 63.0),
        Link("pcie6", "PCIe Gen6 x16", 121.0),  # 64 GT/s x 16 lanes, FLIT mode (242/256)
        Link("nvlink-c2c", "NVLink-C2C", 450.0),  # Grace Hopper / Grace Blackwell: 900 GB/s both ways together
        # a TPU v5e's host: measured, see TPU_LINKS below
        Link("tpu-v5e-host", "TPU v5e host link as measured", 14.16),
    )
}
ALIASES = {
    "gen3": "pcie3",
    "gen4": "pcie4",
    "gen5": "pcie5",
    "gen6": "pcie6",
    **{f"pcie-gen{n}": f"pcie{n}" for n in (3, 4, 5, 6)},
    "c2c": "nvlink-c2c",
    "nvlink": "nvlink-c2c",
}
# GPU name fragments (lower case) -> the host link that GPU family uses; first match wins.
GPU_LINKS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("gh200", "gb200", "gb300", "grace"), "nvlink-c2c"),
    (("b100", "b200", "b300"), "pcie6"),
    (("h100", "h200", "h800", "h20"), "pcie5"),
    # Turing and Volta before Ampere and Ada: "Quadro RTX 4000" (Turing, Gen3) holds "rtx 40"
    (("v100", "t4", "p100", "p40", "rtx 20", "quadro rtx", "titan rtx", "titan v"), "pcie3"),
    (("a100", "a800", "a30", "a40", "a10", "a16", "a2 ", "l40", "l4", "rtx 30", "rtx 40", "rtx a"), "pcie4"),
)
# TPU hosts, by what JAX reports as the chip's device_kind (lower case): the rate the in-program host
# offloads of this project's TPU v5e recordings reached (benchmarks/README.md, "Issue 42 on a real TPU
# v5e"): bytes over the span from a transfer's async-start to the end of its async-done, over the
# 270 transfers of 32 and 128 MiB during which the core waited at least half of that span (so the
# transfer, not the core, was the critical path): median 14.16 GB/s host-to-device, 14.74
# device-to-host (p90 14.18 and 14.75); the Link holds one rate per direction: the slower one.
# jax.device_put measured 14.0 GB/s host-to-device on the same machine (benchmarks/tpu_link.py).
TPU_LINKS: tuple[tuple[tuple[str, ...], str], ...] = ((("tpu v5 lite", "tpu v5e"), "tpu-v5e-host"),)
# The link assumed when the GPU is unknown (not named in the export or by a plan's target, or not in
# GPU_LINKS), for every path (analysis, findings, what-if's page, plan, calibration): PCIe Gen4 x16, the
# link most machines with a discrete GPU have today (A100, L40, RTX 30/40 hosts); a Gen5 guess would
# halve an unknown machine's copy times.  Always said, and ``--link`` chooses another.
ASSUMED = "pcie4"


def parse_link(text: str) -> Link:
    """A link by name (``pcie5``, ``gen4``, ``nvlink-c2c``, ...) or a bandwidth in GB/s (``200``)."""
    key = text.strip().lower().replace("_", "-").replace(" ", "")
    key = ALIASES.get(key, key)
    if key in LINKS:
        return LINKS[key]
    try:
        gbps = float(key.removesuffix("gb/s").removesuffix("gbps"))
    except ValueError:
        raise ValueError(f"unknown link {text!r}: use {', '.join(LINKS)} or a bandwidth in GB/s") from None
    if not gbps > 0 or gbps == float("inf"):
        raise ValueError(f"a link's bandwidth must be a positive number of GB/s, got {text!r}")
    return Link(f"{gbps:g}gbps", f"{gbps:g} GB/s", gbps)


def given_link(text: str | None, flag: str = "--link") -> Link | None:
    """The link a user names (*flag*'s value), parsed at the edge: None when none is named, the
    one-line error (``--link: unknown link ...``) when the name is not a link or a bandwidth."""
    if not text:
        return None
    try:
        return parse_link(text)
    except ValueError as exc:
        raise ProfilerError(f"{flag}: {exc}") from None


def link_of_gpu(name: str | None) -> Link | None:
    """The host link a GPU of this name uses, when its family is known."""
    low = f"{name or ''} ".lower()
    for fragments, key in (*TPU_LINKS, *GPU_LINKS):
        if any(f in low for f in fragments):
            return LINKS[key]
    return None


def copy_scale(source: Link, target: Link) -> float:
    """``F``: how much longer a copy takes on *target* than on *source* (< 1: faster)."""
    return source.gbps / target.gbps


@dataclass(frozen=True)
class HostLink:
    """The link a trace's copies are compared against, and where it comes from."""

    link: Link
    source: str  # "given" (--link), "gpu" (the device model's), "assumed" (unknown GPU)
    why: str  # a clause for the page or the terminal

    @property
    def assumed(self) -> bool:
        return self.source == "assumed"


def host_link(gpu_names: list[str], given: Link | None = None) -> HostLink:
    """The one rule (CLI and dashboard): the link *given* (``--link``), else that of
    the first named GPU whose family is known, else ``ASSUMED``, saying that the GPU is unknown
    (no name in the export: 2026.2 exports have no ``TARGET_INFO_GPU``) or not in the table."""
    if given is not None:
        return HostLink(given, "given", "as chosen (--link)")
    named = [n for n in gpu_names if n]
    for name in named:
        link = link_of_gpu(name)
        if link is not None:
            return HostLink(link, "gpu", f"the host link of the device model ({name})")
    if named:
        unknown = f"the device model ({', '.join(dict.fromkeys(named))}) is not in the table of known GPUs"
    else:
        unknown = "unknown GPU (the export names none: no TARGET_INFO_GPU table)"
    return HostLink(LINKS[ASSUMED], "assumed", f"assumed: {unknown}; --link NAME chooses another")


def run_link(gpus: Mapping[str, str | None], device: str | int | None, given: Link | None = None) -> HostLink:
    """The host link of GPU *device* of a run whose GPUs are named *gpus* (device id -> model name),
    resolved once for every reader (the terminal, the findings, the dashboard): ``host_link`` on that
    GPU's own model when the export names it, else on the run's named GPUs; *given* (``--link``) first."""
    own = gpus.get(str(device)) if device is not None else None
    names = [own] if own else [n for n in gpus.values() if n]
    return host_link(names, given)


def add_link_option(parser: Any, help: str, flag: str = "--link", many: bool = False) -> None:
    """Declare *flag* (``--link``; ``--from-link``) on *parser* (or a group of it): one link NAME, or with
    *many* a repeatable comma list; parsed after the command line (``given_link``, ``given_links``) so
    that a bad one is one line naming the flag."""
    if many:
        parser.add_argument(flag, action="append", default=None, metavar="NAME[,NAME...]", help=help)
    else:
        parser.add_argument(flag, default=None, metavar="NAME", help=help)


def given_links(groups: list[str] | None, flag: str = "--link") -> list[Link] | None:
    """The links of a repeatable comma list (``--link pcie5,nvlink-c2c --link 200``), each parsed by
    ``given_link``: None when the flag is not given, an error when it names none."""
    if not groups:
        return None
    links = [given_link(k.strip(), flag) for group in groups for k in group.split(",") if k.strip()]
    if not links:
        raise ProfilerError(f"{flag}: no link named in {','.join(groups)!r}")
    return [link for link in links if link is not None]


def recorded_link(gpu_names: list[str | None]) -> Link:
    """The link a trace was recorded on, for the what-if's ``F`` when none is given: ``host_link``'s
    rule (each GPU's family), but never assumed: ValueError when the export names no GPU, a GPU's
    family is not in the table, or its GPUs use different links (``--from-link`` then says)."""
    found = {link_of_gpu(n) for n in gpu_names}
    link = found.pop() if len(found) == 1 else None
    if link is None:
        what = ", ".join(sorted({str(n) for n in gpu_names})) or "no GPU named in the export"
        raise ValueError(
            f"cannot tell which host link its GPUs ({what}) use: give it with --from-link NAME (the what-if scales "
            "each copy by the ratio of two links, so it does not assume one, as analyze's GB/s column does)"
        )
    return link


def link_change(source: Link, target: Link) -> dict[str, str | float]:
    """The what-if's ``link`` document: the two links, by name and GB/s."""
    return {"from": source.name, "to": target.name, "from_gbps": source.gbps, "to_gbps": target.gbps}


def without_hint(why: str) -> str:
    """*why* without the ``--link`` hint (for a page whose link menu chooses)."""
    return why.removesuffix("; --link NAME chooses another")
