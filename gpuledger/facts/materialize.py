"""Writing materialized tables: replace one partition's rows exactly (delete, then insert), in one
writer transaction, by column name (a frame column the table lacks is left out; a table column the
frame lacks is NULL), so rematerializing a partition leaves exactly its new rows."""


import polars as pl

from gpuledger import warehouse
from gpuledger.rules.clock import utc_now
from gpuledger.sql import load_sql

# Materialized tables (migration 009) and the column holding their partition key. Identifiers come
# from this table only, never from input; values are always bound parameters.
PARTITION_COLUMN = {
    "usage_hourly_jobs": "day",
    "usage_hourly_projects": "day",
    "utilization_hourly": "day",
    "fairshare_snapshots": "day",
    "budget_snapshots": "day",
    "chargeback_statements": "period",
}


def sql(package: str, name: str) -> str:
    """The text of ``<package>/<name>.sql`` (SQL lives in .sql files)."""
    return load_sql(package, f"{name}.sql")  # the one loader (gpuledger.sql)


def table_columns(con, table: str) -> list[str]:
    return [row[0] for row in con.execute(f'DESCRIBE "{table}"').fetchall()]


def insert_frame(con, table: str, frame: pl.DataFrame) -> int:
    """Insert ``frame``'s rows by column name; returns the rows inserted."""
    if frame.height == 0:
        return 0
    columns = [c for c in frame.columns if c in set(table_columns(con, table))]
    names = ", ".join(f'"{c}"' for c in columns)
    con.register("_materialized_rows", frame.select(columns).to_arrow())
    try:
        con.execute(f'INSERT INTO "{table}" ({names}) SELECT {names} FROM _materialized_rows').fetchall()
    finally:
        con.unregister("_materialized_rows")
    return frame.height


def replace_partition(con, table: str, key: object, frame: pl.DataFrame) -> tuple[int, int]:
    """Delete the partition ``key`` of ``table`` and insert ``frame`` (which must carry the key
    column), in one transaction. Returns (rows deleted, rows inserted)."""
    column = PARTITION_COLUMN[table]
    with warehouse.transaction(con):
        deleted = con.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}" = ?', [key]).fetchall()[0][0]
        con.execute(f'DELETE FROM "{table}" WHERE "{column}" = ?', [key]).fetchall()
        inserted = insert_frame(con, table, frame)
    return deleted, inserted


def stamped(frame: pl.DataFrame, **keys: object) -> pl.DataFrame:
    """``frame`` with the partition / snapshot key columns and ``materialized_at`` added in front."""
    extra = [pl.lit(value).alias(name) for name, value in keys.items()]
    return frame.select(*extra, pl.lit(utc_now()).alias("materialized_at"), pl.all())
