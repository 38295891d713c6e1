"""Kubernetes ingestion: the pure mapping, then the real client against a stand-in API server.

The stand-in (tests/helpers/k8s_standin.py) speaks the Kubernetes HTTP API — PodList paging, chunked watch
streams with bookmarks, 410 Gone — so list, watch, resume and relist run through the official
client unpatched. Tests synchronise on the server's request queue and the ingester's flush hook;
watch requests last one second so streams end and resume quickly.
"""

from __future__ import annotations

import queue
import threading
from datetime import datetime

import pytest
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.ingest.jobs.k8s_mapping import (
    JobRecord,
    MappingOptions,
    Rejected,
    map_pod,
    map_workload,
    mig_fraction,
    parse_duration_s,
)
from gpuledger.ingest.jobs.kubernetes import IngestStats, KubernetesIngest, api_client
from gpuledger.cli.ingest.kubernetes import app as kubernetes_app

from tests.helpers.k8s_standin import POD_LIST, KubeStandIn

NOW = datetime(2026, 11, 29, 12, 0, 0)
CLUSTER = "test-cluster"


def make_pod(
    name: str,
    namespace: str = "ml-vision",
    *,
    gpus: int | str | None = 1,
    mig: dict[str, int] | None = None,
    labels: dict | None = None,
    annotations: dict | None = None,
    phase: str = "Running",
    owner: tuple[str, str] | None = ("Job", "train"),
    node: str | None = "node-h100",
    finished_at: str | None = None,
    node_selector: dict | None = None,
    priority: int | None = 1000,
) -> dict:
    limits: dict = {"cpu": "4"}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    for profile, count in (mig or {}).items():
        limits[f"nvidia.com/mig-{profile}"] = str(count)
    container_status: dict = {
        "name": "main",
        "ready": phase == "Running",
        "restartCount": 0,
        "image": "trainer:1",
        "imageID": "",
        "state": {"running": {"startedAt": "2026-11-29T08:01:00Z"}},
    }
    if finished_at:
        container_status["state"] = {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": "2026-11-29T08:01:00Z",
                "finishedAt": finished_at,
            }
        }
    metadata: dict = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "creationTimestamp": "2026-11-29T07:59:30Z",
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": "owner-uid",
                "controller": True,
            }
        ]
    spec: dict = {
        "containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": limits}}],
        "priority": priority,
        "priorityClassName": "research",
    }
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "phase": phase,
            "startTime": "2026-11-29T08:00:00Z",
            "containerStatuses": [container_status],
        },
    }


def make_workload(
    name: str, namespace: str = "ml-nlp", *, count: int = 4, gpus: int = 8, admitted: bool = False
) -> dict:
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True",
            "lastTransitionTime": "2026-11-29T09:00:00Z",
            "reason": "QuotaReserved",
            "message": "",
        }
    ]
    if admitted:
        conditions.append(
            {
                "type": "Admitted",
                "status": "True",
                "lastTransitionTime": "2026-11-29T09:00:01Z",
                "reason": "Admitted",
                "message": "",
            }
        )
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": "2026-11-29T08:30:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "team-nlp"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": "llm-pretrain",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "queueName": "team-nlp",
            "priority": 500,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "funded"},
            "podSets": [
                {
                    "name": "worker",
                    "count": count,
                    "template": {
                        "metadata": {"labels": {"gpuledger.io/project": "llm", "gpuledger.io/user": "ana"}},
                        "spec": {
                            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"},
                            "containers": [
                                {
                                    "name": "w",
                                    "image": "x",
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                                }
                            ],
                        },
                    },
                }
            ],
        },
        "status": {"conditions": conditions},
    }


# --- pure mapping ---------------------------------------------------------------------------------


def test_mig_fractions_and_durations():
    assert mig_fraction("1g.10gb") == pytest.approx(1 / 7)
    assert mig_fraction("2g.20gb") == pytest.approx(2 / 7)
    assert mig_fraction("3g.40gb") == pytest.approx(3 / 7)
    assert mig_fraction("4g.40gb") == pytest.approx(4 / 7)
    assert mig_fraction("7g.80gb") == 1.0
    assert mig_fraction("1g.10gb+me") == pytest.approx(1 / 7)
    assert mig_fraction("2g.12gb") == pytest.approx(2 / 4)  # A30: four slices
    assert mig_fraction("banana") is None
    assert parse_duration_s("4h", "f") == 14400
    assert parse_duration_s("30m", "f") == 1800
    assert parse_duration_s("1h30m", "f") == 5400
    assert parse_duration_s("5400", "f") == 5400
    assert parse_duration_s(None, "f") is None


def test_map_pod_fields():
    record = map_pod(
        make_pod(
            "train-0",
            labels={"gpuledger.io/project": "vision", "gpuledger.io/user": "bo"},
            annotations={"gpuledger.io/min-runtime": "4h"},
            gpus=8,
        ),
        cluster=CLUSTER,
        now=NOW,
        node_products={"node-h100": "NVIDIA-H100-80GB-HBM3"},
    )
    assert isinstance(record, JobRecord)
    # Identity is the pod uid; the name is what people and DCGM labels see (issue 8, item 8).
    assert (record.job_id, record.scheduler_job) == ("uid-ml-vision-train-0", "ml-vision/train-0")
    assert (record.scheduler_job, record.project, record.user_name, record.name) == (
        "ml-vision/train-0",
        "vision",
        "bo",
        "train",
    )
    assert (record.kind, record.gpu_model, record.gpus, record.min_runtime_s) == ("batch", "H100", 8.0, 14400)
    assert (record.state, record.priority, record.priority_class) == ("Running", 1000, "research")
    assert record.submit_time == datetime(2026, 11, 29, 7, 59, 30)
    assert record.start_time == datetime(2026, 11, 29, 8, 0) and record.end_time is None


def test_map_pod_project_fallbacks_kind_and_skips():
    options = MappingOptions(namespace_projects={"ml-vision": "vision-team"})
    assert map_pod(make_pod("a"), cluster=CLUSTER, now=NOW, options=options).project == "vision-team"
    assert (
        map_pod(make_pod("a", namespace="other"), cluster=CLUSTER, now=NOW, options=options).project
        == "other"
    )
    custom = MappingOptions(project_label="team")
    assert (
        map_pod(make_pod("a", labels={"team": "t1"}), cluster=CLUSTER, now=NOW, options=custom).project
        == "t1"
    )
    assert map_pod(make_pod("a", owner=("PyTorchJob", "p")), cluster=CLUSTER, now=NOW).kind == "training"
    assert map_pod(make_pod("a", owner=None), cluster=CLUSTER, now=NOW).kind == "interactive"
    assert (
        map_pod(make_pod("a", labels={"gpuledger.io/kind": "fine-tune"}), cluster=CLUSTER, now=NOW).kind
        == "fine-tune"
    )
    assert map_pod(make_pod("cpu-only", gpus=None), cluster=CLUSTER, now=NOW) is None
    mixed = map_pod(
        make_pod(
            "m",
            gpus=None,
            mig={"1g.10gb": 2, "3g.40gb": 1},
            node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        ),
        cluster=CLUSTER,
        now=NOW,
    )
    assert mixed.gpus == pytest.approx(5 / 7, abs=1e-6) and mixed.gpu_model == "A100"


def test_map_pod_finished_and_rejected():
    done = map_pod(
        make_pod("d", phase="Succeeded", finished_at="2026-11-29T10:30:00Z"), cluster=CLUSTER, now=NOW
    )
    assert done.end_time == datetime(2026, 11, 29, 10, 30) and done.state == "Succeeded"
    gone = map_pod(make_pod("g"), cluster=CLUSTER, now=NOW, deleted=True)
    assert gone.state == "Deleted" and gone.end_time == NOW
    bad = map_pod(make_pod("bad", gpus="two"), cluster=CLUSTER, now=NOW)
    assert isinstance(bad, Rejected) and bad.location == "ml-vision/bad"
    assert "nvidia.com/gpu" in bad.reason and "'two'" in bad.reason
    bad_runtime = map_pod(
        make_pod("r", annotations={"gpuledger.io/min-runtime": "soon"}), cluster=CLUSTER, now=NOW
    )
    assert isinstance(bad_runtime, Rejected) and "gpuledger.io/min-runtime" in bad_runtime.reason
    assert isinstance(map_pod({"metadata": "x"}, cluster=CLUSTER, now=NOW), Rejected)


def test_map_workload():
    record = map_workload(make_workload("wl-1", admitted=True), cluster=CLUSTER, now=NOW)
    assert record.job_id == "ml-nlp/workload/wl-1" and record.source == "kueue"
    assert (record.gpus, record.gpu_model, record.project, record.user_name) == (32.0, "B200", "llm", "ana")
    assert (record.state, record.priority, record.kind, record.start_time) == (
        "Admitted",
        500,
        "training",
        None,
    )


# --- against the stand-in API server -----------------------------------------------------------


@pytest.fixture
def standin():
    server = KubeStandIn().start()
    server.nodes = [
        {"metadata": {"name": "node-h100", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}},
        {"metadata": {"name": "node-cpu", "labels": {}}},
    ]
    yield server
    server.close()


@pytest.fixture
def ingest(standin, tmp_path):
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    api = api_client(kubeconfig)
    return KubernetesIngest(
        api,
        cluster=CLUSTER,
        warehouse_path=tmp_path / "wh.duckdb",
        page_size=2,
        options=MappingOptions(namespace_projects={"ml-nlp": "nlp"}),
        clock=lambda: NOW,
    )


def _jobs(ingest: KubernetesIngest) -> dict[str, dict]:
    with warehouse.open_reader(ingest.warehouse_path) as con:
        frame = con.sql("SELECT * FROM jobs ORDER BY job_id").pl()
    # Keyed by the scheduler's name (namespace/pod); job_id is the pod uid.
    return {row["scheduler_job"] or row["job_id"]: row for row in frame.iter_rows(named=True)}


def _counts(ingest: KubernetesIngest) -> dict[str, int]:
    with warehouse.open_reader(ingest.warehouse_path) as con:
        return warehouse.table_counts(con, ("jobs", "quarantine"))


def _seed(standin: KubeStandIn) -> None:
    standin.add_pod(make_pod("train-0", labels={"gpuledger.io/project": "vision"}, gpus=8))
    standin.add_pod(make_pod("train-1", labels={"gpuledger.io/project": "vision"}, gpus=8))
    standin.add_pod(make_pod("mig-a", namespace="ml-nlp", gpus=None, mig={"1g.10gb": 1}, owner=None))
    standin.add_pod(make_pod("mig-b", namespace="ml-nlp", gpus=None, mig={"3g.40gb": 1, "2g.20gb": 1}))
    standin.add_pod(make_pod("web", namespace="ml-nlp", gpus=None))  # no GPU: ignored
    standin.add_pod(make_pod("broken", gpus="two"))  # malformed: quarantined
    standin.add_pod(make_pod("done", phase="Succeeded", finished_at="2026-11-29T09:00:00Z"))
    standin.workloads = [make_workload("wl-1")]


def test_sync_paginates_maps_quarantines_and_is_idempotent(standin, ingest):
    _seed(standin)
    stats = ingest.sync()
    pages = []
    while not standin.requests.empty():
        path, query = standin.requests.get_nowait()
        if path == POD_LIST:
            pages.append(query)
    assert len(pages) == 4 and "continue" not in pages[0] and all("continue" in p for p in pages[1:])
    assert all(p["limit"] == "2" for p in pages)
    assert (stats.pods_listed, stats.workloads_listed, stats.quarantined, stats.ignored) == (7, 1, 1, 1)
    jobs = _jobs(ingest)
    assert set(jobs) == {
        "ml-vision/train-0",
        "ml-vision/train-1",
        "ml-nlp/mig-a",
        "ml-nlp/mig-b",
        "ml-vision/done",
        "ml-nlp/workload/wl-1",
    }
    assert jobs["ml-vision/train-0"]["gpus"] == 8.0 and jobs["ml-vision/train-0"]["project"] == "vision"
    assert jobs["ml-vision/train-0"]["gpu_model"] == "H100"  # from the node's label
    assert jobs["ml-nlp/mig-a"]["gpus"] == pytest.approx(1 / 7) and jobs["ml-nlp/mig-a"]["project"] == "nlp"
    assert jobs["ml-nlp/mig-b"]["gpus"] == pytest.approx(5 / 7)
    assert jobs["ml-vision/done"]["end_time"] == datetime(2026, 11, 29, 9, 0)
    assert jobs["ml-nlp/workload/wl-1"]["gpus"] == 32.0
    with warehouse.open_reader(ingest.warehouse_path) as con:
        quarantined = con.execute("SELECT source, location, reason FROM quarantine").fetchall()
    assert quarantined[0][:2] == ("kubernetes", "ml-vision/broken") and "nvidia.com/gpu" in quarantined[0][2]

    before = _counts(ingest)
    again = ingest.sync()
    assert _counts(ingest) == before == {"jobs": 6, "quarantine": 1}
    assert again.jobs_written == stats.jobs_written


@pytest.mark.slow
@pytest.mark.parametrize("gone_as_http", [False, True], ids=["error-event-410", "http-410"])
def test_watch_modified_bookmark_resume_and_relist(standin, ingest, gone_as_http):
    standin.gone_as_http = gone_as_http
    _seed(standin)
    flushes: queue.Queue[IngestStats] = queue.Queue()
    stop = threading.Event()
    result: dict = {}

    def run():
        try:
            result["stats"] = ingest.watch(
                stop, timeout_seconds=1, flush_every=1, on_flush=lambda s: flushes.put(IngestStats(**vars(s)))
            )
        except BaseException as exc:  # surfaced in the test thread
            result["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()

    def next_flush(check) -> IngestStats:
        while True:
            try:
                stats = flushes.get(timeout=15)
            except queue.Empty:
                raise AssertionError(f"no flush satisfied the check; watcher state: {result}") from None
            if check(stats):
                return stats

    def watch_request(check) -> dict:
        while True:
            path, query = standin.requests.get(timeout=15)
            if path == POD_LIST and query.get("watch") in ("true", "1") and check(query):
                return query

    listed = next_flush(lambda s: s.pods_listed == 7)
    first_watch = watch_request(lambda q: True)
    assert first_watch["resourceVersion"] == listed.resource_version
    assert first_watch["allowWatchBookmarks"] == "true"

    # MODIFIED: the pod finishes, its row gains an end time.
    standin.modify_pod(
        make_pod(
            "train-0",
            labels={"gpuledger.io/project": "vision"},
            gpus=8,
            phase="Succeeded",
            finished_at="2026-11-29T11:00:00Z",
        )
    )
    next_flush(lambda s: s.watch_events >= 1)
    row = _jobs(ingest)["ml-vision/train-0"]
    assert (row["state"], row["end_time"]) == ("Succeeded", datetime(2026, 11, 29, 11, 0))

    # DELETED while running: closed at the deletion.
    standin.delete_pod(make_pod("train-1", labels={"gpuledger.io/project": "vision"}, gpus=8))
    next_flush(lambda s: s.watch_events >= 2)
    assert _jobs(ingest)["ml-vision/train-1"]["state"] == "Deleted"

    # BOOKMARK: the next watch resumes from the bookmark's version (no object carries it).
    bookmark_rv = str(standin.bookmark())
    watch_request(lambda q: q.get("resourceVersion") == bookmark_rv)

    # 410 Gone: history compacted; the ingester lists again and watches from the new version.
    standin.compact()
    relisted = next_flush(lambda s: s.relists == 1)
    assert int(relisted.resource_version) >= int(bookmark_rv)
    watch_request(lambda q: q.get("resourceVersion") == relisted.resource_version)
    standin.add_pod(make_pod("late", namespace="ml-nlp", gpus=2))
    next_flush(lambda s: s.relists == 1 and s.watch_events >= 3)
    assert _jobs(ingest)["ml-nlp/late"]["gpus"] == 2.0

    stop.set()
    worker.join(timeout=15)
    assert not worker.is_alive() and "error" not in result, result
    assert _counts(ingest) == {"jobs": 7, "quarantine": 1}


def test_vanished_pod_is_closed_on_relist(standin, ingest):
    standin.add_pod(make_pod("a"))
    standin.add_pod(make_pod("b"))
    ingest.sync()
    standin.delete_pod(make_pod("b"))  # deleted while nobody watched
    stats = ingest.sync()
    assert stats.vanished_closed == 1
    jobs = _jobs(ingest)
    assert (jobs["ml-vision/b"]["state"], jobs["ml-vision/b"]["end_time"]) == ("Gone", NOW)
    assert jobs["ml-vision/a"]["end_time"] is None


def test_cli_once(standin, tmp_path):
    _seed(standin)
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    wh = tmp_path / "cli.duckdb"
    args = [
        "kubernetes",
        "--kubeconfig",
        str(kubeconfig),
        "--cluster",
        "c1",
        "--namespace-map",
        "ml-nlp=nlp",
        "--once",
        "--warehouse",
        str(wh),
    ]
    result = CliRunner().invoke(kubernetes_app, args)
    assert result.exit_code == 0, result.output
    assert "6 job rows written, 1 quarantined" in result.output
    with warehouse.open_reader(wh) as con:
        assert con.execute("SELECT count(*) FROM jobs WHERE cluster = 'c1'").fetchone()[0] == 6
        assert con.execute("SELECT project FROM jobs WHERE scheduler_job = 'ml-nlp/mig-a'").fetchone()[0] == "nlp"


def test_cli_unreachable_server(tmp_path):
    server = KubeStandIn()  # bound, never served, then closed: a refused connection
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    server._server.server_close()
    result = CliRunner().invoke(
        kubernetes_app,
        ["kubernetes", "--kubeconfig", str(kubeconfig), "--once", "--warehouse", str(tmp_path / "x.duckdb")],
    )
    assert result.exit_code == 1
    assert "cannot reach" in result.output


# --- issue 8, item 8: a recreated pod is a new job --------------------------------------------

def _recreated(uid: str, created: str, finished: str | None) -> dict:
    pod = make_pod("train-0", gpus=2, phase="Succeeded" if finished else "Running", finished_at=finished)
    pod["metadata"]["uid"] = uid
    pod["metadata"]["creationTimestamp"] = created
    pod["status"]["startTime"] = created
    return pod


def test_a_pod_recreated_under_the_same_name_is_a_new_job(warehouse_file):
    import polars as pl

    from gpuledger.ingest.jobs.kubernetes import write_batch

    def t(h, m=0):
        return datetime(2026, 11, 29, h, m)

    # A StatefulSet-style pod "ml-vision/train-0" on 2 GPUs ran 08:00-12:00 (4 h × 2 = 8 GPU-hours);
    # its replacement, same name, new uid, runs from 12:30.
    first = map_pod(_recreated("uid-1", "2026-11-29T08:00:00Z", "2026-11-29T12:00:00Z"), cluster=CLUSTER, now=t(12))
    second = map_pod(_recreated("uid-2", "2026-11-29T12:30:00Z", None), cluster=CLUSTER, now=t(13, 30))
    inv = pl.DataFrame({"cluster": [CLUSTER] * 2, "gpu_uuid": ["GPU-a", "GPU-b"], "host": ["n1"] * 2,
                        "model": ["H100"] * 2, "first_seen": [t(7)] * 2})
    minutes = [t(8) + (t(0, 5) - t(0)) * k for k in range(12 * 5)]          # 08:00 .. 12:55, every 5 min
    minutes = [m for m in minutes if m < t(12) or m >= t(12, 30)]
    with warehouse.open_writer(warehouse_file) as con:
        ids = warehouse.register_gpus(con, inv)["gpu_id"].to_list()
        warehouse.write_samples(con, pl.DataFrame({
            "gpu_id": [g for g in ids for _ in minutes], "ts": minutes * 2, "sm_active_ratio": [0.5] * (2 * len(minutes)),
            "namespace": ["ml-vision"] * (2 * len(minutes)), "pod": ["train-0"] * (2 * len(minutes)),
        }, schema_overrides={"ts": pl.Datetime("us")}), "scrape")
        write_batch(con, [first], [], now=t(12))
        write_batch(con, [second], [], now=t(13, 30))
        jobs = con.execute("SELECT job_id, scheduler_job, start_time, end_time FROM jobs ORDER BY start_time").fetchall()
        hours = dict(con.execute(
            "SELECT job_id, sum(epoch(coalesce(end_time, TIMESTAMP '2026-11-29 13:30') - start_time) / 3600 "
            "* gpu_fraction) FROM job_allocations GROUP BY job_id").fetchall())
    # Two jobs, one name. Today the second overwrites the first (job_id = namespace/name) and the
    # derived allocations are clipped to 12:30: 2 GPUs × 1 h = 2 GPU-hours instead of 8 + 2.
    assert jobs == [("uid-1", "ml-vision/train-0", t(8), t(12)), ("uid-2", "ml-vision/train-0", t(12, 30), None)]
    assert hours == pytest.approx({"uid-1": 8.0, "uid-2": 2.0})


def test_sync_stores_node_labels_and_prices_a_spot_node_spot(standin, ingest):
    # Issue 8 item 7: the node's Karpenter capacity-type label makes its GPU spot (today: every
    # device stays reserved, whatever its node is).
    import polars as pl

    standin.nodes[0]["metadata"]["labels"]["karpenter.sh/capacity-type"] = "spot"
    with warehouse.open_writer(ingest.warehouse_path) as con:
        warehouse.register_gpus(con, pl.DataFrame({"cluster": [CLUSTER], "gpu_uuid": ["GPU-1"],
                                                   "host": ["node-h100"], "model": ["H100"]}))
    _seed(standin)
    ingest.sync()
    with warehouse.open_reader(ingest.warehouse_path) as con:
        assert con.execute("SELECT host, pricing_tier FROM gpus").fetchall() == [("node-h100", "spot")]
        assert sorted(h for (h,) in con.execute("SELECT host FROM node_labels").fetchall()) == ["node-cpu", "node-h100"]


def test_rows_keyed_by_name_before_uids_are_not_counted_twice(warehouse_file):
    import dataclasses

    from gpuledger.ingest.jobs.kubernetes import write_batch

    record = map_pod(_recreated("uid-1", "2026-11-29T08:00:00Z", None), cluster=CLUSTER, now=NOW)
    legacy = dataclasses.replace(record, job_id="ml-vision/train-0")   # as written before uids
    with warehouse.open_writer(warehouse_file) as con:
        write_batch(con, [legacy], [], now=NOW)
        write_batch(con, [record], [], now=NOW)
        rows = con.execute("SELECT job_id, scheduler_job FROM jobs").fetchall()
    # The same pod (same name, same creation time): one row, under its uid.
    assert rows == [("uid-1", "ml-vision/train-0")]
