"""Small Nsight Systems exports built from code, with nsys's real table and column names
(``profiler.trace.nsys_schema``).

Used by the tests (exports whose answers are known by construction), the
benchmarks (exports of a million kernels) and demos.  ``omit`` drops tables or
columns to imitate other nsys versions.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from profiler.trace.nsys_schema import (
    COPY_KINDS,
    DDL,
    DEVICE,
    ENUMS,
    GPU_OP_COLUMNS,
    PAGEABLE,
    PINNED,
    REAL_SYNC_TYPE,
    SYNC_CALL,
    UNSET,
    VM_BITS,
    create,
    global_tid,
)

__all__ = [
    "COPY_KINDS",
    "DDL",
    "DEVICE",
    "ENUMS",
    "GPU_OP_COLUMNS",
    "PAGEABLE",
    "PINNED",
    "REAL_SYNC_TYPE",
    "SYNC_CALL",
    "UNSET",
    "VM_BITS",
    "ExportBuilder",
    "global_tid",
]


class ExportBuilder:
    """Collects rows, then ``write()`` creates the SQLite file in one transaction."""

    def __init__(
        self,
        nsys_version: str = "2023.4.4.54",
        schema_version: str = "3.7.2",
        omit: Iterable[str] = (),
    ) -> None:
        self.omit = set(omit)  # "TABLE" or "TABLE.column"
        self.strings: dict[str, int] = {}
        self.rows: dict[str, list[dict[str, object]]] = {t: [] for t in DDL}
        self.rows["META_DATA_EXPORT"] += [
            {"name": "EXPORT_PRODUCT_NAME", "value": "NVIDIA Nsight Systems"},
            {"name": "EXPORT_PRODUCT_VERSION", "value": nsys_version},
            {"name": "EXPORT_SCHEMA_VERSION", "value": schema_version},
        ]
        for enum, rows in ENUMS.items():
            self.rows[enum] = [{"id": i, "name": n, "label": lab} for i, n, lab in rows]
        self._corr = 0

    def string(self, value: str) -> int:
        """The StringIds id of *value* (registered on first use)."""
        if value not in self.strings:
            self.strings[value] = len(self.strings) + 1
            self.rows["StringIds"].append({"id": self.strings[value], "value": value})
        return self.strings[value]

    @staticmethod
    def _op(start: int, end: int, device: int, stream: int, corr: int, pid: int, context: int = 1) -> dict[str, object]:
        """The columns every GPU activity table shares (one CUDA context, 1, unless told)."""
        return {
            "start": start,
            "end": end,
            "deviceId": device,
            "contextId": context,
            "streamId": stream,
            "correlationId": corr,
            "globalPid": global_tid(pid, 0),
        }

    def next_correlation(self) -> int:
        self._corr += 1
        return self._corr

    def gpu(
        self, device: int, name: str = "NVIDIA H200", total_memory: int = 150_000_000_000, sm_count: int | None = None
    ) -> None:
        self.rows["TARGET_INFO_GPU"].append(
            {
                "vmId": VM_BITS,
                "id": device,
                "name": name,
                "totalMemory": total_memory,
                "busLocation": f"0000:{device:02x}:00.0",
                "cuDevice": device,
                "smCount": sm_count,
            }
        )

    def kernel(
        self,
        start: int,
        end: int,
        name: str = "fusion",
        *,
        device: int = 0,
        stream: int = 7,
        demangled: str | None = None,
        short_id: int | None = None,
        correlation: int | None = None,
        pid: int = 100,
        context: int = 1,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
    ) -> int:
        """Add a kernel (launched with *grid* and *block*); returns its correlationId."""
        corr = self.next_correlation() if correlation is None else correlation
        self.rows["CUPTI_ACTIVITY_KIND_KERNEL"].append(
            {
                **self._op(start, end, device, stream, corr, pid, context),
                "demangledName": self.string(demangled if demangled is not None else name),
                "shortName": short_id if short_id is not None else self.string(name),
                "registersPerThread": 32,
                **{f"grid{a}": v for a, v in zip("XYZ", grid, strict=True)},
                **{f"block{a}": v for a, v in zip("XYZ", block, strict=True)},
                "staticSharedMemory": 0,
                "dynamicSharedMemory": 0,
                "localMemoryPerThread": 0,
                "localMemoryTotal": 0,
                "gridId": corr,
            }
        )
        return corr

    def copy(
        self,
        start: int,
        end: int,
        kind: str | int = "d2h",
        nbytes: int = 1 << 20,
        *,
        device: int = 0,
        stream: int = 20,
        host: int | None = PINNED,
        correlation: int | None = None,
        pid: int = 100,
        context: int = 1,
    ) -> int:
        """Add a memcpy (*kind* a class name or a raw copyKind); returns its correlationId."""
        corr = self.next_correlation() if correlation is None else correlation
        ck = COPY_KINDS[kind] if isinstance(kind, str) else kind
        src, dst = DEVICE, DEVICE
        if ck == 1:
            src = host if host is not None else PINNED
        elif ck == 2:
            dst = host if host is not None else PINNED
        self.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
            {
                **self._op(start, end, device, stream, corr, pid, context),
                "bytes": nbytes,
                "copyKind": ck,
                "srcKind": src,
                "dstKind": dst,
            }
        )
        return corr

    def memset(
        self,
        start: int,
        end: int,
        nbytes: int = 4096,
        *,
        device: int = 0,
        stream: int = 7,
        correlation: int | None = None,
        pid: int = 100,
        context: int = 1,
    ) -> int:
        corr = self.next_correlation() if correlation is None else correlation
        self.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(
            {
                **self._op(start, end, device, stream, corr, pid, context),
                "value": 0,
                "bytes": nbytes,
            }
        )
        return corr

    def runtime(
        self,
        start: int,
        end: int,
        correlation: int,
        *,
        name: str = "cudaLaunchKernel",
        pid: int = 100,
        tid: int = 100,
    ) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            {
                "start": start,
                "end": end,
                "eventClass": 1,
                "globalTid": global_tid(pid, tid),
                "correlationId": correlation,
                "nameId": self.string(name),
                "returnValue": 0,
            }
        )

    def event_record(
        self,
        t: int,
        event_id: int,
        *,
        device: int = 0,
        stream: int = 7,
        pid: int = 100,
        tid: int = 100,
        duration: int = 50,
        correlation: int | None = None,
        name: str = "cuEventRecord",
        context: int = 1,
    ) -> int:
        """A ``cuEventRecord`` call at *t* on *stream*: its runtime row and its event row."""
        corr = self.next_correlation() if correlation is None else correlation
        self.runtime(t, t + duration, corr, name=name, pid=pid, tid=tid)
        self.rows["CUPTI_ACTIVITY_KIND_CUDA_EVENT"].append(
            {
                "deviceId": device,
                "contextId": context,
                "streamId": stream,
                "correlationId": corr,
                "globalPid": global_tid(pid, 0),
                "eventId": event_id,
            }
        )
        return corr

    def sync(
        self,
        t: int,
        what: str = "stream_wait",
        *,
        event_id: int | None = None,
        device: int = 0,
        stream: int | None = None,
        pid: int = 100,
        tid: int = 100,
        duration: int = 50,
        sync_type: int | None = None,
        correlation: int | None = None,
        runtime: bool = True,
        context: int = 1,
    ) -> int:
        """A synchronization call at *t* (runtime row at *t*, activity row just after it):
        ``stream_wait`` (stream and event set), ``stream_sync`` (stream), ``event_sync`` and
        ``event_query`` (event), ``device_sync`` (neither).  ``syncType`` as real exports write it
        unless *sync_type* says otherwise."""
        corr = self.next_correlation() if correlation is None else correlation
        if runtime:
            self.runtime(t, t + duration, corr, name=SYNC_CALL[what], pid=pid, tid=tid)
        self.rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(
            {
                **self._op(t + 10, t + duration - 10, device, UNSET if stream is None else stream, corr, pid, context),
                "syncType": REAL_SYNC_TYPE[what] if sync_type is None else sync_type,
                "eventId": UNSET if event_id is None else event_id,
            }
        )
        return corr

    def stream_wait(self, t: int, event_id: int, stream: int, **kw: object) -> int:
        """A ``cuStreamWaitEvent(stream, event)`` call at *t*."""
        return self.sync(t, "stream_wait", event_id=event_id, stream=stream, **kw)  # type: ignore[arg-type]

    def memory(
        self,
        t: int,
        nbytes: int,
        *,
        free: bool = False,
        device: int = 0,
        address: int = 0,
        mem_kind: int = DEVICE,
        pid: int = 100,
    ) -> None:
        """A device memory allocation (or, with *free*, deallocation) of *nbytes* at *t*."""
        self.rows["CUDA_GPU_MEMORY_USAGE_EVENTS"].append(
            {
                "start": t,
                "globalPid": global_tid(pid, 0),
                "deviceId": device,
                "contextId": 1,
                "address": address,
                "pc": 0,
                "bytes": nbytes,
                "memKind": mem_kind,
                "memoryOperationType": 1 if free else 0,
            }
        )

    def nvtx(
        self,
        start: int,
        end: int | None,
        text: str | None,
        *,
        pid: int = 100,
        tid: int = 100,
        event_type: int = 59,
        registered: bool = False,
        domain_id: int = 0,
        end_tid: int | None = None,
        range_id: int | None = None,
    ) -> None:
        """An NVTX event: push/pop range (59) by default; 60 start/end, 34 mark, 75 domain."""
        self.rows["NVTX_EVENTS"].append(
            {
                "start": start,
                "end": end,
                "eventType": event_type,
                "text": None if registered else text,
                "textId": self.string(text) if registered and text is not None else None,
                "globalTid": global_tid(pid, tid),
                "endGlobalTid": global_tid(pid, end_tid) if end_tid is not None else None,
                "domainId": domain_id,
                "rangeId": range_id,
            }
        )

    def domain(self, domain_id: int, name: str, *, pid: int = 100, tid: int = 100) -> None:
        self.nvtx(0, None, name, pid=pid, tid=tid, event_type=75, domain_id=domain_id)

    def write(self, path: str | Path) -> Path:
        """Create the export at *path* (which must not exist)."""
        return create(Path(path), self.rows, self.omit)
