"""One candidate policy: where each named activation goes (device, remat, offload), or a preset.

An activation is a ``checkpoint_name`` inside the step's ``jax.checkpoint``:
``device`` keeps it in device memory for the backward pass, ``remat`` recomputes it
there, ``offload`` sends it to pinned host memory and brings it back.  Everything
unnamed is recomputed (``save_and_offload_only_these_names``, MaxText's
``remat_policy=custom``).  A name tagged on a checkpoint's input (MaxText's
``decoder_layer_input``) cannot be recomputed: it is kept or offloaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PLACES = ("device", "remat", "offload")
SHORT = {"device": "D", "remat": "R", "offload": "O"}


@dataclass(frozen=True)
class Name:
    """A named activation of the step: its shape, how many per step and their bytes."""

    name: str
    shape: tuple[int, ...] = ()
    dtype: str = ""
    count: int = 1  # values per step (layers, scan iterations)
    bytes_per_step: int = 0
    is_input: bool = False  # tagged on a checkpoint's input: kept or offloaded, never recomputed

    def options(self) -> tuple[str, ...]:
        return ("device", "offload") if self.is_input else PLACES

    @property
    def resting(self) -> str:
        """Where it is when nothing is asked: recomputed, or kept when it is an input."""
        return "device" if self.is_input else "remat"


@dataclass(frozen=True)
class Candidate:
    """A placement per name (sorted), or a preset (``jax:NAME``: one of JAX's policies)."""

    placements: tuple[tuple[str, str], ...] = ()
    preset: str | None = None  # jax:dots_saveable, maxtext:minimal, ...
    jax_policy: str | None = None  # a JAX policy by name instead of placements
    label_text: str | None = field(default=None, compare=False)

    @staticmethod
    def of(places: Mapping[str, str], preset: str | None = None) -> Candidate:
        bad = {k: v for k, v in places.items() if v not in PLACES}
        if bad:
            raise ValueError(f"unknown placement {bad}: expected one of {', '.join(PLACES)}")
        return Candidate(tuple(sorted(places.items())), preset=preset)

    @staticmethod
    def jax(name: str, preset: str | None = None) -> Candidate:
        return Candidate((), preset=preset or f"jax:{name}", jax_policy=name)

    def place(self) -> dict[str, str]:
        return dict(self.placements)

    def where(self, place: str) -> list[str]:
        return [n for n, p in self.placements if p == place]

    def with_(self, name: str, place: str) -> Candidate:
        """This candidate with *name* moved to *place* (no preset any more)."""
        return Candidate.of({**self.place(), name: place})

    def policy_doc(self) -> dict[str, Any]:
        """What the script's process builds the policy from (``profiler.xla.policy_swap.build``)."""
        if self.jax_policy is not None:
            return {"jax": self.jax_policy}
        return {"saved": sorted(self.where("device")), "offloaded": sorted(self.where("offload"))}

    def key(self) -> str:
        """Equal for candidates that compile to the same request (a preset equal to a searched one)."""
        return json.dumps(self.policy_doc(), sort_keys=True)

    def label(self, names: Iterable[Name] = ()) -> str:
        """What moved from where the names rest (recomputed; inputs kept), in the names' order:
        ``keep a,b; offload c``, ``recompute all``, ``keep all``; or the preset's name."""
        if self.preset:
            return self.preset
        if self.jax_policy:
            return f"jax:{self.jax_policy}"
        named = list(names) or [Name(n) for n, _ in self.placements]
        place = self.place()
        named = [n for n in named if n.name in place]
        if not named:
            return "(no names)"
        for where, text in (("remat", "recompute all"), ("device", "keep all"), ("offload", "offload all")):
            if all(place[n.name] in (where, n.resting if where == "remat" else where) for n in named):
                return text
        parts = []
        for where, verb in (("device", "keep"), ("offload", "offload"), ("remat", "recompute")):
            moved = [n.name for n in named if place[n.name] == where and where != n.resting]
            if moved:
                parts.append(f"{verb} {','.join(moved)}")
        return "; ".join(parts)


def resting(names: Iterable[Name]) -> Candidate:
    """Every name recomputed (inputs kept): the least device memory without copies."""
    return Candidate.of({n.name: n.resting for n in names})


def everywhere(names: Iterable[Name], place: str) -> Candidate:
    """Every name at *place* (inputs kept when *place* is remat)."""
    return Candidate.of({n.name: (n.resting if place == "remat" else place) for n in names})
