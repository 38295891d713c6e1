"""The `gpuledger` command line: ONE tree, one module per top-level group in this package
(ingest, report, warehouse, config, period, enforce, alerts, whatif, pipelines, simulate,
metrics). The domains hold no CLI code; these modules parse options, call the domain and print.
This file assembles the tree, keeps the deprecated aliases of the old names, and is the program's
one error boundary (`main`)."""

from __future__ import annotations

import os

import typer

from gpuledger.cli import (
    alerts,
    config,
    dashboards,
    enforce,
    ingest,
    metrics,
    period,
    pipelines,
    report,
    simulate,
    warehouse,
    whatif,
)
from gpuledger.cli.aliases import add_deprecated_alias
from gpuledger.cli.ingest import agent as ingest_agent
from gpuledger.cli.ingest import jobs_csv
from gpuledger.errors import GpuledgerError, printable

app = typer.Typer(
    help="gpuledger: GPU-time analytics, fair share, budgets, chargeback and idle-GPU enforcement.",
    no_args_is_help=True,
    add_completion=False,
)
for _name, _group in (("ingest", ingest.app), ("report", report.app), ("warehouse", warehouse.app),
                      ("config", config.app), ("period", period.app), ("enforce", enforce.app),
                      ("alerts", alerts.app), ("whatif", whatif.app), ("pipelines", pipelines.app),
                      ("simulate", simulate.app), ("metrics", metrics.app),
                      ("dashboards", dashboards.app)):
    app.add_typer(_group, name=_name)

# The old names, kept for one release: each runs the new command after one line on stderr.
for _old, _new, _function in (("fairshare", "report fairshare", report.fairshare),
                              ("budget", "report budget", report.budget),
                              ("squatters", "report squatters", report.squatters),
                              ("summary", "warehouse summary", warehouse.summary),
                              ("migrate", "warehouse migrate", warehouse.migrate),
                              ("quarantine", "warehouse quarantine", warehouse.quarantine_list),
                              ("agent", "ingest agent", ingest_agent.agent_command)):
    add_deprecated_alias(app, _old, _new, _function)
_import_app = typer.Typer(help="Deprecated: use `gpuledger ingest jobs-csv`.", no_args_is_help=True,
                          deprecated=True)
add_deprecated_alias(_import_app, "jobs", "ingest jobs-csv", jobs_csv.import_jobs, old_path="import jobs")
app.add_typer(_import_app, name="import", rich_help_panel="Deprecated aliases")

DEBUG_ENV = "GPULEDGER_DEBUG"
_debug = False  # set by the --debug option


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", envvar=DEBUG_ENV,
                               help=f"show the Python traceback of an error (env {DEBUG_ENV}=1)"),
) -> None:
    """gpuledger: GPU-time analytics, fair share, budgets, chargeback and idle-GPU enforcement."""
    global _debug
    _debug = debug


def _known_exit_code(exc: BaseException) -> int | None:
    """The exit code of a problem whose message says what to fix; None for anything else."""
    if isinstance(exc, GpuledgerError):  # ConfigError too
        return exc.exit_code
    # Checked by name (subclasses too): importing their modules here would load DuckDB for `--help`.
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "WarehouseError" in names:
        return getattr(exc, "exit_code", 2)
    if "MissingExtra" in names:
        return getattr(exc, "exit_code", 1)
    return None


def main() -> None:
    """The `gpuledger` program: a known problem (a user's mistake, a broken environment, a source
    answering wrongly) ends in ONE line naming the file, line, field or option and the fix, exit 2
    for a usage error and 1 for a failed run; anything else in one "internal error" line. With
    --debug (or $GPULEDGER_DEBUG=1) the traceback is shown instead."""
    try:
        # not standalone: typer's own usage errors come here too, to be told in one line; a
        # command's typer.Exit(n) comes back as n (commands return None, so anything else is a code)
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            raise SystemExit(code)
    except typer.Abort:
        typer.secho("gpuledger: aborted", err=True, fg="red")
        raise SystemExit(1) from None
    except Exception as exc:  # noqa: BLE001 - the one error boundary of the program
        if _debug or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes"):
            raise
        if isinstance(exc, typer.TyperException) and hasattr(exc, "format_message"):
            # an option typer/click refused: which command, what is wrong, where the help is
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "gpuledger"
            message = " ".join(exc.format_message().split())
            hint = f" (see `{where} --help`)" if exc.exit_code == 2 else ""
            if message:  # empty: a group called without a command, whose help was just shown
                typer.secho(f"{where}: {printable(message)}{hint}", err=True, fg="red")
            raise SystemExit(exc.exit_code) from None
        code = _known_exit_code(exc)
        lines = (str(exc).strip() or type(exc).__name__).splitlines()
        if code is None and isinstance(exc, OSError) and exc.filename:
            # the environment refused a file (disk full, read-only, permissions): it names the file
            code, lines = 1, [f"{exc.filename}: {exc.strerror or exc}; check the path, its permissions "
                              "and the free disk space"]
        if code is None:
            code = 1
            lines = [f"internal error: {type(exc).__name__}: {lines[0]}; rerun with --debug and report it"]
        # a config error lists one problem per line; raw text from a source is escaped
        typer.secho("\n".join(f"gpuledger: {printable(lines[0])}" if i == 0 else printable(line)
                              for i, line in enumerate(lines)), err=True, fg="red")
        raise SystemExit(code) from None

