"""Modules that load on first use, so `gpuledger --help` (and every command's `--help`) does not pay
for polars, DuckDB or the Kubernetes client. The stdlib's own recipe (importlib.util.LazyLoader):
the module object exists at once and runs its code on the first attribute access."""

from __future__ import annotations

import importlib.util
import sys
from importlib import import_module
from importlib.util import find_spec
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """``name`` as a module that is executed on first attribute access (already imported: as is)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def lazy_attributes(package: str, homes: dict[str, str], namespace: dict):
    """A module ``__getattr__`` (PEP 562) for ``package``: ``homes`` maps a public name to the
    submodule that defines it, imported on first use and kept in ``namespace`` (the package's
    ``globals()``); submodules themselves resolve as attributes too (``warehouse.writes.X``)."""
    def __getattr__(name: str):
        home = homes.get(name)
        if home is None:
            if not name.startswith("_") and find_spec(f"{package}.{name}") is not None:
                return import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    return __getattr__
