"""SQL over journals: DuckDB queries on the `runs`, `entries` and `llm_calls` Arrow tables.

DuckDB scans the Arrow tables in place (registered, not copied or imported), in a connection
of its own that lives for one query, so nothing is left behind and every query sees the
tables of the `Journals` it is asked of.
"""

from __future__ import annotations

from typing import Any, Protocol

import pandas as pd
import pyarrow as pa

from kassette._extras import requires
from kassette.errors import InvalidArgumentError

__all__ = ["TABLES", "sql"]

TABLES = ("runs", "entries", "llm_calls")


class Tables(Protocol):
    """What a query reads: a `Journals` (frames.py calls this module, not the reverse)."""

    def to_arrow(self, table: Any) -> pa.Table: ...


def sql(journals: Tables, query: str) -> pd.DataFrame:
    """The result of `query` (DuckDB SQL over `runs`, `entries` and `llm_calls`) as a frame."""
    with requires("journals.sql"):
        import duckdb
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgumentError("sql needs a query")
    connection = duckdb.connect(":memory:")
    try:
        for name in TABLES:
            connection.register(name, journals.to_arrow(name))
        try:
            relation = connection.sql(query)
            table = None if relation is None else relation.to_arrow_table()
        except duckdb.Error as exc:
            raise InvalidArgumentError(f"sql: {exc}") from exc
        return pd.DataFrame() if table is None else table.to_pandas()  # None: no rows (SET)
    finally:
        connection.close()
