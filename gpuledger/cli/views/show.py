"""A command's table in the format it was asked for: the terminal table (``tables``) or csv /
parquet / json of its columns; ``print_rows`` for plain rows of text (config and period listings)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuledger.cli.options import Format
from gpuledger.cli.views import tables


def show_frame(frame, fmt: Format, out: Path | None, title: str, view, wide: bool = False,
               columns: str | None = None) -> None:
    """A command's table in the format asked: the terminal table (views/tables.py, or its plain text
    in ``out``), or csv / parquet / json of its columns (``--columns`` picks and orders them) on
    stdout or in ``out``; parquet needs ``out``. ``frame`` is a polars DataFrame or the read
    model's rows (gpuledger.facts.rows: the terminal table needs no polars)."""
    from gpuledger.facts.rows import as_polars  # lazy: gpuledger.facts loads DuckDB; --help must not

    names = tables.parse_columns(columns)
    if fmt is Format.table:
        tables.print_table(frame, view, title=title, wide=wide, columns=names, out=out)
        return
    frame = as_polars(frame)
    if names is not None:  # csv / parquet / json: the named columns, in that order
        tables.check_columns(frame, names)
        frame = frame.select(names)
    if fmt is Format.parquet:
        if out is None:
            raise typer.BadParameter("parquet needs --out FILE")
        frame.write_parquet(out)
    elif fmt is Format.csv:
        # 6 decimals (a GPU-hour to 3.6 ms): the last-bit noise of parallel float sums must not
        # make two runs over the same data differ
        text = frame.write_csv(float_precision=6)
        out.write_text(text) if out else typer.echo(text, nl=False)
    else:
        text = frame.write_json()
        out.write_text(text) if out else typer.echo(text)
    if out:
        typer.secho(f"wrote {frame.height} rows to {out}", dim=True)


def print_rows(title: str, columns: list[str], rows, fmt: Format = Format.table, out: Path | None = None) -> None:
    """Rows through show_frame: the terminal table (fits the terminal, never cuts a value; the first
    column identifies the row, the others may wrap at spaces), or csv / parquet / json of the text."""
    import polars as pl  # lazy: --help must not load polars (BENCHMARKS.md "CLI start-up")

    text = [[tables.format_value(v) for v in row] for row in rows]
    frame = pl.DataFrame(text, schema=[(c, pl.String) for c in columns], orient="row")
    view = tables.View(columns=tuple(tables.Column(c, c, key=i == 0, wrap=i > 0) for i, c in enumerate(columns)))
    if fmt is Format.table and out is None:
        tables.print_table(frame, view, title=title, hint="a wider terminal or COLUMNS=200 shows them")
    else:
        show_frame(frame, fmt, out, title, view)
