"""The light option coercion (gpuledger/cli/coercion.py) gives typer's own answer: for every str,
bool, Path and choice option of the whole tree, each sample value comes out the same (the value,
or the same error and message) as through typer's pydantic TypeAdapter; and the read commands
really take the light path (a typer upgrade that drops the internals it uses fails here, loudly,
instead of quietly costing the read commands their start-up time)."""

from __future__ import annotations

import subprocess
import sys
from enum import Enum

import typer
import typer.main
from typer._coercion import build_runtime_param
from typer.core import TyperGroup

from gpuledger.cli import app, coercion


def _tree():
    """(command path, command, ctx) for every command of the tree, groups built as the CLI builds them."""
    root = typer.main.get_command(app)
    out = []

    def walk(command, path, ctx):
        out.append((path, command, ctx))
        if isinstance(command, TyperGroup):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                walk(sub, f"{path} {name}".strip(), typer.Context(sub, parent=ctx, info_name=name))

    walk(root, "", typer.Context(root, info_name="gpuledger"))
    return out


def _samples(kind, annotation, tmp_path):
    if kind == "str":
        return ["abc", "", "ünï code", "2026-11-01T00:00:00Z", " padded "]
    if kind == "bool":
        return [True, False, "true", "0", ""]  # strings (an envvar): typer's own coercion
    if kind == "choice":
        values = [m.value for m in annotation]
        return [*values, values[0].upper(), "nope", "", list(annotation)[0]]
    (tmp_path / "a-file").write_text("x")
    return [str(tmp_path), str(tmp_path / "a-file"), str(tmp_path / "missing"), "-", "", tmp_path]


def _outcome(runtime, value, param, ctx):
    try:
        got = runtime.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - the error is the answer compared
        return ("error", type(exc).__name__, getattr(exc, "message", str(exc)))
    return ("value", type(got).__name__, got.value if isinstance(got, Enum) else got)


def test_light_coercion_answers_as_typer_does_for_every_option(tmp_path):
    compared = {"str": 0, "bool": 0, "choice": 0, "path": 0}
    for path, command, ctx in _tree():
        params = [*command.params, command.get_help_option(ctx)]
        for param in params:
            runtime = getattr(param, "_runtime_param", None)
            if not isinstance(runtime, coercion.LightParam):
                continue
            typers = build_runtime_param(param.type_descriptor)
            for value in _samples(runtime.kind, param.type_descriptor.annotation, tmp_path):
                light, own = _outcome(runtime, value, param, ctx), _outcome(typers, value, param, ctx)
                assert light == own, (path, param.name, value)
                compared[runtime.kind] += 1
    assert all(compared.values()), compared  # each kind met at least once


def test_the_read_commands_take_the_light_path():
    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="gpuledger")
    light = coercion.light_parameters(root.get_command(ctx, "report"))
    for name in ("usage start", "usage end", "usage by", "usage fmt", "usage warehouse_file",
                 "fairshare now", "fairshare wide", "budget jobs", "squatters config"):
        assert f"report {name}" in light, name
    assert light["report usage fmt"] == "choice" and light["report usage warehouse_file"] == "path"
    # numbers keep typer's own coercion (ranges, pydantic's messages)
    simulate = coercion.light_parameters(root.get_command(ctx, "simulate"))
    assert "simulate warehouse gpus" not in simulate


def test_a_read_command_and_its_help_import_no_pydantic(tmp_path):
    # `report usage --help`, and a read command up to its first use of the warehouse (it stops at
    # the missing file): no pydantic_core, so no TypeAdapter was built for an option
    probe = (
        "import contextlib, io, sys\n"
        "from gpuledger.cli import main\n"
        "sys.argv = ['gpuledger', *sys.argv[1:]]\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('pydantic_core' in sys.modules)\n"
    )
    for args in (["report", "usage", "--help"],
                 ["report", "usage", "--start", "2026-11-01", "--end", "2026-11-02", "--format", "csv",
                  "-w", str(tmp_path / "none.duckdb")]):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=60,
                              check=True)
        assert done.stdout.strip() == "False", args
