"""How the policy reaches the script's command line (``--policy-arg``, ``--policy-word``).

Three forms:

- a flag, ``--policy-arg --policy``: the script gets two words, ``--policy NAME``;
- a template with ``{policy}``, one or more words:
  ``--policy-arg 'remat_policy={policy}'`` (MaxText's positional ``key=value`` overrides) gives
  ``remat_policy=NAME``, ``--policy-arg '--remat={policy}'`` gives ``--remat=NAME``,
  ``--policy-arg '--remat {policy}'`` gives ``--remat NAME`` (the template is split as a shell
  would split it: quotes group words and are removed);
- one word, exactly as written (``--policy-word``): ``{policy}`` filled in, nothing split, quotes
  kept: ``--policy-word='--config_overlay={"remat_policy":"{policy}"}'`` gives
  ``--config_overlay={"remat_policy":"NAME"}`` (a JSON value).

A value that starts with ``-`` is attached with ``=`` (``--policy-arg='--remat={policy}'``):
given as the next word, argparse reads it as an option; :func:`dangling` says so in one line.
"""

from __future__ import annotations

import itertools
import re
import shlex

from profiler.errors import ProfilerError

PLACEHOLDER = "{policy}"
_OTHER_FIELD = re.compile(r"\{[^{}]*\}")


def check(spec: str, one_word: bool = False) -> None:
    """Raise ValueError when *spec* cannot be used (an empty one, or a template naming another field;
    *one_word*: a word without ``{policy}``)."""
    if one_word:
        if PLACEHOLDER not in spec:
            raise ValueError(f"{spec!r} has no {PLACEHOLDER}: the word is the template the policy is written into")
        return
    if not spec.strip():
        raise ValueError("empty: give a flag (--policy) or a template with {policy} (remat_policy={policy})")
    other = [f for f in _OTHER_FIELD.findall(spec) if f != PLACEHOLDER]
    if other:
        raise ValueError(f"{spec!r}: unknown field {other[0]} (the only field of a template is {PLACEHOLDER})")
    try:
        shlex.split(spec)
    except ValueError as exc:
        raise ValueError(f"{spec!r}: {exc}") from None


def require(spec: str | None, one_word: bool = False) -> None:
    """:func:`check` for a request: nothing to check without a spec; a bad one is the user's one-line error."""
    if spec is None:
        return
    try:
        check(spec, one_word)
    except ValueError as exc:
        raise ProfilerError(f"{'--policy-word' if one_word else '--policy-arg'}: {exc}") from None


def words(spec: str | None, policy: str, one_word: bool = False) -> list[str]:
    """The words that carry *policy* to the script: ``[]`` without a spec."""
    if not spec:
        return []
    check(spec, one_word)
    if one_word:
        return [spec.replace(PLACEHOLDER, policy)]
    if PLACEHOLDER in spec:
        return [w.replace(PLACEHOLDER, policy) for w in shlex.split(spec)]
    return [spec, policy]


FLAGS = ("--policy-arg", "--policy-word")


def dangling(argv: list[str]) -> str | None:
    """The one-line error for ``--policy-arg VALUE`` where VALUE starts with ``-`` (argparse's bare
    "expected one argument"): what to write instead; None when *argv* has no such pair."""
    for flag, value in itertools.pairwise(argv):
        if flag in FLAGS and value.startswith("-"):
            return (
                f"{flag}: {value!r} starts with '-', so it is read as an option of profile-step, not as the "
                f"value of {flag}: attach it with '=': {shlex.quote(f'{flag}={value}')}"
            )
    return None
