"""A materialized answer as query rows with their column types: what a terminal table needs
(gpuledger/cli/views/tables.py reads ``columns``, ``height``, ``schema[name].is_float()`` / ``is_integer()``
and ``table[name].to_list()``), without importing polars — whose import costs more than the whole
materialized query (BENCHMARKS.md "Read model and CLI latency"). ``to_polars`` gives the same
table as a polars DataFrame, for csv / parquet / json and for every reader that computes on it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ColumnType:
    """A column's polars type by name ("Float64", "Int32", "String", "Date", ...)."""

    name: str

    def is_float(self) -> bool:
        return self.name.startswith("Float")

    def is_integer(self) -> bool:
        return self.name.startswith(("Int", "UInt"))


class Column(list):
    """One column's values, in row order."""

    def to_list(self) -> list:
        return list(self)


# DuckDB column types -> the polars type names DuckDB's .pl() gives them (Rows.from_cursor)
DUCKDB_TYPES = {"VARCHAR": "String", "BIGINT": "Int64", "INTEGER": "Int32", "SMALLINT": "Int16", "DOUBLE": "Float64",
                "FLOAT": "Float32", "BOOLEAN": "Boolean", "TIMESTAMP": "Datetime", "DATE": "Date",
                "UINTEGER": "UInt32", "UBIGINT": "UInt64"}


def _polars_type(duckdb_type: str) -> str:
    if duckdb_type.startswith("DECIMAL"):  # DECIMAL(38,2) -> Decimal(38,2)
        return "Decimal" + duckdb_type[len("DECIMAL"):]
    if duckdb_type not in DUCKDB_TYPES:
        raise TypeError(f"read model rows: no polars type for DuckDB's {duckdb_type}")
    return DUCKDB_TYPES[duckdb_type]


class Rows:
    """Rows (tuples in ``schema``'s column order) and ``schema``: column name -> polars type name."""

    def __init__(self, rows: list[tuple], schema: dict[str, str]) -> None:
        self._rows = rows
        self._types = dict(schema)
        self.schema = {name: ColumnType(t) for name, t in schema.items()}

    @classmethod
    def from_cursor(cls, cursor) -> Rows:
        """An executed DuckDB query's rows, typed as its .pl() would type them."""
        schema = {d[0]: _polars_type(str(d[1])) for d in cursor.description}
        return cls(cursor.fetchall(), schema)

    @property
    def columns(self) -> list[str]:
        return list(self._types)

    @property
    def height(self) -> int:
        return len(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self) -> list[tuple]:
        """The rows, tuples in ``columns`` order."""
        return list(self._rows)

    def __getitem__(self, name: str) -> Column:
        at = self.columns.index(name)
        return Column(row[at] for row in self._rows)

    def project(self, columns: dict[str, str], fill: dict | None = None) -> Rows:
        """These rows in ``columns`` (name -> polars type name), in that order; a column they do
        not have is ``fill``'s value for it (None where ``fill`` has none)."""
        fill = fill or {}
        have = self.columns
        picks = [(have.index(c), None) if c in have else (None, fill.get(c)) for c in columns]
        rows = [tuple(row[at] if at is not None else value for at, value in picks) for row in self._rows]
        return Rows(rows, dict(columns))

    def to_polars(self):
        """The same table as a polars DataFrame of the schema's types (no pyarrow on the way)."""
        import polars as pl  # lazy: rows are read without polars; only this conversion needs it

        return pl.DataFrame(self._rows, schema={c: _polars_dtype(pl, t) for c, t in self._types.items()},
                            orient="row")


def _polars_dtype(pl, name: str):
    if name.startswith("Decimal("):  # Decimal(38,2)
        precision, scale = (int(x) for x in name[len("Decimal("):-1].split(","))
        return pl.Decimal(precision, scale)
    return getattr(pl, name)


def as_polars(table):
    """``table`` as a polars DataFrame: a :class:`Rows` converted, a DataFrame as it is."""
    return table.to_polars() if isinstance(table, Rows) else table
