"""Deprecated command names: the old spelling runs the new command, after one line on stderr that
names the new one. Kept for one release (README "Command tree"), then removed."""

from __future__ import annotations

import functools
from collections.abc import Callable

import typer

PANEL = "Deprecated aliases"


def add_deprecated_alias(app: typer.Typer, old: str, new: str, function: Callable, *,
                         old_path: str | None = None) -> None:
    """Register ``function`` on ``app`` as command ``old``; running it first says to use
    ``gpuledger NEW`` (stderr, so a command's csv / json on stdout stays clean)."""

    @functools.wraps(function)  # typer reads the options from the wrapped signature
    def alias(*args, **kwargs):
        typer.secho(f"gpuledger {old_path or old} is deprecated and goes in the next release; "
                    f"use `gpuledger {new}`", err=True, fg="yellow")
        return function(*args, **kwargs)

    app.command(old, help=f"Deprecated: use `gpuledger {new}`.", rich_help_panel=PANEL)(alias)
