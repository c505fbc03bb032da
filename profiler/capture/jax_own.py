"""Whether a jitted function is JAX's own: read by the start-up hook and the step catcher alike."""

from __future__ import annotations

from typing import Any


def jax_internal(fun: Any) -> bool:
    """Whether *fun* is one of JAX's own jitted functions (or an operation run eagerly)."""
    if getattr(fun, "_apply_primitive", False):
        return True
    module = getattr(fun, "__module__", None) or ""
    return module == "jax" or module.startswith(("jax.", "jaxlib."))
