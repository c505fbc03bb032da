"""How tune counts a step's ``jax.checkpoint`` regions (``policy_swap.checkpoint_uses``): once per
region the step runs, a scanned layer once per scan iteration, as the names it tags are counted;
not once per bind of the checkpoint primitive, which JAX calls several times while it traces and
differentiates one checkpoint (a scan of 4 layers bound it 5 times, a loop of 4 layers 8 times).

The first tests trace real steps with this project's JAX; the last ones run
``tests/scripts/maxtext_pattern.py`` (MaxText's patterns: ``key=value`` overrides, scanned layers,
``train_step`` compiled twice) under tune's server, with the real GPU compiler (.venv-aot).
"""

from __future__ import annotations

import json
from pathlib import Path

from profiler.xla import policy_swap
from tests.helpers.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
PATTERN = ROOT / "tests" / "scripts" / "maxtext_pattern.py"
LAYERS = 4


def traced(scan: bool, nested: bool = False, grad: bool = True):
    """The jaxpr of a step over LAYERS checkpointed layers (under a scan or a Python loop), traced
    with tune's policy substitution installed; ``nested``: the whole decoder in one more checkpoint."""
    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    def layer(x, w):
        return x + checkpoint_name(jnp.tanh(x @ w), "h")

    def decoder(ws, x):
        body = jax.checkpoint(layer)
        if scan:
            return jax.lax.scan(lambda c, w: (body(c, w), None), x, ws)[0]
        for i in range(LAYERS):
            x = body(x, ws[i])
        return x

    def loss(ws, x):
        return jnp.mean((jax.checkpoint(decoder) if nested else decoder)(ws, x) ** 2)

    policy_swap.use({"jax": "nothing_saveable"})
    step = jax.jit(jax.value_and_grad(loss) if grad else loss)
    return policy_swap.open_jaxpr(step.trace(jnp.ones((LAYERS, 8, 8)), jnp.ones((2, 8))).jaxpr)


def test_a_scanned_layer_counts_once_per_iteration_in_one_site():
    uses = policy_swap.checkpoint_uses(traced(scan=True))
    assert uses == {"sites": 1, "per_step": LAYERS}
    assert policy_swap.found()["binds"] > LAYERS  # what was counted before: inflated
    assert policy_swap.named_values(traced(scan=True))["h"]["count"] == LAYERS  # the names agree


def test_a_loop_of_layers_counts_each_layer_once():
    assert policy_swap.checkpoint_uses(traced(scan=False)) == {"sites": LAYERS, "per_step": LAYERS}
    assert policy_swap.found()["binds"] == 2 * LAYERS


def test_a_checkpoint_around_scanned_checkpoints_is_one_region_more():
    """The backward pass recomputes the outer region once, then each layer's region: 1 + LAYERS, in 2 sites."""
    assert policy_swap.checkpoint_uses(traced(scan=True, nested=True)) == {"sites": 2, "per_step": 1 + LAYERS}


def test_a_step_without_gradient_counts_its_forward_regions():
    assert policy_swap.checkpoint_uses(traced(scan=False, grad=False)) == {"sites": LAYERS, "per_step": LAYERS}


def test_maxtext_patterns_under_tune_server(aot_python, tmp_path):
    """The MaxText-pattern script's step, scanned and not: 4 regions a step, in 1 site or 4; each name 4
    times; the compile's answer counts the compiled step's regions the same way."""
    from profiler.capture.plan import find_python
    from profiler.capture.tune_session import CompileSession, script_command
    from profiler.xla import targets

    _, spec, _ = targets.resolve("h100")
    (tmp_path / "target.txtpb").write_text(spec)
    for scan, sites in (("true", 1), ("false", LAYERS)):
        folder = tmp_path / f"scan-{scan}"
        folder.mkdir()
        args = [f"scan_layers={scan}", f"layers={LAYERS}", "steps=2"]
        cmd = script_command(find_python(aot_python), PATTERN, args, None, None, None, "")
        with CompileSession(cmd, tmp_path / "target.txtpb", folder) as session:
            assert session.start()["step"] == "train_step"
            found = session.request({"op": "names"})
            assert (found["checkpoints"], found["checkpoint_sites"]) == (LAYERS, sites), found
            assert {n: v["count"] for n, v in found["names"].items()} == dict.fromkeys(
                ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj", "mlpwi", "mlpwo"), LAYERS
            )
            assert found["inputs"] == ["decoder_layer_input"]
            if scan == "true":
                answer = session.request({"op": "compile", "policy": {"saved": ["out_proj"]}, "out": str(folder / "c")})
                assert answer["ok"] and answer["checkpoints"] == LAYERS, answer


def test_tune_says_the_regions_of_a_scanned_step(aot_python, tmp_path):
    """End to end: tune on the MaxText-pattern script says 4 regions in 1 jax.checkpoint, writes it in
    its JSON, and gives the choice as MaxText's overrides."""
    proc = run_cli("tune", "--no-presets", "--no-cache", "--max-compiles", "2", "--jobs", "1", "--batch-arg", "",
                   "--json", "--out", str(tmp_path / "t"), "--python", aot_python, str(PATTERN),
                   f"layers={LAYERS}", "steps=2", timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert (doc["checkpoints"], doc["checkpoint_sites"]) == (LAYERS, 1)
    assert f"{LAYERS} jax.checkpoint region(s) per step (1 jax.checkpoint in the program" in proc.stderr
    assert doc["step"]["name"] == "train_step"
    assert doc["choice"]["maxtext_form"].startswith("remat_policy=custom decoder_layer_input=")
