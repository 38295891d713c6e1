"""The command tree's root: each top-level group's module is imported only when that group runs (or
its help is asked for), so `gpuledger --help` loads none of them and `gpuledger report usage` loads
only gpuledger/cli/report; their options are coerced without typer's pydantic layer where they can
be (gpuledger/cli/coercion.py). Help is click's plain text: it wraps to the terminal and never cuts an
option name (rich's tables did: `--checkpoint-min…` at 80 columns), and it loads no rich.

The deprecated aliases (the old top-level names) are copies of the new commands that first say,
on stderr, which command replaces them. They go in the next release."""

from __future__ import annotations

import copy
from importlib import import_module

import typer
from typer.core import TyperGroup

from gpuledger.cli.coercion import lighten

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
# old name -> the command that replaces it (group path, command); `import` is a group of one
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
    """``command`` and everything under it with click's plain help (typer's rich mode off)."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command


def deprecated_copy(target, old_path: str, new_path: str):
    """A copy of ``target`` named by its old path's last word, which first prints one line on
    stderr naming ``gpuledger NEW_PATH`` (stderr: a command's csv / json on stdout stays clean)."""
    alias = copy.copy(target)
    alias.name = old_path.split()[-1]
    alias.help = f"Deprecated: use `gpuledger {new_path}`.\n\n{target.help or ''}".strip()
    alias.short_help = f"deprecated: use `gpuledger {new_path}`"
    run = target.callback

    def callback(*args, **kwargs):
        typer.secho(f"gpuledger {old_path} is deprecated and goes in the next release; "
                    f"use `gpuledger {new_path}`", err=True, fg="yellow")
        return run(*args, **kwargs)

    alias.callback = callback
    return alias


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
        return [*GROUPS, *ALIASES, *GROUP_ALIASES]

    def get_command(self, ctx, name: str):
        if name not in self._loaded:
            command = self._build(ctx, name)
            if command is None:
                return None
            self._loaded[name] = command
        return self._loaded[name]

    def _build(self, ctx, name: str):
        import typer.main

        if name in GROUPS:
            group = typer.main.get_group(import_module(f"gpuledger.cli.{name}").app)
            group.name = name
            return lighten(plain_help(group), ctx)  # str / bool / Path / choice options without pydantic
        if name in ALIASES:
            group, sub = ALIASES[name]
            return deprecated_copy(self._sub(ctx, group, sub), name, f"{group} {sub}")
        if name in GROUP_ALIASES:
            subs = GROUP_ALIASES[name]
            news = ", ".join(f"`gpuledger {g} {s}`" for g, s in subs.values())
            alias = TyperGroup(name=name, help=f"Deprecated: use {news}.", no_args_is_help=True,
                               rich_markup_mode=None)
            for old, (group, sub) in subs.items():
                alias.add_command(deprecated_copy(self._sub(ctx, group, sub), f"{name} {old}", f"{group} {sub}"))
            return lighten(alias, ctx)
        return None

    def _sub(self, ctx, group: str, name: str):
        first, *rest = group.split()  # a group path: "ingest agent"
        command = self.get_command(ctx, first)
        for word in [*rest, name]:
            command = command.get_command(ctx, word)
        return command

    def format_commands(self, ctx, formatter) -> None:
        # from the tables above: listing the tree imports none of it
        with formatter.section("Commands"):
            formatter.write_dl(list(GROUPS.items()))
        olds = {**{o: " ".join(n) for o, n in ALIASES.items()},
                **{o: ", ".join(" ".join(n) for n in subs.values()) for o, subs in GROUP_ALIASES.items()}}
        with formatter.section("Deprecated aliases (go in the next release)"):
            formatter.write_dl([(old, f"use `gpuledger {new}`") for old, new in olds.items()])
