"""Exports shaped like a profiled training run: policy, steps, layers, copies under kernels."""

from __future__ import annotations

from profiler.synthetic.export import ExportBuilder

TID = 100


def training_export(
    policy: str = "offload_qkv",
    steps: int = 4,
    layers: int = 3,
    exposed: dict[int, int] | None = None,
    step_jitter: tuple[int, ...] = (0,),
    copy_bytes: int = 4 << 20,
    waits: bool = False,
    offload: bool = True,
) -> ExportBuilder:
    """Each step: per layer one 100 us d2h copy launched inside ``layer=i``, hidden by a kernel
    except for ``exposed[i]`` ns at its end; the step takes 1 ms (+ jitter).

    With *waits*, a consumer kernel on the compute stream waits for each copy through a CUDA
    event and starts when the copy ends: it is stalled for the exposed part (METRICS.md rule 4:
    ready = the hiding kernel's end, dep = the copy's end).  Without *offload*, the layers' kernels
    alone (no copy: a ``none`` policy)."""
    exposed = exposed or {}
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H200")
    b.domain(1, "profile-step", tid=TID)
    total = steps * 2_000_000
    b.nvtx(0, total, f"policy={policy}", tid=TID, domain_id=1)
    for s in range(steps):
        t0 = s * 2_000_000 + 1000
        jitter = step_jitter[s % len(step_jitter)]
        b.nvtx(t0, t0 + 1_000_000 + jitter, f"step={s}", tid=TID, domain_id=1)
        for i in range(layers):
            lt = t0 + 10_000 + i * 200_000
            b.nvtx(lt, lt + 150_000, f"layer={i}", tid=TID, domain_id=1)
            if offload:
                corr = b.copy(lt + 1000, lt + 101_000, "d2h", copy_bytes)
                b.runtime(lt + 10, lt + 20, corr, name="cudaMemcpyAsync", tid=TID)
            k = b.kernel(lt + 1000, lt + 101_000 - exposed.get(i, 0), f"fusion_layer{i}")
            b.runtime(lt + 30, lt + 40, k, tid=TID)
            if waits:
                b.event_record(lt + 50, 1000 + i, stream=20, tid=TID)
                b.stream_wait(lt + 60, 1000 + i, stream=7, tid=TID)
                c = b.kernel(lt + 101_000, lt + 110_000, f"consumer_layer{i}")
                b.runtime(lt + 80, lt + 90, c, tid=TID)
    return b
