"""``profile-step install-recipe``: put the ``offload_overlap`` recipe where an nsys finds its recipes.

nsys 2023.4 and 2024.2 list and run the recipes in ``<install>/target-linux-x64/python/
packages/nsys_recipe/recipes`` (``nsys recipe --help`` lists only those) and
also run recipes from the folder named by ``$NSYS_RECIPE_PATH`` (not listed).
Beside the recipe's files an ``install.json`` records this environment, for
the recipe to find profile-step when nsys's Python is not this one.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.errors import ProfilerError
from profiler.trace.nsys import find_nsys, nsys_version, writable

RECIPE = "offload_overlap"
SOURCE = Path(__file__).resolve().parent / RECIPE
RECIPE_FILES = (f"{RECIPE}.py", "metadata.json", f"{RECIPE}.ipynb")
MARKER = "install.json"
# The Python packages nsys's recipe framework imports (its requirements/common.txt).
FRAMEWORK_PACKAGES = ("numpy", "pandas", "psutil", "pyarrow")


class RecipeInstallError(ProfilerError):
    """The recipe cannot be installed there; the message says why and what to do."""


@dataclass
class Installed:
    nsys: Path
    folder: Path  # the recipe's folder
    listed: bool  # where `nsys recipe --help` lists it


def recipe_package(nsys: Path) -> Path | None:
    """The ``nsys_recipe`` package of the install that *nsys* belongs to, if it has one."""
    real = nsys.resolve()
    bases = [real.parent, real.parent.parent]
    for base in bases:
        for cand in [base / "python/packages/nsys_recipe", *sorted(base.glob("target-*/python/packages/nsys_recipe"))]:
            if (cand / "__main__.py").is_file() and (cand / "recipes").is_dir():
                return cand
    return None


def environment_bin() -> Path:
    """The bin folder of this Python's environment (the one to put first on PATH)."""
    return Path(sys.prefix) / "bin"


def install_info() -> dict[str, Any]:
    """What the installed recipe needs to find profile-step from another Python."""
    import profiler

    return {
        "project_root": str(Path(profiler.__file__).resolve().parents[1]),
        "python": sys.executable,
        "python_version": "{}.{}".format(*sys.version_info[:2]),
        "venv_bin": str(environment_bin()),
        "site_packages": [p for p in site.getsitepackages() if Path(p).is_dir()],
    }


def missing_framework_packages() -> list[str]:
    """Which of nsys's recipe requirements this Python cannot import."""
    import importlib

    missing = []
    for name in FRAMEWORK_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def copy_recipe(dest: Path) -> None:
    """The recipe's files and ``install.json`` into *dest*, replacing an earlier install of ours."""
    if dest.exists() and not (dest / MARKER).is_file():
        raise RecipeInstallError(f"{dest} exists and is not a profile-step install; not replaced (remove it first)")
    parent = dest.parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{RECIPE}.", dir=parent))
    try:
        for name in RECIPE_FILES:
            shutil.copy2(SOURCE / name, tmp / name)
        (tmp / MARKER).write_text(json.dumps(install_info(), indent=2) + "\n")
        tmp.chmod(0o755)
        old = parent / f".{RECIPE}.old"
        if dest.exists():
            shutil.rmtree(old, ignore_errors=True)
            dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def install(nsys_arg: str | None = None, into: str | None = None) -> Installed:
    """Install the recipe into the nsys found (or into *into*, a folder for ``$NSYS_RECIPE_PATH``)."""
    nsys = find_nsys(nsys_arg)
    missing = missing_framework_packages()
    if missing:
        raise RecipeInstallError(
            f"this environment ({sys.prefix}) lacks {', '.join(missing)}, which nsys's recipe framework imports: "
            "pip install 'profile-step[recipes]' (bash scripts/setup.sh does)"
        )
    if into is not None:
        folder = Path(into)
        folder.mkdir(parents=True, exist_ok=True)
        if not writable(folder):
            raise RecipeInstallError(f"{folder} is not writable")
        copy_recipe(folder / RECIPE)
        return Installed(nsys, folder / RECIPE, listed=False)
    package = recipe_package(nsys)
    if package is None:
        raise RecipeInstallError(
            f"{nsys} (nsys {nsys_version(nsys)}) has no recipe framework (no python/packages/nsys_recipe "
            "beside it): use an nsys with `nsys recipe` (--nsys PATH; bash scripts/install-nsys.sh installs 2024.2.3)"
        )
    recipes = package / "recipes"
    if not writable(recipes):
        raise RecipeInstallError(
            f"cannot install into {recipes}: the nsys install is read-only for this user; run "
            f"`sudo {environment_bin() / 'profile-step'} install-recipe --nsys {nsys}`, or install into a folder "
            "of yours with `profile-step install-recipe --into DIR` and run nsys with NSYS_RECIPE_PATH=DIR "
            "(nsys then runs the recipe but does not list it)"
        )
    third_party = package / "third_party"
    if not third_party.is_dir():
        # `nsys recipe` refuses to start without this folder (Debian ships nsys without it)
        third_party.mkdir()
    copy_recipe(recipes / RECIPE)
    return Installed(nsys, recipes / RECIPE, listed=True)


def listed_by_nsys(nsys: Path) -> bool:
    """Whether ``nsys recipe --help``, run with this environment first on PATH, lists the recipe."""
    env = {**os.environ, "PATH": f"{environment_bin()}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [str(nsys), "recipe", "--help"], capture_output=True, text=True, env=env, check=False, timeout=120
    )
    return any(line.strip().startswith(f"{RECIPE} ") for line in proc.stdout.splitlines())
