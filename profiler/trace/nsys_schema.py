"""The tables of an Nsight Systems SQLite export, as nsys writes them: one owner of the DDL.

The DDL follows the schema nsys 2023.4.4 writes (export schema 3.7.2), column for column for
the columns the profiler reads.  Written by the exports built from code
(``profiler.synthetic.export``) and by the conversion of a JAX profiler trace
(``profiler.trace.jax_profile``); read by ``profiler.trace.loader``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl

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
    "ThreadNames": ["nameId INTEGER NOT NULL", "priority INTEGER", "globalTid INTEGER"],
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


Rows = Sequence[Mapping[str, object]] | pl.DataFrame


def _tuples(table_rows: Rows, names: list[str]) -> Iterable[Sequence[object]]:
    """The rows as value tuples in the order of *names* (a column a frame lacks is NULL)."""
    if isinstance(table_rows, pl.DataFrame):
        present = [n for n in names if n in table_rows.columns]
        nulls = [pl.lit(None).alias(n) for n in names if n not in table_rows.columns]
        return table_rows.select(*present, *nulls).select(names).iter_rows()
    return ([r.get(n) for n in names] for r in table_rows)


def create(path: Path, rows: Mapping[str, Rows], omit: Iterable[str] = ()) -> Path:
    """Create the export at *path* (which must not exist) in one transaction: one table per key of
    *rows* with rows (nsys creates tables lazily; ``StringIds`` and ``META_DATA_EXPORT`` always),
    each row a mapping of column name to value, or a frame with those columns.  *omit* drops tables
    (``TABLE``) or columns (``TABLE.column``), to imitate other nsys versions."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(path)
    dropped = set(omit)
    con = sqlite3.connect(path)
    try:
        with con:
            for table, cols in DDL.items():
                table_rows = rows.get(table, ())
                empty = len(table_rows) == 0
                if table in dropped or (empty and table not in ("StringIds", "META_DATA_EXPORT")):
                    continue
                kept = [c for c in cols if f"{table}.{c.split()[0]}" not in dropped]
                con.execute(f'CREATE TABLE "{table}" ({", ".join(kept)})')
                names = [c.split()[0] for c in kept]
                marks = ", ".join("?" for _ in names)
                con.executemany(
                    f'INSERT INTO "{table}" ({", ".join(names)}) VALUES ({marks})', _tuples(table_rows, names)
                )
    finally:
        con.close()
    return path
