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

__all__ = ["duckdb"]
