"""Small Nsight Systems exports built from code, with nsys's real table and column names.

Used by the tests (exports whose answers are known by construction), the
benchmarks (exports of a million kernels) and demos.  The DDL follows the
schema nsys 2023.4.4 writes (export schema 3.7.2), column for column for the
columns the profiler reads; ``omit`` drops tables or columns to imitate
other nsys versions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

VM_BITS = 1 << 48  # nsys sets high bits of a GlobalId; the profiler must ignore them

# The columns nsys's kernel, memcpy and memset tables begin with.
GPU_OP_COLUMNS = [
    "start INTEGER NOT NULL",
    "end INTEGER NOT NULL",
    "deviceId INTEGER NOT NULL",
    "contextId INTEGER NOT NULL",
    "greenContextId INTEGER",
    "streamId INTEGER NOT NULL",
    "correlationId INTEGER",
    "globalPid INTEGER",
]

DDL: dict[str, list[str]] = {
    "StringIds": ["id INTEGER NOT NULL PRIMARY KEY", "value TEXT NOT NULL"],
    "META_DATA_EXPORT": ["name TEXT NOT NULL", "value TEXT"],
    "TARGET_INFO_GPU": [
        "vmId INTEGER NOT NULL",
        "id INTEGER NOT NULL",
        "name TEXT",
        "busLocation TEXT",
        "isDiscrete INTEGER",
        "l2CacheSize INTEGER",
        "totalMemory INTEGER",
        "memoryBandwidth INTEGER",
        "clockRate INTEGER",
        "smCount INTEGER",
        "uuid TEXT",
        "chipName TEXT",
        "cuDevice INTEGER",
    ],
    "TARGET_INFO_CUDA_STREAM": [
        "streamId INTEGER NOT NULL",
        "hwId INTEGER NOT NULL",
        "vmId INTEGER NOT NULL",
        "processId INTEGER NOT NULL",
        "contextId INTEGER NOT NULL",
        "priority INTEGER NOT NULL",
        "flag INTEGER NOT NULL",
    ],
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        *GPU_OP_COLUMNS,
        "demangledName INTEGER NOT NULL",
        "shortName INTEGER NOT NULL",
        "mangledName INTEGER",
        "launchType INTEGER",
        "cacheConfig INTEGER",
        "registersPerThread INTEGER NOT NULL",
        "gridX INTEGER NOT NULL",
        "gridY INTEGER NOT NULL",
        "gridZ INTEGER NOT NULL",
        "blockX INTEGER NOT NULL",
        "blockY INTEGER NOT NULL",
        "blockZ INTEGER NOT NULL",
        "staticSharedMemory INTEGER NOT NULL",
        "dynamicSharedMemory INTEGER NOT NULL",
        "localMemoryPerThread INTEGER NOT NULL",
        "localMemoryTotal INTEGER NOT NULL",
        "gridId INTEGER NOT NULL",
        "sharedMemoryExecuted INTEGER",
        "graphNodeId INTEGER",
        "sharedMemoryLimitConfig INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_MEMCPY": [
        *GPU_OP_COLUMNS,
        "bytes INTEGER NOT NULL",
        "copyKind INTEGER NOT NULL",
        "deprecatedSrcId INTEGER",
        "srcKind INTEGER",
        "dstKind INTEGER",
        "srcDeviceId INTEGER",
        "srcContextId INTEGER",
        "dstDeviceId INTEGER",
        "dstContextId INTEGER",
        "migrationCause INTEGER",
        "graphNodeId INTEGER",
        "virtualAddress INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_MEMSET": [
        *GPU_OP_COLUMNS,
        "value INTEGER NOT NULL",
        "bytes INTEGER NOT NULL",
        "graphNodeId INTEGER",
        "memKind INTEGER",
    ],
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        "start INTEGER NOT NULL",
        "end INTEGER NOT NULL",
        "eventClass INTEGER NOT NULL",
        "globalTid INTEGER",
        "correlationId INTEGER",
        "nameId INTEGER NOT NULL",
        "returnValue INTEGER NOT NULL",
        "callchainId INTEGER",
    ],
    # nsys 2023.4.4 writes the event table without times: a record's time is its API call's
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": [
        "deviceId INTEGER NOT NULL",
        "contextId INTEGER NOT NULL",
        "greenContextId INTEGER",
        "streamId INTEGER NOT NULL",
        "correlationId INTEGER",
        "globalPid INTEGER",
        "eventId INTEGER NOT NULL",
    ],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [
        *GPU_OP_COLUMNS,
        "syncType INTEGER NOT NULL",
        "eventId INTEGER NOT NULL",
    ],
    # --cuda-memory-usage=true: device memory allocations and frees
    "CUDA_GPU_MEMORY_USAGE_EVENTS": [
        "start INTEGER NOT NULL",
        "globalPid INTEGER NOT NULL",
        "deviceId INTEGER NOT NULL",
        "contextId INTEGER NOT NULL",
        "address INTEGER NOT NULL",
        "pc INTEGER NOT NULL",
        "bytes INTEGER NOT NULL",
        "memKind INTEGER NOT NULL",
        "memoryOperationType INTEGER NOT NULL",
        "name TEXT",
        "correlationId INTEGER",
    ],
    "NVTX_EVENTS": [
        "start INTEGER NOT NULL",
        "end INTEGER",
        "eventType INTEGER NOT NULL",
        "rangeId INTEGER",
        "category INTEGER",
        "color INTEGER",
        "text TEXT",
        "globalTid INTEGER",
        "endGlobalTid INTEGER",
        "textId INTEGER",
        "domainId INTEGER",
        "uint64Value INTEGER",
        "int64Value INTEGER",
        "doubleValue REAL",
        "uint32Value INTEGER",
        "int32Value INTEGER",
        "floatValue REAL",
        "jsonTextId INTEGER",
        "jsonText TEXT",
    ],
}

COPY_KINDS = {"h2d": 1, "d2h": 2, "d2d": 8, "p2p": 10}
# The enum tables nsys writes into every export (nsys's own reports join them).
ENUMS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"),
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
        (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"),
        (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
        (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"),
        (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
        (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
        (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
        (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
        (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
        (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ],
    "ENUM_CUDA_DEV_MEM_EVENT_OPER": [
        (0, "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", "Allocation"),
        (1, "CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", "Deallocation"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
}
for _enum in ENUMS:
    DDL[_enum] = ["id INTEGER NOT NULL PRIMARY KEY", "name TEXT", "label TEXT"]
PAGEABLE, PINNED, DEVICE = 0, 1, 2
UNSET = 4294967295  # CUPTI's "no stream" / "no event" in synchronization rows
# syncType as real exports (nsys 2020.5 to 2023.4) write it, whatever ENUM_CUPTI_SYNC_TYPE says:
# stream waits and stream synchronizes 3, event synchronizes and queries 2, device synchronizes 1.
REAL_SYNC_TYPE = {"stream_wait": 3, "stream_sync": 3, "event_sync": 2, "event_query": 2, "device_sync": 1}
SYNC_CALL = {
    "stream_wait": "cuStreamWaitEvent",
    "stream_sync": "cudaStreamSynchronize",
    "event_sync": "cudaEventSynchronize",
    "event_query": "cudaEventQuery",
    "device_sync": "cudaDeviceSynchronize",
}


def global_tid(pid: int, tid: int) -> int:
    """A serialized GlobalId as nsys writes it: PID in bits 24..47, TID in 0..23."""
    return VM_BITS | (pid << 24) | tid


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

    def gpu(self, device: int, name: str = "NVIDIA H200", total_memory: int = 150_000_000_000) -> None:
        self.rows["TARGET_INFO_GPU"].append(
            {
                "vmId": VM_BITS,
                "id": device,
                "name": name,
                "totalMemory": total_memory,
                "busLocation": f"0000:{device:02x}:00.0",
                "cuDevice": device,
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
        path = Path(path)
        if path.exists():
            raise FileExistsError(path)
        con = sqlite3.connect(path)
        try:
            with con:
                for table, cols in DDL.items():
                    if table in self.omit:
                        continue
                    rows = self.rows[table]
                    if not rows and table not in ("StringIds", "META_DATA_EXPORT"):
                        continue  # nsys creates tables lazily
                    kept = [c for c in cols if f"{table}.{c.split()[0]}" not in self.omit]
                    con.execute(f'CREATE TABLE "{table}" ({", ".join(kept)})')
                    names = [c.split()[0] for c in kept]
                    marks = ", ".join("?" for _ in names)
                    con.executemany(
                        f'INSERT INTO "{table}" ({", ".join(names)}) VALUES ({marks})',
                        ([r.get(n) for n in names] for r in rows),
                    )
        finally:
            con.close()
        return path
