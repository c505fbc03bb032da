"""Newer XLA (jax 0.12) prints a read of a tuple's element as an operand ``%x#k`` instead of a
``get-tuple-element`` instruction: the offload plan and the prediction must not change with it."""

from __future__ import annotations

import re

import pytest

from profiler.analysis.links import parse_link
from profiler.predict import roofline
from profiler.predict.step import predict_module
from profiler.xla.hlo import parse_text
from profiler.xla.plan import offload_plan
from profiler.xla.targets import TARGETS
from tests.helpers.paths import SHARED_HLO

GTE = re.compile(r"^\s*%(\S+) = [^=]*? get-tuple-element\(%([^)\s]+)\), index=(\d+)")


def newer_printing(text: str) -> tuple[str, int]:
    """*text* as newer XLA prints it: every non-root ``get-tuple-element`` line removed and its
    readers given ``%tuple#index``; and how many reads were rewritten."""
    out, alias = [], {}
    for line in text.splitlines():
        m = GTE.match(line)
        if m and "ROOT" not in line.split("=")[0]:
            alias[m.group(1)] = f"{m.group(2)}#{m.group(3)}"
            continue
        out.append(line)
    body = "\n".join(out)
    if alias:
        names = "|".join(re.escape(n) for n in sorted(alias, key=len, reverse=True))
        body = re.sub(rf"%({names})(?=[,)\s])", lambda m: "%" + alias[m.group(1)], body)
    return body + "\n", len(alias)


def test_a_tuple_read_is_a_get_tuple_element_of_the_tuple():
    text = """HloModule m, entry_computation_layout={((f32[4]{0}, s32[]))->f32[4]{0}}

ENTRY %main (p: (f32[4], s32[])) -> f32[4] {
  %p = (f32[4]{0}, s32[]) parameter(0)
  %a = f32[4]{0} copy(%p#0)
  ROOT %b = f32[4]{0} add(%a, %p#0)
}
"""
    comp = parse_text(text).computations["main"]
    names = [i.name for i in comp.instructions]
    assert names == ["p", "p#0", "a", "b"]  # one read, before its first reader
    read = comp.instructions[1]
    assert (read.opcode, read.operands, read.tuple_index, read.shape.dtype, read.shape.dims) == (
        "get-tuple-element",
        ["p"],
        0,
        "f32",
        (4,),
    )
    assert [i.position for i in comp.instructions] == [0, 1, 2, 3]
    assert comp.instructions[3].operands == ["a", "p#0"]


@pytest.mark.parametrize(
    "name",
    [
        "aot_h100__two_layer_offload_step_after_opt.hlo.txt",
        "openxla-xla__memory_space_propagation_jit_loss_fn_scan_fwd_bwd.hlo.txt",
        "openxla-xla__hlo_ordering_tpu_async_dus_to_host.hlo.txt",
    ],
)
def test_offload_plan_and_prediction_read_both_printings_alike(name):
    path = SHARED_HLO / name
    if not path.is_file():
        pytest.skip("../shared/hlo is not here")
    old_text = path.read_text()
    new_text, rewritten = newer_printing(old_text)
    assert rewritten > 0 and "#" in new_text
    old, new = parse_text(old_text), parse_text(new_text)
    assert new.instruction_count == old.instruction_count
    assert offload_plan(new) == offload_plan(old)
    if name.startswith("aot_h100"):  # a scheduled GPU module: the replay too
        device = roofline.device_from_spec(TARGETS["h100"].spec_text())
        links = [parse_link("pcie5"), parse_link("nvlink-c2c")]
        assert [p.doc() for p in predict_module(new, device, links)[0]] == [
            p.doc() for p in predict_module(old, device, links)[0]
        ]
