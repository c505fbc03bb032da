"""Host links to compare achieved copy bandwidth against, and the default for a trace's GPUs.

Rates are per direction, in decimal GB/s (10^9 bytes/s), after line encoding: PCIe x16 is
16 lanes x 8 / 16 / 32 / 64 GT/s with 128b/130b encoding (Gen3 to Gen5) or FLIT mode (Gen6,
242/256 of the raw rate); NVLink-C2C moves 900 GB/s both ways together on Grace Hopper and
Grace Blackwell (450 GB/s each way) and 1.8 TB/s on Vera Rubin (900 GB/s each way).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    key: str
    name: str
    gbps: float  # per direction

    @property
    def label(self) -> str:
        return f"{self.name} ({self.gbps:g} GB/s per direction)"


LINKS = (
    Link("pcie3", "PCIe Gen3 x16", 15.75),
    Link("pcie4", "PCIe Gen4 x16", 31.5),
    Link("pcie5", "PCIe Gen5 x16", 63.0),
    Link("pcie6", "PCIe Gen6 x16", 121.0),
    Link("c2c", "NVLink-C2C, Grace Hopper / Grace Blackwell", 450.0),
    Link("c2c-rubin", "NVLink-C2C, Vera Rubin", 900.0),
)
BY_KEY = {link.key: link for link in LINKS}
CUSTOM = "custom"
FALLBACK = "pcie4"
# The host link of a GPU model (first match wins).  A GPU in a Grace superchip reaches host
# memory over NVLink-C2C; every other one over its PCIe slot.
DEVICE_LINKS: tuple[tuple[str, str], ...] = (
    (r"\bVR\d{3}|\bVera\b|\bRubin\b", "c2c-rubin"),
    (r"\bG[HB]\d{3}\b", "c2c"),
    (r"\bB300\b|RTX PRO 6000 Blackwell", "pcie6"),
    (r"\bH(100|200|800|20)\b|\bB(100|200)\b|RTX 50\d0|\bL40S\b", "pcie5"),
    (r"\bA(100|800|40|30|10|16|2)\b|\bL4\b|\bL40\b|RTX (30|40)\d0|RTX A\d{4}|RTX \d000 Ada", "pcie4"),
    (r"V100|P100|P40|\bT4\b|RTX 20\d0|Quadro|TITAN|GTX", "pcie3"),
)


def default_link(gpu_names: list[str]) -> tuple[Link, str]:
    """The link to compare against for these GPUs, and why (a sentence for the page)."""
    for name in gpu_names:
        for pattern, key in DEVICE_LINKS:
            if re.search(pattern, name, flags=re.IGNORECASE):
                link = BY_KEY[key]
                return link, f"{link.label}: the host link of the device model ({name})"
    link = BY_KEY[FALLBACK]
    known = f" ({', '.join(gpu_names)})" if gpu_names else ""
    return link, f"{link.label}: assumed, the device model{known} is not in the table of known GPUs"
