"""A candidate written as the user writes it: the JAX policy, MaxText's overrides; MaxText's presets.

MaxText (``src/maxtext/configs/base.yml``, ``layers/decoders.py``,
``utils/maxtext_utils.get_save_and_offload_names``, commit e591f30) turns
``remat_policy`` into a JAX policy: its presets save (``save_only_these_names``) or
offload (``save_and_offload_only_these_names``) fixed lists of names; ``custom`` takes
one override per tensor name (``device``, ``remat``, ``offload``; base.yml's defaults:
``decoder_layer_input=device``, every other name ``remat``).  The tables below are
those lists; a name the step does not have changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from profiler.tune.candidate import Candidate, Name

# remat_policy=custom's tensor names (base.yml), in its order
MAXTEXT_CUSTOM = (
    "decoder_layer_input",
    "context",
    "mlpwi",
    "mlpwi_0",
    "mlpwi_1",
    "mlpwo",
    "moe_mlpwi_0",
    "moe_mlpwi_1",
    "moe_mlpwo",
    "query_proj",
    "key_proj",
    "value_proj",
    "kv_proj",
    "qkv_proj",
    "out_proj",
    "query_wa_proj",
    "kv_wa_proj",
    "mla_q",
    "mla_kv",
    "attention_out",
    "engram",
    "indexer_cutoff_threshold",
)
_QKV = ("query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj")
_MINIMAL = (*_QKV, "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")
# preset -> (saved on the device, offloaded); every other name recomputed.  ``full``: nothing saved.
MAXTEXT_PRESETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "full": ((), ()),
    "minimal": (_MINIMAL, ()),
    "minimal_with_context": ((*_MINIMAL, "context"), ()),
    "save_dot_with_context_except_mlp": ((*_QKV, "context", "out_proj"), ()),
    "save_dot_except_mlpwi": ((*_QKV, "out_proj", "mlpwo"), ()),
    "save_dot_except_mlp": ((*_QKV, "out_proj"), ()),
    "save_qkv_proj": (_QKV, ()),
    "save_out_proj": (("out_proj",), ()),
    "qkv_proj_offloaded": ((), ("query_proj", "value_proj", "key_proj", "kv_proj")),
    "minimal_offloaded": ((), _MINIMAL),
}
# JAX's own policies compiled beside the search (nothing_saveable is the resting candidate;
# everything_saveable keeps what no checkpoint would)
JAX_PRESETS = ("everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable")


def maxtext_presets(names: Iterable[Name]) -> list[Candidate]:
    """MaxText's presets as placements of the step's names; presets the step cannot tell apart
    from an earlier one (the same placements) are left out.  Names tagged on an input stay on the
    device, as MaxText keeps ``decoder_layer_input`` unless told to offload it."""
    names = list(names)
    out: dict[str, Candidate] = {}
    for preset, (saved, offloaded) in MAXTEXT_PRESETS.items():
        place = {}
        for n in names:
            if n.name in offloaded:
                place[n.name] = "offload"
            elif n.name in saved or n.is_input:
                place[n.name] = "device"
            else:
                place[n.name] = "remat"
        cand = Candidate.of(place, preset=f"maxtext:{preset}")
        if cand.key() not in out:
            out[cand.key()] = cand
    return list(out.values())


def jax_presets() -> list[Candidate]:
    return [Candidate.jax(n) for n in JAX_PRESETS]


def jax_form(c: Candidate) -> str:
    """The policy for ``jax.checkpoint(layer, policy=...)``."""
    if c.jax_policy:
        return f"jax.checkpoint_policies.{c.jax_policy}"
    saved, offloaded = sorted(c.where("device")), sorted(c.where("offload"))
    if not offloaded:
        if not saved:
            return "jax.checkpoint_policies.nothing_saveable"
        return f"jax.checkpoint_policies.save_only_these_names({', '.join(repr(n) for n in saved)})"
    return (
        "jax.checkpoint_policies.save_and_offload_only_these_names("
        f"names_which_can_be_saved={saved!r}, names_which_can_be_offloaded={offloaded!r}, "
        'offload_src="device", offload_dst="pinned_host")'
    )


def maxtext_form(c: Candidate) -> tuple[str | None, str | None]:
    """(MaxText's overrides, None) or (None, why there are none)."""
    if c.preset and c.preset.startswith("maxtext:"):
        return f"remat_policy={c.preset.removeprefix('maxtext:')}", None
    if c.jax_policy:
        return None, f"{c.jax_policy} is a JAX policy with no MaxText remat_policy"
    other = [n for n, _ in c.placements if n not in MAXTEXT_CUSTOM]
    if other:
        return None, f"MaxText's remat_policy=custom has no tensor named {', '.join(other)}"
    place = c.place()
    words = [f"{n}={place[n]}" for n in MAXTEXT_CUSTOM if n in place]
    return " ".join(["remat_policy=custom", *words]), None
