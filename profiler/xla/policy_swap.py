"""In the script's process: give the script's ``jax.checkpoint`` calls another policy, and find
the activations they name.

``profile-step tune`` compiles one step under many policies without editing the
script.  Every ``jax.checkpoint`` / ``jax.remat`` (Flax's ``nn.remat`` and
MaxText's layers too) becomes one ``remat`` primitive bound with the policy the
script gave; :func:`install` wraps that bind so that the script's own
checkpoints (``differentiated=False``) get :func:`active`'s policy instead.  The
policy is read when the step is traced and differentiated, so each candidate
clears JAX's caches and traces the step again (:func:`use`).  What is substituted:
the policy, nothing else; a step without any ``jax.checkpoint`` has nothing to
substitute (``checkpoint_uses(jaxpr)['sites'] == 0``).

A policy is given as a small document (JSON from profile-step):

- ``{"saved": [...], "offloaded": [...]}``: ``save_and_offload_only_these_names`` (the names
  not listed are recomputed; MaxText's ``remat_policy=custom``);
- ``{"jax": NAME}``: one of ``jax.checkpoint_policies`` (``nothing_saveable``,
  ``everything_saveable``, ``dots_saveable``, ``dots_with_no_batch_dims_saveable``,
  ``offload_dot_with_no_batch_dims`` to pinned host);
- ``{"script": true}``: the script's own policy, untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

JAX_POLICIES = (
    "nothing_saveable",
    "everything_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "offload_dot_with_no_batch_dims",
)

_state: dict[str, Any] = {"policy": None, "script": True, "checkpoints": 0, "inputs": set(), "inside": set()}


def build(doc: dict[str, Any]) -> Any:
    """The JAX policy a document describes (see the module docstring); ValueError for a bad one."""
    import jax

    cp = jax.checkpoint_policies
    if doc.get("script"):
        return None
    if "jax" in doc:
        name = doc["jax"]
        if name not in JAX_POLICIES:
            raise ValueError(f"unknown JAX policy {name!r}")
        if name == "offload_dot_with_no_batch_dims":
            return cp.offload_dot_with_no_batch_dims(offload_src="device", offload_dst="pinned_host")
        return getattr(cp, name)
    saved, offloaded = list(doc.get("saved") or []), list(doc.get("offloaded") or [])
    return cp.save_and_offload_only_these_names(
        names_which_can_be_saved=saved,
        names_which_can_be_offloaded=offloaded,
        offload_src="device",
        offload_dst="pinned_host",
    )


def _dispatch(prim: Any, *args: Any, **params: Any) -> Any:
    """The policy every substituted checkpoint carries: the one :func:`use` chose."""
    return _state["policy"](prim, *args, **params)


# operations that leave a value what it was (a checkpoint input through them is still an input)
_SAME_VALUE = {"sharding_constraint", "convert_element_type", "copy", "copy_p", "reshape", "squeeze",
               "mesh_cast", "reshard", "pvary", "optimization_barrier"}  # fmt: skip


def _record(jaxpr: Any) -> None:
    """The names one of the script's checkpoints tags, and those tagged on its inputs (directly or
    through operations that keep the value: MaxText constrains the layer input's sharding first)."""
    try:
        invars = set(jaxpr.invars)
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in _SAME_VALUE and eqn.invars and eqn.invars[0] in invars:
                invars.update(eqn.outvars)
            if eqn.primitive.name == "name":
                _state["inside"].add(eqn.params["name"])
                if eqn.invars and eqn.invars[0] in invars:
                    _state["inputs"].add(eqn.params["name"])
    except Exception:  # a record is best effort; the substitution must go on
        pass


def install() -> None:
    """Wrap the remat primitive's bind once (idempotent)."""
    from jax._src import ad_checkpoint as adc

    prim = adc.remat_p
    if getattr(prim.bind, "_profile_step_swap", False):
        return
    original = prim.bind

    def bind(*args: Any, **params: Any) -> Any:
        if not params.get("differentiated", True):
            _state["checkpoints"] += 1
            _record(params.get("jaxpr"))
            if not _state["script"]:
                params["policy"] = _dispatch
        return original(*args, **params)

    bind._profile_step_swap = True  # type: ignore[attr-defined]
    prim.bind = bind


def use(doc: dict[str, Any]) -> None:
    """Make *doc* the policy of the next trace (and clear JAX's caches so that there is one)."""
    import jax

    install()
    _state["script"] = bool(doc.get("script"))
    _state["policy"] = build(doc)
    _state["checkpoints"] = 0
    jax.clear_caches()


def found() -> dict[str, Any]:
    """What the last trace saw: how many times the checkpoint primitive was bound (not a count of
    checkpoints: JAX binds one several times while it traces and differentiates it, see
    :func:`checkpoint_uses`), the names inside them, those on their inputs."""
    return {
        "binds": _state["checkpoints"],
        "inside": sorted(_state["inside"]),
        "inputs": sorted(_state["inputs"]),
    }


def _is_checkpoint(prim: str) -> bool:
    return prim.startswith("remat") or prim == "checkpoint"  # jax.checkpoint's primitive, by JAX version


def checkpoint_uses(jaxpr: Any) -> dict[str, int]:
    """How a traced step uses its ``jax.checkpoint`` calls: ``sites``, the checkpoint equations in
    the program (a layer scanned under ``lax.scan`` is one; a Python loop of L layers is L), and
    ``per_step``, the checkpointed regions one step runs (scan lengths multiplied: a scanned layer
    once per iteration, as the compiled program runs it and as :func:`named_values` counts the names
    it tags).  After differentiation a checkpoint is one equation, its backward pass's
    recomputation (the forward is inlined): counted once, nothing inside it again; a checkpoint
    around scanned ones is one region more (the backward pass recomputes both levels)."""
    uses = {"sites": 0, "per_step": 0}
    for eqn, mult in _equations(jaxpr):
        if _is_checkpoint(eqn.primitive.name):
            uses["sites"] += 1
            uses["per_step"] += mult
    return uses


def _equations(jaxpr: Any, mult: int = 1) -> Iterator[tuple[Any, int]]:
    """Each equation of a traced step, with how many times one step runs it (scan lengths
    multiplied); a differentiated checkpoint is yielded but not entered (its inside is the
    backward pass's recomputation)."""
    for eqn in jaxpr.eqns:
        yield eqn, mult
        prim = eqn.primitive.name
        if _is_checkpoint(prim) and eqn.params.get("differentiated"):
            continue
        inner = mult * int(eqn.params.get("length", 1)) if prim == "scan" else mult
        for value in eqn.params.values():
            for sub in _subjaxprs(value):
                yield from _equations(sub, inner)


def open_jaxpr(v: Any) -> Any:
    """The jaxpr with equations inside *v* (a jaxpr, or a closed one: JAX 0.12 merged the two), or None."""
    if hasattr(v, "eqns"):
        return v
    inner = getattr(v, "jaxpr", None)
    return inner if hasattr(inner, "eqns") else None


def _subjaxprs(value: Any) -> list[Any]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [j for j in (open_jaxpr(v) for v in values if not isinstance(v, (str, int, float))) if j is not None]


def named_values(jaxpr: Any) -> dict[str, dict[str, Any]]:
    """Per ``checkpoint_name`` in a traced step: its shape and dtype, how many values it tags per
    step (scan lengths multiplied) and their bytes.  The backward pass's recomputations (inside a
    differentiated checkpoint) are not counted: each value once, where the forward pass makes it."""
    out: dict[str, dict[str, Any]] = {}
    for eqn, mult in _equations(jaxpr):
        if eqn.primitive.name != "name":
            continue
        aval = eqn.invars[0].aval
        nbytes = int(getattr(aval, "size", 0)) * int(getattr(getattr(aval, "dtype", None), "itemsize", 0))
        row = out.setdefault(
            eqn.params["name"],
            {"shape": list(aval.shape), "dtype": str(aval.dtype), "count": 0, "bytes_per_step": 0},
        )
        row["count"] += mult
        row["bytes_per_step"] += mult * nbytes
    return out
