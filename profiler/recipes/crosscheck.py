"""``profile-step analyze --cross-check``: our numbers against Nsight Systems' own recipes.

nsys 2023.4.4 and 2024.2.3 have recipes that count what we count: copies per
direction (count, summed duration, bytes), kernels, and the NVTX projection of
GPU ops onto ranges (the attribution behind every per-range, per-layer and
per-step number), with the same columns in both (2024.2's
``nvtx_gpu_proj_trace`` adds ``Rank``, drops ``File``; neither is read here).
No recipe of these versions measures unions or intersections of copies (busy,
overlap, exposed time), so those cannot be cross-checked; the output says so.

nsys's recipes write their SQLite or parquet export beside the report (and
overwrite one that is not newer), so they run here on a private folder: a
link to the report, or for an export an empty stand-in report, with a copy
of the export made after it, which the recipes then take as fresh.  Both
sides read the same export.  The input is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from profiler.errors import ProfilerError
from profiler.trace.nsys import _first_error, find_nsys, is_report, nsys_version

# nsys's label of each copy class (ENUM_CUDA_MEMCPY_OPER as its recipes print it)
LABELS = {
    "h2d": "[CUDA memcpy Host-to-Device]",
    "d2h": "[CUDA memcpy Device-to-Host]",
    "d2d": "[CUDA memcpy Device-to-Device]",
    "p2p": "[CUDA memcpy Peer-to-Peer]",
}
MEMSET = "[CUDA memset]"
RECIPES = ("cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "cuda_gpu_kern_sum", "nvtx_gpu_proj_trace")
OUTPUT_TABLE = {
    "cuda_gpu_mem_time_sum": "rank_stats.parquet",
    "cuda_gpu_mem_size_sum": "rank_stats.parquet",
    "cuda_gpu_kern_sum": "rank_stats.parquet",
    "nvtx_gpu_proj_trace": "trace.parquet",
}
NAMES_SHOWN = 8  # range names listed one by one in the table (all are in the JSON)
NOT_CHECKED = (
    "busy, overlap, exposed and hidden copy time, occupancy and GB/s: unions and intersections of intervals, "
    "which no recipe of nsys {version} measures ({overlap}the *_time_util_map heatmaps give per-bin utilization "
    "rounded to 0.1%, and under NumPy 2 they fail in nsys's own code, as do nvtx_gpu_proj_sum{more} and "
    "nccl_gpu_proj_sum)"
)


def not_checked(version: str) -> str:
    """What the recipes of this nsys version (seen in 2023.4.4 and 2024.2.3) cannot check."""
    if version.startswith("2023."):
        return NOT_CHECKED.format(version=version, overlap="nccl_gpu_overlap_trace is not in this version; ", more="")
    overlap = "nccl_gpu_overlap_trace measures NCCL against compute kernels, not copies; "
    return NOT_CHECKED.format(version=version, overlap=overlap, more=", nccl_gpu_overlap_trace")


class CrossCheckError(ProfilerError):
    """The cross-check cannot run (nsys's recipe framework or its Python packages are missing)."""


@dataclass
class Check:
    number: str
    recipe: str
    ours: int | None
    theirs: int | None
    agree: bool | None
    note: str = ""


# --- running nsys's recipes ---------------------------------------------------------------------


def _stage(source: Path, export: Path, folder: Path) -> Path:
    """``folder/report.<ext>`` (a link to *source*, or an empty stand-in for an export) and a copy of
    *export* beside it whose ctime is later: nsys's recipes then read the export and export nothing."""
    folder.mkdir()
    if is_report(source):
        report = folder / f"report{source.suffix if source.suffix in ('.nsys-rep', '.qdrep') else '.nsys-rep'}"
        report.symlink_to(source.resolve())
    else:
        report = folder / "report.nsys-rep"
        report.touch()
    copy = folder / "report.sqlite"
    shutil.copyfile(export, copy)
    while os.path.getctime(copy) <= os.path.getctime(report):  # file times tick in jiffies
        time.sleep(0.005)
        os.utime(copy)
    return report


def _environment() -> dict[str, str]:
    """nsys runs the first python3 on PATH: this environment's, which has the recipe packages."""
    from profiler.recipes.install import environment_bin

    return {**os.environ, "PATH": f"{environment_bin()}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_recipe(nsys: Path, name: str, report: Path) -> dict[str, Any]:
    """``{"status": "ok", "rows": [...]}``, ``{"status": "no data"}`` or ``{"status": "failed", "error"}``."""
    out = report.parent / f"out-{name}"
    proc = subprocess.run(
        [str(nsys), "recipe", name, "--input", str(report), "--output", str(out)],
        capture_output=True,
        text=True,
        cwd=report.parent,
        env=_environment(),
        check=False,
        timeout=600,
    )
    table = out / OUTPUT_TABLE[name]
    if proc.returncode == 0 and table.is_file():
        import pyarrow.parquet as pq

        return {"status": "ok", "rows": pq.read_table(table).to_pylist()}
    text = proc.stdout + proc.stderr
    if proc.returncode == 0 and "No output generated" in text:
        return {"status": "no data"}
    return {"status": "failed", "error": _first_error(text)}


def run_recipes(nsys: Path, source: Path, export: Path, names: Iterable[str] = RECIPES) -> dict[str, dict[str, Any]]:
    """Each recipe on its own staged copy (they may export, so never two in one folder), two at a time."""
    with tempfile.TemporaryDirectory(prefix="profile-step-cross-check-") as tmp:
        staged = {name: _stage(source, export, Path(tmp) / name) for name in names}
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {name: pool.submit(run_recipe, nsys, name, report) for name, report in staged.items()}
            return {name: f.result() for name, f in futures.items()}


# --- comparing --------------------------------------------------------------------------------


def _sum(devices: dict[str, Any], *path: str) -> int:
    total = 0
    for d in devices.values():
        value: Any = d
        for key in path:
            value = value[key]
        total += value
    return int(total)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _compare(number: str, recipe: str, ours: int, theirs: int, extra: int = 0, why: str = "") -> Check:
    """*theirs* should be *ours* plus *extra* (what nsys counts and METRICS.md leaves out, said in *why*)."""
    note = why if extra else ""
    return Check(number, recipe, ours, theirs, theirs == ours + extra, note)


def _missing(number: str, recipe: str, ours: int | None, result: dict[str, Any]) -> Check:
    return Check(number, recipe, ours, None, None, f"recipe failed: {result.get('error', '?')}")


def copy_checks(trace: Any, devices: dict[str, Any], time_sum: dict[str, Any], size_sum: dict[str, Any]) -> list[Check]:
    """Counts, summed durations and bytes per copy class against the two memory-operation recipes."""
    import polars as pl

    def by_class(result: dict[str, Any], column: str) -> dict[str, int]:
        got: dict[str, int] = {}
        for row in result.get("rows", []):
            op = row["Operation"]
            if op == MEMSET:
                continue
            cls = next((c for c, label in LABELS.items() if label == op), "other")
            got[cls] = got.get(cls, 0) + int(row[column])
        return got

    bad = trace.copies.filter(~(pl.col("end") >= pl.col("start")).fill_null(False))
    bad_by = {
        c: (int(n), int(d or 0), int(b or 0))
        for c, n, d, b in bad.group_by("cls")
        .agg(pl.len(), (pl.col("end") - pl.col("start")).sum(), pl.col("bytes").sum())
        .iter_rows()
    }
    why_invalid = "nsys also counts {} with end < start, which docs/metrics.md leaves out (invalid_ops)"
    counts, durations = by_class(time_sum, "Count"), by_class(time_sum, "Total Time")
    sizes = by_class(size_sum, "Total")
    checks: list[Check] = []
    for cls in ("h2d", "d2h", "d2d", "p2p", "other"):
        n_bad, d_bad, b_bad = bad_by.get(cls, (0, 0, 0))
        why = why_invalid.format(_plural(n_bad, "copy", "copies"))
        ours = _sum(devices, "copies", cls, "count")
        if time_sum["status"] == "failed":
            checks.append(_missing(f"{cls} copies", "cuda_gpu_mem_time_sum", ours, time_sum))
        else:
            checks.append(_compare(f"{cls} copies", "cuda_gpu_mem_time_sum", ours, counts.get(cls, 0), n_bad, why))
            if cls in ("h2d", "d2h"):
                ours_d = _sum(devices, "copies", cls, "duration_sum_ns")
                checks.append(
                    _compare(
                        f"{cls} duration_sum_ns",
                        "cuda_gpu_mem_time_sum",
                        ours_d,
                        durations.get(cls, 0),
                        d_bad,
                        why,
                    )
                )
        ours_b = _sum(devices, "copies", cls, "bytes")
        if size_sum["status"] == "failed":
            checks.append(_missing(f"{cls} bytes", "cuda_gpu_mem_size_sum", ours_b, size_sum))
        else:
            checks.append(_compare(f"{cls} bytes", "cuda_gpu_mem_size_sum", ours_b, sizes.get(cls, 0), b_bad, why))
    return checks


def is_nccl_name(name: str) -> bool:
    """METRICS.md's rule, applied to the names nsys prints (demangled)."""
    return name.removeprefix("void ").lower().startswith("nccl")


def kernel_checks(trace: Any, devices: dict[str, Any], kern_sum: dict[str, Any]) -> list[Check]:
    """Kernel counts, all and NCCL, against ``cuda_gpu_kern_sum``."""
    import polars as pl

    ours_all = _sum(devices, "compute", "count") + _sum(devices, "nccl", "count")
    ours_nccl = _sum(devices, "nccl", "count")
    if kern_sum["status"] == "failed":
        return [
            _missing("kernels", "cuda_gpu_kern_sum", ours_all, kern_sum),
            _missing("NCCL kernels", "cuda_gpu_kern_sum", ours_nccl, kern_sum),
        ]
    rows = kern_sum.get("rows", [])
    bad = trace.kernel_spans.filter(~(pl.col("end") >= pl.col("start")).fill_null(False))
    counted = _plural(bad.height, "kernel", "kernels")
    why = f"nsys also counts {counted} with end < start, which docs/metrics.md leaves out"
    theirs_all = sum(int(r["Instances"]) for r in rows)
    theirs_nccl = sum(int(r["Instances"]) for r in rows if is_nccl_name(r["Name"] or ""))
    bad_nccl = int(bad["is_nccl"].sum()) if bad.height else 0
    nccl = _compare("NCCL kernels", "cuda_gpu_kern_sum", ours_nccl, theirs_nccl, bad_nccl, why)
    if not nccl.agree:
        nccl.note = "NCCL by name: ours from the short name, nsys prints the demangled one"
    return [_compare("kernels", "cuda_gpu_kern_sum", ours_all, theirs_all, bad.height, why), nccl]


def _name_matches(theirs: str, ours: str) -> bool:
    """nsys shows a domain's ranges as ``DOMAIN:message`` and shortens ``A::b`` messages to ``:b``."""
    return theirs == ours or theirs.endswith(":" + ours) or (theirs.startswith(":") and ours.endswith(theirs))


def projection_checks(trace: Any, proj: dict[str, Any]) -> tuple[list[Check], list[dict[str, Any]]]:
    """GPU ops per NVTX range instance, ours (the attribution of every per-range view) against
    ``nvtx_gpu_proj_trace``: totals, then per range name; and the per-name detail.

    nsys's ``NumGPUOps`` counts the distinct CUDA calls (correlation ids) whose GPU ops it
    projects, not the ops: a call that launches two ops (a copy staged through the host: D2H
    and H2D under one correlation id) counts once.  So theirs is compared with our calls.
    """
    import polars as pl

    from profiler.analysis.breakdown import Breakdown

    recipe = "nvtx_gpu_proj_trace"
    bd = Breakdown(trace)
    launches = bd.pairs.join(bd.ops.select("op_id", "pid", "correlation_id"), on="op_id")
    calls = pl.struct("pid", "correlation_id").n_unique().cast(pl.Int64).alias("calls")
    counts = launches.group_by("range_id").agg(pl.len().cast(pl.Int64).alias("ops"), calls)
    ranges = bd.ranges.ranges.join(counts, on="range_id", how="left").with_columns(pl.col("ops", "calls").fill_null(0))
    ours = {
        (int(s), int(t)): (n, int(ops), int(calls))
        for s, n, t, ops, calls in ranges.select("start", "name", "tid", "ops", "calls").iter_rows()
        if ops
    }
    total_ours = sum(v[1] for v in ours.values())
    if proj["status"] == "failed":
        return [
            _missing("NVTX ranges with GPU ops", recipe, len(ours), proj),
            _missing("GPU ops in NVTX ranges (summed)", recipe, total_ours, proj),
        ], []
    theirs_rows = [r for r in proj.get("rows", []) if r.get("Orig Start") is not None]
    per_name: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        new = {"name": name, "ours_ops": 0, "ours_calls": 0, "theirs_ops": 0, "ranges": 0, "unmatched": 0}
        return per_name.setdefault(name, new)

    matched: set[tuple[int, int]] = set()
    for r in theirs_rows:
        key = (int(r["Orig Start"]), int(r["TID"]))
        mine = ours.get(key)
        if mine is None or not _name_matches(r["Name"] or "", mine[0]):
            e = entry(r["Name"] or "")
            e["theirs_ops"] += int(r["NumGPUOps"])
            e["unmatched"] += 1
            continue
        matched.add(key)
        e = entry(mine[0])
        e["ranges"] += 1
        e["ours_ops"] += mine[1]
        e["ours_calls"] += mine[2]
        e["theirs_ops"] += int(r["NumGPUOps"])
    for key, (name, ops, calls) in ours.items():
        if key not in matched:
            e = entry(name)
            e["ours_ops"] += ops
            e["ours_calls"] += calls
            e["unmatched"] += 1
    detail = sorted(per_name.values(), key=lambda e: (-e["ours_ops"], e["name"]))
    for e in detail:
        e["agree"] = e["unmatched"] == 0 and e["ours_calls"] == e["theirs_ops"]

    def note(ops: int, calls: int) -> str:
        return f"nsys counts CUDA calls: {ops - calls} of our ops share a call with another op" if ops != calls else ""

    total_calls = sum(e["ours_calls"] for e in detail)
    total_theirs = sum(int(r["NumGPUOps"]) for r in theirs_rows)
    matching = "ranges matched by start and thread; nsys writes DOMAIN:message" if theirs_rows else ""
    checks = [
        Check(
            "NVTX ranges with GPU ops",
            recipe,
            len(ours),
            len(theirs_rows),
            len(ours) == len(theirs_rows) == len(matched),
            matching,
        ),
        Check(
            "GPU ops in NVTX ranges (summed)",
            recipe,
            total_ours,
            total_theirs,
            total_calls == total_theirs and all(e["agree"] for e in detail),
            note(total_ours, total_calls),
        ),
    ]
    for e in detail[:NAMES_SHOWN]:
        ops, calls = e["ours_ops"], e["ours_calls"]
        name = f"  GPU ops in {e['name'][:40]!r}"
        checks.append(Check(name, recipe, ops, e["theirs_ops"], e["agree"], note(ops, calls)))
    if len(detail) > NAMES_SHOWN:
        rest = detail[NAMES_SHOWN:]
        ops, calls = sum(e["ours_ops"] for e in rest), sum(e["ours_calls"] for e in rest)
        name = f"  GPU ops in the other {len(rest)} range names"
        theirs = sum(e["theirs_ops"] for e in rest)
        checks.append(Check(name, recipe, ops, theirs, all(e["agree"] for e in rest), note(ops, calls)))
    return checks, detail


def cross_check(path: str, nsys_arg: str | None = None) -> dict[str, Any]:
    """Run nsys's recipes on the report (or export) at *path* and compare them with ours."""
    from profiler.recipes.install import missing_framework_packages, recipe_package
    from profiler.runs.result import analyze
    from profiler.trace import load_trace

    trace = load_trace(path, nsys_arg)
    nsys = find_nsys(nsys_arg)
    if recipe_package(nsys) is None:
        raise CrossCheckError(f"{nsys} (nsys {nsys_version(nsys)}) has no recipe framework (nsys recipe)")
    missing = missing_framework_packages()
    if missing:
        raise CrossCheckError(
            f"nsys's recipes run in this environment ({sys.prefix}), which lacks {', '.join(missing)}: "
            "pip install 'profile-step[recipes]' (bash scripts/setup.sh does)"
        )
    devices = analyze(trace)["devices"]
    results = run_recipes(nsys, Path(path), Path(trace.path))
    checks = copy_checks(trace, devices, results["cuda_gpu_mem_time_sum"], results["cuda_gpu_mem_size_sum"])
    checks += kernel_checks(trace, devices, results["cuda_gpu_kern_sum"])
    proj, detail = projection_checks(trace, results["nvtx_gpu_proj_trace"])
    checks += proj
    version = nsys_version(nsys)
    return {
        "trace": str(path),
        "export": str(trace.path),
        "nsys": str(nsys),
        "nsys_version": version,
        "recipes": {name: {k: v for k, v in r.items() if k != "rows"} for name, r in results.items()},
        "checks": [asdict(c) for c in checks],
        "nvtx_ranges_by_name": detail,
        "agree": all(c.agree for c in checks),
        "not_checked": not_checked(version.split("-")[0]),
    }


def render(doc: dict[str, Any]) -> str:
    """The agreement table: per number, ours, theirs, and whether they agree (with why, when not plain)."""
    from profiler.report.text import table

    def show(v: Any) -> str:
        return "-" if v is None else f"{v:,}" if isinstance(v, int) else str(v)

    verdict = {True: "yes", False: "NO", None: "n/a"}
    rows = [
        [c["number"], c["recipe"], show(c["ours"]), show(c["theirs"]), verdict[c["agree"]], c["note"]]
        for c in doc["checks"]
    ]
    head = f"{doc['trace']} against Nsight Systems {doc['nsys_version']} recipes (both read {doc['export']})"
    status = [
        f"recipe {name}: {r['status']}" + (f" ({r['error']})" if r.get("error") else "")
        for name, r in doc["recipes"].items()
        if r["status"] != "ok"
    ]
    out = [head, "", table(("number", "nsys recipe", "ours", "theirs", "agree", "why"), rows, left=(0, 1, 5))]
    out += ["", *status] if status else []
    n_bad = sum(1 for c in doc["checks"] if c["agree"] is not True)
    out += ["", "all numbers agree" if doc["agree"] else f"{n_bad} numbers do not agree or could not be checked"]
    out += [f"not cross-checked: {doc['not_checked']}"]
    return "\n".join(out)
