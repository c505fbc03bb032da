"""The vocabularies that writers and readers of a run share, in one place.

Capture writes NVTX ranges and run folders; analysis, reports and the
dashboard read them.  Both sides import these names from here, so that
analysis and dashboards never import capture.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

# --- NVTX ranges written by ``profiler.annotate`` ------------------------------------------
DOMAIN = "profile-step"
CAPTURE_RANGE = "profile-step:capture"
POLICY_PREFIX, STEP_PREFIX, LAYER_PREFIX, WARMUP_PREFIX = "policy=", "step=", "layer=", "warmup="

# --- NVTX and CUDA calls written by others ------------------------------------------------
XLA_DOMAIN = "TSL"  # XLA's own ranges (XlaModule, Thunk, XlaCompile, ...) live in this domain
CUDA_PROFILER_START = ("cudaProfilerStart", "cuProfilerStart")  # runtime / driver API names
CUDA_PROFILER_STOP = ("cudaProfilerStop", "cuProfilerStop")

# --- what nsys records and what the analysis reads (``--capture-range``) ------------------
# auto: record the whole run; analyze the profile-step:capture range, else the span between
# cudaProfilerStart and cudaProfilerStop, else everything.  all: record and analyze everything.
# nvtx:NAME / cuda-profiler-api: nsys records only that range / between those calls.
CAPTURE_MODES = ("auto", "all", "nvtx:NAME", "cuda-profiler-api")
CAPTURE_MANIFEST_KEY = "capture"

# the example's policies (examples/train.py), the default of `profile-step plan`
EXAMPLE_POLICIES = ("none", "remat", "offload_qkv", "offload_mlp", "offload_all")

# --- environment profile-step sets for the training script --------------------------------
POLICY_ENV = "PROFILE_STEP_POLICY"
RUN_DIR_ENV = "PROFILE_STEP_RUN_DIR"
XLA_DUMP_ENV = "PROFILE_STEP_XLA_DUMP"  # the dump folder profile-step asked XLA for (run)
PLAN_DIR_ENV = "PROFILE_STEP_PLAN_DIR"  # profile-step plan: where the compiled step's facts go
PLAN_TARGET_ENV = "PROFILE_STEP_PLAN_TARGET"  # profile-step plan: the GPU target description file
BATCH_ENV = "PROFILE_STEP_BATCH"  # profile-step plan: the micro batch asked for
TUNE_FDS_ENV = "PROFILE_STEP_TUNE_FDS"  # profile-step tune: "READ,WRITE" pipe descriptors of the compile loop
TUNE_POLICY_ENV = "PROFILE_STEP_TUNE_POLICY"  # tune --verify: the policy (JSON) of the script's jax.checkpoints
NVTX_REQUIREMENT = "nvtx>=0.2.8,<0.2.12"  # the binding the start-up hook writes ranges with
NO_NVTX_NOTE = "no nvtx binding"  # how the hook's note begins when the script's Python has none
HOOK_ENV = "PROFILE_STEP_HOOK"  # 0: no start-up hook in the script's interpreter (profiler.capture.startup)
XLA_PRESETS_ENV = "PROFILE_STEP_XLA_PRESETS"  # profile-step's XLA flags, for the hook to keep in force

# --- run folders: runs/<UTC>-<policy>[-rank<R>]-<id>[.partial]/ -----------------------------
PARTIAL_SUFFIX = ".partial"
MANIFEST = "manifest.json"
TRACE_STEM = "trace"
LOG = "output.log"
RUNTIME_FACTS = "runtime.json"
STARTUP_FACTS = "startup.json"  # what the start-up hook saw: versions, devices, XLA flags, executions
COMPILED_STEP = "compiled_step.json"  # what the script handed over (annotate.compiled_step)
COMPILED = "compiled.json"  # the step's compiled module read from the XLA dump, by profile-step
XLA_DUMP_DIR = "xla_dump"
# a JAX profiler trace (jax.profiler.trace's <host>.trace.json.gz, or its perfetto_trace.json.gz); in a
# run folder recorded with jax.profiler: trace.json.gz
JAX_TRACE_SUFFIXES = ("trace.json.gz", "trace.json")


def is_jax_trace_name(name: str) -> bool:
    """Whether a file name is a JAX profiler trace's (``host.trace.json.gz``, ``perfetto_trace.json.gz``)."""
    return name.endswith(JAX_TRACE_SUFFIXES)


# --- ranks in file and folder names -------------------------------------------------------
# `%q{RANK}`-style names: report.3.sqlite, trace.rank3.sqlite, rank_12-xyz.nsys-rep, run-rank3-...
DEFAULT_RANK_PATTERN = r"(?:rank[_-]?|\.)(\d+)(?:[._-]|$)"


def rank_from_name(path: Path, pattern: str = DEFAULT_RANK_PATTERN) -> int | None:
    """The rank a file or its run folder is named by, if any (the last match wins)."""
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    for text in (stem + ".", path.parent.name + "."):
        found = re.findall(pattern, text, flags=re.IGNORECASE)
        if found:
            return int(found[-1])
    return None


def is_tpu_name(device: str | None) -> bool:
    """Whether a device's name is a TPU's (JAX's device_kind ``TPU v5 lite``, or ``TPU`` where the run
    named none): what the reports call such a device, and whose accuracy figures its predictions carry."""
    return (device or "").upper().startswith("TPU")


def device_word(names: Iterable[object]) -> str:
    """What the reports call a run's devices, by their names: ``TPU`` when every one is a TPU's (and
    there is one), else ``GPU``."""
    named = [str(n) for n in names]
    return "TPU" if named and all(is_tpu_name(n) for n in named) else "GPU"
