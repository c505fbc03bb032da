"""The roofline's cost of cuDNN's fused attention (``__cudnn$fmha*``), which XLA compiles without a
GPU (``jax.nn.dot_product_attention(..., implementation="cudnn")``); the instruction lines are as
JAX 0.10.2 compiles a causal attention of 8 x 4096 tokens, 128 heads of 128 for a B200."""

from __future__ import annotations

import pytest

from profiler.predict import roofline, schedule
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS

CFG = '{"operation_queue_id":"0","cudnn_fmha_backend_config":{"mask_type":"CAUSAL"}}'
T = "bf16[8,128,4096,128]{3,1,2,0}"
MODULE = "\n".join(
    [
        "HloModule m, is_scheduled=true",
        "ENTRY %e (q: bf16[8,4096,128,128], k: bf16[8,4096,128,128], v: bf16[8,4096,128,128]) -> "
        "bf16[8,128,4096,128] {",
        "  %q = bf16[8,4096,128,128]{3,2,1,0} parameter(0)",
        "  %k = bf16[8,4096,128,128]{3,2,1,0} parameter(1)",
        "  %v = bf16[8,4096,128,128]{3,2,1,0} parameter(2)",
        f"  %f = ({T}, f32[8,128,4096]{{2,1,0}}, u8[0]{{0}}) custom-call(%q, %k, %v), "
        f'custom_call_target="__cudnn$fmhaSoftmax", backend_config={CFG}',
        f"  %o = {T} get-tuple-element(%f), index=0",
        "  %s = f32[8,128,4096]{2,1,0} get-tuple-element(%f), index=1",
        f"  %b = ({T}, {T}, {T}, u8[0]{{0}}) custom-call(%q, %k, %v, %s, %o), "
        f'custom_call_target="__cudnn$fmhaSoftmaxBackward", backend_config={CFG}',
        f"  ROOT %dq = {T} get-tuple-element(%b), index=0",
        "}",
        "",
    ]
)


def test_fused_attention_flops():
    """Forward 2 B H Sq Sk (Dqk + Dv), halved by the causal mask: 2 x 8 x 128 x 4096^2 x 256 / 2 =
    4.398e12 FLOPs, 1.95 ms at the B200's 2250 TFLOP/s bf16; the backward 2.5 times that."""
    module = parse_text(MODULE)
    dev = roofline.device_from_spec(TARGETS["b200"].spec_text(), TARGETS["b200"].peak_bf16_tflops)
    fwd = 2 * 8 * 128 * 4096 * 4096 * (128 + 128) / 2
    assert fwd == pytest.approx(4.398e12, rel=1e-3)
    costs = roofline.costs(schedule.build(module), dev)
    assert costs["f"] == pytest.approx(fwd / 2250e12 * 1e9, abs=1)
    assert costs["b"] == pytest.approx(2.5 * fwd / 2250e12 * 1e9, abs=1)
    without_mask = parse_text(MODULE.replace('"CAUSAL"', '"NO_MASK"'))
    assert roofline.costs(schedule.build(without_mask), dev)["f"] == pytest.approx(2 * fwd / 2250e12 * 1e9, abs=1)
