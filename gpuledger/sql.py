"""The one loader of SQL text: long SQL lives in ``.sql`` files next to the module that runs it
(as the migrations do), shipped as package data; statements bind their parameters (``$lo``,
``$hi``...), never format values in.

A file may name a fragment ``{{ name }}``: a rule that must read the same in SQL everywhere (the
best activity signal, which lines are billed: gpuledger.rules) or a shared piece of SQL (the
hourly aggregates). The caller passes each fragment by name; a missing or unused one is an error,
so a file and its caller cannot drift apart silently.
"""

from __future__ import annotations

import importlib
import re
import sys
from functools import cache
from pathlib import Path

_FRAGMENT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def package_folder(package: str) -> Path | None:
    """The folder a package's files are read from (a wheel, an editable install), or None for a
    package in a zip, whose files only importlib.resources reads. Read commands use the folder:
    importlib.resources' first use imports its readers and zipfile, ~10 ms of every read
    command's start (issue 41)."""
    module = sys.modules.get(package) or importlib.import_module(package)
    folders = module.__spec__.submodule_search_locations or ()
    return next((Path(f) for f in folders if Path(f).is_dir()), None)


@cache
def _text(package: str, name: str) -> str:
    folder = package_folder(package)
    if folder is not None:
        return (folder / name).read_text(encoding="utf-8")
    from importlib import resources  # lazy: a zipped package only; its readers cost ~10 ms at start

    return (resources.files(package) / name).read_text(encoding="utf-8")


def load_sql(package: str, name: str, **fragments: str) -> str:
    """The text of ``name`` (a path under ``package``, a module's ``__package__``) with each
    ``{{ fragment }}`` replaced by the SQL text given for it."""
    text = _text(package, name)
    named = set(_FRAGMENT.findall(text))
    if named != set(fragments):
        raise ValueError(f"{package}/{name}: fragments named {sorted(named)}, given {sorted(fragments)}")
    return _FRAGMENT.sub(lambda m: fragments[m[1]], text) if named else text
