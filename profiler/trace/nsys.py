"""Finding the nsys binary and exporting ``.nsys-rep`` reports to SQLite."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from profiler.errors import InputError, NsysNotFound, ProfilerError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Where scripts/install-nsys.sh puts Nsight Systems: the default (newest) first.  2023.4.4 stays
# for the tests' version matrix; `.tools/nsys` is the one-version layout before 2024.2.
NSYS_IN_PREFIX = "usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys"
LOCAL_PREFIXES = {
    "2024.2.3": PROJECT_ROOT / ".tools" / "nsys-2024.2.3",
    "2023.4.4": PROJECT_ROOT / ".tools" / "nsys-2023.4.4",
}
LOCAL_PREFIX = LOCAL_PREFIXES["2024.2.3"]
LOCAL_NSYS = LOCAL_PREFIX / NSYS_IN_PREFIX
LEGACY_NSYS = PROJECT_ROOT / ".tools" / "nsys" / NSYS_IN_PREFIX
INSTALL_HINT = "install it with: bash scripts/install-nsys.sh (or pass --nsys PATH / set $NSYS)"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"


def nsys_candidates(explicit: str | None = None) -> list[Path]:
    """Places to look for nsys, in order: --nsys, $NSYS, PATH, the project prefix, usual installs."""
    found: list[Path] = []
    if explicit:
        return [Path(explicit)]
    if os.environ.get("NSYS"):
        return [Path(os.environ["NSYS"])]
    on_path = shutil.which("nsys")
    if on_path:
        found.append(Path(on_path))
    found += local_nsys()
    found.append(Path("/usr/local/cuda/bin/nsys"))
    found += [Path(p) for p in sorted(glob.glob("/opt/nvidia/nsight-systems/*/bin/nsys"), reverse=True)]
    found += [Path(p) for p in sorted(glob.glob("/opt/nvidia/nsight-systems-cli/*/bin/nsys"), reverse=True)]
    return found


def local_nsys() -> list[Path]:
    """The project's own installs (scripts/install-nsys.sh), the default first, installed or not."""
    return [prefix / NSYS_IN_PREFIX for prefix in LOCAL_PREFIXES.values()] + [LEGACY_NSYS]


def installed_local_nsys() -> dict[str, Path]:
    """The project's installs that are there, by version (``2024.2.3``), the default first."""
    return {v: p / NSYS_IN_PREFIX for v, p in LOCAL_PREFIXES.items() if os.access(p / NSYS_IN_PREFIX, os.X_OK)}


def find_nsys(explicit: str | None = None) -> Path:
    """The first executable nsys among ``nsys_candidates``; NsysNotFound otherwise."""
    for cand in nsys_candidates(explicit):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    if explicit or os.environ.get("NSYS"):
        where = explicit or os.environ["NSYS"]
        raise NsysNotFound(f"nsys not found at {where}; {INSTALL_HINT}")
    raise NsysNotFound(f"nsys not found; {INSTALL_HINT}")


def nsys_version(nsys: Path) -> str:
    """``2023.4.4.54-...`` from ``nsys --version``."""
    out = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, check=False)
    m = re.search(r"version\s+(\S+)", out.stdout + out.stderr)
    return m.group(1) if m else (out.stdout.strip() or "unknown")


def is_report(path: Path) -> bool:
    """True for an nsys report (by suffix, or by its header)."""
    if path.suffix in REPORT_SUFFIXES:
        return True
    try:
        with path.open("rb") as fh:
            return fh.read(len(REPORT_MAGIC)) == REPORT_MAGIC
    except OSError:
        return False


def _report_key(report: Path) -> str:
    """The key of *report*'s export in the cache: its resolved path, size and modification time."""
    st = report.stat()
    return hashlib.sha1(f"{report.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]


def exports_cache_dir() -> Path:
    """Where exports made by profile-step go when not beside their source (a report's where nsys's own
    ``REPORT.sqlite`` is taken or cannot be written, conversions of JAX profiler traces always): the
    ``exports`` folder of profile-step's cache (``profiler.cache_dir``)."""
    from profiler.cache_dir import cache_dir

    return cache_dir("exports")


def _is_export_of(sqlite: Path, report: Path) -> bool:
    """An existing SQLite file that nsys exported from this report, after its last change."""
    import sqlite3

    from profiler.trace.sqlite_io import connect_ro

    try:
        if sqlite.stat().st_mtime_ns < report.stat().st_mtime_ns:
            return False
        con = connect_ro(sqlite)
        try:
            rows = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT"))
        finally:
            con.close()
    except (OSError, sqlite3.DatabaseError):
        return False
    source = rows.get("EXPORT_PARAM_INPUT_PATH_ABS") or rows.get("EXPORT_PARAM_INPUT_FILE") or ""
    return Path(str(source)).name == report.name


def export_paths(report: Path) -> list[Path]:
    """Where the export of *report* may live, in order of preference."""
    from profiler.cache_dir import root

    # the cache's folder is named, not made: reading an export that lies beside its report writes nothing
    return [report.with_suffix(".sqlite"), root() / "exports" / f"{report.stem}.{_report_key(report)}.sqlite"]


def export_report(report: Path, nsys_path: str | None = None) -> Path:
    """The SQLite export of *report*: reused when present, else made with nsys.

    Never writes over a file that exists: nsys's ``REPORT.sqlite`` beside the report (its
    convention), else, when that is taken by another file or the folder is not writable, into
    profile-step's cache (``exports/REPORT.<key>.sqlite``), never another file beside the report.
    """
    report = Path(report)
    if not report.is_file():
        raise InputError(report, "no such file or folder")
    candidates = export_paths(report)
    for cand in candidates:
        if cand.exists() and _is_export_of(cand, report):
            return cand
    nsys = find_nsys(nsys_path)
    for target in candidates:
        if target.exists():
            continue
        try:
            if not target.parent.is_dir():  # the cache's folder: made (and tagged) on first need
                exports_cache_dir()
        except ProfilerError:
            continue
        if writable(target.parent):
            return _export_to(nsys, report, target)
    raise InputError(report, "no writable place for its SQLite export")


def writable(folder: Path) -> bool:
    """Writable, and not marked read-only (root ignores the mode bits; we respect them)."""
    try:
        mode = folder.stat().st_mode
    except OSError:
        return False
    return os.access(folder, os.W_OK) and bool(mode & stat.S_IWUSR)


def _export_to(nsys: Path, report: Path, target: Path) -> Path:
    """Export into a temporary file beside *target*, then link it into place."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".partial.sqlite", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()
    try:
        proc = subprocess.run(
            [
                str(nsys),
                "export",
                "--type",
                "sqlite",
                "--quiet",
                "true",
                "--lazy",
                "true",
                "--output",
                str(tmp),
                str(report),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not tmp.exists():
            text = proc.stdout + proc.stderr
            raise InputError(report, too_new_problem(text, report) or f"nsys export failed: {_first_error(text)}")
        try:
            os.link(tmp, target)  # never replaces a file that appeared meanwhile
        except FileExistsError:
            if not _is_export_of(target, report):
                raise InputError(report, f"{target} appeared during export; not replaced") from None
        return target
    finally:
        tmp.unlink(missing_ok=True)


# nsys's refusal of a report written by a newer nsys (2023.4.4 and 2024.2.3 word it so)
TOO_NEW = re.compile(r"created in Nsight Systems version \(([^)]+)\), newer than your current version \(([^)]+)\)")


def too_new_problem(text: str, report: Path) -> str | None:
    """One line for a report too new for this nsys: both versions, and the export to run with the user's
    own nsys, then the analysis of that export; None when *text* is not that refusal."""
    m = TOO_NEW.search(text)
    if m is None:
        return None
    theirs, ours = (v.split("-")[0] for v in m.groups())
    export = report.with_suffix(".sqlite").name
    return (
        f"written by nsys {theirs}, newer than this nsys {ours}; export it with the nsys that wrote it "
        f"(`nsys export --type sqlite --output {export} {report.name}`), then `profile-step analyze {export}`"
    )


def _first_error(text: str) -> str:
    """The most telling line of nsys's output (progress bars stripped)."""
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", text) if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("Processing")]
    for ln in lines:
        if re.search(r"error|newer|version|cannot|unsupported|failed", ln, re.I):
            return ln
    return lines[-1] if lines else "no output"
