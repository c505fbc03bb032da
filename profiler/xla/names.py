"""XLA's NVTX range names, as XLA writes them, and what their op_name paths say.

XLA:GPU writes its ranges in the NVTX domain ``TSL`` (the same text in any
other domain is a user's range):

- per execution of an executable: ``XlaModule:#hlo_module=NAME,program_id=N#``,
  with any other ``key=value`` fields (``prefix=args[0],...``); autotuning
  runs small modules with no ``program_id`` (``XlaModule:#hlo_module=extracted#``);
- per thunk: ``Thunk:#name=<op_name path>,hlo_op=<instruction>#``, where the
  ``name=`` field may be empty or absent (``Thunk:#hlo_op=wrapped_slice.522#``)
  and newer versions add ``,unique_hlo_op_id=N``; instruction names keep the
  suffixes XLA's passes give them (``gemm_fusion_dot.588.0``,
  ``loop_convert_fusion.9.peeled_double_buffer``);
- on the host while compiling: ``XlaCompile:#module=NAME,program_id=N#``
  (``program_id`` may be missing), ``XlaPass:#name=...,module=...#``,
  ``XlaPassPipeline:#...#``, ``XlaAutotunerMeasurement:#hlo_op=...#``,
  ``XlaAutotunerCompilation``, ``XlaDumpHloModule:#...#`` and more.

``malformed`` is kept for what really is: a name cut short (at any byte), an
unbalanced ``#``, an empty instruction, a ``program_id`` that is not a
number, or an op path longer than ``MAX_OP_PATH`` bytes.  All parsing is polars
string expressions over the whole column.
"""

from __future__ import annotations

import polars as pl

from profiler.conventions import DOMAIN, XLA_DOMAIN

MAX_OP_PATH = 65_536  # bytes; real op_name paths are a few hundred

MODULE_BODY_RE = r"^XlaModule:#([^#]*)#$"
# name=... is greedy up to the last ",hlo_op=": an op_name path may itself hold commas.
THUNK_RE = r"^Thunk:#(?:name=(.*),)?hlo_op=([^,#]+)((?:,[A-Za-z_]+=[^,#]*)*)#$"
# host-side compile work: any Xla<Word> but XlaModule, bare or with #key=value,...#
COMPILE_RE = r"^Xla[A-Za-z]+(?::#([^#]*)#)?$"
COMPILE_HEAD_RE = r"^Xla[A-Za-z]+:"
# suffixes XLA's passes add to an instruction's name (.peeled_double_buffer, .clone, ...)
PASS_SUFFIX_RE = r"(?:\.[A-Za-z_][A-Za-z_0-9]*)+$"


def _field(body: pl.Expr, key: str) -> pl.Expr:
    """The value of ``key=`` in a comma-separated ``key=value`` list (NULL when absent)."""
    return body.str.extract(f"(?:^|,){key}=([^,]*)", 1)


# --- layers by convention ------------------------------------------------------------------
# A path component (between "/" or parentheses) that names one numbered layer:
# layer_3, layers_3, x_layers_3 (praxis), layer3, block_3, blocks-3, decoder_3, h_3 (GPT-style),
# and layers/3, blocks/3, h/3 (an index as its own component).
NUMBERED_LAYER_RE = r"(?:^|[/(])((?:x_)?(?:layers?|blocks?|decoder)[_-]?\d+|h_\d+|(?:layers?|blocks?|h)/\d+)(?:[/)]|$)"
# A scan over layers (lax.scan, flax nn.scan, MaxText's scanned decoder): the same thunks repeat
# once per layer.  Looked for only where no numbered layer is; whichever component matched, the
# scanned thunks of a trace are one family numbered by the loop's iterations (breakdown.scan_layers).
SCANNED_LAYER_RE = r"(?:^|[/(])(decoder/layers|layers|layer|blocks|block|decoder|while/body)(?:[/)]|$)"
DEFAULT_LAYER_PATTERN: str | None = None  # None: the two conventions above

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


def layer_of(path: pl.Expr, layer_pattern: str | None = None) -> pl.Expr:
    """The layer an op_name path names: the first group of *layer_pattern*, or by convention."""
    if layer_pattern:
        return path.str.extract(layer_pattern, 1)
    return pl.coalesce(path.str.extract(NUMBERED_LAYER_RE, 1), path.str.extract(SCANNED_LAYER_RE, 1))


def parse_xla(
    frame: pl.DataFrame, text: str = "name", domain: str | None = "domain", layer_pattern: str | None = None
) -> pl.DataFrame:
    """*frame* with columns parsed from its NVTX messages (column *text*): xla_kind
    (module/thunk/compile/malformed, NULL for a user range), hlo_module, program_id, op_path,
    hlo_op, hlo_op_id, hlo_base (the instruction less pass suffixes), layer, activation, backward.

    *domain*: the column holding each range's NVTX domain; only ``TSL`` ranges are XLA's, and
    the ``XlaModule`` and ``XlaCompile`` ranges profile-step's start-up hook writes in its own
    domain (one per execution and per compilation, where XLA writes none: XLA:CPU) where the
    frame holds no ``XlaModule`` range of XLA's own.
    ``None`` reads every name as if it were XLA's.  Parsed in stages (each regex runs once).
    """
    t = pl.col(text).fill_null("")
    in_xla = pl.lit(True) if domain is None else (pl.col(domain) == XLA_DOMAIN).fill_null(False)
    if domain is not None:
        is_module = t.str.starts_with("XlaModule:#")
        hook_named = is_module | t.str.starts_with("XlaCompile:#")
        hook = (pl.col(domain) == DOMAIN).fill_null(False) & hook_named
        in_xla = in_xla | (hook & ~(in_xla & is_module).any())
    staged = frame.with_columns(
        in_xla.alias("_in"),
        t.str.extract(MODULE_BODY_RE, 1).alias("_mbody"),
        t.str.extract(THUNK_RE, 1).alias("_tpath"),
        t.str.extract(THUNK_RE, 2).alias("_top"),
        t.str.extract(THUNK_RE, 3).alias("_ttail"),
        (t.str.contains(COMPILE_RE) & ~t.str.starts_with("XlaModule")).alias("_is_c"),
        t.str.extract(COMPILE_RE, 1).alias("_cbody"),
        # a name XLA's would have begun: "Thunk:#...", "XlaModule:#...", "XlaCompile:...", or cut before that
        (
            t.str.starts_with("Thunk:")
            | t.str.starts_with("XlaModule:")
            | t.str.contains(COMPILE_HEAD_RE)
            | ((t != "") & (pl.lit("Thunk:#").str.starts_with(t) | pl.lit("XlaModule:#").str.starts_with(t)))
        ).alias("_looks"),
    ).with_columns(
        _field(pl.col("_mbody"), "hlo_module").alias("_mname"),
        _field(pl.col("_cbody"), "module").alias("_cname"),
        pl.when(pl.col("_mbody").is_not_null())
        .then(_field(pl.col("_mbody"), "program_id"))
        .otherwise(_field(pl.col("_cbody"), "program_id"))
        .alias("_pid"),
    )
    module_ok = pl.col("_mname").str.len_bytes().fill_null(0) > 0
    program_ok = pl.col("_pid").is_null() | pl.col("_pid").str.contains(r"^\d{1,18}$")
    thunk_ok = pl.col("_top").is_not_null() & (pl.col("_tpath").str.len_bytes().fill_null(0) <= MAX_OP_PATH)
    kind = (
        pl.when(~pl.col("_in"))
        .then(None)
        .when(thunk_ok)
        .then(pl.lit("thunk"))
        .when(module_ok & program_ok)
        .then(pl.lit("module"))
        .when(pl.col("_is_c") & program_ok)
        .then(pl.lit("compile"))
        .when(pl.col("_looks"))
        .then(pl.lit("malformed"))
        .otherwise(None)
    )
    staged = staged.with_columns(kind.alias("xla_kind"))
    is_thunk, kind_col = pl.col("xla_kind") == "thunk", pl.col("xla_kind")
    staged = staged.with_columns(
        pl.when(kind_col == "module")
        .then(pl.col("_mname"))
        .when(kind_col == "compile")
        .then(pl.col("_cname"))
        .alias("hlo_module"),
        pl.when(kind_col.is_in(["module", "compile"]))
        .then(pl.col("_pid"))
        .cast(pl.Int64, strict=False)
        .alias("program_id"),
        pl.when(is_thunk & (pl.col("_tpath") != "")).then(pl.col("_tpath")).alias("op_path"),
        pl.when(is_thunk).then(pl.col("_top")).alias("hlo_op"),
        pl.when(is_thunk)
        .then(_field(pl.col("_ttail").str.strip_prefix(","), "unique_hlo_op_id"))
        .cast(pl.Int64, strict=False)
        .alias("hlo_op_id"),
    )
    path = pl.col("op_path")
    activation = pl.coalesce(
        [pl.when(path.str.contains(f"(?:^|[/(]){n}(?:[/)\\]]|$)")).then(pl.lit(n)) for n in ACTIVATION_NAMES]
    )
    return staged.with_columns(
        pl.col("hlo_op").str.replace(PASS_SUFFIX_RE, "").alias("hlo_base"),
        layer_of(path, layer_pattern).alias("layer"),
        activation.alias("activation"),
        path.str.contains("transpose(", literal=True).fill_null(False).alias("backward"),
    ).drop("_in", "_mbody", "_tpath", "_top", "_ttail", "_is_c", "_cbody", "_looks", "_mname", "_cname", "_pid")
