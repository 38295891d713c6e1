"""DuckDB's engine for the warehouse's own modules, without the duckdb package's Python layer.

``import duckdb`` runs the package's ``__init__``: its relation and expression helpers, its data
source adapters and its version read through ``importlib.metadata`` — about 0.1 CPU-second at every
process start, as much as Python and typer together (issue 41: a report read from the kept facts
is then half package import). The connection, its errors and every query are the C++ extension's
(``_duckdb``), which the package re-exports as they are (``duckdb.Error is _duckdb.Error``), so the
warehouse connects and catches through it; what needs the package's Python parts (``.pl()``,
registering a frame) imports the package where it is used. Older DuckDB releases ship the
extension inside the package only: then this is the package."""

try:
    import _duckdb as duckdb
except ImportError:  # pragma: no cover - DuckDB < 1.4 keeps the extension at duckdb.duckdb
    import duckdb

# The connection methods the package's Python layer adds (duckdb._relation.CONNECTION_METHODS in
# DuckDB 2.0): until something imports the package, a connection has none of them. Each is a stub
# that imports the package on first use (which sets the real method on the class) and calls it, so
# `con.sql(...)` works on every path and the package still loads only where it is used.
_PACKAGE_METHODS = ("from_arrow", "from_csv_auto", "from_df", "from_parquet", "from_query", "query", "read_csv",
                    "read_json", "read_parquet", "sql", "table", "table_function", "to_arrow_reader",
                    "to_arrow_table", "values", "view")


def _through_package(name: str):
    def method(self, *args, **kwargs):
        import duckdb as package  # noqa: F401  # lazy: its import sets the real method on the class

        if getattr(type(self), name) is method:  # this DuckDB's package does not add it
            raise AttributeError(f"DuckDB's connection has no {name!r}")
        return getattr(self, name)(*args, **kwargs)

    method.__name__ = name
    return method


for _name in _PACKAGE_METHODS:
    if not hasattr(duckdb.DuckDBPyConnection, _name):
        setattr(duckdb.DuckDBPyConnection, _name, _through_package(_name))

__all__ = ["duckdb"]
