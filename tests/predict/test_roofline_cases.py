"""The roofline's costs (``profiler/predict/roofline.py``) on small modules worked out by hand.

The device is made of round numbers so that each cost can be read off: a matmul FLOP takes 1 ps
(1e12 FLOP/s), any other FLOP 10 ps (1e11), a byte of HBM traffic 1 ns (1e9 B/s) and a byte over
the interconnect 1 ns (1e9 B/s).  Written from the survivors of the module's mutation run
(docs/testing.md): each test names what it pins.
"""

from __future__ import annotations

import math

import pytest

from profiler.predict import roofline, schedule
from profiler.xla.hlo import parse_text
from profiler.xla.targets import TARGETS, TPU_TARGETS

DEV = roofline.Device("T", matmul_flops=1e12, vector_flops=1e11, hbm_bytes_s=1e9, interconnect_bytes_s=1e9)
FAST_HBM = roofline.Device("T", 1e12, 1e11, 1e15, 1e9)  # bytes cost nothing to speak of: the FLOPs decide

ADD = """%add (add_a: f32[], add_b: f32[]) -> f32[] {
  %add_a = f32[] parameter(0)
  %add_b = f32[] parameter(1)
  ROOT %add_s = f32[] add(%add_a, %add_b)
}
"""


def module(entry: str, *computations: str) -> str:
    return "\n".join(["HloModule m, is_scheduled=true", "", ADD, *computations, entry, ""])


def costs_of(text: str, dev: roofline.Device = DEV, launch_ns: int = 0) -> dict[str, int]:
    return roofline.costs(schedule.build(parse_text(text)), dev, launch_ns)


def ins(text: str, name: str):
    m = parse_text(text)
    return roofline.Costs(m, DEV), next(i for i in m.instructions() if i.name == name)


def parsed(text: str) -> tuple[roofline.Costs, dict]:
    """The costs of the module *text* on ``DEV``, and its instructions by name."""
    m = parse_text(text)
    return roofline.Costs(m, DEV), {i.name: i for i in m.instructions()}


MM = """%fused_mm (p0: bf16[64,32], p1: bf16[32,16]) -> bf16[64,16] {
  %p0 = bf16[64,32]{1,0} parameter(0)
  %p1 = bf16[32,16]{1,0} parameter(1)
  %d = bf16[64,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = bf16[64,16]{1,0} tanh(%d)
}
"""
MM_ENTRY = """ENTRY %e (x: bf16[64,32], w: bf16[32,16]) -> bf16[64,16] {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  ROOT %f = bf16[64,16]{1,0} fusion(%x, %w), kind=kOutput, calls=%fused_mm
}
"""


def test_a_fusion_costs_the_slower_of_its_flops_and_its_bytes():
    """The fused matmul: 2 x 64 x 16 x 32 = 65,536 matmul FLOPs (65.536 ns) and 64 x 16 = 1,024 tanh
    FLOPs (10.24 ns): 75.776 ns of compute, 76 ns rounded up.  Its bytes: x 4,096 + w 1,024 read, 2,048
    written = 7,168 ns.  At 1 ns a byte the bytes decide; with HBM a million times faster, the FLOPs."""
    text = module(MM_ENTRY, MM)
    c, f = ins(text, "f")
    assert c.flops(f) == (65536.0, 1024.0, 65536.0)
    assert c.hbm_bytes(f) == 4096 + 1024 + 2048
    assert costs_of(text) == {"f": 7168}
    assert costs_of(text, FAST_HBM) == {"f": 76}
    assert costs_of(text, FAST_HBM, launch_ns=5) == {"f": 81}


def test_an_exact_number_of_nanoseconds_is_not_rounded_up_by_float_noise():
    """4,008 bytes at 1e9 B/s are 4,008 ns; the seconds' float (4.008e-06 x 1e9 = 4008.000000000001)
    once made it 4,009."""
    text = module(
        """ENTRY %e (v: f32[1000]) -> f32[] {
  %v = f32[1000]{0} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%v, %z), dimensions={0}, to_apply=%add
}
"""
    )
    c, r = ins(text, "r")
    assert c.flops(r) == (0.0, 1000.0, 0.0)  # a reduce: one FLOP per input element, not per result
    assert c.hbm_bytes(r) == 4000 + 4 + 4  # v and the init read, the scalar written
    assert costs_of(text) == {"r": 4008}


@pytest.mark.parametrize(
    ("dtype", "weight"),
    [("bf16", 1.0), ("f16", 1.0), ("f32", 2.0), ("f8e4m3fn", 0.5), ("f4e2m1fn", 0.5), ("f64", 32.0), ("s32", 32.0)],
)
def test_a_dot_is_weighted_by_its_dtype_against_the_bf16_peak(dtype, weight):
    """2 x 8 x 4 x 16 = 1,024 FLOPs; TF32 (f32) runs at half the bf16 peak, fp8 at twice, f64 and
    integers far from it (32 times)."""
    text = module(
        f"""ENTRY %e (x: {dtype}[8,16], w: {dtype}[16,4]) -> {dtype}[8,4] {{
  %x = {dtype}[8,16]{{1,0}} parameter(0)
  %w = {dtype}[16,4]{{1,0}} parameter(1)
  ROOT %d = {dtype}[8,4]{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
    )
    c, d = ins(text, "d")
    assert c.flops(d) == (1024 * weight, 0.0, 1024.0)
    assert costs_of(text, FAST_HBM) == {"d": math.ceil(1024 * weight / 1000)}


def test_a_dot_without_dimension_numbers_takes_k_from_the_sizes():
    """A module read from a proto may lack ``lhs_contracting_dims``: K = sqrt(|lhs| |rhs| / (|out| x
    batch)) = sqrt(2,048 x 512 / 1,024) = 32 for [64,32] x [32,16]; with a leading batch of 2 in a
    3-D result, sqrt(2 x 2,048 x 2 x 512 / (2,048 x 2)) = 32 again."""
    text = module(
        """ENTRY %e (x: bf16[64,32], w: bf16[32,16]) -> bf16[64,16] {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  ROOT %d = bf16[64,16]{1,0} dot(%x, %w)
}
"""
    )
    c, d = ins(text, "d")
    assert c.flops(d) == (2 * 1024 * 32.0, 0.0, 2 * 1024 * 32.0)
    batched = module(
        """ENTRY %e (x: bf16[2,64,32], w: bf16[2,32,16]) -> bf16[2,64,16] {
  %x = bf16[2,64,32]{2,1,0} parameter(0)
  %w = bf16[2,32,16]{2,1,0} parameter(1)
  ROOT %d = bf16[2,64,16]{2,1,0} dot(%x, %w)
}
"""
    )
    c, d = ins(batched, "d")
    assert c.flops(d) == (2 * 2048 * 32.0, 0.0, 2 * 2048 * 32.0)


def test_a_convolution_counts_only_the_taps_on_real_input_elements():
    """A 1-D convolution of 8 positions with 2 input features into 4 output features, a window of 3,
    padded by 1 each side: of the 8 x 3 (position, tap) pairs, two fall on padding (the first
    position's first tap, the last position's last), so 22 are real: 2 features x 22 / 8 = 5.5
    multiply-adds per result element, 2 x 32 x 5.5 = 352 FLOPs (f32: weighted twice)."""
    text = module(
        """ENTRY %e (x: f32[1,8,2], k: f32[3,2,4]) -> f32[1,8,4] {
  %x = f32[1,8,2]{2,1,0} parameter(0)
  %k = f32[3,2,4]{2,1,0} parameter(1)
  ROOT %c = f32[1,8,4]{2,1,0} convolution(%x, %k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f
}
"""
    )
    c, conv = ins(text, "c")
    assert c.flops(conv) == (704.0, 0.0, 352.0)
    dilated = text.replace("pad=1_1", "pad=1_1 lhs_dilate=2")
    # the input dilated to 15 positions, its 8 real elements at the even ones: output position o reads
    # o - 1, o and o + 1, of which one is even and in range when o is even, two when o is odd: 12 real
    # pairs, 2 x 12 / 8 = 3 multiply-adds per result element, 2 x 32 x 3 = 192 FLOPs
    c, conv = ins(dilated, "c")
    assert c.flops(conv) == (384.0, 0.0, 192.0)


def test_a_two_dimensional_window_with_stride_asymmetric_padding_and_dilation():
    """A 5 x 5 input, a 3 x 3 window.  Dimension 0: stride 2, padded 1 before and 0 after: 2 outputs
    reading positions -1, 0, 1 and 1, 2, 3: 5 real taps, 5 / 2 a result.  Dimension 1: stride 1, no
    padding before and 2 after, the window dilated by 2: 3 outputs reading 0, 2, 4 / 1, 3, 5 / 2, 4, 6:
    7 real taps, 7 / 3 a result.  One input feature: 5/2 x 7/3 = 35/6 multiply-adds for each of the 6
    results, 70 FLOPs, weighted twice for f32."""
    window = "window={size=3x3 stride=2x1 pad=1_0x0_2 rhs_dilate=1x2}"
    text = module(
        f"""ENTRY %e (x: f32[1,5,5,1], k: f32[3,3,1,1]) -> f32[1,2,3,1] {{
  %x = f32[1,5,5,1]{{3,2,1,0}} parameter(0)
  %k = f32[3,3,1,1]{{3,2,1,0}} parameter(1)
  ROOT %c = f32[1,2,3,1]{{3,2,1,0}} convolution(%x, %k), {window}, dim_labels=b01f_01io->b01f
}}
"""
    )
    c, conv = ins(text, "c")
    assert c.flops(conv) == pytest.approx((140.0, 0.0, 70.0))
    assert roofline._window(window) == {
        "size": [3, 3], "stride": [2, 1], "pad_lo": [1, 0], "rhs_dilate": [1, 2]}  # fmt: skip


def test_a_loop_is_costed_by_its_bodys_ops_and_not_as_one_more_kernel():
    """Three trips of a body that adds 1 to its counter (three 4-byte scalars: 12 ns) and negates 1,000
    floats (8,000 ns): the costs are per execution of each body instruction; the ``while`` itself is a
    region the simulator replays from its body, with no cost of its own."""
    body = """%body (bp: (s32[], f32[1000])) -> (s32[], f32[1000]) {
  %bp = (s32[], f32[1000]{0}) parameter(0)
  %bi = s32[] get-tuple-element(%bp), index=0
  %bv = f32[1000]{0} get-tuple-element(%bp), index=1
  %one = s32[] constant(1)
  %inc = s32[] add(%bi, %one)
  %neg = f32[1000]{0} negate(%bv)
  ROOT %bt = (s32[], f32[1000]{0}) tuple(%inc, %neg)
}

%cond (cp: (s32[], f32[1000])) -> pred[] {
  %cp = (s32[], f32[1000]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %three), direction=LT
}
"""
    trips = 'backend_config={"known_trip_count":{"n":"3"}}'
    text = module(
        f"""ENTRY %e (v: f32[1000]) -> (s32[], f32[1000]) {{
  %v = f32[1000]{{0}} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[1000]{{0}}) tuple(%zero, %v)
  ROOT %w = (s32[], f32[1000]{{0}}) while(%init), condition=%cond, body=%body, {trips}
}}
""",
        body,
    )
    assert costs_of(text, launch_ns=2) == {"inc": 14, "neg": 8002}
    assert roofline.op_classes(schedule.build(parse_text(text))) == {"inc": "other", "neg": "other"}


def test_a_fusion_reads_only_the_slices_of_a_sliced_parameter_and_writes_only_an_update():
    """``v`` (4,000 bytes) read through a 10-element slice costs 40 bytes; a dynamic-update-slice of
    ``v`` in place reads none of it and writes only its 40-byte update (plus the 4-byte index read)."""
    sliced = """%fused_slice (q0: f32[1000], q1: f32[10]) -> f32[10] {
  %q0 = f32[1000]{0} parameter(0)
  %q1 = f32[10]{0} parameter(1)
  %sl = f32[10]{0} slice(%q0), slice={[0:10]}
  ROOT %m = f32[10]{0} multiply(%sl, %q1)
}
"""
    updated = """%fused_dus (r0: f32[1000], r1: f32[10], r2: s32[]) -> f32[1000] {
  %r0 = f32[1000]{0} parameter(0)
  %r1 = f32[10]{0} parameter(1)
  %r2 = s32[] parameter(2)
  %u = f32[1000]{0} dynamic-update-slice(%r0, %r1, %r2)
  ROOT %bc = f32[1000]{0} bitcast(%u)
}
"""
    text = module(
        """ENTRY %e (v: f32[1000], y: f32[10], i: s32[]) -> f32[1000] {
  %v = f32[1000]{0} parameter(0)
  %y = f32[10]{0} parameter(1)
  %i = s32[] parameter(2)
  %f2 = f32[10]{0} fusion(%v, %y), kind=kLoop, calls=%fused_slice
  ROOT %f3 = f32[1000]{0} fusion(%v, %y, %i), kind=kLoop, calls=%fused_dus
}
""",
        sliced,
        updated,
    )
    c, f2 = ins(text, "f2")
    assert c.hbm_bytes(f2) == 40 + 40 + 40
    assert c.flops(f2) == (0.0, 10.0, 0.0)
    c, f3 = ins(text, "f3")
    assert c.hbm_bytes(f3) == 0 + 40 + 4 + 40
    assert costs_of(text) == {"f2": 120, "f3": 84}
    # the slice's parameter also read whole by another user: read whole
    both = text.replace("ROOT %m = f32[10]{0} multiply(%sl, %q1)", "%m = f32[10]{0} multiply(%sl, %q1)\n"
                        "  %n = f32[] reduce(%q0, %q1), dimensions={0}, to_apply=%add\n"
                        "  ROOT %t = (f32[10]{0}, f32[]) tuple(%m, %n)")  # fmt: skip
    c, f2 = ins(both, "f2")
    assert c.hbm_bytes(f2) == 4000 + 40 + 40


def test_a_tuple_root_writes_each_update_and_each_whole_result():
    """A fusion whose root is a tuple of an in-place update (40 bytes) and a fresh result (a 10-element
    f32, 40 bytes) writes 80 bytes, not the 4,000-byte buffer."""
    fused = """%fused_two (r0: f32[1000], r1: f32[10], r2: s32[]) -> (f32[1000], f32[10]) {
  %r0 = f32[1000]{0} parameter(0)
  %r1 = f32[10]{0} parameter(1)
  %r2 = s32[] parameter(2)
  %u = f32[1000]{0} dynamic-update-slice(%r0, %r1, %r2)
  %n = f32[10]{0} negate(%r1)
  ROOT %t = (f32[1000]{0}, f32[10]{0}) tuple(%u, %n)
}
"""
    text = module(
        """ENTRY %e (v: f32[1000], y: f32[10], i: s32[]) -> (f32[1000], f32[10]) {
  %v = f32[1000]{0} parameter(0)
  %y = f32[10]{0} parameter(1)
  %i = s32[] parameter(2)
  ROOT %f = (f32[1000]{0}, f32[10]{0}) fusion(%v, %y, %i), kind=kLoop, calls=%fused_two
}
""",
        fused,
    )
    c, f = ins(text, "f")
    assert c.hbm_bytes(f) == (0 + 40 + 4) + (40 + 40)
    # without an update in it, the tuple's results are written whole
    plain = text.replace("%u = f32[1000]{0} dynamic-update-slice(%r0, %r1, %r2)", "%u = f32[1000]{0} abs(%r0)")
    c, f = ins(plain, "f")
    assert c.hbm_bytes(f) == (4000 + 40 + 4) + (4000 + 40)
    # a dynamic slice (operands: the buffer and a 4-byte index) is no update: its 40-byte result is written
    sliced = text.replace(
        "%n = f32[10]{0} negate(%r1)", "%n = f32[10]{0} dynamic-slice(%r0, %r2), dynamic_slice_sizes={10}"
    )
    c, f = ins(sliced, "f")
    assert c.hbm_bytes(f) == (4000 + 40 + 4) + (40 + 40)


def test_a_parameter_read_through_a_nested_fusion_that_yields_less_reads_what_it_yields():
    """A TPU wraps a dynamic slice of a stacked buffer in a nested loop fusion: the 4,000-byte ``v``
    read by a nested fusion that yields 10 floats costs 40 bytes, as a slice would; a nested fusion
    that yields a tuple is not taken for a slice."""
    inner = """%slicer (pp: f32[1000]) -> f32[10] {
  %pp = f32[1000]{0} parameter(0)
  ROOT %sl2 = f32[10]{0} slice(%pp), slice={[0:10]}
}

%outer (p: f32[1000]) -> f32[10] {
  %p = f32[1000]{0} parameter(0)
  %inner = f32[10]{0} fusion(%p), kind=kLoop, calls=%slicer
  ROOT %neg = f32[10]{0} negate(%inner)
}
"""
    text = module(
        """ENTRY %e (v: f32[1000]) -> f32[10] {
  %v = f32[1000]{0} parameter(0)
  ROOT %f = f32[10]{0} fusion(%v), kind=kLoop, calls=%outer
}
""",
        inner,
    )
    c, f = ins(text, "f")
    assert c.hbm_bytes(f) == 40 + 40
    assert c.flops(f) == (0.0, 10.0, 0.0)
    as_tuple = (
        text.replace("%slicer (pp: f32[1000]) -> f32[10]", "%slicer (pp: f32[1000]) -> (f32[10])")
        .replace("ROOT %sl2 = f32[10]{0} slice(%pp), slice={[0:10]}",
                 "%sl2 = f32[10]{0} slice(%pp), slice={[0:10]}\n  ROOT %tu = (f32[10]{0}) tuple(%sl2)")
        .replace("%inner = f32[10]{0} fusion(%p)", "%inner = (f32[10]{0}) fusion(%p)")
    )  # fmt: skip
    c, f = ins(as_tuple, "f")
    assert c.hbm_bytes(f) == 4000 + 40


def test_host_arrays_and_on_chip_spaces_are_no_hbm_traffic():
    """An operand in host memory (``S(5)``) is not read from HBM; ``S(1)`` is HBM on a GPU (a device-side
    pool) and on-chip on a device that says so (a TPU's VMEM)."""
    text = module(
        """ENTRY %e (h: f32[100], d: f32[100]) -> f32[100] {
  %h = f32[100]{0:S(5)} parameter(0)
  %d = f32[100]{0:S(1)} parameter(1)
  ROOT %a = f32[100]{0} add(%h, %d)
}
"""
    )
    m = parse_text(text)
    a = next(i for i in m.instructions() if i.name == "a")
    assert roofline.Costs(m, DEV).hbm_bytes(a) == 400 + 400
    on_chip = roofline.Device("T", 1e12, 1e11, 1e9, 1e9, frozenset({1}))
    assert roofline.Costs(m, on_chip).hbm_bytes(a) == 400
    for free in ("h", "d"):
        assert roofline.Costs(m, DEV).hbm_bytes(next(i for i in m.instructions() if i.name == free)) == 0


ALL_REDUCE = """ENTRY %e (v: f32[1000]) -> f32[1000] {{
  %v = f32[1000]{{0}} parameter(0)
  ROOT %c = f32[1000]{{0}} {op}(%v){groups}
}}
"""


@pytest.mark.parametrize(
    ("op", "groups", "ns"),
    [
        # a ring all-reduce moves 2 (n - 1) / n of its payload: 4,000 x 2 x 3/4
        ("all-reduce", ", replica_groups={{0,1,2,3}}, to_apply=%add", 6000),
        ("all-reduce", ", replica_groups=[2,4]<=[8], to_apply=%add", 6000),  # the iota form: groups of 4
        ("all-reduce", ", replica_groups={{0,1}}, to_apply=%add", 4000),  # 2 x 1/2
        ("all-reduce", ", to_apply=%add", 8000),  # no groups said: the whole payload both ways
        ("collective-permute", ", source_target_pairs={{0,1},{1,0}}", 4000),  # the payload once
        ("all-to-all", ", replica_groups={{0,1,2,3}}, dimensions={0}", 3000),  # (n - 1) / n
    ],
)
def test_a_collective_costs_its_payload_over_the_interconnect_with_its_algorithms_factor(op, groups, ns):
    text = module(ALL_REDUCE.format(op=op, groups=groups))
    assert costs_of(text, launch_ns=7) == {"c": ns}  # no launch cost added to a collective


def test_an_async_all_gather_finds_its_kind_and_group_inside_its_wrapper():
    """An all-gather of 250 floats per device into 1,000 over 4 devices: (n - 1) / n of the 4,000-byte
    payload, 3,000 ns, read inside the async wrapper's computation."""
    wrapped = """%ag (p: f32[250]) -> f32[1000] {
  %p = f32[250]{0} parameter(0)
  ROOT %g = f32[1000]{0} all-gather(%p), replica_groups={{0,1,2,3}}, dimensions={0}
}
"""
    text = module(
        """ENTRY %e (v: f32[250]) -> f32[1000] {
  %v = f32[250]{0} parameter(0)
  %st = ((f32[250]{0}), f32[1000]{0}) async-start(%v), calls=%ag
  ROOT %d = f32[1000]{0} async-done(%st), calls=%ag
}
""",
        wrapped,
    )
    m = parse_text(text)
    s = next(i for i in m.instructions() if i.name == "st")
    assert roofline.group_size(s, m) == 4
    sched = schedule.build(m)
    op = next(o for o in sched.ops if o.name == "st")
    assert roofline.Costs(m, DEV).collective_ns(s, 4000) == 3000
    assert roofline.costs(sched, DEV)["st"] == roofline.Costs(m, DEV).collective_ns(s, op.bytes)


def conditional(branches: str, names: str) -> str:
    """A module whose entry runs one of the computations *names* (in *branches*) on 1,000 floats."""
    return module(
        f"""ENTRY %e (i: s32[], v: f32[1000]) -> f32[1000] {{
  %i = s32[] parameter(0)
  %v = f32[1000]{{0}} parameter(1)
  ROOT %c = f32[1000]{{0}} conditional(%i, %v, %v), branch_computations={{{names}}}
}}
""",
        branches,
    )


def test_a_conditional_costs_its_costliest_branch():
    """Branch one negates 1,000 floats (8,000 bytes: 8,000 ns), branch two 10 (80 ns): 8,000 ns, plus
    the launch cost once."""
    branches = """%big (p: f32[1000]) -> f32[1000] {
  %p = f32[1000]{0} parameter(0)
  ROOT %n = f32[1000]{0} negate(%p)
}

%small (q: f32[1000]) -> f32[1000] {
  %q = f32[1000]{0} parameter(0)
  %s = f32[10]{0} slice(%q), slice={[0:10]}
  %n2 = f32[10]{0} negate(%s)
  ROOT %b = f32[1000]{0} bitcast(%q)
}
"""
    text = conditional(branches, "%big, %small")
    m = parse_text(text)
    c = next(i for i in m.instructions() if i.name == "c")
    assert roofline.Costs(m, DEV).conditional_ns(c) == 8000
    assert costs_of(text, launch_ns=3)["c"] == 8003


def test_costs_leave_out_free_instructions_and_host_copies_and_classes_name_each_op():
    """The host copy pair is priced by the simulator over a link, not here; parameters, constants and
    tuples cost nothing and get no class."""
    text = module(
        """ENTRY %e (x: bf16[64,32], w: bf16[32,16], v: f32[1000]) -> (bf16[64,16], f32[1000]) {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  %v = f32[1000]{0} parameter(2)
  %f = bf16[64,16]{1,0} fusion(%x, %w), kind=kOutput, calls=%fused_mm
  %n = f32[1000]{0} negate(%v)
  %cs = (f32[1000]{0:S(5)}, f32[1000]{0}, u32[]) copy-start(%n)
  %cd = f32[1000]{0:S(5)} copy-done(%cs)
  %back = (f32[1000]{0}, f32[1000]{0:S(5)}, u32[]) copy-start(%cd)
  %bd = f32[1000]{0} copy-done(%back)
  %ar = f32[1000]{0} all-reduce(%bd), replica_groups={{0,1}}, to_apply=%add
  ROOT %t = (bf16[64,16]{1,0}, f32[1000]{0}) tuple(%f, %ar)
}
""",
        MM,
    )
    sched = schedule.build(parse_text(text))
    assert roofline.costs(sched, DEV) == {"f": 7168, "n": 8000, "ar": 4000}
    assert [(o.name, o.stream) for o in sched.ops if o.kind == "start"] == [("cs", "d2h"), ("back", "h2d")]
    assert roofline.op_classes(sched) == {"f": "matmul", "n": "other", "cs": "copy", "back": "copy", "ar": "collective"}
    assert roofline.op_class(sched, "f") == "matmul"
    assert roofline.op_class(sched, "x") == "other"
    # a fusion without a dot is a fusion; a cuBLAS call a matmul
    no_dot = text.replace("%d = bf16[64,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                          "%d = bf16[64,16]{1,0} slice(%p0), slice={[0:64], [0:16]}")  # fmt: skip
    assert roofline.op_classes(schedule.build(parse_text(no_dot)))["f"] == "fusion"
    totals = roofline.totals(sched, DEV)
    # the fused matmul's 65,536 FLOPs; tanh 1,024 + negate 1,000 other FLOPs; bytes: the fusion's 7,168
    # and the negate's 8,000 (the collective and the copy are not compute)
    assert totals == {"matmul_flops": 65536.0, "other_flops": 2024.0, "hbm_bytes": 15168.0}


def test_a_device_from_a_gpu_description():
    """The vector peak is SMs x FP32 lanes x 2 x clock: 132 x 128 x 2 x 1.98 GHz = 66.9 TFLOP/s on the
    built-in H200; the interconnect by name (an H200's NVLink 4: 450 GB/s); the tensor-core peak from
    the argument, else the built-in target of the same name."""
    spec = TARGETS["h200"].spec_text()
    d = roofline.device_from_spec(spec)
    assert d.name == "NVIDIA H200"
    assert d.matmul_flops == TARGETS["h200"].peak_bf16_tflops * 1e12
    assert d.vector_flops == 132 * 128 * 2 * 1.98 * 1e9
    slow = roofline.device_from_spec(spec.replace("clock_rate_ghz: 1.98", "clock_rate_ghz: 0.5"))
    assert slow.vector_flops == 132 * 128 * 2 * 0.5 * 1e9
    assert d.hbm_bytes_s == 4.8e12
    assert d.interconnect_bytes_s == 450e9
    assert d.on_chip_spaces == frozenset()
    assert roofline.device_from_spec(spec, 500.0).matmul_flops == 500e12
    a100 = spec.replace("NVIDIA H200", "NVIDIA A100-SXM4-80GB")
    assert roofline.device_from_spec(a100, 312.0).interconnect_bytes_s == 300e9
    # a GPU with no built-in target: its tensor-core peak from the table of device kinds (L40S: 362)
    l40s = spec.replace("NVIDIA H200", "NVIDIA L40S")
    assert "NVIDIA L40S" not in {t.description for t in TARGETS.values()}
    assert roofline.device_from_spec(l40s).matmul_flops == 362e12
    other = spec.replace("NVIDIA H200", "Some GPU")
    assert roofline.device_from_spec(other, 100.0).interconnect_bytes_s == roofline.DEFAULT_INTERCONNECT_GBPS * 1e9
    with pytest.raises(ValueError, match="no tensor-core peak"):
        roofline.device_from_spec(other)
    # no FP32 lanes said: the vector peak is the tensor-core peak / 16
    no_lanes = "\n".join(line for line in spec.splitlines() if "fpus_per_core" not in line)
    assert roofline.device_from_spec(no_lanes).vector_flops == TARGETS["h200"].peak_bf16_tflops * 1e12 / 16
    no_bw = "\n".join(line for line in spec.splitlines() if "memory_bandwidth" not in line)
    with pytest.raises(ValueError, match=r"^the target description has no memory_bandwidth$"):
        roofline.device_from_spec(no_bw)
    with pytest.raises(
        ValueError, match=r"^the target description's memory_bandwidth, core_count or clock is not a number$"
    ):
        roofline.device_from_spec(spec.replace("core_count: 132", "core_count: many"))
    with pytest.raises(ValueError, match="no memory_bandwidth"):
        roofline.device_from_spec(spec.replace("memory_bandwidth: 4800000000000", "memory_bandwidth: 0"))
    assert (
        roofline.device_from_spec(spec.replace("memory_bandwidth: 4800000000000", "memory_bandwidth: 1")).hbm_bytes_s
        == 1
    )
    # no SM count or no clock said: the vector peak falls back as without lanes; no name: "GPU"
    for field in ("core_count", "clock_rate_ghz"):
        without = "\n".join(line for line in spec.splitlines() if field not in line)
        assert roofline.device_from_spec(without).vector_flops == TARGETS["h200"].peak_bf16_tflops * 1e12 / 16
    unnamed = "\n".join(line for line in spec.splitlines() if "device_description_str" not in line)
    assert roofline.device_from_spec(unnamed, 100.0).name == "GPU"


def test_a_device_from_a_tpu_description():
    """A TPU's rates are given as they are; its ``S(1)`` is on-chip (VMEM)."""
    t = TPU_TARGETS["tpu-v5e"]
    d = roofline.device_from_spec(t.spec_text())
    assert d == roofline.Device("TPU v5 lite", 197e12, 197e12 / 16, 819e9, 200e9, frozenset({1}))
    assert roofline.device_from_spec(t.spec_text(), 100.0).matmul_flops == 100e12
    lacking = r"^the TPU description lacks memory_bandwidth, peak_bf16_flops, vector_flops or interconnect$"
    with pytest.raises(ValueError, match=lacking):
        roofline.device_from_spec(t.spec_text().replace("memory_bandwidth", "bandwidth_of_memory"))
    with pytest.raises(ValueError, match=lacking):
        roofline.device_from_spec(
            t.spec_text().replace("interconnect_bandwidth: 200000000000", "interconnect_bandwidth: 0")
        )
    one = t.spec_text().replace("interconnect_bandwidth: 200000000000", "interconnect_bandwidth: 1")
    assert roofline.device_from_spec(one).interconnect_bytes_s == 1
    with pytest.raises(ValueError, match=r"^the TPU description's rates are not numbers$"):
        roofline.device_from_spec(t.spec_text().replace("vector_flops: 12312500000000", "vector_flops: fast"))


def attention(target: str, result: str, operands: str, config: str = '{"cudnn_fmha_backend_config":{}}') -> str:
    """cuDNN's fused attention on Q [2, 16, 4, 64] (B, Sq, H, Dqk), K [2, 8, 4, 64] (Sk = 8), V [2, 8, 4, 32]
    (Dv = 32) and the softmax statistics [2, 4, 16]: one custom call returning *result*."""
    return module(
        f"""ENTRY %e (q: bf16[2,16,4,64], k: bf16[2,8,4,64], v: bf16[2,8,4,32], st: f32[2,4,16]) -> {result} {{
  %q = bf16[2,16,4,64]{{3,2,1,0}} parameter(0)
  %k = bf16[2,8,4,64]{{3,2,1,0}} parameter(1)
  %v = bf16[2,8,4,32]{{3,2,1,0}} parameter(2)
  %st = f32[2,4,16]{{2,1,0}} parameter(3)
  ROOT %a = {result} custom-call({operands}), custom_call_target="{target}", backend_config={config}
}}
"""
    )


def test_fused_attention_with_keys_and_values_of_other_widths():
    """Forward: 2 B H Sq Sk (Dqk + Dv) = 2 x 2 x 4 x 16 x 8 x (64 + 32) = 196,608 FLOPs (no mask said: the
    whole square).  The backward's first result is dQ ([B, H, Sq, Dqk]): Dv is read from V (operand 2),
    and it costs 2.5 forwards: 491,520.  In f32, each FLOP weighs twice against the bf16 peak."""
    fwd = 2 * 2 * 4 * 16 * 8 * (64 + 32)
    assert fwd == 196608
    text = attention("__cudnn$fmhaSoftmax", "bf16[2,4,16,32]{3,2,1,0}", "%q, %k, %v")
    c, a = ins(text, "a")
    assert c.flops(a) == (fwd, 0.0, fwd)
    back = attention("__cudnn$fmhaSoftmaxBackward", "bf16[2,4,16,64]{3,2,1,0}", "%q, %k, %v, %st")
    c, a = ins(back, "a")
    assert c.flops(a) == (2.5 * fwd, 0.0, 2.5 * fwd)
    in_f32 = attention("__cudnn$fmhaSoftmax", "f32[2,4,16,32]{3,2,1,0}", "%q, %k, %v")
    c, a = ins(in_f32, "a")
    assert c.flops(a) == (2 * fwd, 0.0, fwd)
    causal = attention("__cudnn$fmhaSoftmax", "bf16[2,4,16,32]{3,2,1,0}", "%q, %k, %v",
                       '{"cudnn_fmha_backend_config":{"mask_type":"CAUSAL"}}')  # fmt: skip
    c, a = ins(causal, "a")
    assert c.flops(a) == (fwd / 2, 0.0, fwd / 2)


@pytest.mark.parametrize(
    ("result", "operands"),
    [
        ("bf16[2,4,16]{2,1,0}", "%q, %k, %v"),  # a result that is not [B, H, Sq, D]
        ("bf16[2,4,16,32]{3,2,1,0}", "%q, %st"),  # K not 4-D
        ("bf16[2,4,16,32]{3,2,1,0}", "%q"),  # no K at all
    ],
)
def test_fused_attention_of_unexpected_shapes_counts_nothing(result, operands):
    text = attention("__cudnn$fmhaSoftmax", result, operands)
    c, a = ins(text, "a")
    assert c.flops(a) == (0.0, 0.0, 0.0)


def test_a_dot_of_one_element_or_with_an_operand_missing_counts_one_multiply_add():
    """Without dimension numbers, a 1 x 1 by 1 x 1 dot has K = sqrt(1 x 1 / 1) = 1: 2 FLOPs, weighted
    twice in f32.  An operand the module does not hold (a dump cut short) leaves K at 1."""
    text = module(
        """ENTRY %e (x: f32[1,1], w: f32[1,1]) -> f32[1,1] {
  %x = f32[1,1]{1,0} parameter(0)
  %w = f32[1,1]{1,0} parameter(1)
  ROOT %d = f32[1,1]{1,0} dot(%x, %w)
}
"""
    )
    c, d = ins(text, "d")
    assert c.flops(d) == (4.0, 0.0, 2.0)
    for missing in ("dot(%x, %gone)", "dot(%gone, %w)"):
        c, d = ins(text.replace("dot(%x, %w)", missing), "d")
        assert c.flops(d) == (4.0, 0.0, 2.0)


def test_a_fusion_whose_root_is_the_update_writes_only_the_update():
    """The dynamic-update-slice as the fusion's root, not through a bitcast: 40 bytes written."""
    fused = """%fused_dus (r0: f32[1000], r1: f32[10], r2: s32[]) -> f32[1000] {
  %r0 = f32[1000]{0} parameter(0)
  %r1 = f32[10]{0} parameter(1)
  %r2 = s32[] parameter(2)
  ROOT %u = f32[1000]{0} dynamic-update-slice(%r0, %r1, %r2)
}
"""
    text = module(
        """ENTRY %e (v: f32[1000], y: f32[10], i: s32[]) -> f32[1000] {
  %v = f32[1000]{0} parameter(0)
  %y = f32[10]{0} parameter(1)
  %i = s32[] parameter(2)
  ROOT %f = f32[1000]{0} fusion(%v, %y, %i), kind=kLoop, calls=%fused_dus
}
""",
        fused,
    )
    c, f = ins(text, "f")
    assert c.hbm_bytes(f) == 0 + 40 + 4 + 40


CONV = """%fused_conv (c0: f32[1,2,1,3], c1: f32[2,4,1,1]) -> f32[1,4,1,3] {
  %c0 = f32[1,2,1,3]{3,2,1,0} parameter(0)
  %c1 = f32[2,4,1,1]{3,2,1,0} parameter(1)
  ROOT %cv = f32[1,4,1,3]{3,2,1,0} convolution(%c0, %c1), dim_labels=bf01_io01->bf01
}
"""
WRAPPED_AR = """%wrapped_ar (wp: f32[1000]) -> f32[1000] {
  %wp = f32[1000]{0} parameter(0)
  ROOT %war = f32[1000]{0} all-reduce(%wp), replica_groups={{0,1},{2,3}}, to_apply=%add
}
"""
KINDS = module(
    """ENTRY %e (x: bf16[64,32], w: bf16[32,16], v: f32[1000], img: f32[1,2,1,3], ker: f32[2,4,1,1]) -> f32[1000] {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  %v = f32[1000]{0} parameter(2)
  %img = f32[1,2,1,3]{3,2,1,0} parameter(3)
  %ker = f32[2,4,1,1]{3,2,1,0} parameter(4)
  %dt = bf16[64,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %cv2 = f32[1,4,1,3]{3,2,1,0} convolution(%img, %ker), dim_labels=bf01_io01->bf01
  %cv3 = f32[1,4,1,3]{3,2,1,0} convolution(%img, %ker)
  %fc = f32[1,4,1,3]{3,2,1,0} fusion(%img, %ker), kind=kOutput, calls=%fused_conv
  %gm = (bf16[64,16]{1,0}, s8[1024]{0}) custom-call(%x, %w), custom_call_target="__cublas$gemm"
  %dn = (bf16[64,16]{1,0}, u8[0]{0}) custom-call(%x, %w), custom_call_target="__cudnn$convForward"
  %ars = f32[1000]{0} all-reduce-start(%v), replica_groups={{0,1,2,3}}, to_apply=%add
  %ard = f32[1000]{0} all-reduce-done(%ars)
  %as = ((f32[1000]{0}), f32[1000]{0}) async-start(%ard), calls=%wrapped_ar
  ROOT %ad = f32[1000]{0} async-done(%as), calls=%wrapped_ar
}
""",
    CONV,
    WRAPPED_AR,
)


def test_each_kind_of_op_gets_its_class_and_its_collectives_factor():
    """Unfused dots, convolutions and cuBLAS/cuDNN calls and a fusion around a convolution are matmuls.
    The asynchronous all-reduce over 4 devices moves 2 x 3/4 of its 4,000 bytes (6,000 ns); the one in
    an async wrapper, over groups of 2 ({0,1} and {2,3}), 2 x 1/2 (4,000 ns)."""
    sched = schedule.build(parse_text(KINDS))
    assert roofline.op_classes(sched) == {
        "dt": "matmul", "cv2": "matmul", "cv3": "matmul", "fc": "matmul", "gm": "matmul", "dn": "matmul",
        "ars": "collective", "as": "collective",
    }  # fmt: skip
    costs = roofline.costs(sched, DEV)
    assert (costs["ars"], costs["as"]) == (6000, 4000)


def test_a_convolution_with_its_features_first_and_no_window():
    """A 1 x 1 convolution over a 1 x 3 image, features first (``bf01_io01->bf01``: the kernel's input
    features are its dimension 0), no window said (stride 1, no padding): every tap is real, 2 input
    features a result, 2 x 12 x 2 = 48 FLOPs.  Without ``dim_labels`` the kernel's elements over its
    first dimension: 8 / 2 = 4 a result, 96 FLOPs."""
    c, by = parsed(KINDS)
    assert c.flops(by["cv2"]) == (96.0, 0.0, 48.0)
    assert c.flops(by["fc"]) == (96.0, 0.0, 48.0)
    assert c.flops(by["cv3"]) == (192.0, 0.0, 96.0)


def test_what_calls_and_async_wrappers_count_and_what_other_ops_count():
    """A ``call`` and an async wrapper count their computation's FLOPs; a custom call that is not
    attention counts none, even with attention's shapes; reduce-window and select-and-scatter one FLOP
    per input element; a fusion of a computation the module lacks (a dump cut short), none."""
    wrapped = """%wrapped_neg (np: f32[1000]) -> f32[1000] {
  %np = f32[1000]{0} parameter(0)
  ROOT %nn = f32[1000]{0} negate(%np)
}
"""
    text = module(
        """ENTRY %e (v: f32[1000], q: bf16[2,16,4,64], k: bf16[2,8,4,64], s: f32[4,4], src: f32[2,2]) -> f32[1000] {
  %v = f32[1000]{0} parameter(0)
  %q = bf16[2,16,4,64]{3,2,1,0} parameter(1)
  %k = bf16[2,8,4,64]{3,2,1,0} parameter(2)
  %s = f32[4,4]{1,0} parameter(3)
  %src = f32[2,2]{1,0} parameter(4)
  %z = f32[] constant(0)
  %cl = f32[1000]{0} call(%v), to_apply=%wrapped_neg
  %as = ((f32[1000]{0}), f32[1000]{0}) async-start(%v), calls=%wrapped_neg
  %ad = f32[1000]{0} async-done(%as), calls=%wrapped_neg
  %other = bf16[2,4,16,64]{3,2,1,0} custom-call(%q, %k), custom_call_target="some_kernel"
  %rw = f32[2,2]{1,0} reduce-window(%s, %z), window={size=2x2 stride=2x2}, to_apply=%add
  %ss = f32[4,4]{1,0} select-and-scatter(%s, %src, %z), window={size=2x2 stride=2x2}, select=%add, scatter=%add
  %gone = f32[1000]{0} fusion(%v), kind=kLoop, calls=%not_in_the_module
  ROOT %o = f32[1000]{0} add(%cl, %ad)
}
""",
        wrapped,
    )
    c, by = parsed(text)
    assert c.flops(by["cl"]) == (0.0, 1000.0, 0.0)
    assert c.flops(by["as"]) == (0.0, 1000.0, 0.0)
    assert c.flops(by["other"]) == (0.0, 0.0, 0.0)
    assert c.flops(by["rw"]) == (0.0, 16.0, 0.0)
    assert c.flops(by["ss"]) == (0.0, 16.0, 0.0)
    assert c.flops(by["gone"]) == (0.0, 0.0, 0.0)


def test_bytes_of_host_results_other_custom_calls_and_missing_operands():
    """A result in host memory is not written to HBM (the 400-byte operand is read); a custom call that is
    not a GEMM writes every array of its tuple (40 + 80 bytes); an operand the module lacks is passed
    over and the next one still counted."""
    text = module(
        """ENTRY %e (d: f32[100]) -> f32[100] {
  %d = f32[100]{0} parameter(0)
  %h = f32[100]{0:S(5)} negate(%d)
  %cc = (f32[10]{0}, f32[20]{0}) custom-call(%d), custom_call_target="some_kernel"
  ROOT %a = f32[100]{0} add(%gone, %d)
}
"""
    )
    c, by = parsed(text)
    assert c.hbm_bytes(by["h"]) == 400
    assert c.hbm_bytes(by["cc"]) == 400 + 40 + 80
    assert c.hbm_bytes(by["a"]) == 400 + 400


def test_a_conditional_whose_branches_launch_nothing_costs_its_own_bytes():
    """Both branches only pass their operand on (a bitcast): no kernel; the conditional is then priced as
    one kernel of its own bytes: the 4-byte index and the 4,000-byte operand read, 4,000 written."""
    branches = """%b1 (p1: f32[1000]) -> f32[1000] {
  %p1 = f32[1000]{0} parameter(0)
  ROOT %c1 = f32[1000]{0} bitcast(%p1)
}

%b2 (p2: f32[1000]) -> f32[1000] {
  %p2 = f32[1000]{0} parameter(0)
  ROOT %c2 = f32[1000]{0} bitcast(%p2)
}
"""
    m = parse_text(conditional(branches, "%b1, %b2"))
    c = next(i for i in m.instructions() if i.name == "c")
    assert roofline.Costs(m, DEV).conditional_ns(c) == 4 + 4000 + 4000 + 4000


@pytest.mark.parametrize("operands", ["%q, %k", "%q, %k, %st"])
def test_fused_attention_backward_without_a_4d_value_keeps_the_results_width(operands):
    """Without V (or with a 3-D operand where V would be), the backward takes Dv from its result, dQ: 64
    here, so 2 B H Sq Sk (64 + 64) x 2.5 = 655,360 FLOPs."""
    text = attention("__cudnn$fmhaSoftmaxBackward", "bf16[2,4,16,64]{3,2,1,0}", operands)
    c, a = ins(text, "a")
    fwd = 2 * 2 * 4 * 16 * 8 * (64 + 64)
    assert c.flops(a) == (2.5 * fwd, 0.0, 2.5 * fwd)
    assert 2.5 * fwd == 655360


def test_a_tuple_root_with_the_update_second_and_a_result_in_host_memory():
    """The update second in the tuple still adds its 40 bytes to the first result's 40; a result the fusion
    writes to host memory (``S(5)``) is no HBM write."""
    fused = """%fused_two (r0: f32[1000], r1: f32[10], r2: s32[]) -> (f32[10], f32[1000], f32[10]) {
  %r0 = f32[1000]{0} parameter(0)
  %r1 = f32[10]{0} parameter(1)
  %r2 = s32[] parameter(2)
  %u = f32[1000]{0} dynamic-update-slice(%r0, %r1, %r2)
  %n = f32[10]{0} negate(%r1)
  %h = f32[10]{0:S(5)} abs(%r1)
  ROOT %t = (f32[10]{0}, f32[1000]{0}, f32[10]{0:S(5)}) tuple(%n, %u, %h)
}
"""
    text = module(
        """ENTRY %e (v: f32[1000], y: f32[10], i: s32[]) -> (f32[10], f32[1000], f32[10]) {
  %v = f32[1000]{0} parameter(0)
  %y = f32[10]{0} parameter(1)
  %i = s32[] parameter(2)
  ROOT %f = (f32[10]{0}, f32[1000]{0}, f32[10]{0:S(5)}) fusion(%v, %y, %i), kind=kLoop, calls=%fused_two
}
""",
        fused,
    )
    c, f = ins(text, "f")
    assert c.hbm_bytes(f) == (0 + 40 + 4) + (40 + 40)
