"""Option values without typer's pydantic layer, in the common case.

typer 0.29 coerces every option value through a pydantic ``TypeAdapter`` built on first use
(``typer/_coercion.py``, ``typer/_adapters.py``), even a ``--help`` flag left unset. Importing
that layer (pydantic's validators and core schema) costs more than the rest of a command's
``--help``, and a third of a read command served from materialized rows (BENCHMARKS.md "Read
model and CLI latency").

The read commands' options are of four kinds: ``str``, ``bool``, ``Path`` and an ``Enum`` of
choices. A value that arrives as a string (or already as the type) needs none of pydantic for
these: a string stays itself, a path goes through typer's own pydantic-free path checks
(``coerce_cli_path``), a choice through typer's own matching (``coerce_cli_choice``). Anything
else — numbers, ranges, lists, files, custom parsers, and any value the light path cannot take —
goes to typer's own coercion unchanged, so every error message is typer's own.
tests/cli/test_coercion.py holds both to the same answers for every option of the tree.

This leans on typer internals (``_TyperParameter._runtime_param``, ``typer._coercion``); with a
typer that lacks them :func:`lighten` installs nothing and typer's coercion runs (slower, the same
answers), and the test says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

try:  # typer 0.29's coercion layer (imported by typer.core already: costs nothing here)
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path, lenient_issubclass, routes_to_path
except ImportError:  # another typer: its own coercion stays
    RuntimeParam = None

_TYPERS = object()  # "not for the light path": typer's own coercion answers


def kind_of(descriptor) -> str | None:
    """Which light coercion a parameter's typer ``TypeDescriptor`` takes (the order of typer's
    ``build_leaf_adapter``), or None for typer's own."""
    info, annotation = descriptor.parameter_info, descriptor.annotation
    if descriptor.file_annotation is not None or info.parser is not None:
        return None
    if lenient_issubclass(annotation, Enum):
        return "choice"
    if annotation is bool:
        return "bool"
    if annotation is str:
        return "str"
    if lenient_issubclass(annotation, Path) and routes_to_path(annotation, info):
        return "path"
    return None


def _light(kind: str, descriptor, value: Any, param, ctx) -> Any:
    info, annotation = descriptor.parameter_info, descriptor.annotation
    if kind == "str" and isinstance(value, str):
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "choice" and isinstance(value, (str, annotation)):
        return coerce_cli_choice(value, choices=tuple(annotation), case_sensitive=info.case_sensitive, ctx=ctx)
    if kind == "path" and isinstance(value, (str, Path)):
        path_type = info.path_type or annotation
        given = path_type(value) if lenient_issubclass(path_type, Path) else value
        return coerce_cli_path(given, info, path_type=path_type, param=param, ctx=ctx)
    return _TYPERS


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class LightParam(RuntimeParam):
        """typer's runtime coercion for one parameter, without pydantic where ``kind`` allows."""

        kind: str = "str"
        descriptor: Any = None

        def _coerce_value(self, value: Any, param, ctx) -> Any:
            try:
                out = _light(self.kind, self.descriptor, value, param, ctx)
            except Exception:  # noqa: BLE001 - typer's own coercion raises its own error for it
                out = _TYPERS
            if out is _TYPERS:
                return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)
            return out


def lighten(command, ctx=None, *, recursive: bool = True):
    """Give ``command``'s typer parameters (its help option too, when ``ctx`` is given, and with
    ``recursive`` every subcommand's) the light coercion where their kind allows; returns
    ``command``. A parameter already coerced once keeps what it has."""
    if RuntimeParam is None:
        return command
    params = list(getattr(command, "params", ()))
    if ctx is not None and hasattr(command, "get_help_option"):
        params.append(command.get_help_option(ctx))  # created (and cached by the command) now
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", _TYPERS) is not None:
            continue
        kind = kind_of(descriptor)
        if kind is not None:
            param._runtime_param = LightParam(parameter_info=descriptor.parameter_info,
                                              annotation=descriptor.annotation, kind=kind, descriptor=descriptor)
    if recursive:
        for sub in getattr(command, "commands", {}).values():
            lighten(sub, ctx)
    return command


def light_parameters(command) -> dict[str, str]:
    """``{command path / option: kind}`` of the parameters under ``command`` that take the light
    coercion (for the tests and the benchmark's note)."""
    out: dict[str, str] = {}

    def walk(cmd, path: str) -> None:
        for param in getattr(cmd, "params", ()):
            runtime = getattr(param, "_runtime_param", None)
            if RuntimeParam is not None and isinstance(runtime, LightParam):
                out[f"{path} {param.name}"] = runtime.kind
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(command, getattr(command, "name", "") or "")
    return out
