"""Random exports of launches, copies, events and waits for the costs' and the replay's reference checks."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from profiler.synthetic.export import ExportBuilder

MIB = 1 << 20


FACTORS = (1.0, 0.5, 0.0, 1.7)


action = st.tuples(
    st.sampled_from(
        [
            *("kernel", "nccl", "h2d", "d2h", "d2d", "memset", "record", "wait", "wait", "bare"),
            *("stream_sync", "event_sync", "device_sync", "memcpy"),
        ]
    ),
    st.sampled_from([100, 200]),  # pid
    st.sampled_from([0, 1]),  # device
    st.sampled_from([7, 8, 20]),  # stream
    st.integers(0, 3),  # event id
    st.integers(0, 40),  # host time step (0: a tie)
    st.integers(-30, 400),  # GPU start after launch (negative: skew)
    st.integers(-5, 500),  # duration (negative: an invalid op)
    st.sampled_from([1000, MIB, 3 * MIB]),
)


def build_random(actions: list[tuple], path: Path) -> Path:
    b = ExportBuilder()
    t = 0
    for kind, pid, dev, stream, ev, dt, lat, dur, nbytes in actions:
        t += dt
        tid = pid + 1 + stream % 2  # two threads per process
        if kind in ("stream_sync", "event_sync", "device_sync"):
            # a blocking call: the host thread is held for a while (the next call starts after it)
            held = abs(dur) + 1
            b.sync(
                t,
                kind,
                event_id=ev,
                device=dev,
                stream=stream if kind == "stream_sync" else None,
                pid=pid,
                tid=tid,
                duration=held,
            )
            t += held
            continue
        if kind == "memcpy":  # a synchronous copy: the call returns when the copy is done
            corr = b.copy(t + abs(lat), t + abs(lat) + abs(dur), "d2h", nbytes, device=dev, stream=stream, pid=pid)
            b.runtime(t, t + abs(lat) + abs(dur) + 7, corr, name="cudaMemcpy_v3020", pid=pid, tid=tid)
            t += abs(lat) + abs(dur) + 7
            continue
        if kind == "record":
            b.event_record(t, ev, device=dev, stream=stream, pid=pid, tid=tid)
            continue
        if kind == "wait":
            b.stream_wait(t, ev, stream, device=dev, pid=pid, tid=tid)
            continue
        start = t + lat
        end = start + dur
        if kind in ("kernel", "nccl"):
            corr = b.kernel(
                start, end, "ncclKernel" if kind == "nccl" else "fusion", device=dev, stream=stream, pid=pid
            )
        elif kind == "memset":
            corr = b.memset(start, end, device=dev, stream=stream, pid=pid)
        else:
            copy_kind = "h2d" if kind == "bare" else kind
            corr = b.copy(start, end, copy_kind, nbytes, device=dev, stream=stream, pid=pid)
        if kind != "bare":
            b.runtime(t, t + 3, corr, pid=pid, tid=tid)
    return b.write(path)
