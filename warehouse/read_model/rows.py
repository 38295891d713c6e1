"""A materialized answer as query rows with their column types: what a terminal table needs
(gpuledger/tables.py reads ``columns``, ``height``, ``schema[name].is_float()`` / ``is_integer()``
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


class Rows:
    """Rows (tuples in ``schema``'s column order) and ``schema``: column name -> polars type name."""

    def __init__(self, rows: list[tuple], schema: dict[str, str]) -> None:
        self._rows = rows
        self._types = dict(schema)
        self.schema = {name: ColumnType(t) for name, t in schema.items()}

    @property
    def columns(self) -> list[str]:
        return list(self._types)

    @property
    def height(self) -> int:
        return len(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, name: str) -> Column:
        at = self.columns.index(name)
        return Column(row[at] for row in self._rows)

    def to_polars(self):
        """The same table as a polars DataFrame of the schema's types (no pyarrow on the way)."""
        import polars as pl

        return pl.DataFrame(self._rows, schema={c: getattr(pl, t) for c, t in self._types.items()}, orient="row")


def as_polars(table):
    """``table`` as a polars DataFrame: a :class:`Rows` converted, a DataFrame as it is."""
    return table.to_polars() if isinstance(table, Rows) else table
