"""Long SQL lives in ``.sql`` files next to the module that runs it (as the migrations do), shipped
as package data; statements bind their parameters (``$lo``, ``$hi``...), never format values in."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def load_sql(package: str, name: str) -> str:
    """The text of ``name`` in ``package`` (a module's ``__package__``)."""
    return (resources.files(package) / name).read_text(encoding="utf-8")
