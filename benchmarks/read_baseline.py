"""Baseline (a): read only the columns analyze needs, nothing else, with one reader.

python benchmarks/read_baseline.py {connectorx,adbc,sqlite3} EXPORT [--stalls | --all]

``--stalls``: also what the stalls read (every op's stream and launch, the
runtime rows, event records and synchronization rows).  ``--all``: what
``analyze --json`` reads with stalls, contexts and the kernels-slowed metric:
``--stalls`` plus each kernel's launch shape (grid and block, which group the
kernels of that metric) and each record's and wait's context (which names its
device).
"""

from __future__ import annotations

import sys

QUERIES = {
    # without a per-group view, analyze reads kernel spans and names only
    "kernels": "SELECT deviceId, start, end, shortName, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "copies": "SELECT deviceId, streamId, start, end, correlationId, globalPid, bytes, copyKind, srcKind, "
    "dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "memsets": "SELECT deviceId, streamId, start, end, correlationId, globalPid, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET",
}


STALL_QUERIES = {
    "kernels": "SELECT deviceId, streamId, start, end, correlationId, globalPid, shortName, demangledName "
    "FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "copies": QUERIES["copies"],
    "memsets": QUERIES["memsets"],
    "runtime": "SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
    "events": "SELECT deviceId, streamId, correlationId, globalPid, eventId FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "syncs": "SELECT start, end, deviceId, streamId, correlationId, globalPid, syncType, eventId "
    "FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
}


ALL_QUERIES = {
    **STALL_QUERIES,
    "kernels": "SELECT deviceId, streamId, start, end, correlationId, globalPid, shortName, demangledName, "
    "gridX, gridY, gridZ, blockX, blockY, blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "events": "SELECT deviceId, streamId, correlationId, globalPid, eventId, contextId "
    "FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "syncs": "SELECT start, end, deviceId, streamId, correlationId, globalPid, syncType, eventId, contextId "
    "FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
}


def main() -> None:
    reader, path = sys.argv[1], sys.argv[2]
    import polars as pl

    rows = 0
    flags = sys.argv[3:]
    queries = ALL_QUERIES if "--all" in flags else STALL_QUERIES if "--stalls" in flags else QUERIES
    for sql in queries.values():
        if reader == "connectorx":
            import connectorx as cx

            df = cx.read_sql(f"sqlite://{path}", sql, return_type="polars")
        elif reader == "adbc":
            import adbc_driver_sqlite.dbapi as adbc

            with adbc.connect(f"file:{path}?mode=ro") as con, con.cursor() as cur:
                cur.execute(sql)
                df = pl.from_arrow(cur.fetch_arrow_table())
        else:
            import sqlite3

            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            cur = con.execute(sql)
            names = [d[0] for d in cur.description]
            df = pl.DataFrame(cur.fetchall(), schema=names, orient="row")
        rows += df.height
    print(rows)


if __name__ == "__main__":
    main()
