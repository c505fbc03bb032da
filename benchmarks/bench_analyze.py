"""Wall time and peak memory of ``profile-step analyze --json`` against its baselines.

    python benchmarks/bench_analyze.py [EXPORT] [--repeat 3] [--events]

Makes the 1M-kernel export first when EXPORT does not exist (with ``--events``:
``benchmarks/data/big-events.sqlite``, with launches, event records and stream
waits, and then also ``whatif --json``, and the read baseline includes what the
stalls read).  Each command runs as its own process; peak memory is the
child's max RSS.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks.make_export import make  # noqa: E402
from profiler.trace.nsys import find_nsys  # noqa: E402


def measure(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one run of *cmd*, measured by GNU time."""
    if not Path("/usr/bin/time").exists():
        raise SystemExit("needs GNU time: apt-get install time")
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M", *cmd],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}: {proc.stderr[-500:]}")
    wall, kib = proc.stderr.strip().splitlines()[-1].split()
    return float(wall), int(kib) / 1024


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("export", type=Path, nargs="?", default=None)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--events", action="store_true", help="launches, event records and stream waits in the export")
    a = p.parse_args()
    a.export = a.export or HERE / "data" / ("big-events.sqlite" if a.events else "big.sqlite")
    if not a.export.exists():
        make(a.export, 1_000_000, 200_000, 20_000, events=a.events)
    py = sys.executable
    export = str(a.export.resolve())
    cmds: dict[str, list[str]] = {
        "profile-step analyze --json --no-findings": [
            py,
            "-m",
            "profiler.cli",
            "analyze",
            "--json",
            "--no-findings",
            export,
        ],
        "profile-step analyze --json (with findings)": [py, "-m", "profiler.cli", "analyze", "--json", export],
    }
    if a.events:
        cmds["profile-step whatif --json --link nvlink-c2c"] = [
            py,
            "-m",
            "profiler.cli",
            "whatif",
            "--json",
            "--link",
            "nvlink-c2c",
            export,
        ]
    for reader in ("connectorx", "adbc", "sqlite3"):
        try:
            module = {"connectorx": "connectorx", "adbc": "adbc_driver_sqlite"}.get(reader, reader)
            __import__(module)
        except ImportError:
            continue
        extra = ["--stalls"] if a.events else []
        cmds[f"(a) read columns only, {reader}"] = [py, str(HERE / "read_baseline.py"), reader, export, *extra]
    try:
        nsys = find_nsys()
        stats = [str(nsys), "stats", "--format", "csv", "--output", "-"]
        cmds["(b) nsys stats cuda_gpu_mem_time_sum (copies only)"] = [
            *stats,
            "--report",
            "cuda_gpu_mem_time_sum",
            export,
        ]
        cmds["(b) nsys stats cuda_gpu_kern_sum + cuda_gpu_mem_time_sum"] = [
            *stats,
            "--report",
            "cuda_gpu_kern_sum",
            "--report",
            "cuda_gpu_mem_time_sum",
            export,
        ]
    except Exception as exc:
        print(f"(b) skipped: {exc}")
    tmp = HERE / "data"
    print(f"export: {a.export} ({a.export.stat().st_size / 2**20:.0f} MiB), best of {a.repeat}")
    print(f"{'command':58s} {'wall s':>8s} {'peak MiB':>9s}")
    for name, cmd in cmds.items():
        runs = [measure(cmd, tmp) for _ in range(a.repeat)]
        wall = min(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        print(f"{name:58s} {wall:8.2f} {rss:9.0f}")
    shutil.rmtree(tmp / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
