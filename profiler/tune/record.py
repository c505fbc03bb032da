"""The persistent record of tune's compiles: a second tune of the same step compiles nothing it has seen.

A compile's result (the compiled step's HLO and the script's answer: module, ``memory_analysis()``,
seconds) is kept under ``$PROFILE_STEP_CACHE/tune`` (default ``~/.cache/profile-step/tune``; ``--no-cache``
neither reads nor writes it), keyed by what decides the program XLA makes:

- the *step*: the fingerprint of its traced jaxpr (``tune_server``: shapes, dtypes, shardings and every
  primitive of the step, whatever file they came from), the JAX that traced it, ``$XLA_FLAGS``;
- the *target*: the GPU description the step is compiled for (its text);
- the *flags*: ``--xla-option``;
- the *placement*: the candidate's policy document.

The first three make the step key (one folder); the placement names a compile in it.  Predictions are
not kept: a link or a memory limit is a replay of the kept program, which costs no compile.  The
step's folder also keeps the choices of earlier tunes (their placements, link and limit): the next
tune of that step starts its search from them (``search``'s seeds), so a faster link's choice is never
slower than a slower link's.  An entry that cannot be read is a miss, never an error.  Beside the step
folders, ``launch/`` maps a launch of the script (known before it runs) to its step key and its traced
step's names (``profiler.tune.launch``): a tune that meets only kept programs then never starts the script.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from profiler.tune.candidate import Candidate

HLO = "step.hlo.txt"
ANSWER = "answer.json"
CHOICES = "choices.json"
KEPT = ("module", "memory", "seconds", "checkpoints", "notes")  # the answer's fields kept beside the HLO


def _digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def step_key(step_fingerprint: str, target_spec: str, options: dict[str, Any], jax_version: str | None) -> str:
    """The key of one step compiled for one target with one set of flags."""
    return _digest(
        {
            "step": step_fingerprint,
            "target": hashlib.sha256(target_spec.encode()).hexdigest(),
            "options": options,
            "jax": jax_version,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        }
    )[:24]


class Record:
    """One step's compiles on one target with one set of flags (a folder of the cache)."""

    def __init__(self, root: Path, key: str) -> None:  # root: the cache's tune folder
        self.folder = root / key
        self.key = key
        self.stored = 0

    def _entry(self, c: Candidate) -> Path:
        return self.folder / _digest(c.policy_doc())[:24]

    def has(self, c: Candidate) -> bool:
        """Whether *c* has a kept answer (a hit costs no compile)."""
        return (self._entry(c) / ANSWER).is_file()

    def get(self, c: Candidate, into: Path) -> dict[str, Any] | None:
        """The kept answer for *c*, its HLO copied to *into* (the tune folder keeps its own files);
        None when there is none or it cannot be read."""
        entry = self._entry(c)
        try:
            answer = json.loads((entry / ANSWER).read_text())
            into.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(entry / HLO, into / HLO)
        except (OSError, ValueError):
            return None
        if not isinstance(answer, dict) or answer.get("policy") != c.policy_doc():
            return None
        return {**{k: answer.get(k) for k in KEPT}, "ok": True, "hlo_file": str(into / HLO), "reused": str(entry)}

    def put(self, c: Candidate, answer: dict[str, Any]) -> None:
        """Keep a successful compile's answer and HLO (written whole, then renamed: never half an entry)."""
        if not answer.get("ok") or not answer.get("hlo_file"):
            return
        entry = self._entry(c)
        tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(answer["hlo_file"], tmp / HLO)
            kept = {k: answer.get(k) for k in KEPT}
            (tmp / ANSWER).write_text(json.dumps({**kept, "policy": c.policy_doc()}, default=str))
            if entry.exists():
                shutil.rmtree(entry)
            tmp.rename(entry)
            self.stored += 1
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)

    def choices(self) -> list[dict[str, Any]]:
        """The earlier tunes' choices of this step: ``placements``, ``link`` (key), ``gbps``, ``limit``."""
        try:
            rows = json.loads((self.folder / CHOICES).read_text())
        except (OSError, ValueError):
            return []
        return (
            [r for r in rows if isinstance(r, dict) and isinstance(r.get("placements"), dict)]
            if isinstance(rows, list)
            else []
        )

    def seeds(self) -> list[Candidate]:
        """The earlier choices as candidates (a placement once: the first link that chose it)."""
        out: list[Candidate] = []
        for r in self.choices():
            try:
                c = Candidate.of(r["placements"])
            except ValueError:
                continue
            if c not in out:
                out.append(c)
        return out

    def remember(self, c: Candidate, link: str, gbps: float, limit: int | None) -> None:
        """Add a tune's choice (a placement of the names; a JAX preset is not a seed of the search)."""
        if c.jax_policy or not c.placements:
            return
        row = {"placements": c.place(), "link": link, "gbps": gbps, "limit": limit}
        rows = [r for r in self.choices() if r != row] + [row]
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f"{CHOICES}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(rows, indent=1))
            tmp.replace(self.folder / CHOICES)
        except OSError:
            pass
