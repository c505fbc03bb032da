"""A short command's answer, for facts gathered beside a capture (git's commit, a Python's plugins)."""

from __future__ import annotations

import subprocess


def output_of(cmd: list[str], timeout: float) -> str | None:
    """*cmd*'s standard output, stripped, when it ran and ended with 0 within *timeout* seconds; else None."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None
