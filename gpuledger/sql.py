"""The one loader of SQL text: long SQL lives in ``.sql`` files next to the module that runs it
(as the migrations do), shipped as package data; statements bind their parameters (``$lo``,
``$hi``...), never format values in.

A file may name a fragment ``{{ name }}``: a rule that must read the same in SQL everywhere (the
best activity signal, which lines are billed: gpuledger.rules) or a shared piece of SQL (the
hourly aggregates). The caller passes each fragment by name; a missing or unused one is an error,
so a file and its caller cannot drift apart silently.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

_FRAGMENT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@cache
def _text(package: str, name: str) -> str:
    # A package installed as files (a wheel, an editable install) is read from its folder:
    # importlib.resources' first use imports its readers and zipfile, ~10 ms of every read
    # command's start (issue 41); a package in a zip keeps going through importlib.resources.
    spec = sys.modules[package].__spec__ if package in sys.modules else None
    for folder in (spec and spec.submodule_search_locations) or ():
        path = Path(folder, name)
        if path.is_file():
            return path.read_text(encoding="utf-8")
    from importlib import resources

    return (resources.files(package) / name).read_text(encoding="utf-8")


def load_sql(package: str, name: str, **fragments: str) -> str:
    """The text of ``name`` (a path under ``package``, a module's ``__package__``) with each
    ``{{ fragment }}`` replaced by the SQL text given for it."""
    text = _text(package, name)
    named = set(_FRAGMENT.findall(text))
    if named != set(fragments):
        raise ValueError(f"{package}/{name}: fragments named {sorted(named)}, given {sorted(fragments)}")
    return _FRAGMENT.sub(lambda m: fragments[m[1]], text) if named else text
