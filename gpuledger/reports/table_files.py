"""A table as a file or an HTML table's cells, the same for every report (statements, showback,
the weekly summary): CSV with fixed float precision, Parquet, the cell texts an HTML row shows,
and the sha256 a manifest lists. Below the reports that use it, so none imports another for it."""

from __future__ import annotations

import hashlib
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import polars as pl


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_csv(frame: pl.DataFrame, path: Path) -> Path:
    # 6 decimals: GPU-hours to 3.6 ms; money columns are decimals and print exactly
    path.write_text(frame.write_csv(float_precision=6, datetime_format="%Y-%m-%dT%H:%M:%S"))
    return path


def write_parquet(frame: pl.DataFrame, path: Path) -> Path:
    frame.write_parquet(path, compression="zstd", statistics=True)
    return path


def _cell(value, name: str) -> dict:
    if name == "note":
        return {"text": "" if value is None else str(value), "num": False, "note": True}
    if value is None:
        return {"text": "", "num": False}
    if isinstance(value, Decimal):
        return {"text": f"{value:,.2f}", "num": True}
    if isinstance(value, bool):
        return {"text": "yes" if value else "no", "num": False}
    if isinstance(value, float):
        return {"text": f"{value:.1%}" if name == "efficiency_ratio" else f"{value:,.3f}", "num": True}
    if isinstance(value, int):
        return {"text": str(value), "num": True}
    if isinstance(value, datetime):
        return {"text": f"{value:%Y-%m-%d %H:%M}", "num": False}
    return {"text": str(value), "num": False}


def html_rows(frame: pl.DataFrame) -> list[list[dict]]:
    """Each row's cells as the report templates show them: text and whether it is a number."""
    return [[_cell(v, frame.columns[i]) for i, v in enumerate(row)] for row in frame.iter_rows()]
