"""How far each kind of prediction was off on real steps: the error every predicted step carries.

A prediction is a claim; this module says what it was worth on the project's real data, and when
two predictions are too close to call.  The figures are residuals, measured, not chosen:
``benchmarks/h200_predictions.py`` computes them from the example's steps on an H200
(``sample_traces/h200-example``: 8 runs, 3 steps each, each run's own optimized HLO and the GPU's
own description), and ``tests/predict/test_accuracy.py`` recomputes them and fails when they no
longer hold.

- ``step``: the range of ``(predicted - measured) / measured`` of the predicted step over those
  runs: what an absolute predicted step is worth;
- ``tie``: the largest error of the *ratio* of two runs' predicted steps against their measured
  ratio, over the pairs of runs that compile the same program shape (the unrolled ones: a policy
  changes what is saved, offloaded or recomputed): two predictions of such programs whose
  difference is under it are a tie.  Pairs with a scanned program were off by up to 12%
  (calibrated) and 18% (roofline): a scan against an unrolled loop is beyond this figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.conventions import is_tpu_name

BASIS = "the example's 8 runs on a real H200 (their median steps; sample_traces/h200-example; benchmarks/README.md)"


@dataclass(frozen=True)
class Accuracy:
    kind: str  # "roofline" | "calibrated"
    step_low: float  # the most negative (predicted - measured) / measured on the reference steps
    step_high: float  # the most positive
    tie: float  # relative difference under which two predictions of one program shape are a tie
    basis: str = BASIS
    shortest_ns: float = 168.2e6  # the shortest real step of the basis (the H200 example's none run)

    def error_text(self) -> str:
        """``20-33% short`` / ``-7% to +3%``: the step error as people read it."""
        lo, hi = round(100 * self.step_low), round(100 * self.step_high)
        if hi < 0:
            return f"{-hi}-{-lo}% short"
        if lo > 0:
            return f"{lo}-{hi}% long"
        return f"{lo:+d}% to {hi:+d}%"

    @property
    def costed(self) -> str:
        """How this kind prices the kernels, in words (two tables of one output with two error lines say
        which is which)."""
        return {"roofline": "the roofline alone", "xla": "XLA's own kernel estimates"}.get(self.kind, self.kind)

    def line(self) -> str:
        """One line for a table of predictions of this kind."""
        return (
            f"error of these predictions ({self.costed}) on {self.basis}: steps {self.error_text()}; the ratio of two "
            f"steps of one program shape off by at most {100 * self.tie:.0f}%, so two predictions within "
            f"{100 * self.tie:.0f}% of each other are a tie"
        )

    def out_of_range(self, *steps_ns: float) -> bool:
        """Whether predicted steps are all far below the real steps the error was measured on (under a
        hundredth of the shortest): there kernel launches, which no prediction here prices, decide."""
        return bool(steps_ns) and max(steps_ns) < self.shortest_ns / 100

    def is_tie(self, a_ns: float, b_ns: float) -> bool:
        """Whether two predicted steps are too close to call."""
        top = max(a_ns, b_ns)
        return top > 0 and abs(a_ns - b_ns) / top < self.tie


# measured 2026-12-04 (benchmarks/h200_predictions.py): the uncalibrated roofline was -20.4% to -32.6%
# short, unrolled pairs' ratios off by at most 9.6%; calibrated on the Pax A100 archives and carried to
# the H200, -6.6% to -16.9%, pairs at most 2.6% (2026-12-07, reductions a class apart: -6.0% to -16.5%)
ROOFLINE = Accuracy("roofline", step_low=-0.33, step_high=-0.20, tie=0.10)
CALIBRATED = Accuracy("calibrated", step_low=-0.17, step_high=-0.059, tie=0.03)
# measured 2026-12-07 (benchmarks/h200_predictions.py, "plan with XLA's"): the same 8 steps as plan compiles
# them without a GPU (jaxlib 0.10.2, benchmarks/h200_deviceless), GEMMs and fusions that reduce
# costed by XLA's own estimates written into the module (roofline.with_xla), the rest by the roofline:
# -11.2% to -17.5% (the same modules by the roofline alone: -26.5% to -33.9%), unrolled pairs' ratios off
# by at most 0.9% (the roofline's: 10.2%).  Which of XLA's estimates to take per class was chosen on
# these same steps (roofline.XLA_MODELS): an in-sample figure, one program on one GPU.
XLA_BASIS = (
    "the example's 8 runs on a real H200, compiled as plan compiles them (sample_traces/h200-example; in "
    "sample: XLA's estimates per class were chosen on them)"
)
XLA = Accuracy("xla", step_low=-0.18, step_high=-0.11, tie=0.01, basis=XLA_BASIS)
# measured 2026-12-07 (the same benchmark, "plan, A100 procN + XLA's"): plan --calibrate on a Pax A100
# archive applied to those modules: XLA's estimates where they are, the A100's class scales elsewhere
# (calibrate.calibrated_costs): -9.6% to -15.2% on either archive, unrolled pairs within 0.9%
CALIBRATED_XLA = Accuracy("calibrated, XLA's estimates where given", step_low=-0.16, step_high=-0.09, tie=0.01,
                          basis=XLA_BASIS)  # fmt: skip
KINDS = {a.kind: a for a in (ROOFLINE, CALIBRATED, XLA, CALIBRATED_XLA)}


def cost_model(xla_costed: int) -> str:
    """How a compiled step was costed, as its prediction's ``cost_model`` names it: ``xla`` where XLA's own
    estimate costed any instruction (``roofline.with_xla``), else ``roofline``."""
    return XLA.kind if xla_costed else ROOFLINE.kind


def of_costs(cost_models: list[str | None]) -> Accuracy:
    """The accuracy of predictions costed as *cost_models* say (each prediction's ``cost_model``:
    ``xla`` or ``roofline``): XLA's figures where every one took XLA's estimates, else the roofline's
    (a comparison of an XLA-costed step with a roofline-costed one is no better than the roofline)."""
    return XLA if cost_models and all(m == XLA.kind for m in cost_models) else ROOFLINE


# A TPU's recorded program (plan --from) is priced on the TPU's description: measured 2026-12-06
# (benchmarks/tpu_predictions.py) on 17 TPU v5e runs of two models, the example at d_model 2048
# (sample_traces/tpu-v5e-example, 10 runs) and the H200 example's own step at d_model 4096
# (sample_traces/tpu-v5e-h200-shape, 7): the roofline -3.0% to -20.1%, pairs of one model and form
# off by at most 8.4%; calibrated on the smaller model's scanned remat run and applied to the 16
# others, -2.1% to +1.6% on its own model and -2.3% to -8.8% on the other (out of sample: the
# absolute step drifts with the model, the ratios of its policies do not), pairs at most 2.9%
# (tests/predict/test_tpu_recordings.py recomputes them)
TPU_BASIS = (
    "17 real TPU v5e steps of two models (sample_traces/tpu-v5e-example, tpu-v5e-h200-shape; benchmarks/README.md)"
)
TPU_SHORTEST_NS = 120.7e6  # the d2048 example's scanned none run, 4 layers
TPU_ROOFLINE = Accuracy("roofline", -0.201, -0.03, 0.09, TPU_BASIS, TPU_SHORTEST_NS)
TPU_CALIBRATED = Accuracy("calibrated", -0.088, 0.016, 0.03, TPU_BASIS, TPU_SHORTEST_NS)


# A calibration carried between a TPU and a GPU: measured 2026-12-06 (benchmarks/cross_device.py, "one
# step on two accelerators"): fitted on either TPU v5e remat-scan run and applied to the 8 H200 runs of
# the same model, -25.4% to -14.6%, pairs of one form off by at most 10.8%; fitted on a GPU (the H200's
# unrolled offload_qkv, the Pax A100) and applied to the 17 TPU v5e runs, -1.2% to +34.1%, pairs at
# most 10.5% (2026-12-06, the H200 fit from its command buffers' kernels too: 196 of 213 ms named, was
# 16; tests/predict/test_cross_device.py recomputes the cells).  2026-12-07, fusions that reduce fitted
# apart from the other fusions (roofline.op_classes): TPU to GPU -25.3% to -14.0%, tie 10.8%; GPU to
# TPU -0.9% to +20.2% (was +34.1%), tie 5.4% (was 10.5%)
CARRY_BASIS = "the example's steps on an H200 and a TPU v5e, fitted on the other kind (benchmarks/README.md)"
TPU_TO_GPU = Accuracy("calibrated on a TPU", step_low=-0.253, step_high=-0.140, tie=0.108, basis=CARRY_BASIS)
GPU_TO_TPU = Accuracy("calibrated on a GPU", step_low=-0.009, step_high=0.202, tie=0.054, basis=CARRY_BASIS)


def calibrated(source: str | None, target: str | None) -> Accuracy:
    """What a calibration fitted on device *source* was worth on device *target*: the carried figures
    between a TPU and a GPU, else the target's own (a GPU's fits carried to another GPU, a TPU's to the
    same chip)."""
    if is_tpu_name(source) and not is_tpu_name(target):
        return TPU_TO_GPU
    if is_tpu_name(target) and not is_tpu_name(source):
        return GPU_TO_TPU
    return of_device(target)[1]


def calibrated_accuracy(source: str | None, target: str | None, with_xla: bool) -> Accuracy:
    """What a calibration fitted on *source* and applied to *target* was worth, where the predicted
    modules carried XLA's own estimates (*with_xla*: plan's and tune's compiles for a GPU) or not."""
    if with_xla and not is_tpu_name(source) and not is_tpu_name(target):
        return CALIBRATED_XLA
    return calibrated(source, target)


def of_device(name: str | None) -> tuple[Accuracy, Accuracy]:
    """(roofline, calibrated) accuracies for predictions priced on device *name*: the TPU's figures
    for a TPU (JAX's device_kind ``TPU ...``), else the GPUs'."""
    if is_tpu_name(name):
        return TPU_ROOFLINE, TPU_CALIBRATED
    return ROOFLINE, CALIBRATED
