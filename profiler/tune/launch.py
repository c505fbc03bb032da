"""The launch key: what tune knows of a step before the script runs, so that a tune whose search meets
only programs already in the record never starts the script.

The record of compiles (``profiler.tune.record``) is keyed by the traced step, which only the started
script knows.  The launch key is made of what decides that step and is known beforehand:

- the script's command line (the Python as given and resolved, the script, its arguments, the batch and
  policy words), the working folder, and the environment the script gets, less the variables that
  describe the shell (``VOLATILE``) and those tune sets per run (its folder, its pipes);
- the Python: its version and every installed distribution (name, version, where its metadata lies, and
  when that changed), read by one short run of that Python that imports nothing but ``importlib.metadata``;
- the target description, ``--xla-option`` (``$XLA_FLAGS`` is in the environment).

The first tune of a launch (the script started) records under that key the step key, what the script
answered about its step (``ready``, ``names``), and the content hash of every file the script's process
read or imported from outside the Python's own prefix (its standard library and site-packages): the
script, the user's modules, a config file (the start-up hook's audit of ``open`` until the step is
handed over, and the modules' ``__file__``).  A later tune with the same key reuses the entry only when
every one of those files still has its hash (a file gone is a change, and so is one the first run looked
for and did not find that is there now); else the script starts as before.  A started script's
traced step is always checked against the entry's step key (``LazySession``): a difference is an error of
the launch key, and the tune starts over with the script started.

Not seen: a file the script found by listing a folder and never opened in the first run, what native code
reads by itself (beside the environment), and a reinstall of a distribution at the same version that
leaves its metadata's time unchanged.  ``--start-script`` starts the script whatever the record holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiler.capture.tune_session import CompileSession
from profiler.conventions import PLAN_DIR_ENV, PLAN_TARGET_ENV, TUNE_FDS_ENV
from profiler.errors import ProfilerError

LAUNCH = "launch"  # the record's folder of launch entries (beside the step folders)
_SHELL = "_ OLDPWD PWD SHLVL PYTEST_CURRENT_TEST PS1 PS2 PROMPT_COMMAND COLUMNS LINES WINDOWID TERM_SESSION_ID"
_SESSION = "SSH_CLIENT SSH_CONNECTION SSH_TTY SSH_AUTH_SOCK TMUX TMUX_PANE STY"
VOLATILE = frozenset([*_SHELL.split(), *_SESSION.split(), PLAN_DIR_ENV, PLAN_TARGET_ENV, TUNE_FDS_ENV])
_PYTHON_FACTS = r"""
import json, os, sys, importlib.metadata as md
dists = []
for d in md.distributions():
    where = getattr(d, "_path", None)
    try:
        stamp = os.stat(where).st_mtime_ns if where else None
    except OSError:
        stamp = None
    dists.append([d.metadata["Name"] or "", d.version or "", str(where), stamp])
print(json.dumps({"version": sys.version, "executable": os.path.realpath(sys.executable), "prefix": sys.prefix,
                  "base_prefix": sys.base_prefix, "path": sys.path, "dists": sorted(dists)}))
"""


class StaleRecord(ProfilerError):
    """A started script traced another step than the launch entry says: the entry is wrong."""


def _digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def python_facts(python: str, env: dict[str, str]) -> dict[str, Any] | None:
    """The Python's version and installed distributions (one short run of it); None when it fails."""
    keep = {k: v for k, v in env.items() if k not in (TUNE_FDS_ENV,)}
    try:
        proc = subprocess.run([python, "-c", _PYTHON_FACTS], capture_output=True, text=True, env=keep, timeout=120,
                              check=False, stdin=subprocess.DEVNULL)  # fmt: skip
        return json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def launch_key(session: CompileSession, spec: str, options: dict[str, Any], facts: dict[str, Any]) -> str:
    """The key of one launch: the command, the folder, the environment, the Python, the target, the flags."""
    env = {k: v for k, v in session.env.items() if k not in VOLATILE}
    command = [*session.command]
    return _digest(
        {
            "command": command,
            "resolved": [os.path.realpath(w) if os.path.exists(w) else None for w in command],
            "cwd": os.getcwd(),
            "env": env,
            "python": facts,
            "target": hashlib.sha256(spec.encode()).hexdigest(),
            "options": options,
        }
    )[:24]


def file_hash(path: str) -> str | None:
    """The SHA-256 of a file's bytes; None when it is gone or not a regular file."""
    try:
        if not os.path.isfile(path):
            return None
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def hashes(paths: list[str]) -> dict[str, str | None]:
    """Each file's content hash (None: gone or not a file)."""
    return {p: file_hash(p) for p in sorted(set(paths))}


def _well_formed(entry: Any) -> bool:
    """Whether a launch entry has what the search reads: the step's answer, its names, the files."""
    if not isinstance(entry, dict) or not all(k in entry for k in ("step_key", "ready", "found", "files")):
        return False
    found, ready = entry["found"], entry["ready"]
    if not isinstance(found, dict) or not isinstance(ready, dict) or not found.get("ok"):
        return False
    names = found.get("names")
    return (
        isinstance(found.get("fingerprint"), str)
        and isinstance(names, dict)
        and all(isinstance(v, dict) and {"shape", "dtype", "count", "bytes_per_step"} <= set(v) for v in names.values())
    )


class LaunchRecord:
    """The launch entries of the record (``<record>/launch/<key>.json``)."""

    def __init__(self, root: Path, key: str) -> None:
        self.path = root / LAUNCH / f"{key}.json"
        self.key = key

    def lookup(self) -> tuple[dict[str, Any] | None, str]:
        """The entry when every file it names is unchanged, else None; and why (for the output)."""
        try:
            entry = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None, "no earlier tune of this launch"
        except (OSError, ValueError):
            return None, "its entry in the record cannot be read"
        if not _well_formed(entry):
            return None, "its entry in the record cannot be read"
        files = entry["files"]
        if not isinstance(files, dict) or not files:
            return None, "its entry in the record names no file"
        now = hashes(list(files))
        changed = [p for p in files if now.get(p) != files[p]]
        if changed:
            what = "gone" if now.get(changed[0]) is None else "changed"
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            return None, f"{changed[0]} {what}{more} since the earlier tune"
        return entry, ""

    def write(self, step_key: str, ready: dict[str, Any], found: dict[str, Any], files: dict[str, str | None]) -> None:
        """Keep the entry (written whole, then renamed); never raises."""
        doc = {"step_key": step_key, "ready": ready, "found": found, "files": files}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc, default=str))
            tmp.replace(self.path)
        except OSError:
            pass

    def forget(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


def read_files(sources: dict[str, Any], script: Path, skip: list[Path]) -> list[str]:
    """The files a started script read or imported (its ``sources`` answer) that the launch key must
    watch: outside the Python's prefixes, the tune folder and the system's pseudo-files, and not a module's
    cached bytecode (``__pycache__``: its source is watched; a touched source rewrites it); the script always."""
    roots = [os.path.realpath(p) for p in sources.get("prefixes") or [] if p]
    roots += [os.path.realpath(p) for p in skip] + ["/proc", "/sys", "/dev"]
    out = {os.path.realpath(script)}
    for p in sources.get("files") or []:
        real = os.path.realpath(p)
        if "/__pycache__/" in real:
            continue
        if not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            out.add(real)
    return sorted(out)


class LazySession:
    """The script's process, started at its first request: until then the step is the record's.

    ``ready`` is the recorded answer; when a request comes, the script is started, its step traced and
    checked against the record's step key (``check``); a difference raises ``StaleRecord``."""

    def __init__(
        self,
        inner: CompileSession,
        name: str,
        ready: dict[str, Any],
        check: Callable[[dict[str, Any], dict[str, Any]], str | None],
        say: Callable[[str], None],
    ) -> None:
        self.inner = inner
        self.name = name
        self.ready = ready
        self.check = check
        self.say = say
        self.command = inner.command
        self.log = inner.log
        self.started = False
        self._launched = False

    def begin(self) -> None:
        """Start the process without waiting for its step (several start side by side)."""
        if not self._launched:
            self._launched = True
            self.say(f"tune: a placement not in the record: starting {self.name} (log: {self.log})")
            self.inner.launch()

    def request(self, doc: dict[str, Any]) -> dict[str, Any]:
        if not self.started:
            self.started = True
            self.begin()
            ready = self.inner.wait_ready()
            found = self.inner.request({"op": "names"})
            why = self.check(ready, found)
            if why is not None:
                raise StaleRecord(why)
        return self.inner.request(doc)

    def close(self) -> None:
        self.inner.close()
