"""XLA's NVTX range names: modules, thunks, and what their op_name paths say.

XLA:GPU names a range per executable, ``XlaModule:#hlo_module=NAME,program_id=N#``,
and one per thunk, ``Thunk:#name=<op_name path>,hlo_op=<instruction>#`` (newer
versions add ``,unique_hlo_op_id=N`` before the closing ``#``).  All parsing is
polars string expressions over the whole column.
"""

from __future__ import annotations

import polars as pl

MODULE_RE = r"^XlaModule:#(?:.*,)?hlo_module=([^,#]*)(?:,.*)?#$"
PROGRAM_RE = r"^XlaModule:#(?:.*,)?program_id=(\d+)(?:,.*)?#$"
# name=... is greedy up to the last ",hlo_op=": an op_name path may itself hold commas.
THUNK_RE = r"^Thunk:#name=(.*),hlo_op=([^,#]*)(?:,unique_hlo_op_id=(\d+))?#$"

# jax.named_scope components that name a layer; the first capture group is the layer.
DEFAULT_LAYER_PATTERN = r"(?:^|[/(])((?:layer|decoder|block|blocks|layers)(?:[_-]?\d+)?)(?:[/)]|$)"
# MaxText's activation names (checkpoint_name), looked for in op_name paths.
ACTIVATION_NAMES = (
    "decoder_layer_input",
    "query_proj",
    "key_proj",
    "value_proj",
    "out_proj",
    "context",
    "mlpwi_0",
    "mlpwi_1",
    "mlpwi",
    "mlpwo",
)


def parse_xla(text: pl.Expr, layer_pattern: str = DEFAULT_LAYER_PATTERN) -> list[pl.Expr]:
    """Columns parsed from NVTX messages: xla_kind (module/thunk/malformed/None), hlo_module,
    program_id, op_path, hlo_op, hlo_op_id, layer, activation, backward."""
    thunk_path = text.str.extract(THUNK_RE, 1)
    is_module = text.str.starts_with("XlaModule:#")
    is_thunk = text.str.starts_with("Thunk:#")
    module = text.str.extract(MODULE_RE, 1)
    kind = (
        pl.when(is_thunk & thunk_path.is_not_null())
        .then(pl.lit("thunk"))
        .when(is_module & module.is_not_null())
        .then(pl.lit("module"))
        .when(is_thunk | is_module)
        .then(pl.lit("malformed"))
        .otherwise(None)
    )
    activation = pl.coalesce(
        [
            pl.when(thunk_path.str.contains(f"(?:^|[/(]){n}(?:[/)\\]]|$)", literal=False)).then(pl.lit(n))
            for n in ACTIVATION_NAMES
        ]
    )
    return [
        kind.alias("xla_kind"),
        module.alias("hlo_module"),
        text.str.extract(PROGRAM_RE, 1).cast(pl.Int64, strict=False).alias("program_id"),
        thunk_path.alias("op_path"),
        text.str.extract(THUNK_RE, 2).alias("hlo_op"),
        text.str.extract(THUNK_RE, 3).cast(pl.Int64, strict=False).alias("hlo_op_id"),
        thunk_path.str.extract(layer_pattern, 1).alias("layer"),
        activation.alias("activation"),
        thunk_path.str.contains("transpose(", literal=True).alias("backward"),
    ]
