"""`gpuledger ingest scrape` and `gpuledger ingest prometheus`: DCGM samples from live exporters or
from a Prometheus server's history."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer
from rich.console import Console
from rich.markup import escape

from gpuledger import deadlines
from gpuledger.cli.options import ConfigOpt, WarehouseOpt, config_or_exit, utc_range, warehouse_path
from gpuledger.ingest import DEFAULT_CLUSTER
from gpuledger.lazy import lazy_import
from gpuledger.rules.clock import parse_duration_s
from gpuledger.stopping import StopSignals

# polars / DuckDB behind these load when a command runs, not for --help
prom = lazy_import("gpuledger.ingest.metrics.prometheus.backfill")
scraping = lazy_import("gpuledger.ingest.metrics.scrape")

app = typer.Typer(help="Ingest DCGM samples: scrape dcgm-exporter endpoints or backfill from Prometheus.",
                  no_args_is_help=True)
console = Console(stderr=True)

ClusterOpt = Annotated[str, typer.Option("--cluster", help="cluster name the GPUs are registered under")]


def _duration(text: str, option: str) -> int:
    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    if seconds < 1:
        raise typer.BadParameter(f"{text!r} is under a second; give at least 1s", param_hint=option)
    return seconds


def _call_deadline(connect_s: float, read_s: float, total_s: float) -> deadlines.CallDeadline:
    for option, value in (("--connect-timeout", connect_s), ("--read-timeout", read_s), ("--deadline", total_s)):
        if not 0 < value <= deadlines.MAX_WAIT_S:
            raise typer.BadParameter(f"{value:g} is not within (0, {deadlines.MAX_WAIT_S:g}] seconds",
                                     param_hint=option)
    return deadlines.CallDeadline(connect_s, read_s, total_s)


@app.command("scrape")
def scrape_cmd(
    urls: Annotated[list[str] | None, typer.Argument(
        help="dcgm-exporter /metrics URLs (default: the config's sources.scrape targets)")] = None,
    interval: Annotated[float, typer.Option("--interval", help="seconds between scrape rounds", min=0, max=86_400)] = 30.0,
    count: Annotated[int, typer.Option("--count", help="scrape rounds", min=1)] = 1,
    every: Annotated[str | None, typer.Option(
        "--every", help="run as a service: a round every DURATION (e.g. 60s) until stopped (SIGTERM, "
                        "Ctrl-C); overrides --interval and --count")] = None,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", help="seconds one attempt may take in all (connecting and the whole page; default: "
                          "sources.scrape's, else 10)", min=0.001, max=deadlines.MAX_WAIT_S)] = None,
    retries: Annotated[int | None, typer.Option(
        "--retries", help="retries after a timeout, refusal or 5xx (default: sources.scrape's, else 3)",
        min=0, max=100)] = None,
    backoff: Annotated[float, typer.Option("--backoff", help="first retry wait, seconds (doubles)", min=0, max=3600)] = 0.5,
    cluster: Annotated[str | None, typer.Option(
        "--cluster", help="cluster name the GPUs are registered under (default: sources.scrape's, else "
                          f"{DEFAULT_CLUSTER})")] = None,
    config: ConfigOpt = None,
    warehouse_file: WarehouseOpt = None,
    heartbeat: Annotated[Path | None, typer.Option(
        "--heartbeat", help="touch this file after every round, failed targets or not (a liveness "
                            "probe checks its age: the loop still turns)")] = None,
) -> None:
    """Scrape dcgm-exporter endpoints concurrently and store their samples; failing targets are
    retried with backoff, reported on stderr and in quarantine, and never stop the others. With
    --every it is the long-running scrape service (README "Pipelines": the every-minute loop lives
    outside Dagster, whose per-run start-up costs seconds)."""
    source = None
    if not urls or cluster is None or timeout is None or retries is None:
        source = config_or_exit(config).sources.scrape
    if not urls:
        if source is None:
            raise typer.BadParameter("give the /metrics URLs, or a config with sources.scrape targets "
                                     "(--config or $GPULEDGER_CONFIG)", param_hint="URLS")
        urls = source.targets
    cluster = cluster or (source.cluster if source else DEFAULT_CLUSTER)
    timeout = timeout if timeout is not None else (source.timeout_s if source else 10.0)
    retries = retries if retries is not None else (source.retries if source else 3)
    rounds: int | None = count
    if every is not None:
        interval, rounds = float(_duration(every, "--every")), None
    of = "" if rounds is None else f"/{rounds}"

    def report(round_no: int, stats: scraping.IngestStats) -> None:
        for error in stats.errors:
            console.print(f"[red]scrape failed[/red]: {escape(error)}")
        unknown = ", ".join(f"{k} x{v}" for k, v in sorted(stats.unknown_dcgm.items()))
        console.print(f"round {round_no}{of}: {stats.pages} pages, {stats.samples_new} new samples, "
                      f"{stats.quarantined} lines quarantined, {stats.failed_targets} targets failed"
                      + (f"; DCGM fields not stored: {unknown}" if unknown else ""))
        if heartbeat is not None:
            heartbeat.touch()

    for url in urls:
        _check_target(url)
    with StopSignals() as stop:  # Ctrl-C / SIGTERM: stop within a second, never mid-write
        total = scraping.scrape(urls, warehouse_path=warehouse_path(warehouse_file), cluster=cluster,
                                interval_s=interval, count=rounds, timeout_s=timeout, retries=retries,
                                backoff_s=backoff, on_round=report, stop=stop.event)
    if stop.stopped:
        console.print(f"stopped ({'Ctrl-C' if stop.exit_code else 'SIGTERM'}): every round written "
                      "before it is stored")
        raise typer.Exit(stop.exit_code)
    if total.failed_targets:  # some targets failed (the others are stored): not a success
        raise typer.Exit(1)


def _check_target(url: str) -> None:
    """An exporter URL: http(s) with a host, else a usage error naming it (exit 2)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "http://[::1": an IPv6 host without its closing bracket
        raise typer.BadParameter(f"{url!r} is not a URL ({exc}); write it as http://HOST:9400/metrics "
                                 "(an IPv6 address in brackets: http://[::1]:9400/metrics)", param_hint="URLS") from None
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number within 0-65535
    except ValueError:
        raise typer.BadParameter(f"{url!r}: the port is not a number within 1-65535", param_hint="URLS") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise typer.BadParameter(f"{url!r} is not an http:// or https:// URL with a host; write it as "
                                 "http://HOST:9400/metrics", param_hint="URLS")


@app.command("prometheus")
def prometheus_cmd(
    url: Annotated[str, typer.Option("--url", help="Prometheus base URL, e.g. http://prometheus:9090")],
    start: Annotated[str, typer.Option("--start", help="UTC start, ISO-8601 or epoch seconds")],
    end: Annotated[str, typer.Option("--end", help="UTC end (exclusive), ISO-8601 or epoch seconds")],
    step: Annotated[str, typer.Option("--step", help="sample grid, e.g. 30s (the exporter's interval)")] = "30s",
    chunk: Annotated[str | None, typer.Option("--chunk", help="time per query and per transaction, e.g. 1h (default 1h; with --aggregate 1d, the most it takes)")] = None,
    workers: Annotated[int, typer.Option("--workers", help="worker processes fetching and decoding chunks ahead of the writes (memory: ~450 MB each at 1,024 GPUs x 1 h chunks)", min=1)] = 2,
    gzip: Annotated[bool, typer.Option("--gzip/--no-gzip", help="ask Prometheus for gzip (only worth it over a slow link)")] = False,
    progress: Annotated[str, typer.Option("--progress", help="bar, lines (one line per chunk) or none")] = "bar",
    connect_timeout: Annotated[float | None, typer.Option("--connect-timeout", help="seconds to open a connection (default: sources.prometheus.connect_timeout_s when --url is that server, else {0:g})".format(deadlines.PROMETHEUS.connect_s))] = None,
    read_timeout: Annotated[float | None, typer.Option("--read-timeout", help="seconds of silence allowed from the server, its query evaluation included (default: sources.prometheus.read_timeout_s when --url is that server, else {0:g})".format(deadlines.PROMETHEUS.read_s))] = None,
    deadline: Annotated[float | None, typer.Option("--deadline", help="seconds one query may take in all, retries included (default: sources.prometheus.deadline_s when --url is that server, else {0:g})".format(deadlines.PROMETHEUS.total_s))] = None,
    aggregate: Annotated[str | None, typer.Option("--aggregate", help="store one row per GPU and window of this size (1m-5m: averages, peak memory, sample counts) instead of raw samples; chunks sized from the TSDB's series count (about 260 MiB each at any fleet size), at most --chunk (default and most: 1d)")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="--aggregate: queries in flight at once", min=1, max=32)] = 4,
    settle: Annotated[str | None, typer.Option("--settle", help="--aggregate: ask the TSDB only up to this long before the wall clock, e.g. 60s (it may not answer for its newest seconds yet: VictoriaMetrics' -search.latencyOffset is 30 s); default: sources.prometheus.settle_s when --url is that server, else 60s; 0s for a Prometheus")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", envvar="GPULEDGER_PROMETHEUS_TENANT", help="Mimir / Cortex tenant (X-Scope-OrgID header; default: sources.prometheus.tenant when --url is that server; a cluster's own tenant in sources.prometheus.clusters wins for its queries)")] = None,
    cluster_label: Annotated[str | None, typer.Option("--cluster-label", help="--aggregate from a TSDB holding several clusters: the label naming each series' cluster (e.g. cluster); every value it takes is stored as its own cluster (default: sources.prometheus.cluster_label when --url is that server; sources.prometheus.clusters gives each cluster a selector and a tenant)")] = None,
    bearer_token_file: Annotated[str | None, typer.Option("--bearer-token-file", envvar="GPULEDGER_PROMETHEUS_BEARER_TOKEN_FILE", help="a file holding the bearer token (or the token in env GPULEDGER_PROMETHEUS_BEARER_TOKEN; default: sources.prometheus's bearer_token_file / bearer_token_env when --url is that server)")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help=f"cluster name the GPUs are registered under (default {DEFAULT_CLUSTER}); with --cluster-label or sources.prometheus.clusters, only that cluster")] = None,
    config_file: ConfigOpt = None,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Backfill DCGM samples from Prometheus' HTTP API (or Thanos Query, Mimir, VictoriaMetrics:
    give the URL up to /api/v1) in resumable chunks (rerun after an interruption to continue where
    it stopped). With --aggregate 5m, window aggregates instead of raw samples (fleet scale)."""
    t0, t1 = utc_range(start, end)
    headers = _auth_headers(url, tenant, bearer_token_file, config_file)
    limits = _prometheus_deadline(url, config_file, connect_timeout, read_timeout, deadline)
    if aggregate is not None:
        targets, label = _tsdb_clusters(url, cluster, cluster_label, config_file)
        _aggregate(url, t0, t1, _duration(aggregate, "--aggregate"), _duration(chunk or "1d", "--chunk"),
                   concurrency, headers, cluster or DEFAULT_CLUSTER, warehouse_file, limits, progress,
                   targets=targets, label=label, settle_s=_settle(url, settle, config_file))
        return
    if cluster_label is not None:
        raise typer.BadParameter("works with --aggregate only: the raw backfill stores every series under one "
                                 "--cluster (run it once per cluster's Prometheus)", param_hint="--cluster-label")
    cluster = cluster or DEFAULT_CLUSTER
    step_s, chunk_s = _duration(step, "--step"), _duration(chunk or "1h", "--chunk")
    if progress not in ("bar", "lines", "none"):
        raise typer.BadParameter("use bar, lines or none", param_hint="--progress")
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    bar = Progress(TextColumn("[bold]backfill"), BarColumn(), TextColumn("{task.completed}/{task.total} chunks"),
                   TextColumn("{task.fields[samples]} samples"), TimeElapsedColumn(), TimeRemainingColumn(),
                   console=console, disable=progress != "bar", transient=True)  # no half-drawn bar left
    task = bar.add_task("backfill", total=None, samples=0)

    def on_chunk(end_s: int, total: int, stats: prom.BackfillStats) -> None:
        bar.update(task, total=total, completed=stats.chunks_done + stats.chunks_skipped,
                   samples=stats.samples_new)
        if progress == "lines":
            print(f"chunk {prom._iso(end_s)} done {stats.chunks_done + stats.chunks_skipped}/{total} "
                  f"new {stats.samples_new}", flush=True)

    try:
        with bar:
            stats = prom.backfill(url, t0, t1, step_s=step_s, chunk_s=chunk_s,
                                  warehouse_path=warehouse_path(warehouse_file), cluster=cluster,
                                  workers=workers, on_chunk=on_chunk, compress=gzip, deadline=limits,
                                  headers=headers)
    except prom.PrometheusError as exc:
        # one line; the text is the server's, so no rich markup in it
        hint = ""
        if exc.resumable and exc.undone_from:
            hint = (f"; nothing from {exc.undone_from} on was stored, the chunks before it are: "
                    "rerun the same command to continue")
        elif exc.resumable:
            hint = "; nothing was stored: rerun the same command when the server answers"
        typer.secho(f"gpuledger: backfill stopped: {exc}{hint}", err=True, fg="red")
        raise typer.Exit(1) from None
    console.print(f"backfill {url}: {stats.chunks_done} chunks ingested, {stats.chunks_skipped} already done, "
                  f"{stats.samples_new} new samples, {stats.quarantined} quarantined; metrics: "
                  f"{', '.join(stats.metrics) or 'none found'}")


def _settle(url: str, settle: str | None, config_file) -> int:
    """--settle, else sources.prometheus.settle_s when it names this server, else 60 s."""
    if settle is not None:
        try:
            return parse_duration_s(settle)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--settle") from None
    from gpuledger.ingest.metrics.prometheus.auth import source_for

    source = source_for(url, config_or_exit(config_file))
    return source.settle_s if source is not None else 60


def _prometheus_deadline(url: str, config_file, connect_s: float | None, read_s: float | None,
                         total_s: float | None) -> deadlines.CallDeadline:
    """The options, else sources.prometheus's timeouts when it names this server, else the defaults."""
    from gpuledger.ingest.metrics.prometheus.auth import source_for

    source = None
    if None in (connect_s, read_s, total_s):
        source = source_for(url, config_or_exit(config_file))
    base = source.call_deadline() if source is not None else deadlines.PROMETHEUS
    return _call_deadline(base.connect_s if connect_s is None else connect_s,
                          base.read_s if read_s is None else read_s,
                          base.total_s if total_s is None else total_s)


def _auth_headers(url: str, tenant: str | None, token_file: str | None, config_file) -> dict[str, str]:
    """Tenant and bearer token: the options (and their env vars) first, else the config's
    sources.prometheus when it names this server (gpuledger.ingest.metrics.prometheus.auth)."""
    from gpuledger.errors import UsageError
    from gpuledger.ingest.metrics.prometheus.auth import auth_headers, source_for

    try:
        return auth_headers(source_for(url, config_or_exit(config_file)), tenant=tenant, token_file=token_file)
    except UsageError as exc:
        typer.secho(f"gpuledger: {exc}", err=True, fg="red")
        raise typer.Exit(2) from None


def _tsdb_clusters(url: str, cluster: str | None, label: str | None, config_file):
    """(the configured clusters, the cluster label) for --aggregate: the options first, else
    sources.prometheus's when --url is that server; --cluster keeps only that cluster
    (tsdb_clusters.select_targets: the pipelines' partitions choose there too)."""
    from gpuledger.ingest.metrics.prometheus.auth import source_for
    from gpuledger.ingest.metrics.prometheus.tsdb_clusters import TargetError, select_targets

    try:
        return select_targets(source_for(url, config_or_exit(config_file)), cluster=cluster, label=label)
    except TargetError as exc:
        raise typer.BadParameter(str(exc), param_hint=exc.param) from None


def _aggregate(url, t0, t1, step_s, chunk_s, concurrency, headers, cluster, warehouse_file, limits, progress, *,
               targets=(), label=None, settle_s: int = 60) -> None:
    from gpuledger.errors import UsageError
    from gpuledger.ingest.metrics.prometheus.aggregate import SERIES_WINDOWS_PER_CHUNK, aggregate

    def on_chunk(end_s: int, total: int, stats) -> None:
        if progress == "lines":
            print(f"chunk {prom._iso(end_s)} done {stats.chunks_done}/{total} new {stats.rows_new} "
                  f"({stats.series} series)", flush=True)

    try:
        stats = aggregate(url, t0, t1, step_s=step_s, chunk_s=chunk_s, warehouse_path=warehouse_path(warehouse_file),
                          cluster=cluster, clusters=list(targets), cluster_label=label, concurrency=concurrency,
                          headers=headers, deadline=limits, on_chunk=on_chunk, settle_s=settle_s)
    except prom.PrometheusError as exc:
        where = (f"; {'only some shards of the windows' if getattr(exc, 'partly_stored', False) else 'nothing'} "
                 f"from {exc.undone_from} on {'were' if getattr(exc, 'partly_stored', False) else 'was'} stored: "
                 "rerun to continue" if exc.undone_from else "")
        typer.secho(f"gpuledger: aggregate stopped: {exc}{where}", err=True, fg="red")
        raise typer.Exit(1) from None
    except UsageError as exc:
        typer.secho(f"gpuledger: {exc}", err=True, fg="red")
        raise typer.Exit(2) from None
    clusters = ", ".join(f"{name} {rows:,}" for name, rows in stats.rows_by_cluster.items())
    shards = f" in {stats.shards} shards of the series" if stats.shards > 1 else ""
    chunking = (f", chunks of {stats.chunk_windows * step_s / 3600:.3g} h for {stats.series:,} series{shards}: at most "
                f"{SERIES_WINDOWS_PER_CHUNK:,} series-windows, about 260 MiB, a {'shard' if shards else 'chunk'}"
                if stats.chunk_windows else "")
    done = "whole windows already done" if stats.filling else "already done"
    resumed = "; ".join(f"{name}: {done if at == 'done' else 'continued from ' + at}"
                        for name, at in stats.resumed.items())
    console.print(f"aggregate {url} ({step_s} s windows{chunking}): {stats.chunks_done} chunks "
                  f"ingested{f' ({resumed})' if resumed else ''}, {stats.rows_new} new rows"
                  f"{f' (by cluster: {clusters})' if len(stats.rows_by_cluster) > 1 or label else ''}, "
                  f"{stats.quarantined} quarantined; "
                  f"metrics: {', '.join(stats.metrics)}", markup=False, soft_wrap=True)
    if stats.filling:
        console.print(f"{stats.rows_filling} of the rows are the window still filling, {stats.filling}, stored as far "
                      "as it has come: the next run stores it anew", markup=False, soft_wrap=True)
    if stats.unlabelled_series:
        console.print(f"{stats.unlabelled_series} {stats.unlabelled_metric} series (one a device and job) carry no "
                      f"{label!r} label: their GPUs were not stored (give them a cluster: "
                      "sources.prometheus.clusters.<name>.selector)", style="yellow", markup=False,
                      soft_wrap=True)
