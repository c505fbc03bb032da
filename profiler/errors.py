"""Errors that reach the user as one line, never as a traceback."""

from __future__ import annotations

from pathlib import Path


class ProfilerError(Exception):
    """A problem the user can act on; the CLI prints it on one line and exits 2."""

    exit_code = 2


class InputError(ProfilerError):
    """A file the user gave cannot be used: names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class NsysNotFound(ProfilerError):
    """No usable nsys binary was found."""
