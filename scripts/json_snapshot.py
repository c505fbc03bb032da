"""Every ``--json`` document the CLI prints (and a few text pages) on a fixed set of real and SYNTHETIC
inputs, written to a folder, so that a behaviour-preserving change can be checked byte for byte:

    python scripts/json_snapshot.py /tmp/before      # on the commit before the change
    python scripts/json_snapshot.py /tmp/after       # after it
    diff -r /tmp/before /tmp/after                   # nothing: the change preserved every document

Each case writes NAME.out (stdout), NAME.err (stderr) and NAME.rc (the exit code).  Public traces come
from sample_traces/public and, when present, ../shared/traces (cases on an absent file are skipped, and
said).  The commands run from an empty scratch folder, so no results.db or runs/ of the caller is read.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "sample_traces" / "public"
SHARED = ROOT.parent / "shared" / "traces"
DEMO = ROOT / "sample_traces" / "demo-synthetic"
CPU = ROOT / "sample_traces" / "cpu-example"


def _cpu_runs() -> list[Path]:
    return sorted(p for p in CPU.iterdir() if p.is_dir())


def cases() -> dict[str, list[str | Path]]:
    """Case name -> the profile-step arguments."""
    cpu_none, cpu_qkv = _cpu_runs()[:2]
    flex7 = PUBLIC / "flexgen__nsight_report7.sqlite"
    before, after = PUBLIC / "nsysai__mfu_2gpu_before.sqlite", PUBLIC / "nsysai__mfu_2gpu_after.sqlite"
    none, offload_all = DEMO / "synthetic-0-none", DEMO / "synthetic-4-offload_all"
    return {
        # analyze: one trace, nsys versions 2020.5 .. 2026.2
        "analyze-flexgen7": ["analyze", flex7, "--json"],
        "analyze-flexgen3-by-range": ["analyze", PUBLIC / "flexgen__nsight_report3.sqlite", "--by", "range", "--json"],
        "analyze-nsysai-h100": ["analyze", PUBLIC / "nsysai__h100_2gpu_1s.sqlite", "--json"],
        "analyze-nsysai-before-link": ["analyze", before, "--link", "pcie5", "--json"],
        "analyze-alpa2": ["analyze", SHARED / "alpa__report2.sqlite", "--json"],
        "analyze-apma-hzy": ["analyze", SHARED / "apma_hzy__report4.sqlite", "--json"],
        "analyze-jacobi-sys": ["analyze", SHARED / "gpubootcamp__jacobi_memcpy_sys_report.sqlite", "--json"],
        "analyze-p2pacc-device": ["analyze", SHARED / "p2pacc__mpiV100.sqlite", "--device", "0", "--json"],
        # analyze: run folders (one, a folder of runs, views over runs)
        "analyze-cpu-run": ["analyze", cpu_none, "--by", "step", "--json"],
        "analyze-cpu-runs": ["analyze", CPU, "--json"],
        "analyze-demo-run-by-layer": ["analyze", DEMO / "synthetic-3-offload_mlp", "--by", "layer", "--json"],
        "analyze-demo-runs": ["analyze", DEMO, "--json"],
        "analyze-demo-runs-by-step": ["analyze", DEMO, "--by", "step", "--json"],
        "analyze-ranks": [
            "analyze",
            str(SHARED / "alcf__*.sqlite"),
            "--ranks",
            "--rank-pattern",
            r"T1_(\d+)",
            "--jobs",
            "1",
            "--json",
        ],
        # findings
        "findings-flexgen7": ["findings", flex7, "--json"],
        "findings-profile-name": [
            "findings",
            PUBLIC / "flexgen__profile_name.sqlite",
            "--link",
            "nvlink-c2c",
            "--json",
        ],
        "findings-demo": ["findings", DEMO, "--json"],
        "findings-cpu": ["findings", CPU, "--json"],
        # whatif
        "whatif-flexgen7": ["whatif", flex7, "--json"],
        "whatif-flexgen7-pcie5": ["whatif", flex7, "--link", "pcie5", "--json"],
        "whatif-h100-gbs": ["whatif", PUBLIC / "nsysai__h100_2gpu_1s.sqlite", "--link", "25", "--json"],
        "whatif-h100-from": [
            "whatif",
            PUBLIC / "nsysai__h100_2gpu_1s.sqlite",
            "--link",
            "pcie5",
            "--from-link",
            "pcie4",
            "--json",
        ],
        "whatif-demo-run": ["whatif", offload_all, "--copy-scale", "0.5", "--json"],
        "whatif-cpu-run": ["whatif", cpu_qkv, "--link", "nvlink-c2c", "--json"],
        # compare
        "compare-demo": ["compare", DEMO, DEMO, "--format", "json"],
        "compare-runs-apart": ["compare", none, offload_all, "--format", "json"],
        "compare-cpu-demo": ["compare", CPU, DEMO, "--format", "json"],
        "compare-nsysai": ["compare", before, after, "--format", "json"],
        "compare-cpu": ["compare", cpu_none, cpu_qkv, "--format", "json"],
        # text where a host link is shown: the GPU's, an assumed one, a given one
        "text-analyze-flexgen7-link": ["analyze", flex7, "--link", "pcie3"],
        "text-analyze-h100": ["analyze", PUBLIC / "nsysai__h100_2gpu_1s.sqlite"],
        "text-findings-h100": ["findings", PUBLIC / "nsysai__h100_2gpu_1s.sqlite", "--wide"],
        # bad input: the one-line errors
        "error-analyze-link": ["analyze", flex7, "--link", "pcie9", "--json"],
        "error-analyze-runs-link": ["analyze", DEMO, "--link", "-3", "--json"],
        "error-findings-link": ["findings", flex7, "--link", "fast", "--json"],
        "error-whatif-link": ["whatif", flex7, "--link", "0", "--json"],
        "error-whatif-from-link": ["whatif", flex7, "--link", "pcie5", "--from-link", "usb", "--json"],
        "error-whatif-unknown-gpu": ["whatif", SHARED / "nsysai__h100_2gpu_1s.sqlite", "--link", "pcie5", "--json"],
        "error-plan-link": ["plan", "--link", "pcie5,warp", "--json", ROOT / "examples" / "train.py"],
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: json_snapshot.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    exe = shutil.which("profile-step") or str(ROOT / ".venv" / "bin" / "profile-step")
    with tempfile.TemporaryDirectory() as scratch:
        for name, args in cases().items():
            paths = [a for a in args if isinstance(a, Path)]
            if any(not p.exists() for p in paths):
                print(f"{name}: skipped, an input is absent", file=sys.stderr)
                continue
            done = subprocess.run([exe, *map(str, args)], cwd=scratch, capture_output=True, text=True)
            (out / f"{name}.out").write_text(done.stdout)
            (out / f"{name}.err").write_text(done.stderr)
            (out / f"{name}.rc").write_text(f"{done.returncode}\n")
            print(f"{name}: exit {done.returncode}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
