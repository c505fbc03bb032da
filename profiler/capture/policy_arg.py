"""How the policy reaches the script's command line (``--policy-arg``).

Two forms:

- a flag, ``--policy-arg --policy``: the script gets two words, ``--policy NAME``;
- a template with ``{policy}``, one or more words:
  ``--policy-arg 'remat_policy={policy}'`` (MaxText's positional ``key=value`` overrides) gives
  ``remat_policy=NAME``, ``--policy-arg '--remat={policy}'`` gives ``--remat=NAME``,
  ``--policy-arg '--remat {policy}'`` gives ``--remat NAME``.
"""

from __future__ import annotations

import re
import shlex

from profiler.errors import ProfilerError

PLACEHOLDER = "{policy}"
_OTHER_FIELD = re.compile(r"\{[^{}]*\}")


def check(spec: str) -> None:
    """Raise ValueError when *spec* cannot be used (an empty one, or a template naming another field)."""
    if not spec.strip():
        raise ValueError("empty: give a flag (--policy) or a template with {policy} (remat_policy={policy})")
    other = [f for f in _OTHER_FIELD.findall(spec) if f != PLACEHOLDER]
    if other:
        raise ValueError(f"{spec!r}: unknown field {other[0]} (the only field of a template is {PLACEHOLDER})")
    try:
        shlex.split(spec)
    except ValueError as exc:
        raise ValueError(f"{spec!r}: {exc}") from None


def require(spec: str | None) -> None:
    """:func:`check` for a request: nothing to check without a spec; a bad one is the user's one-line error."""
    if spec is None:
        return
    try:
        check(spec)
    except ValueError as exc:
        raise ProfilerError(f"--policy-arg: {exc}") from None


def words(spec: str | None, policy: str) -> list[str]:
    """The words that carry *policy* to the script: ``[]`` without a spec."""
    if not spec:
        return []
    check(spec)
    if PLACEHOLDER in spec:
        return [w.replace(PLACEHOLDER, policy) for w in shlex.split(spec)]
    return [spec, policy]
