"""MaxText's configuration as the MaxText-like scripts here take it (kv_overrides.py, maxtext_pattern.py):
positional ``key=value`` overrides of the script's defaults, and MaxText's ``remat_policy`` names as JAX
checkpoint policies.  Imported from the script's own folder (``python tests/scripts/NAME.py`` puts it first
on sys.path); like the scripts, it knows nothing of profile-step.
"""

import sys
from pathlib import Path

import jax

OFFLOAD = {"offload_src": "device", "offload_dst": "pinned_host"}


def overrides(config: dict[str, str], policies: tuple[str, ...]) -> dict[str, str]:
    """*config* with the command line's ``key=value`` words applied; a word without ``=``, an unknown key
    or a ``remat_policy`` not in *policies* ends the script with a CONFIG ERROR, as MaxText's config does."""
    script = Path(sys.argv[0]).name
    for word in sys.argv[1:]:
        key, sep, value = word.partition("=")
        if not sep:
            sys.exit(f"{script}: CONFIG ERROR: expected key=value, got {word!r}")
        if key not in config:
            sys.exit(f"{script}: CONFIG ERROR: unknown key {key!r}")
        config[key] = value
    if config["remat_policy"] not in policies:
        sys.exit(f"{script}: CONFIG ERROR: {config['remat_policy']!r} not in {policies}")
    return config


def remat_policy(config: dict[str, str], tensors: tuple[str, ...]):
    """The JAX policy of ``config["remat_policy"]``; ``custom``: each of *tensors* saved or offloaded as its
    key says (``device``, ``offload``; else recomputed)."""
    cp = jax.checkpoint_policies
    return {
        "full": cp.nothing_saveable,
        "minimal": cp.dots_with_no_batch_dims_saveable,
        "minimal_offloaded": cp.offload_dot_with_no_batch_dims(**OFFLOAD),
        "qkv_proj_offloaded": cp.save_and_offload_only_these_names(
            names_which_can_be_saved=[],
            names_which_can_be_offloaded=["query_proj", "key_proj", "value_proj"],
            **OFFLOAD,
        ),
        "custom": cp.save_and_offload_only_these_names(
            names_which_can_be_saved=[t for t in tensors if config[t] == "device"],
            names_which_can_be_offloaded=[t for t in tensors if config[t] == "offload"],
            **OFFLOAD,
        ),
    }[config["remat_policy"]]
