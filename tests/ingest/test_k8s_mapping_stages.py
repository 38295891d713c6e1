"""The stages of map_pod / map_workload (gpuledger.ingest.jobs.k8s_mapping), each on hand-made
input; the whole mappers stay covered by tests/ingest/test_kubernetes.py and test_edges.py.
Expected values derived by hand in the comments."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpuledger.ingest.jobs.k8s_mapping import (
    DEFAULT_OPTIONS,
    MappingOptions,
    _Malformed,
    _min_runtime,
    _ownership,
    _pod_record,
    _pod_set_count,
    _workload_priority_class,
    _workload_record,
    pod_end,
    pod_lifetime,
    workload_conditions,
    workload_demand,
    workload_state,
)

NOW = datetime(2026, 12, 1, 12, 0, 0)
CREATED = {"creationTimestamp": "2026-11-29T10:00:00Z"}


def _finished_container(at: str) -> dict:
    return {"state": {"terminated": {"finishedAt": at}}}


def test_pod_lifetime_running_pod_has_no_end():
    # phase Running, not deleted: no end, state is the phase
    got = pod_lifetime(
        CREATED, {"phase": "Running", "startTime": "2026-11-29T10:05:00Z"}, now=NOW, deleted=False
    )
    assert got == (datetime(2026, 11, 29, 10, 0), datetime(2026, 11, 29, 10, 5), None, "Running")


def test_pod_lifetime_no_phase_is_pending_and_deleted_running_pod_is_deleted():
    assert pod_lifetime(CREATED, {}, now=NOW, deleted=False)[3] == "Pending"
    # deleted while Running, nothing else known: ends now, state Deleted
    _, _, end, state = pod_lifetime(CREATED, {"phase": "Running"}, now=NOW, deleted=True)
    assert (end, state) == (NOW, "Deleted")
    # deleted after it Succeeded: the phase stays the state
    status = {"phase": "Succeeded", "containerStatuses": [_finished_container("2026-11-29T11:00:00Z")]}
    assert pod_lifetime(CREATED, status, now=NOW, deleted=True)[2:] == (
        datetime(2026, 11, 29, 11),
        "Succeeded",
    )


def test_pod_lifetime_names_missing_creation_time():
    with pytest.raises(_Malformed, match=r"^metadata.creationTimestamp: missing$"):
        pod_lifetime({}, {"phase": "Running"}, now=NOW, deleted=False)


def test_pod_end_prefers_last_container_finish():
    # two containers finish 11:00 and 11:30; deletion at 12:00 and a condition at 11:45 lose: 11:30
    meta = {"deletionTimestamp": "2026-11-29T12:00:00Z"}
    status = {
        "containerStatuses": [
            _finished_container("2026-11-29T11:00:00Z"),
            _finished_container("2026-11-29T11:30:00Z"),
        ],
        "conditions": [{"lastTransitionTime": "2026-11-29T11:45:00Z"}],
    }
    assert pod_end(meta, status, "Succeeded", NOW) == datetime(2026, 11, 29, 11, 30)


def test_pod_end_falls_back_deletion_then_condition_then_now():
    conditions = {"conditions": [{"lastTransitionTime": "2026-11-29T11:45:00Z"}]}
    # no container finish: deletion time 12:00
    assert pod_end({"deletionTimestamp": "2026-11-29T12:00:00Z"}, conditions, "Failed", NOW) == datetime(
        2026, 11, 29, 12
    )
    # no deletion either, finished phase: last condition 11:45
    assert pod_end({}, conditions, "Failed", NOW) == datetime(2026, 11, 29, 11, 45)
    # a deleted Running pod does not read conditions: now
    assert pod_end({}, conditions, "Running", NOW) == NOW


def test_min_runtime_reads_the_configured_annotation():
    # "1h30m" = 3600 + 1800 = 5400 s; a cluster's own annotation name is honoured
    assert _min_runtime({"gpuledger.io/min-runtime": "1h30m"}, DEFAULT_OPTIONS) == 5400
    assert _min_runtime({"x/min": "90s"}, MappingOptions(min_runtime_annotation="x/min")) == 90
    assert _min_runtime({}, DEFAULT_OPTIONS) is None
    with pytest.raises(_Malformed, match=r"metadata.annotations\['gpuledger.io/min-runtime'\]: 'soon'"):
        _min_runtime({"gpuledger.io/min-runtime": "soon"}, DEFAULT_OPTIONS)


def test_ownership_owner_name_and_label_project():
    labels = {"gpuledger.io/project": "vision", "gpuledger.io/user": "ana"}
    got = _ownership(labels, "ml", "train-0", "PyTorchJob", "train", DEFAULT_OPTIONS)
    assert got == {"project": "vision", "user_name": "ana", "name": "train", "kind": "training"}


def test_ownership_bare_pod_uses_own_name_and_namespace_project():
    # no owner: the pod's own name, kind "interactive"; no project label: namespace mapping
    options = MappingOptions(namespace_projects={"ml": "ml-research"})
    got = _ownership({}, "ml", "shell", None, None, options)
    assert got == {"project": "ml-research", "user_name": None, "name": "shell", "kind": "interactive"}
    with pytest.raises(
        _Malformed, match=r"metadata.labels\['gpuledger.io/user'\]: expected a string, got int"
    ):
        _ownership({"gpuledger.io/user": 7}, "ml", "shell", None, None, DEFAULT_OPTIONS)


def _gpu_pod(gpus: int = 2) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u-1", **CREATED},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
        "status": {"phase": "Running"},
    }


def test_pod_record_builds_row_or_none():
    row = _pod_record(
        _gpu_pod(), cluster="c", now=NOW, options=DEFAULT_OPTIONS, node_products={}, deleted=False
    )
    assert (row.job_id, row.scheduler_job, row.gpus, row.state, row.source) == (
        "u-1",
        "ml/p",
        2.0,
        "Running",
        "kubernetes",
    )
    none = _pod_record(
        _gpu_pod(0), cluster="c", now=NOW, options=DEFAULT_OPTIONS, node_products={}, deleted=False
    )
    assert none is None


def test_pod_record_reports_first_fault_in_read_order():
    # two faults: name missing and a bad min-runtime annotation; the name is read first
    pod = _gpu_pod()
    del pod["metadata"]["name"]
    pod["metadata"]["annotations"] = {"gpuledger.io/min-runtime": "soon"}
    with pytest.raises(_Malformed, match=r"^metadata.name: missing$"):
        _pod_record(pod, cluster="c", now=NOW, options=DEFAULT_OPTIONS, node_products={}, deleted=False)


def _pod_set(gpus: int, count=1, labels=None, product=None) -> dict:
    spec: dict = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"count": count, "template": {"metadata": {"labels": labels or {}}, "spec": spec}}


def test_workload_demand_sums_pod_sets_and_first_gpu_set_wins():
    # launcher asks 0 GPUs (its labels ignored); workers 4 pods × 2 GPUs = 8; extra 1 × 1 = 9
    spec = {
        "podSets": [
            _pod_set(0, labels={"team": "launcher"}),
            _pod_set(2, count=4, labels={"team": "workers"}, product="NVIDIA-H100-80GB-HBM3"),
            _pod_set(1, labels={"team": "extra", "tier": "b"}, product="NVIDIA-A100-SXM4-80GB"),
        ]
    }
    got = workload_demand(spec)
    assert got.gpus == 9.0
    assert got.labels == {"team": "workers", "tier": "b"}  # earlier GPU pod set wins "team"
    assert got.gpu_model == "H100"


def test_workload_demand_empty_and_bad_pod_set():
    assert workload_demand({}).gpus == 0.0
    with pytest.raises(_Malformed, match=r"^spec.podSets\[1\]: expected an object, got str$"):
        workload_demand({"podSets": [_pod_set(1), "oops"]})


def test_pod_set_count_defaults_to_one_and_refuses_bad_counts():
    assert _pod_set_count({}, "spec.podSets[0]") == 1
    assert _pod_set_count({"count": 0}, "spec.podSets[0]") == 0
    for bad in (True, -1, "3", 1.5):
        with pytest.raises(_Malformed, match=r"^spec.podSets\[2\].count: expected a non-negative integer"):
            _pod_set_count({"count": bad}, "spec.podSets[2]")


def test_workload_conditions_keeps_true_ones_with_times():
    status = {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-11-29T10:01:00Z"},
            {"type": "Admitted", "status": "True"},  # no time: kept with None
            {"type": "Finished", "status": "False", "lastTransitionTime": "2026-11-29T11:00:00Z"},
            {"type": 5, "status": "True"},  # not a string type: skipped
        ]
    }
    assert workload_conditions(status) == {"QuotaReserved": datetime(2026, 11, 29, 10, 1), "Admitted": None}
    with pytest.raises(_Malformed, match=r"^status.conditions\[0\]: expected an object, got NoneType$"):
        workload_conditions({"conditions": [None]})


def test_workload_state_precedence_and_inactive():
    assert workload_state({}, {}) == "Pending"
    # Finished outranks Admitted; Admitted outranks QuotaReserved
    assert workload_state({"Admitted": None, "Finished": None}, {}) == "Finished"
    assert workload_state({"QuotaReserved": None, "Admitted": None}, {}) == "Admitted"
    assert workload_state({"Admitted": None}, {"active": False}) == "Inactive"
    assert workload_state({"Finished": None}, {"active": False}) == "Finished"


def test_workload_priority_class_v1beta2_ref_and_v1beta1_name():
    assert (
        _workload_priority_class({"priorityClassRef": {"kind": "WorkloadPriorityClass", "name": "high"}})
        == "high"
    )
    assert _workload_priority_class({"priorityClassName": "low"}) == "low"
    assert _workload_priority_class({}) is None
    with pytest.raises(_Malformed, match=r"^spec.priorityClassRef.name: expected a string, got int$"):
        _workload_priority_class({"priorityClassRef": {"name": 3}})


def test_workload_record_row_has_no_start_and_ends_at_finish():
    workload = {
        "metadata": {"name": "w", "namespace": "ml", **CREATED},
        "spec": {"podSets": [_pod_set(2, count=3)]},
        "status": {
            "conditions": [
                {"type": "Finished", "status": "True", "lastTransitionTime": "2026-11-30T00:00:00Z"}
            ]
        },
    }
    row = _workload_record(workload, cluster="c", now=NOW, options=DEFAULT_OPTIONS)
    # 3 pods × 2 GPUs = 6; start NULL by design; end = Finished time
    assert (row.job_id, row.gpus, row.start_time, row.end_time, row.state, row.source) == (
        "ml/workload/w",
        6.0,
        None,
        datetime(2026, 11, 30),
        "Finished",
        "kueue",
    )
