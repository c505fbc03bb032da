"""The host link's copy rate each way on this machine's first device (issue 42's TPU recording):
a 1 GiB bfloat16 array moved to ``pinned_host`` and back with ``jax.device_put``, six times each
(the first is dropped), as the offload policies move activations.  Prints one line per direction:
the median rate in GB/s (1e9 bytes per second)."""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp


def timed_put(x: jax.Array, to: jax.sharding.Sharding, times: int = 6) -> tuple[jax.Array, list[float]]:
    """*x* put on *to* *times* times: the last copy and each put's seconds."""
    secs, moved = [], x
    for _ in range(times):
        t0 = time.perf_counter()
        moved = jax.block_until_ready(jax.device_put(x, to))
        secs.append(time.perf_counter() - t0)
    return moved, secs


def main() -> None:
    dev = jax.devices()[0]
    on_device = jax.sharding.SingleDeviceSharding(dev, memory_kind="device")
    on_host = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")
    x = jax.block_until_ready(jax.device_put(jnp.ones((512, 1024, 1024), jnp.bfloat16), on_device))
    nbytes = x.size * x.dtype.itemsize
    host, d2h = timed_put(x, on_host)
    _, h2d = timed_put(host, on_device)
    for label, secs in (("d2h", d2h), ("h2d", h2d)):
        rate = nbytes / statistics.median(secs[1:]) / 1e9
        print(f"link {label}: {rate:.2f} GB/s ({nbytes} bytes, median of {len(secs) - 1})", flush=True)


if __name__ == "__main__":
    main()
