"""`gpuledger ingest kubernetes`: GPU pods and Kueue Workloads into ``jobs``.

``app`` carries the one command ``kubernetes``; ``ingest_kubernetes_command`` is the same function
for a parent app that prefers ``ingest_app.command("kubernetes")(ingest_kubernetes_command)``.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Annotated

import typer

from gpuledger import deadlines
from gpuledger.cli.options import WarehouseOpt, warehouse_path
from gpuledger.errors import printable
from gpuledger.stopping import Stopped, StopSignals

app = typer.Typer(help="Read job records from a scheduler into the warehouse.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Read job records from a scheduler into the warehouse."""


def parse_namespace_map(values: list[str]) -> dict[str, str]:
    """``ns=project[,ns=project]`` pairs, or the path of a YAML file mapping namespace → project."""
    mapping: dict[str, str] = {}
    for value in values:
        if "=" in value:
            for pair in value.split(","):
                namespace, sep, project = (part.strip() for part in pair.partition("="))
                if not sep or not namespace or not project:
                    raise typer.BadParameter(
                        f"{pair!r}: write NAMESPACE=PROJECT, e.g. ml-vision=vision",
                        param_hint="--namespace-map",
                    )
                mapping[namespace] = project
            continue
        path = Path(value)
        import yaml  # here, not at import: `--help` stays light

        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise typer.BadParameter(
                f"{value!r} is neither NAMESPACE=PROJECT nor a readable YAML file ({exc})",
                param_hint="--namespace-map",
            ) from None
        if not isinstance(loaded, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()
        ):
            raise typer.BadParameter(
                f"{value}: expected a YAML mapping of namespace: project", param_hint="--namespace-map"
            )
        mapping.update(loaded)
    return mapping


def _summary(stats) -> str:
    return (
        f"{stats.pods_listed} pods and {stats.workloads_listed} workloads listed, {stats.watch_events} watch "
        f"events; {stats.jobs_written} job rows written, {stats.quarantined} quarantined, "
        f"{stats.ignored} without GPUs ignored, {stats.vanished_closed} vanished pods closed, "
        f"{stats.relists} relists; resourceVersion {stats.resource_version}"
    )


@app.command("kubernetes")
def ingest_kubernetes_command(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)"),
    ] = None,
    context: Annotated[
        str | None, typer.Option(help="kubeconfig context (default: its current context)")
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help="cluster name stored on every job row (default: the context name)")
    ] = None,
    project_label: Annotated[str, typer.Option(help="pod label naming the project")] = "gpuledger.io/project",
    user_label: Annotated[str, typer.Option(help="pod label naming the user")] = "gpuledger.io/user",
    namespace_map: Annotated[
        list[str] | None,
        typer.Option(
            help="NAMESPACE=PROJECT (comma-separated, repeatable) or a YAML file of namespace: project; "
            "used when a pod has no project label"
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch/--once", help="keep following pod changes, or list once")
    ] = False,
    page_size: Annotated[int, typer.Option(min=1, help="objects per list page")] = 500,
    watch_timeout: Annotated[
        int, typer.Option(min=1, max=86_400, help="seconds per watch request before it resumes")
    ] = 300,
    connect_timeout: Annotated[
        float, typer.Option("--connect-timeout", help="seconds to reach the API server")
    ] = deadlines.KUBERNETES.connect_s,
    read_timeout: Annotated[
        float, typer.Option("--read-timeout", help="seconds the API server may stay silent on one request")
    ] = deadlines.KUBERNETES.read_s,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """List (and with --watch, follow) pods requesting nvidia.com/gpu or MIG slices, plus Kueue
    Workloads, into the warehouse's jobs table. Re-running changes no row counts."""
    from gpuledger.extras import require

    require("kubernetes.client")  # the [kubernetes] extra; a clear message when it is missing
    from gpuledger.ingest.jobs.k8s_mapping import MappingOptions
    from gpuledger.ingest.jobs.kubernetes import KubernetesIngest

    limits = call_deadline(connect_timeout, read_timeout)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its text is not the user's; we say what failed
    options = MappingOptions(project_label=project_label, user_label=user_label,
                             namespace_projects=parse_namespace_map(namespace_map or []))
    api = _api(kubeconfig, context)
    if cluster is None:
        cluster = context or _current_context(kubeconfig) or "in-cluster"
    # SIGINT / SIGTERM stop within a second even inside a silent watch stream (minutes between
    # events), never in the middle of a write: 130 for Ctrl-C, 0 for a service manager's stop.
    signals = StopSignals(interrupt=True)
    ingest = KubernetesIngest(api, cluster=cluster, warehouse_path=warehouse_path(warehouse_file), options=options,
                              page_size=page_size, deadline=limits, write_guard=signals.holding)
    stats = _follow(ingest, signals, cluster, limits, watch=watch, watch_timeout=watch_timeout)
    typer.echo(f"cluster {cluster}: {_summary(stats)}")


def _api(kubeconfig: Path | None, context: str | None):
    """The API client of the kubeconfig (or in-cluster); a kubeconfig that cannot be read is exit
    2 with what is wrong with it."""
    import yaml
    from kubernetes.config import ConfigException  # the extra: checked by the command

    from gpuledger.ingest.jobs.kubernetes import api_client

    try:
        return api_client(kubeconfig, context, retries=0)
    except (ConfigException, OSError, TypeError, UnicodeDecodeError, yaml.YAMLError) as exc:
        typer.echo(f"gpuledger ingest kubernetes: cannot load the kubeconfig ({_kubeconfig_problem(exc, kubeconfig)}); "
                   "pass --kubeconfig / --context or run inside the cluster", err=True)
        raise typer.Exit(2) from None


def _follow(ingest, signals: StopSignals, cluster: str, limits, *, watch: bool, watch_timeout: int):
    """One list (or, with ``watch``, the list and then the watch until a signal) into the
    warehouse; the stats. A stop, a refusal or an unreachable server ends the command with one line
    and its exit code (130 / 0 for a signal, 1 otherwise)."""
    from kubernetes.client import ApiException  # loaded (the extra checked) by _api

    from gpuledger.ingest.jobs.kubernetes import IngestStats

    stats = IngestStats()
    try:
        with signals:
            if watch:
                ingest.watch(signals.event, stats=stats, timeout_seconds=watch_timeout,
                             on_flush=lambda s: typer.echo(_summary(s), err=True))
            else:
                ingest.sync(stats)
            if signals.stopped:  # set between two writes: the watch loop ended on it
                raise Stopped
    except (Stopped, KeyboardInterrupt):
        name = "SIGTERM" if signals.signal == signal.SIGTERM else "SIGINT"
        typer.echo(f"cluster {cluster}: stopped ({name}); every finished write is stored: {_summary(stats)}",
                   err=True)
        raise typer.Exit(signals.exit_code if signals.signal else 130) from None
    except ApiException as exc:
        typer.echo(f"gpuledger ingest kubernetes: the API server refused ({exc.status} {exc.reason}); "
                   "check the context's permissions to list pods and nodes", err=True)
        raise typer.Exit(1) from None
    except Exception as exc:  # connection refused, DNS, TLS, no answer: say which server and stop
        if type(exc).__module__.startswith(("urllib3", "socket", "ssl")) or isinstance(exc, OSError):
            typer.echo(f"gpuledger ingest kubernetes: cannot reach {ingest.api.configuration.host}: "
                       f"{deadlines.why_unreachable(exc, limits)}; nothing was written by this request "
                       "(check the server, or raise --read-timeout / --connect-timeout)", err=True)
            raise typer.Exit(1) from None
        raise
    return stats


def call_deadline(connect_s: float, read_s: float) -> deadlines.CallDeadline:
    """--connect-timeout / --read-timeout checked at the door (exit 2 naming the option)."""
    for option, value in (("--connect-timeout", connect_s), ("--read-timeout", read_s)):
        if not 0 < value <= deadlines.MAX_WAIT_S:
            raise typer.BadParameter(f"{value:g} is not within (0, {deadlines.MAX_WAIT_S:g}] seconds",
                                     param_hint=option)
    return deadlines.CallDeadline(connect_s, read_s, deadlines.KUBERNETES.total_s)


def _kubeconfig_problem(exc: BaseException, kubeconfig: Path | None) -> str:
    """One line for a kubeconfig that cannot be used: a YAML error as file:line:column and its
    problem, never the parser's multi-line report."""
    import yaml

    mark = getattr(exc, "problem_mark", None)
    if isinstance(exc, yaml.YAMLError):
        where = f"{kubeconfig or 'kubeconfig'}" + (f":{mark.line + 1}:{mark.column + 1}" if mark else "")
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"{where}: not valid YAML: {problem}"
    lines = str(exc).strip().splitlines()
    return printable(lines[0] if lines else type(exc).__name__, limit=200)


def _current_context(kubeconfig: Path | None) -> str | None:
    from gpuledger.enforce.backends.k8s_common import current_context

    return current_context(kubeconfig)
