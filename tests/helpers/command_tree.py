"""Every command path of the `gpuledger` tree, found the way click finds them (the root loads its
groups on demand, so its `.commands` dict is empty until asked)."""

from __future__ import annotations

import typer
import typer.main
from typer.core import TyperGroup


def command_paths() -> list[list[str]]:
    """[[], ["ingest"], ["ingest", "scrape"], ...]: the root, every group and every command."""
    from gpuledger.cli import app

    root = typer.main.get_command(app)
    paths: list[list[str]] = [[]]

    def walk(group, prefix: list[str]) -> None:
        if not isinstance(group, TyperGroup):
            return
        ctx = typer.Context(group)
        for name in group.list_commands(ctx):
            paths.append([*prefix, name])
            walk(group.get_command(ctx, name), [*prefix, name])

    walk(root, [])
    return paths
