"""XLA's cost analysis of a dumped module by the script's own Python when profile-step's jaxlib cannot
parse the text (a newer XLA's syntax: MaxText on jax 0.12 writes ``%wide.arg_tuple.9#1``)."""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.capture.step_module import costs_by_script_python
from profiler.xla.compiled import NO_JAXLIB, UNPARSED, cost_analysis, describe
from profiler.xla.dump import DumpModule

# what jax 0.12's XLA writes and jaxlib 0.10 cannot read: an operand that names a tuple's element
NEWER_SYNTAX = """HloModule jit_step, entry_computation_layout={((f32[4]{0}, f32[4]{0}))->f32[4]{0}}

ENTRY %main (p: (f32[4], f32[4])) -> f32[4] {
  %p = (f32[4]{0}, f32[4]{0}) parameter(0)
  ROOT %copy.1 = f32[4]{0} copy(%p#1)
}
"""


@pytest.fixture(scope="module")
def other_python(tmp_path_factory) -> str:
    """Another interpreter (its own path) with this environment's jax: a script's own Python."""
    other = tmp_path_factory.mktemp("script-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    (lib,) = (other / "lib").glob("python*/site-packages")
    (lib / "this-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return str(other / "bin" / "python")


@pytest.fixture(scope="module")
def step_text(tmp_path_factory) -> Path:
    """A real compiled module's text (a matmul and a tanh, compiled by XLA:CPU here)."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((64, 64), jnp.float32)
    text = jax.jit(lambda a: jnp.tanh(a @ a)).lower(x).compile().as_text()
    path = tmp_path_factory.mktemp("dump") / "module_0001.jit_step.cpu_after_optimizations.txt"
    path.write_text(text)
    return path


def unparsed(entry: dict, why: str = UNPARSED) -> dict:
    """*entry* as ``describe`` leaves it when profile-step's jaxlib cannot parse the module (or,
    with *why* ``NO_JAXLIB``, when profile-step has no jax at all)."""
    return {**entry, "cost": None, "notes": [*entry["notes"], f"{why} (error: line 5)"]}


def test_profile_steps_jaxlib_names_the_line_it_cannot_parse():
    cost, why = cost_analysis(NEWER_SYNTAX)
    if cost is not None:
        pytest.skip("this jaxlib reads the newer syntax")
    assert why.startswith(UNPARSED)
    assert "error:" in why and "Syntax error when trying" not in why  # the specific line, not the heading


@pytest.mark.parametrize("why", [UNPARSED, NO_JAXLIB])
def test_the_scripts_python_supplies_the_cost_it_could_parse(step_text, other_python, why):
    mod = DumpModule(1, "jit_step", {"after": step_text})
    entry = describe(mod)
    assert entry["cost"] and entry["cost"]["flops"] >= 2 * 64**3  # what profile-step's own jaxlib measures
    failed = unparsed(entry, why)
    costs_by_script_python([failed], [mod], other_python)
    assert failed["cost"] == entry["cost"]
    assert failed["cost_source"] == f"XLA's cost analysis run by the script's Python ({other_python})"
    assert not any(n.startswith(why) for n in failed["notes"])


def test_a_module_neither_can_parse_keeps_both_reasons(tmp_path, other_python):
    path = tmp_path / "module_0002.jit_step.cpu_after_optimizations.txt"
    path.write_text(NEWER_SYNTAX.replace("copy(%p#1)", "copy(%p#1"))  # broken for every version
    mod = DumpModule(2, "jit_step", {"after": path})
    entry = unparsed(describe(mod, with_cost=False))
    costs_by_script_python([entry], [mod], other_python)
    assert entry["cost"] is None
    (note,) = [n for n in entry["notes"] if n.startswith(UNPARSED)]
    assert "nor could the script's Python: " in note and "error:" in note.split("nor could")[1]


def test_a_python_that_cannot_run_is_a_note(step_text, tmp_path):
    mod = DumpModule(1, "jit_step", {"after": step_text})
    entry = unparsed(describe(mod, with_cost=False))
    costs_by_script_python([entry], [mod], str(tmp_path / "no-such-python"))
    assert entry["cost"] is None
    assert any("could not run the cost analysis" in n for n in entry["notes"])


def test_profile_steps_own_python_is_not_asked_again(step_text):
    mod = DumpModule(1, "jit_step", {"after": step_text})
    entry = unparsed(describe(mod, with_cost=False))
    costs_by_script_python([entry], [mod], sys.executable)
    assert entry["cost"] is None and entry["notes"][-1] == f"{UNPARSED} (error: line 5)"
