"""The command tree's root: each top-level group's module is imported only when that group runs (or
its help is asked for), so `gpuledger --help` loads none of them and `gpuledger report usage` loads
only gpuledger/cli/report; their options are coerced without typer's pydantic layer where they can
be (gpuledger/cli/coercion.py). Help is click's plain text: it wraps to the terminal and never cuts an
option name (rich's tables did: `--checkpoint-min…` at 80 columns), and it loads no rich.

The old top-level names (deprecated for a release, now removed) answer with one line naming the command
that replaced them, exit 2 (:func:`removed_name`)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

from gpuledger.cli.coercion import lighten

if TYPE_CHECKING:
    import click

# name -> the line shown in `gpuledger --help` (each group's own help is in its module)
GROUPS = {
    "ingest": "metrics, job records and device holdings into the warehouse; the GPU-node agent",
    "report": "usage, utilization, chargeback, fair share, budgets, squatters, finance files",
    "warehouse": "migrate, summary, quarantine, disk use, prune, retire a GPU",
    "config": "check, print or load the config; the versions the warehouse holds",
    "period": "close a month's statement, list closed months, correct one",
    "enforce": "funded priorities and squatter preemption (dry run unless apply --yes)",
    "alerts": "on-call and owner alerts through the warehouse outbox; an owner's answer to one",
    "team": "a team lead's own queue: order, fund, hold or release the team's queued jobs",
    "whatif": "replay job records under scheduling policies and capacity mixes",
    "pipelines": "run the Dagster asset graph once in this process",
    "simulate": "a deterministic simulated GPU cluster: warehouse, endpoints, files",
    "metrics": "gpuledger's own figures for Prometheus",
    "dashboards": "serve the Streamlit dashboards of the installed package",
}
# removed old name -> the command that replaced it (group path, command); `import` was a group of one
ALIASES = {
    "fairshare": ("report", "fairshare"),
    "budget": ("report", "budget"),
    "squatters": ("report", "squatters"),
    "summary": ("warehouse", "summary"),
    "migrate": ("warehouse", "migrate"),
    "quarantine": ("warehouse", "quarantine"),
    "agent": ("ingest agent", "nvml"),
}
GROUP_ALIASES = {"import": {"jobs": ("ingest", "jobs-csv")}}


def plain_help(command):
    """``command`` and everything under it with click's plain help (typer's rich mode off). A
    group's commands not built yet (LazyCommands) are left so: each gets it when built."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    for sub in dict.values(getattr(command, "commands", {})):  # dict's own: builds nothing
        if sub is not None:
            plain_help(sub)
    return command


def removed_name(old_path: str, new_path: str) -> click.Command:
    """A hidden command for a name that was deprecated and is gone: whatever it is given, one line
    on stderr naming ``gpuledger NEW_PATH``, exit 2 (a usage error), nothing run. (click, beside
    typer's own copy of it, loads only here: ~8 ms of every command's start otherwise.)"""
    import click

    def callback(args=()):
        typer.secho(f"gpuledger {old_path} was removed (deprecated the release before): use `gpuledger {new_path}`",
                    err=True, fg="red")
        raise typer.Exit(2)

    return click.Command(old_path.split()[-1], callback=callback, hidden=True, add_help_option=False,
                         params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


class LazyCommands(dict):
    """A group's commands by name, each built from its typer registration the first time it is
    looked up (then kept): `gpuledger report fairshare` builds one command, not the group's ten —
    typer reads every parameter of every function it builds (~1 ms each; issue 41: a read command
    answers in a few times a bare `import typer`). Iterating the values or items builds them all."""

    def __init__(self, infos: dict, build) -> None:
        super().__init__(dict.fromkeys(infos))
        self._infos, self._build = infos, build

    def __getitem__(self, name: str):
        command = super().__getitem__(name)
        if command is None:
            command = self._build(self._infos[name])
            super().__setitem__(name, command)
        return command

    def get(self, name: str, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def values(self):
        return [self[name] for name in self]

    def items(self):
        return [(name, self[name]) for name in self]


def lazy_group(app: typer.Typer, ctx):
    """``app`` as a click group whose commands (not its sub-groups) are built on first lookup, each
    with plain help and the light coercion, as :func:`plain_help` / :func:`lighten` give a whole tree."""
    import typer.main

    infos = {info.name or typer.main.get_command_name(info.callback.__name__): info for info in app.registered_commands}
    registered, app.registered_commands = app.registered_commands, []
    try:
        group = typer.main.get_group(app)  # its callback, options and sub-groups; no commands yet
    finally:
        app.registered_commands = registered
    built = dict(group.commands)  # the sub-groups (`ingest agent`)
    for sub in built.values():
        lighten(plain_help(sub), ctx)

    def build(info):
        command = typer.main.get_command_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                                   rich_markup_mode=app.rich_markup_mode)
        return lighten(plain_help(command), ctx)

    group.commands = LazyCommands(infos, build)
    for name, sub in built.items():
        dict.__setitem__(group.commands, name, sub)
    return group


class CommandTree(TyperGroup):
    """The root group: the names are known without importing anything; a group's module loads on
    first use."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: dict = {}

    def parse_args(self, ctx, args):
        lighten(self, ctx, recursive=False)  # the root's own options (--debug, --help): no pydantic
        return super().parse_args(ctx, args)

    def list_commands(self, ctx) -> list[str]:
        return list(GROUPS)

    def get_command(self, ctx, name: str):
        if name not in self._loaded:
            command = self._build(ctx, name)
            if command is None:
                return None
            self._loaded[name] = command
        return self._loaded[name]

    def _build(self, ctx, name: str):
        if name in GROUPS:
            group = lazy_group(import_module(f"gpuledger.cli.{name}").app, ctx)
            group.name = name
            return lighten(plain_help(group), ctx, recursive=False)  # str / bool / Path / choice options without pydantic
        if name in ALIASES:
            return removed_name(name, " ".join(ALIASES[name]))
        if name in GROUP_ALIASES:
            news = ", ".join(" ".join(n) for n in GROUP_ALIASES[name].values())
            return removed_name(name, news)
        return None

    def format_commands(self, ctx, formatter) -> None:
        # from the tables above: listing the tree imports none of it
        with formatter.section("Commands"):
            formatter.write_dl(list(GROUPS.items()))
