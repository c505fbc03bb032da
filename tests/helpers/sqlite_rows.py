"""One query's rows from an SQLite file (an export the tests made), the connection closed after."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()
