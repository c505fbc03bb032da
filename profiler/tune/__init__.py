"""``profile-step tune``: which named activations to keep on the device, recompute or offload.

- ``candidate``: one placement of the named activations (or a preset policy), and the
  policy document the script's process compiles it with;
- ``forms``: a candidate as the JAX policy and as MaxText's overrides, and MaxText's presets;
- ``search``: which candidates to compile, pruned, and why the search stopped;
- ``evaluate``: a compiled candidate's predicted step, exposed copy time and memory;
- ``explain``: one line per activation of the choice;
- ``compiler``: the evaluator the search calls: compiles in the script's process, cached, predicted;
- ``document``: the tune document (``tune.json``, ``--json``) and its ``plan.json`` form;
- ``request``: the command line; ``run``: the whole command; ``verify``: ``--verify``.
"""
