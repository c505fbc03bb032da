"""XLA's range names as XLA writes them (forms seen in real Pax and MaxText traces), layers by
convention, and bad names: malformed, never a crash."""

from __future__ import annotations

import polars as pl
import pytest

from profiler.xla.names import MAX_OP_PATH, parse_xla

PAX_PATH = "pjit(_wrapped_step_fn)/jit(main)/jvp(xformer_lm.apply)/xformer_lm/lm/transformer"


def parsed(*names: str | None, domain: str | None = None) -> list[dict]:
    frame = pl.DataFrame(
        {"name": list(names), "domain": [domain] * len(names)}, schema={"name": pl.String, "domain": pl.String}
    )
    return parse_xla(frame, "name", "domain" if domain is not None else None).to_dicts()


def one(name: str) -> dict:
    return parsed(name)[0]


STEP_COMPILE = ("compile", "pjit__wrapped_step_fn", 40, None, None, None)  # the step's module, program 40


@pytest.mark.parametrize(
    ("name", "kind", "module", "program", "path", "hlo", "base"),
    [
        ("XlaModule:#hlo_module=jit_step,program_id=12#", "module", "jit_step", 12, None, None, None),
        (
            "XlaModule:#prefix=jit(train_step)/jit(main),hlo_module=jit_train_step,program_id=16#",
            "module",
            "jit_train_step",
            16,
            None,
            None,
            None,
        ),
        (
            "XlaModule:#prefix=args[0],hlo_module=jit_reshape,program_id=9#",
            "module",
            "jit_reshape",
            9,
            None,
            None,
            None,
        ),
        ("XlaModule:#hlo_module=extracted#", "module", "extracted", None, None, None, None),  # autotuner's trial
        ("Thunk:#hlo_op=wrapped_slice.522#", "thunk", None, None, None, "wrapped_slice.522", "wrapped_slice.522"),
        (
            "Thunk:#name=,hlo_op=input_add_reduce_fusion.9#",
            "thunk",
            None,
            None,
            None,
            "input_add_reduce_fusion.9",
            None,
        ),
        ("Thunk:#name=a/b,hlo_op=gemm_fusion_dot.588.0#", "thunk", None, None, "a/b", "gemm_fusion_dot.588.0", None),
        (
            "Thunk:#name=a/b,hlo_op=loop_convert_fusion.9.peeled_double_buffer#",
            "thunk",
            None,
            None,
            "a/b",
            "loop_convert_fusion.9.peeled_double_buffer",
            "loop_convert_fusion.9",
        ),
        (
            "Thunk:#name=jit(_psum)/jit(main)/reduce_sum[axes=(0,)],hlo_op=all-reduce-start#",
            "thunk",
            None,
            None,
            "jit(_psum)/jit(main)/reduce_sum[axes=(0,)]",
            "all-reduce-start",
            "all-reduce-start",
        ),
        (
            "XlaCompile:#module=pjit__wrapped_step_fn,program_id=40#",
            *STEP_COMPILE,
        ),
        ("XlaCompile:#module=jit_convert_element_type#", "compile", "jit_convert_element_type", None, None, None, None),
        (
            "XlaPass:#name=triton-autotuner,module=pjit__wrapped_step_fn,program_id=40#",
            *STEP_COMPILE,
        ),
        ("XlaPassPipeline:#name=post-layout_assignment,module=m,program_id=40#", "compile", "m", 40, None, None, None),
        ("XlaAutotunerMeasurement:#hlo_op=gemm_fusion_dot.572#", "compile", None, None, None, None, None),
        ("XlaAutotunerCompilation", "compile", None, None, None, None, None),
        ("ncclAllGather", None, None, None, None, None, None),
        ("step=3", None, None, None, None, None, None),
    ],
)
def test_real_forms(name, kind, module, program, path, hlo, base):
    row = one(name)
    assert (row["xla_kind"], row["hlo_module"], row["program_id"], row["op_path"], row["hlo_op"]) == (
        kind,
        module,
        program,
        path,
        hlo,
    )
    if base is not None:
        assert row["hlo_base"] == base


def test_only_xlas_own_domain_is_xla():
    name = "Thunk:#name=jit(f)/layer_1/x,hlo_op=fusion.1#"
    assert parsed(name, domain="TSL")[0]["xla_kind"] == "thunk"
    for other in ("profile-step", "NCCL", ""):
        row = parsed(name, domain=other)[0]
        assert row["xla_kind"] is None and row["layer"] is None, other  # a user's range of that name
    frame = pl.DataFrame({"name": [name], "domain": [None]}, schema={"name": pl.String, "domain": pl.String})
    assert parse_xla(frame)["xla_kind"][0] is None  # the default domain is not XLA's


@pytest.mark.parametrize(
    "name",
    [
        "Thunk:#name=jit(step)/jvp(x_layers_3)/dot,hlo_op=fusion.12#",
        "XlaModule:#prefix=args[0],hlo_module=jit_reshape,program_id=9#",
        "XlaCompile:#module=pjit__wrapped_step_fn,program_id=40#",
        "Thunk:#hlo_op=wrapped_slice.522#",
    ],
)
def test_cut_at_any_byte_is_malformed(name):
    cuts = [name[:i] for i in range(1, len(name))]
    rows = parsed(*cuts)
    kinds = {c: r["xla_kind"] for c, r in zip(cuts, rows, strict=True)}
    # every proper prefix lacks the closing '#': malformed, whatever byte it was cut at
    # (a bare "XlaCompile" is a complete compile range name of its own)
    wrong = {
        c: k for c, k in kinds.items() if k != "malformed" and not (k == "compile" and "#" not in c and ":" not in c)
    }
    assert not wrong


@pytest.mark.parametrize(
    "name",
    [
        "Thunk:#name=a,hlo_op=f",  # unbalanced '#'
        "Thunk:name=a,hlo_op=f#",
        "Thunk:#name=a,hlo_op=#",  # no instruction
        "Thunk:#name=a,hlo_op=f#g#",
        "XlaModule:#hlo_module=m,program_id=12",
        "XlaModule:#hlo_module=m#,program_id=12#",
        "XlaModule:#hlo_module=m,program_id=twelve#",  # not a number
        "XlaModule:#hlo_module=m,program_id=-1#",
        "XlaModule:#hlo_module=m,program_id=99999999999999999999999#",  # beyond int64
        "XlaModule:#program_id=1#",  # no module
        "XlaCompile:#module=m,program_id=x#",
        "XlaCompile:#module=m",
        "Thunk:#name=" + "p/" * (MAX_OP_PATH // 2 + 1) + ",hlo_op=f#",  # an op path no XLA writes
    ],
)
def test_malformed(name):
    row = one(name)
    assert row["xla_kind"] == "malformed"
    assert row["hlo_op"] is None and row["layer"] is None and row["program_id"] is None


@pytest.mark.parametrize(
    ("path", "layer"),
    [
        ("jit(step)/jvp(layer_3)/dot_general", "layer_3"),
        ("jit(step)/layers_12/mlp", "layers_12"),
        (f"{PAX_PATH}/x_layers_7/ff_layer/layer_norm/add", "x_layers_7"),  # praxis; not layer_norm
        ("jit(step)/model/layers/3/attn", "layers/3"),
        ("jit(step)/model/block_2/attn", "block_2"),
        ("jit(step)/transformer/h_11/attn/c_attn", "h_11"),  # GPT-style
        ("jit(f)/decoder_2/q", "decoder_2"),
        ("jit(train_step)/jvp(Transformer)/decoder/layers/self_attention/q", "decoder/layers"),  # flax scan
        ("jit(train_step)/jvp(Transformer)/decoder/while/body/mlp", "decoder"),  # MaxText's scanned decoder
        ("jit(step)/while/body/dot_general", "while/body"),
        ("jit(step)/while/body/layers_2/dot", "layers_2"),  # a numbered layer wins over the loop around it
        (f"{PAX_PATH}/softmax/logits", None),
        ("jit(step)/layer_norm/add", None),
        ("jit(step)/h/attn", None),
    ],
)
def test_layers_by_convention(path, layer):
    assert one(f"Thunk:#name={path},hlo_op=fusion.1#")["layer"] == layer


def test_backward_and_pattern_override():
    fwd = one(f"Thunk:#name={PAX_PATH}/x_layers_3/self_attention/q,hlo_op=f.1#")
    bwd = one("Thunk:#name=pjit(f)/jit(main)/transpose(jvp(xformer_lm.apply))/lm/x_layers_3/q,hlo_op=f.2#")
    assert (fwd["layer"], fwd["backward"]) == ("x_layers_3", False)
    assert (bwd["layer"], bwd["backward"]) == ("x_layers_3", True)
    frame = pl.DataFrame({"name": ["Thunk:#name=a/stage_4/layer_1/x,hlo_op=f#"], "domain": ["TSL"]})
    assert parse_xla(frame, layer_pattern=r"(stage_\d+)")["layer"][0] == "stage_4"
    assert parse_xla(frame)["layer"][0] == "layer_1"
