"""Which clusters a TSDB holds and how each is asked for (issue 41): one Thanos / Mimir /
VictoriaMetrics often holds every cluster of a fleet, told apart by a label (``cluster``, from each
Prometheus' external_labels or remote write), and Mimir / Cortex keep each in its own tenant.

A :class:`TsdbCluster` is a name, the PromQL label matchers that select its series
(``cluster="east"``) and the tenant its queries carry (``X-Scope-OrgID``). They come from the
config (``sources.prometheus.clusters``: a selector and a tenant per cluster, the selector defaulting
to ``<cluster_label>="<name>"``), or from the label alone: every value it takes on DCGM series in
the range is a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuledger.errors import UsageError
from gpuledger.ingest.metrics.prometheus.client import NotPrometheusAnswer, get_body, parse_json, series_in_range
from gpuledger.rules.promql import check_label, label_selector


@dataclass(frozen=True)
class TsdbCluster:
    """One cluster's series in a shared TSDB: stored under ``name``; ``selector``: PromQL label
    matchers without braces ('' = every series); ``tenant``: X-Scope-OrgID (None: the command's)."""

    name: str
    selector: str = ""
    tenant: str | None = None


def discover_clusters(session, url: str, label: str, metrics: Sequence[str], start_s: int, end_s: int,
                      kw: dict) -> list[TsdbCluster]:
    """One cluster per value of ``label`` on the DCGM series (``metrics``) in [start_s, end_s)."""
    endpoint = f"{url.rstrip('/')}/api/v1/label/{label}/values"
    params = {"match[]": f'{{__name__=~"{"|".join(metrics)}"}}', "start": start_s, "end": end_s}
    values = parse_json(endpoint, params, *get_body(session, endpoint, params, **kw))
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise NotPrometheusAnswer(f"{endpoint}: the label values are not a list of names")
    return [TsdbCluster(v, label_selector(label, v)) for v in sorted(set(values)) if v]


def unlabelled_devices(session, url: str, label: str, metric: str, start_s: int, end_s: int, kw: dict) -> int:
    """How many series of ``metric`` in [start_s, end_s) lack ``label`` (no cluster would store
    them), from the series index (no samples read; counted on the server where it refuses)."""
    return series_in_range(session, url, f'{metric}{{{label}=""}}', start_s, end_s, kw)


def clusters_from_source(source) -> list[TsdbCluster]:
    """``sources.prometheus.clusters`` as TsdbClusters: each its selector (default
    ``<cluster_label>="<name>"``) and tenant; [] when the config names none."""
    if source is None:
        return []
    label = source.cluster_label
    return [TsdbCluster(name, c.selector or (label_selector(label, name) if label else ""), c.tenant)
            for name, c in source.clusters.items()]


class TargetError(UsageError):
    """A cluster or label the source cannot give; ``param``: the option it came from."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def select_targets(source, *, cluster: str | None, label: str | None) -> tuple[list[TsdbCluster], str | None]:
    """(the clusters to ask for, the cluster label) of an aggregate: ``label`` first, else
    ``source``'s (sources.prometheus when it names the server; None: no config); the configured
    clusters, cut to ``cluster`` when it is given; with a label and no configured clusters,
    ``cluster`` alone is the series whose label says it. The CLI (`ingest prometheus --aggregate
    --cluster`) and the pipelines' per-cluster partitions both choose here. TargetError names the
    option that was wrong."""
    targets = clusters_from_source(source)
    label = label or (source.cluster_label if source is not None else None)
    try:
        label = check_label(label) if label else None
    except UsageError as exc:
        raise TargetError(str(exc), "--cluster-label") from None
    if label and not targets and cluster:  # one cluster of the label's values
        targets = [TsdbCluster(cluster, label_selector(label, cluster))]
    elif targets and cluster:
        known = [t.name for t in targets]
        targets = [t for t in targets if t.name == cluster]
        if not targets:
            raise TargetError(f"{cluster!r} is not among sources.prometheus.clusters ({', '.join(known)})", "--cluster")
    return targets, label
