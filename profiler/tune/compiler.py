"""Candidates compiled in the script's process (``profiler.capture.tune_session``), once per request
(the compile cache of a run; with a ``Record``, once per step, target and flags across runs), and
predicted on the link against the memory limit: the evaluator the search calls.

With helpers (``--jobs N``: N - 1 more processes of the same script, started by ``spawn`` when a
round first has more than one candidate to compile), ``prefetch`` compiles a round's candidates side
by side before the search asks for them one by one; an answer compiled ahead is counted, numbered
(``cNNN``) and recorded only when the search takes it, in the search's order, so the result is the
one of a single process.  The first process may be a ``launch.LazySession`` (the step from the record
of an earlier tune): it starts at its first request, beside the helpers.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiler.analysis.links import HostLink
from profiler.capture.tune_session import CompileSession
from profiler.errors import ProfilerError
from profiler.predict import roofline
from profiler.tune.candidate import Candidate, Name
from profiler.tune.evaluate import Compiled, Outcome, compiled_from
from profiler.tune.launch import StaleRecord
from profiler.tune.record import Record
from profiler.units import human_time


class Compiler:
    """Compiles candidates in the script's process, once per request (the cache), and predicts them."""

    def __init__(
        self,
        session: CompileSession,
        out: Path,
        device: roofline.Device,
        link: HostLink,
        limit: int | None,
        options: dict[str, Any] | None = None,
        calibration: Any = None,
        record: Record | None = None,
        helpers: list[CompileSession] | None = None,
        spawn: Callable[[int], CompileSession] | None = None,
        jobs: int = 1,
    ) -> None:
        self.session = session
        self.helpers = list(helpers or [])  # more processes of the script (--jobs), launched, maybe not ready
        self._ready: dict[int, threading.Event] = {}  # per helper (id): set once it is ready or left out
        self._left_out: dict[int, str] = {}  # the helpers that failed to start or took another step: why
        self._waiters: dict[int, threading.Thread] = {}  # the threads that wait for the helpers' steps
        self.spawn = spawn  # makes helper number i (2, 3, ...), not launched
        self._to_spawn = max(0, jobs - 1) if spawn is not None else 0
        self.ahead: dict[str, dict[str, Any]] = {}  # answers compiled side by side, not taken yet
        self._ahead_no = 0
        self.out = out
        self.device = device
        self.link = link.link
        self.limit = limit
        self.options = dict(options or {})
        self.calibration = calibration
        self.cache: dict[str, Compiled | None] = {}
        self.errors: dict[str, str] = {}
        self.compiles = 0
        self.seconds = 0.0
        self.record = record
        self.reused = 0  # answers taken from the record instead of compiling
        self.reused_keys: set[str] = set()
        self.echo: Callable[[str], None] = lambda s: None
        self.device_memory: int | None = None
        self.names: list[Name] = []  # for the candidates' labels in the progress lines

    def _key(self, c: Candidate) -> str:
        return c.key() + (repr(sorted(self.options.items())) if self.options else "")

    def cached(self, c: Candidate) -> bool:
        """Whether *c* costs no compile: compiled in this run, or kept in the record."""
        return self._key(c) in self.cache or (self.record is not None and self.record.has(c))

    def _reuse(self, c: Candidate) -> dict[str, Any] | None:
        """The record's answer for *c* (its HLO copied into ``rNNN``), or None."""
        if self.record is None:
            return None
        ans = self.record.get(c, self.out / f"r{self.reused + 1:03d}")
        if ans is not None:
            self.reused += 1
            self.reused_keys.add(self._key(c))
        return ans

    def compiled(self, c: Candidate) -> Compiled | None:
        key = self._key(c)
        if key not in self.cache:
            t0 = time.monotonic()
            ans = self._reuse(c)
            side = key in self.ahead
            if ans is None:
                self.compiles += 1
                where = self.out / f"c{self.compiles:03d}"
                if side:
                    ans = _moved(self.ahead.pop(key), where)
                else:
                    ans = self.session.request(self._request(c, where))
                    self.seconds += time.monotonic() - t0
                if self.record is not None:
                    self.record.put(c, ans)
            if ans.get("ok"):
                comp = compiled_from(ans, key, self.device)
                comp.calibration = self.calibration
                self.cache[key] = comp
            else:
                self.cache[key] = None
                self.errors[key] = str(ans.get("error"))
            out = self.outcome(c)
            state = "failed" if out is None else human_time(out.step_ns) + ("" if out.fits else ", does not fit")
            what = "kept (compiled by an earlier tune)" if key in self.reused_keys else f"compile {self.compiles}"
            took = float(ans.get("seconds") or 0.0) if side else time.monotonic() - t0
            beside = ", side by side" if side and ans.get("together") else ""
            self.echo(f"tune: {what}: {c.label(self.names)}: {state} ({took:.1f} s{beside})")
        return self.cache[key]

    def _request(self, c: Candidate, where: Path) -> dict[str, Any]:
        return {"op": "compile", "policy": c.policy_doc(), "out": str(where), "options": self.options}

    @property
    def jobs(self) -> int:
        """How many script processes compile (this one and its helpers still alive)."""
        return 1 + len(self.helpers)

    def _watch(self, h: CompileSession) -> None:
        """Wait for a helper's step in a thread of its own (once): a round does not wait for a helper that is
        still starting; its ``_ready`` event is set when it is ready or left out (``_left_out``: why)."""
        if id(h) in self._ready:
            return
        event = self._ready[id(h)] = threading.Event()
        step = (self.session.ready or {}).get("step")

        def wait() -> None:
            try:
                ready = h.wait_ready()
                if ready.get("step") != step:
                    self._left_out[id(h)] = f"it took {ready.get('step')} as the step, not {step}"
            except Exception as exc:  # it failed to start, or it was closed while starting
                self._left_out[id(h)] = str(exc) if isinstance(exc, ProfilerError) else type(exc).__name__
            event.set()

        self._waiters[id(h)] = threading.Thread(target=wait, daemon=True)
        self._waiters[id(h)].start()

    def _spawn_helpers(self) -> None:
        """``--jobs N``: the N - 1 more processes of the script, launched now (the first round with more than
        one candidate to compile), side by side with the first."""
        for i in range(2, 2 + self._to_spawn):
            h = self.spawn(i)  # type: ignore[misc]
            h.launch()
            self.helpers.append(h)
        if self._to_spawn:
            self.echo(f"tune: {self._to_spawn} more process(es) of the script started to compile side by side")
        self._to_spawn = 0

    def _drop(self, h: CompileSession) -> None:
        """Close a helper; one still starting is ended first and its waiting thread joined (never a thread
        left reading a descriptor that closing frees for another pipe)."""
        waiter = self._waiters.get(id(h))
        if waiter is not None and waiter.is_alive():
            if h.proc is not None:
                h.proc.kill()
            waiter.join(timeout=60)
        h.close()
        if h in self.helpers:
            self.helpers.remove(h)

    def pending(self, cands: list[Candidate], room: int | None = None) -> list[Candidate]:
        """Those of *cands* that a compile would be needed for (neither cached nor compiled ahead), each once,
        in order; at most *room*."""
        out: dict[str, Candidate] = {}
        for c in cands:
            key = self._key(c)
            if key not in out and key not in self.ahead and not self.cached(c):
                out[key] = c
        todo = list(out.values())
        return todo if room is None else todo[: max(room, 0)]

    def prefetch(self, cands: list[Candidate], room: int | None = None) -> None:
        """Compile side by side, in this process and its helpers, those of *cands* that ``pending`` names
        (at most *room*: what is left of the compile budget); the search takes them from ``ahead``."""
        if not self.helpers and not self._to_spawn:
            return
        todo = self.pending(cands, room)
        if len(todo) < 2:
            return
        self._spawn_helpers()
        begin = getattr(self.session, "begin", None)  # a first process not started yet starts beside them
        if begin is not None:
            begin()
        sessions = [self.session, *self.helpers]
        jobs: queue.Queue[tuple[Candidate, Path]] = queue.Queue()
        for c in todo:
            self._ahead_no += 1
            jobs.put((c, self.out / "ahead" / f"a{self._ahead_no:03d}"))
        for h in self.helpers:
            self._watch(h)
        answers: dict[str, dict[str, Any]] = {}
        lost: list[CompileSession] = []
        failed: list[BaseException] = []
        t0 = time.monotonic()
        threads = [threading.Thread(target=self._work, args=(s, jobs, answers, lost, failed)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.seconds += time.monotonic() - t0
        if failed:  # the first process's own failure (a record that no longer holds: launch.StaleRecord)
            raise failed[0]
        for h in [h for h in self.helpers if id(h) in self._left_out and self._ready[id(h)].is_set()]:
            self.echo(f"tune: a helper process is left out: {self._left_out[id(h)]}")
            self._drop(h)
        together = len({a["by"] for a in answers.values()}) > 1  # more than one process compiled this round
        self.ahead.update({k: {**a, "together": together} for k, a in answers.items()})
        for h in lost:
            if h is not self.session:
                self.echo("tune: a helper process ended; its candidates are compiled here")
                self._drop(h)

    def _work(self, s: CompileSession, jobs: queue.Queue, answers: dict, lost: list, failed: list) -> None:
        """One process's share: take candidates until none is left (a helper still starting takes none once the
        others have taken them all; a process that ends takes no more: what it had is compiled later, one by one)."""
        if s is not self.session:
            ready = self._ready[id(s)]
            while not ready.wait(0.2):
                if jobs.empty():
                    return
            if id(s) in self._left_out:
                return
        while True:
            try:
                c, where = jobs.get_nowait()
            except queue.Empty:
                return
            try:
                answers[self._key(c)] = {**s.request(self._request(c, where)), "ahead_dir": str(where), "by": id(s)}
            except StaleRecord as exc:
                failed.append(exc)
                return
            except (ProfilerError, OSError, ValueError):  # it ended, its pipe broke, or it answered garbage
                lost.append(s)
                return

    def finish(self) -> None:
        """Close the helpers and remove what was compiled ahead and never taken."""
        for h in list(self.helpers):
            self._drop(h)
        self.ahead.clear()
        shutil.rmtree(self.out / "ahead", ignore_errors=True)

    def outcome(self, c: Candidate) -> Outcome | None:
        comp = self.cache.get(self._key(c))
        return comp.outcome(self.link, self.limit) if comp is not None else None

    def __call__(self, c: Candidate) -> Outcome | None:
        self.compiled(c)
        return self.outcome(c)


def _moved(ans: dict[str, Any], where: Path) -> dict[str, Any]:
    """An answer compiled ahead, its folder moved to *where* (the compile's number in the search's order)."""
    ans = dict(ans)
    src = Path(ans.pop("ahead_dir"))
    if src.exists():
        where.parent.mkdir(parents=True, exist_ok=True)
        src.rename(where)
    if ans.get("hlo_file"):
        ans["hlo_file"] = str(where / Path(ans["hlo_file"]).name)
    return ans
