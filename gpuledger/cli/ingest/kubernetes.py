"""`gpuledger ingest kubernetes`: GPU pods and Kueue Workloads into ``jobs``.

``app`` carries the one command ``kubernetes``; ``ingest_kubernetes_command`` is the same function
for a parent app that prefers ``ingest_app.command("kubernetes")(ingest_kubernetes_command)``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Annotated

import typer
import yaml

from gpuledger.cli.options import WarehouseOpt, warehouse_path
from gpuledger.ingest.jobs.k8s_mapping import MappingOptions

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
        int, typer.Option(min=1, help="seconds per watch request before it resumes")
    ] = 300,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """List (and with --watch, follow) pods requesting nvidia.com/gpu or MIG slices, plus Kueue
    Workloads, into the warehouse's jobs table. Re-running changes no row counts."""
    from gpuledger.extras import require

    k8s = require("kubernetes.client")  # the [kubernetes] extra; a clear message when it is missing
    from kubernetes.config import ConfigException

    from gpuledger.ingest.jobs.kubernetes import KubernetesIngest, api_client

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    options = MappingOptions(
        project_label=project_label,
        user_label=user_label,
        namespace_projects=parse_namespace_map(namespace_map or []),
    )
    try:
        api = api_client(kubeconfig, context)
    except (ConfigException, OSError, TypeError, UnicodeDecodeError, yaml.YAMLError) as exc:
        typer.echo(
            f"gpuledger ingest kubernetes: cannot load the kubeconfig ({exc}); "
            "pass --kubeconfig / --context or run inside the cluster",
            err=True,
        )
        raise typer.Exit(2) from None
    if cluster is None:
        cluster = context or _current_context(kubeconfig) or "in-cluster"
    ingest = KubernetesIngest(
        api,
        cluster=cluster,
        warehouse_path=warehouse_path(warehouse_file),
        options=options,
        page_size=page_size,
    )
    stop = threading.Event()
    try:
        if watch:
            stats = ingest.watch(
                stop, timeout_seconds=watch_timeout, on_flush=lambda s: typer.echo(_summary(s), err=True)
            )
        else:
            stats = ingest.sync()
    except KeyboardInterrupt:
        stop.set()
        raise typer.Exit(130) from None
    except k8s.ApiException as exc:
        typer.echo(
            f"gpuledger ingest kubernetes: the API server refused ({exc.status} {exc.reason}); "
            "check the context's permissions to list pods and nodes",
            err=True,
        )
        raise typer.Exit(1) from None
    except Exception as exc:  # connection refused, DNS, TLS: say which server and stop
        if type(exc).__module__.startswith(("urllib3", "socket", "ssl")) or isinstance(exc, OSError):
            typer.echo(
                f"gpuledger ingest kubernetes: cannot reach {api.configuration.host} ({exc})", err=True
            )
            raise typer.Exit(1) from None
        raise
    typer.echo(f"cluster {cluster}: {_summary(stats)}")


def _current_context(kubeconfig: Path | None) -> str | None:
    try:
        from kubernetes.config import list_kube_config_contexts

        _, current = list_kube_config_contexts(config_file=str(kubeconfig) if kubeconfig else None)
        return current.get("name") if current else None
    except Exception:  # no kubeconfig (in-cluster): the caller falls back
        return None
