"""nsys's recipe folder as a user's nsys holds it, and a folder's files before and after."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def fake_install(tmp_path: Path, nsys: Path, framework: bool) -> Path:
    """An nsys install laid out like NVIDIA's (the real binary behind a wrapper), with or without recipes."""
    target = tmp_path / "nsys-install" / "target-linux-x64"
    target.mkdir(parents=True)
    wrapper = target / "nsys"
    wrapper.write_text(f'#!/bin/sh\nexec "{nsys}" "$@"\n')
    wrapper.chmod(0o755)
    if framework:
        pkg = target / "python" / "packages" / "nsys_recipe"
        (pkg / "recipes").mkdir(parents=True)
        (pkg / "__main__.py").write_text("")
    return wrapper


def venv_env(**extra: str) -> dict[str, str]:
    """This environment first on PATH: nsys runs the first python3 there."""
    return {**os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}", **extra}
