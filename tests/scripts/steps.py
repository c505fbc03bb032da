"""A tiny CPU-only 'training' script for capture tests: annotated steps, no JAX.

steps.py [--steps N] [--fail-at N] [--sleep S] [--exit-code N] [--forever]
"""

import argparse
import sys
import time

from profiler import annotate

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--warmup", type=int, default=1)
ap.add_argument("--fail-at", type=int, default=None)
ap.add_argument("--sleep", type=float, default=0.01)
ap.add_argument("--forever", action="store_true")
ap.add_argument("--policy", default=None)
args = ap.parse_args()
policy = args.policy or annotate.policy_name("none")
for i in range(args.warmup):
    with annotate.warmup(i):
        time.sleep(args.sleep)
with annotate.capture(policy):
    i = 0
    while args.forever or i < args.steps:
        if args.fail_at == i:
            raise SystemExit(f"steps.py: failing at step {i} as asked")
        with annotate.step(i):
            for layer in range(2):
                with annotate.layer(layer):
                    time.sleep(args.sleep)
        print(f"step {i} done policy={policy}", flush=True)
        if i == 2:
            print("READY", flush=True)
        i += 1
sys.exit(0)
