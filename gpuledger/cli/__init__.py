"""The `gpuledger` command line: ONE tree, one module per top-level group in this package
(ingest, report, warehouse, config, period, enforce, alerts, whatif, pipelines, simulate,
metrics). The domains hold no CLI code; these modules parse options, call the domain and print.
The root (tree.py) loads a group's module when it runs and keeps the deprecated aliases of the old
names; this file is the program's one error boundary (`main`)."""

from __future__ import annotations

import os
import signal
import threading

import typer

from gpuledger.cli.tree import CommandTree
from gpuledger.errors import GpuledgerError, printable

# gpuledger/cli/tree.py: the groups load on first use; plain click help that never cuts a name
app = typer.Typer(
    cls=CommandTree,
    help="gpuledger: GPU-time analytics, fair share, budgets, chargeback and idle-GPU enforcement.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

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
    if debug:  # library text in messages that keep it for --debug (gpuledger.errors.debug_wanted)
        os.environ[DEBUG_ENV] = "1"


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


_ctrl_c = False  # set by SIGINT: DuckDB turns it into "Query interrupted", polars into its own error


def _on_sigint(signum, frame) -> None:
    global _ctrl_c
    _ctrl_c = True
    signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as Python's own handler does


def _interrupted() -> None:
    """Ctrl-C: one line, exit 130 (what a shell expects of SIGINT). Every write is a transaction,
    so what was not committed is not there; the resumable commands continue on a rerun."""
    typer.secho("\ngpuledger: interrupted (Ctrl-C); work committed before it is kept, a rerun continues",
                err=True, fg="red")
    raise SystemExit(130) from None


def main() -> None:
    """The `gpuledger` program: a known problem (a user's mistake, a broken environment, a source
    answering wrongly) ends in ONE line naming the file, line, field or option and the fix, exit 2
    for a usage error and 1 for a failed run; anything else in one "internal error" line. With
    --debug (or $GPULEDGER_DEBUG=1) the traceback is shown instead."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        # not standalone: typer's own usage errors come here too, to be told in one line; a
        # command's typer.Exit(n) comes back as n (commands return None, so anything else is a code)
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            raise SystemExit(code)
    except typer.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            _interrupted()
        typer.secho("gpuledger: aborted", err=True, fg="red")
        raise SystemExit(1) from None
    except KeyboardInterrupt:  # Ctrl-C outside click's own handling (start-up, teardown)
        _interrupted()
    except Exception as exc:  # noqa: BLE001 - the one error boundary of the program
        if _debug or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes"):
            raise
        if _ctrl_c:  # whatever the library under the interrupted call made of Ctrl-C
            _interrupted()
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

