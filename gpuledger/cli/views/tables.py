"""Terminal tables: the one place every command that prints a table renders it.

A table never cuts a number or a name. It shows a report's important columns by default (the
`View` says which, see views/reports.py) and every column with ``--wide`` or the ones named with
``--columns``. It fits the terminal's width (``COLUMNS`` when set, else the terminal; piped
without ``COLUMNS``: as wide as it needs): first by narrowing the gaps between columns, then by
wrapping free-text columns, and only then by hiding default columns from the right, which a line
under the table names. Explicitly asked-for columns are never hidden: the table grows instead.

Light on purpose (CLI modules import it for --help): the frame is a polars DataFrame, but polars
is never imported here.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuledger.errors import UsageError

if TYPE_CHECKING:
    import polars as pl

WideOpt = typer.Option(False, "--wide", help="show every column (the terminal table; csv/json always have them all)")
ColumnsOpt = typer.Option(
    None, "--columns",
    help="comma-separated column names to show, in this order (their csv names; also selects csv/parquet/json columns)",
)

GIB = 2**30
KINDS = ("text", "int", "num", "money", "gib", "datetime", "date", "bool")


@dataclass(frozen=True)
class Column:
    """How one frame column shows in the terminal.

    ``name`` is the frame's (and csv's) column name; ``header`` the terminal header, lines split by
    "\\n", units in it ("{currency}" is filled from the frame's currency column). ``kind`` picks the
    cell format; ``decimals`` for "num" and "gib". ``default``: shown without --wide. ``key``: an
    identifying column, never hidden to fit. ``wrap``: free text that may wrap inside its column,
    at spaces; ``wrap="hyphen"`` also after a hyphen (a state such as preempt-eligible);
    ``wrap="anywhere"`` also inside a word (raw input lines, which are not names).
    """

    name: str
    header: str
    kind: str = "text"
    decimals: int = 1
    default: bool = True
    key: bool = False
    wrap: bool | str = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")


@dataclass(frozen=True)
class View:
    """A report's columns in display order, with notes for units or abbreviations: (column, text)
    pairs, a note printed under the table when its column shows ("" = always).

    ``indent``: (name column, depth column) to indent tree names by depth, as ``sshare`` does.
    ``currency``: the column naming the currency of the money columns.
    """

    columns: tuple[Column, ...]
    notes: tuple[tuple[str, str], ...] = ()
    indent: tuple[str, str] | None = None
    currency: str = "currency"

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


def format_value(value: object, kind: str | None = None, decimals: int = 1) -> str:
    """One cell as text: "" for NULL, "inf" for infinity, yes/no, thousands separators, money to the
    cent, bytes as GiB, times to the minute (UTC)."""
    if value is None:
        return ""
    kind = kind or _kind_of(value)
    if kind == "bool" or isinstance(value, bool):
        return "yes" if value else "no"
    if kind == "money":
        return f"{Decimal(value):,.2f}"
    if kind == "gib":
        return f"{value / GIB:,.{decimals}f}"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "num":
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return f"{value:,.{decimals}f}"
    if kind == "datetime" and isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if kind in ("date", "datetime") and isinstance(value, date):
        return value.strftime("%Y-%m-%d")
    return str(value)


def _kind_of(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Decimal):
        return "money"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "num"
    if isinstance(value, datetime):
        return "datetime"
    if isinstance(value, date):
        return "date"
    return "text"


def _implicit(frame: pl.DataFrame, name: str) -> Column:
    """A column the view does not declare (new in the report): shown under --wide as it is."""
    dtype = frame.schema[name]
    if dtype.is_float():
        return Column(name, name, "num", decimals=3, default=False)
    if dtype.is_integer():
        return Column(name, name, "int", default=False)
    return Column(name, name, default=False)  # formatted by the value's own type


def resolve(frame: pl.DataFrame, view: View, name: str) -> Column:
    """How column ``name`` of ``frame`` shows: as the view declares it, else as its type says."""
    return view.column(name) or _implicit(frame, name)


def parse_columns(text: str | None) -> list[str] | None:
    """``--columns a,b,c`` as a list (None when not given)."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("--columns: give one or more column names separated by commas, e.g. --columns node,status")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"--columns: {', '.join(twice)} named more than once; name each column once")
    return names


def check_columns(frame: pl.DataFrame, names: list[str] | None) -> None:
    """Every name in ``names`` is a column of ``frame``, else a one-line error listing the valid ones."""
    unknown = [n for n in names or () if n not in frame.columns]
    if unknown:
        raise UsageError(f"--columns: no column {', '.join(unknown)}; choose from {', '.join(frame.columns)}")


def render(
    frame: pl.DataFrame,
    view: View,
    *,
    title: str = "",
    width: int | None = None,
    wide: bool = False,
    columns: list[str] | None = None,
    bold: bool = False,
    hint: str = "--wide or --columns shows them",
) -> str:
    """The table as text lines (ending in a newline). ``width`` None: no limit."""
    check_columns(frame, columns)
    if columns is not None:
        chosen = [resolve(frame, view, n) for n in columns]
    else:
        declared = [c for c in view.columns if c.name in frame.columns]
        extra = [_implicit(frame, n) for n in frame.columns if view.column(n) is None]
        chosen = declared + extra if wide else [c for c in declared if c.default]
    chosen = _with_currency(frame, view, chosen, explicit=columns is not None)
    explicit = wide or columns is not None
    cells = {c.name: _cells(frame, view, c) for c in chosen}
    currency = _single_currency(frame, view)
    headers = {c.name: _header_lines(c.header, currency) for c in chosen}
    natural = {c.name: max([len(h) for h in headers[c.name]] + [len(v) for v in cells[c.name]]) for c in chosen}

    widths, gap, hidden = _fit(chosen, natural, headers, cells, width, explicit)
    shown = [c for c in chosen if c.name not in hidden]
    lines: list[str] = []
    for text in _prose(title, width) if title else []:
        lines.append(typer.style(text, bold=True) if bold else text)
    lines.extend(_header_block(shown, headers, widths, gap, bold))
    for row in range(frame.height):
        lines.extend(_row_lines(shown, cells, widths, gap, row))
    if frame.height == 0:
        lines.append("(no rows)")
    below = [f"hidden to fit {width} columns: {', '.join(hidden)} ({hint})"] if hidden else []
    names = {c.name for c in shown}
    below += [text for column, text in view.notes if column == "" or column in names]
    for text in below:
        lines.extend(_prose(text, width))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _prose(text: str, width: int | None) -> list[str]:
    """A title or note kept to the width, wrapped at spaces (a long path stays whole)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) if width else [text]


def _single_currency(frame: pl.DataFrame, view: View) -> str | None:
    if view.currency not in frame.columns:
        return None
    values = {v for v in frame[view.currency].to_list() if v is not None}
    return values.pop() if len(values) == 1 else None


def _with_currency(frame: pl.DataFrame, view: View, chosen: list[Column], *, explicit: bool) -> list[Column]:
    """Money headers carry a single currency; with several, the currency column must show."""
    names = [c.name for c in chosen]
    has_money = any(c.kind == "money" for c in chosen)
    if (not explicit and has_money and view.currency in frame.columns and view.currency not in names
            and _single_currency(frame, view) is None and frame.height):
        money_at = max(i for i, c in enumerate(chosen) if c.kind == "money")
        chosen = [*chosen[:money_at + 1], view.column(view.currency) or Column(view.currency, view.currency),
                  *chosen[money_at + 1:]]
    return chosen


def _header_lines(header: str, currency: str | None) -> list[str]:
    lines = header.split("\n")
    if currency is not None:
        return [line.replace("{currency}", currency) for line in lines]
    return [line for line in lines if "{currency}" not in line] or [header.replace("{currency}", "")]


def _cells(frame: pl.DataFrame, view: View, column: Column) -> list[str]:
    values = frame[column.name].to_list()
    kind = None if column.kind == "text" else column.kind
    out = [format_value(v, kind, column.decimals) for v in values]
    if view.indent and column.name == view.indent[0] and view.indent[1] in frame.columns:
        depths = frame[view.indent[1]].to_list()
        out = [" " * int(d or 0) + v for v, d in zip(out, depths, strict=True)]
    return out


def _fit(chosen, natural, headers, cells, width, explicit):
    """Column widths, the gap between columns, and the default columns hidden to fit ``width``."""
    widths = dict(natural)

    def total(cols, gap):
        return sum(widths[c.name] for c in cols) + gap * max(0, len(cols) - 1)

    if width is None:
        return widths, 2, []
    for gap in (2, 1):
        if total(chosen, gap) <= width:
            return widths, gap, []
    # Free text wraps: narrow the widest wrapping column a character at a time, never below its
    # header, its longest word (wrapping at spaces) or 10 characters.
    floors = {}
    for c in chosen:
        if c.wrap:
            pieces = (re.split(r"\s+|(?<=-)", v) if c.wrap == "hyphen" else v.split() for v in cells[c.name])
            words = [] if c.wrap == "anywhere" else [len(w) for ws in pieces for w in ws]
            floors[c.name] = min(natural[c.name], max([10] + [len(h) for h in headers[c.name]] + words))
    while total(chosen, 1) > width:
        room = [n for n in floors if widths[n] > floors[n]]
        if not room:
            break
        widest = max(room, key=lambda n: widths[n] - floors[n])
        widths[widest] -= 1
    if total(chosen, 1) <= width:
        return widths, 1, []
    if explicit:
        return widths, 1, []  # asked for: wider than the terminal rather than hidden
    shown = list(chosen)
    hidden: list[str] = []
    for c in reversed(chosen):
        if total(shown, 1) <= width:
            break
        if not c.key:
            shown.remove(c)
            hidden.insert(0, c.name)
    return widths, 1, hidden


def _align(text: str, width: int, right: bool) -> str:
    return text.rjust(width) if right else text.ljust(width)


def _right(column: Column) -> bool:
    return column.kind in ("int", "num", "money", "gib")


def _header_block(shown, headers, widths, gap, bold) -> list[str]:
    depth = max([len(headers[c.name]) for c in shown], default=1)
    sep = " " * gap
    lines = []
    for i in range(depth):
        parts = []
        for c in shown:
            h = headers[c.name]
            text = h[i - (depth - len(h))] if i >= depth - len(h) else ""  # bottom-aligned
            parts.append(_align(text, widths[c.name], _right(c)))
        line = sep.join(parts)
        lines.append(typer.style(line, bold=True) if bold else line)
    lines.append(sep.join("─" * widths[c.name] for c in shown))
    return lines


def _row_lines(shown, cells, widths, gap, row) -> list[str]:
    pieces = []
    for c in shown:
        text = cells[c.name][row]
        if c.wrap and len(text) > widths[c.name]:
            # at spaces only: a word longer than the column overflows it rather than being split
            pieces.append(textwrap.wrap(text, widths[c.name], break_long_words=c.wrap == "anywhere",
                                        break_on_hyphens=c.wrap == "hyphen") or [""])
        else:
            pieces.append([text])
    height = max(len(p) for p in pieces)
    sep = " " * gap
    return [sep.join(_align(p[i] if i < len(p) else "", widths[c.name], _right(c))
                     for c, p in zip(shown, pieces, strict=True)) for i in range(height)]


def terminal_width() -> int | None:
    """``COLUMNS`` when set (also when piped), else the terminal's width; None when stdout is not a
    terminal and ``COLUMNS`` is unset (a file or a pipe: no limit)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def print_table(
    frame: pl.DataFrame,
    view: View,
    *,
    title: str = "",
    wide: bool = False,
    columns: str | list[str] | None = None,
    out: Path | None = None,
    hint: str = "--wide or --columns shows them",
) -> None:
    """Render and print the table, or write it as plain text (no colour codes) to ``out``.
    ``hint`` says how to see columns hidden to fit (for a command without --wide / --columns)."""
    names = parse_columns(columns) if isinstance(columns, str) or columns is None else columns
    to_terminal = out is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    text = render(frame, view, title=title, width=terminal_width(), wide=wide, columns=names, bold=to_terminal,
                  hint=hint)
    if out is None:
        typer.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    typer.echo(f"wrote a table of {frame.height} rows to {out}", err=True)
