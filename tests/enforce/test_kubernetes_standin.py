"""Enforcement against the Kubernetes stand-in (tests/helpers/k8s_standin.py), the official client speaking
real HTTP: the plan-file flow never evicts a label-exempt pod, nor one that gained the label after
the plan; a pod recreated under the same name (new uid) is never evicted — refused on the re-read,
and by the API server's own uid precondition (409 Conflict) when it races the re-read; Events name
the pod's uid; the RBAC manifests grant exactly the calls the code makes (compared both ways),
cluster-wide and in the namespaced variant."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from gpuledger.enforce.apply import apply_actions
from gpuledger.enforce.backends.kubernetes import EvictionBackend
from gpuledger.enforce.backends.kueue import KueueBackend
from gpuledger.enforce.model import Action
from typer.testing import CliRunner

from gpuledger import warehouse
from tests.helpers.configs import TWO_PROJECTS
from tests.helpers.k8s_standin import KubeStandIn

kubernetes = pytest.importorskip("kubernetes")
NOW = datetime(2026, 11, 20, 12, 0)
AT = "2026-11-20T12:00:00"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
CONFIG = TWO_PROJECTS + '    exempt_labels: {gpuledger.io/protect: "true"}\n'


@pytest.fixture
def server():
    s = KubeStandIn().start()
    yield s
    s.close()


def pod(name: str, uid: str | None = None, labels: dict | None = None) -> dict:
    # `want` waits for GPUs (Pending), as the warehouse has it; every other pod runs
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": uid or f"uid-{name}", "labels": labels or {}},
            "spec": {"containers": [{"name": "main"}], "terminationGracePeriodSeconds": 900},
            "status": {"phase": "Pending" if name == "want" else "Running"}}


def cli(*args):
    from gpuledger.cli import app

    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def pods_warehouse(tmp_path, server):
    """An unfunded 8-GPU pod `burst` running on burst, a funded pod `want` waiting for 8 H100s —
    in the warehouse (as ingested) and on the stand-in."""
    path = tmp_path / "w.duckdb"
    (tmp_path / "c.yaml").write_text(CONFIG)
    assert cli("config", "load", "--config", str(tmp_path / "c.yaml"), "-w", str(path)).exit_code == 0
    with warehouse.open_writer(path) as con:
        for uid, name, project, start in (("uid-burst", "burst", "free-proj", NOW - timedelta(hours=1)),
                                          ("uid-want", "want", "funded-proj", None)):
            con.execute("INSERT INTO jobs (cluster, job_id, scheduler_job, project, name, namespace, kind, gpu_model, "
                        "gpus, min_runtime_s, submit_time, start_time, state, source, updated_at) VALUES "
                        "('k', ?, ?, ?, ?, 'ml', 'training', 'H100', 8, 3600, ?, ?, ?, 'kubernetes', ?)",
                        [uid, f"ml/{name}", project, name, NOW - timedelta(hours=2), start,
                         "RUNNING" if start else "PENDING", NOW - timedelta(minutes=1)])
    server.kc = server.write_kubeconfig(tmp_path / "kc", context="k")
    return path


def plan_file(path, server, out: Path, *extra) -> list[dict]:
    done = cli("enforce", "plan", "--format", "json", "--out", str(out), "--now", AT, "-w", str(path), *extra)
    assert done.exit_code == 0, done.output
    return json.loads(out.read_text())["actions"]


def apply_file(path, server, plan: Path):
    done = cli("enforce", "apply", "--backend", "kubernetes", "--plan", str(plan), "--yes", "--kubeconfig",
               str(server.kc), "--now", AT, "-w", str(path))
    assert done.exit_code == 0, done.output
    return done.output


def evictions(server) -> list[str]:
    return [c["path"] for c in server.calls if c["path"].endswith("/eviction")]


def test_a_label_exempt_pod_survives_the_plan_file_flow(server, pods_warehouse, tmp_path):
    server.add_pod(pod("burst", labels={"gpuledger.io/protect": "true"}))
    server.add_pod(pod("want"))
    observe = ["--observe", "kubernetes", "--kubeconfig", str(server.kc)]
    # the README's review flow, without the live view: nothing is preempted (labels exist only there)
    blind = plan_file(pods_warehouse, server, tmp_path / "blind.json")
    assert not [a for a in blind if a["action"] == "preempt"]
    # with it: the label exempts the pod
    actions = plan_file(pods_warehouse, server, tmp_path / "plan.json", *observe)
    assert not [a for a in actions if a["action"] == "preempt"]
    assert "exempt" in next(a["reason"] for a in actions if a["job_id"] == "uid-burst" and a["action"] == "set-priority")
    for f in ("blind.json", "plan.json"):
        apply_file(pods_warehouse, server, tmp_path / f)
    assert evictions(server) == [] and sorted(p["metadata"]["name"] for p in server.pods_snapshot()) == ["burst", "want"]

    # the label arrives after the plan was made: the re-read before acting sees it, nothing is evicted
    server.modify_pod(pod("burst"))  # label gone: the next plan preempts it
    plain = plan_file(pods_warehouse, server, tmp_path / "late.json", *observe)
    (pre,) = [a for a in plain if a["action"] == "preempt"]
    assert pre["job_id"] == "uid-burst" and pre["observed"]["labels"] == {"gpuledger.io/protect": None,
                                                                            "gpuledger.io/checkpointing": None}
    server.modify_pod(pod("burst", labels={"gpuledger.io/protect": "true"}))
    out = apply_file(pods_warehouse, server, tmp_path / "late.json")
    assert "refused" in out and "label gpuledger.io/protect was None, now 'true'" in out, out
    assert evictions(server) == [] and len(server.pods_snapshot()) == 2


def test_a_pod_recreated_under_the_same_name_is_not_evicted(server, pods_warehouse, tmp_path):
    server.add_pod(pod("burst"))
    server.add_pod(pod("want"))
    actions = plan_file(pods_warehouse, server, tmp_path / "plan.json", "--observe", "kubernetes",
                        "--kubeconfig", str(server.kc))
    (pre,) = [a for a in actions if a["action"] == "preempt"]
    assert pre["observed"]["uid"] == "uid-burst"
    server.delete_pod(pod("burst"))
    server.add_pod(pod("burst", uid="uid-burst-2"))  # its controller made a new one under the same name
    out = apply_file(pods_warehouse, server, tmp_path / "plan.json")
    assert "uid was 'uid-burst', now 'uid-burst-2'" in out and evictions(server) == []
    # the same race closer than the re-read: the eviction carries the uid, the API server says 409
    api = kubernetes.config.new_client_from_config(config_file=str(server.kc))
    action = Action(action="preempt", cluster="k", job_id="uid-burst", project="free-proj", reason="r", rule="t",
                    source="kubernetes", scheduler_job="ml/burst", mode="stop", observed={"uid": "uid-burst"})
    outcome = EvictionBackend(api=api, cluster="k").preempt(action, dry_run=False)
    assert outcome.outcome == "refused" and outcome.error.startswith("409 ") and "recreated" in outcome.detail
    (call,) = [c for c in server.calls if c["path"].endswith("/eviction")]
    assert call["body"]["deleteOptions"] == {"preconditions": {"uid": "uid-burst"}}  # no grace: the pod's own 900 s
    assert sorted((p["metadata"]["name"], p["metadata"]["uid"]) for p in server.pods_snapshot()) == [
        ("burst", "uid-burst-2"), ("want", "uid-want")]


def test_events_name_the_pod_uid_and_a_configured_grace_is_sent(server, tmp_path):
    server.add_pod(pod("p"))
    api = kubernetes.config.new_client_from_config(config_file=str(server.write_kubeconfig(tmp_path / "kc", context="k")))
    common = dict(cluster="k", job_id="uid-p", project="x", reason="idle", rule="t", source="kubernetes",
                  scheduler_job="ml/p", observed={"uid": "uid-p", "state": "Running"})
    run = apply_actions([Action(action="warn", stage="warning", **common),
                         Action(action="preempt", mode="stop", **common)],
                        EvictionBackend(api=api, cluster="k", grace_period_s=120), dry_run=False)
    assert [o.outcome for _, o in run.results] == ["done", "done"]
    assert [(e["reason"], e["involvedObject"]["uid"]) for e in server.events] == [
        ("GpuledgerIdleWarning", "uid-p"), ("GpuledgerPreempted", "uid-p")]
    (call,) = [c for c in server.calls if c["path"].endswith("/eviction")]
    assert call["body"]["deleteOptions"] == {"gracePeriodSeconds": 120, "preconditions": {"uid": "uid-p"}}


def _granted(manifest: str, kind: str) -> set[tuple[str, str, str]]:
    (role,) = [d for d in yaml.safe_load_all((DEPLOY / manifest).read_text()) if d["kind"] == kind]
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def _used(server) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every request the backends made (GETs from the request log,
    writes from the enforcement calls)."""
    requests = []
    while not server.requests.empty():
        requests.append(("GET", server.requests.get()[0]))
    requests += [(c["method"], c["path"]) for c in server.calls if c["method"] != "GET"]
    out = set()
    for method, path in requests:
        parts = path.strip("/").split("/")
        group = parts[1] if parts[0] == "apis" else ""
        rest = parts[3:] if parts[0] == "apis" else parts[2:]
        if rest[:1] == ["namespaces"]:
            rest = rest[2:]
        resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
        verb = {"GET": "get" if name else "list", "PATCH": "patch", "POST": "create"}[method]
        out.add((group, f"{resource}/{sub}" if sub else resource, verb))
    return out


def _exercise(server, api, namespaces):
    """Every call path of both backends: observe, re-read, priority, warn, preempt, re-activate."""
    server.kueue_workloads[("ml", "a")] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "a", "namespace": "ml", "uid": "uid-a", "annotations": {"gpuledger.io/requeue": "pending"}},
        "spec": {"active": False, "priority": 1, "podSets": []}, "status": {"conditions": []}}
    server.kueue_workloads[("ml", "b")] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "b", "namespace": "ml", "uid": "uid-b"}, "spec": {"active": True, "priority": 1}}
    server.add_pod(pod("p"))
    kueue, evict = KueueBackend(api=api, cluster="k", namespaces=namespaces), EvictionBackend(api=api, cluster="k", namespaces=namespaces)
    kueue.prepare(dry_run=False)
    kueue.observe()
    evict.observe()
    wl = dict(cluster="k", job_id="ml/workload/b", project="x", reason="r", rule="t", source="kueue",
              observed={"uid": "uid-b"})
    pd = dict(cluster="k", job_id="uid-p", project="x", reason="r", rule="t", source="kubernetes",
              scheduler_job="ml/p", observed={"uid": "uid-p"})
    apply_actions([Action(action="set-priority", priority=5, **wl), Action(action="warn", stage="warning", **wl),
                   Action(action="preempt", mode="stop", **wl), Action(action="warn", stage="warning", **pd),
                   Action(action="preempt", mode="stop", **pd)], kueue, dry_run=False)
    apply_actions([Action(action="warn", stage="warning", **pd), Action(action="preempt", mode="stop", **pd)],
                  evict, dry_run=False)


@pytest.mark.parametrize(("manifest", "kind", "namespaces"), [("rbac.yaml", "ClusterRole", None),
                                                              ("rbac-namespaced.yaml", "Role", ["ml"])])
def test_rbac_grants_exactly_what_the_code_uses(server, tmp_path, manifest, kind, namespaces):
    api = kubernetes.config.new_client_from_config(config_file=str(server.write_kubeconfig(tmp_path / "kc", context="k")))
    _exercise(server, api, namespaces)
    used, granted = _used(server), _granted(manifest, kind)
    assert used == granted, {"used, not granted": used - granted, "granted, not used": granted - used}
    assert not [g for g in granted if g[2] in ("delete", "deletecollection", "update", "watch")]
    if namespaces:  # the namespaced variant never lists across namespaces
        (role,) = [d for d in yaml.safe_load_all((DEPLOY / manifest).read_text()) if d["kind"] == kind]
        assert role["metadata"]["namespace"] == "ml"


def test_the_hourly_cap_holds_across_separate_apply_runs(server, pods_warehouse, tmp_path):
    """Two apply runs, each with a plan of one eviction made before either ran: with
    max_preemptions_per_hour 1 the second is refused at apply time, counted from the audit."""
    from gpuledger.enforce import cycle

    from gpuledger.config import load_config

    (tmp_path / "capped.yaml").write_text(CONFIG.replace("    dry_run: false", "    dry_run: false\n"
                                                        "    max_preemptions_per_hour: 1"))
    cfg = load_config(tmp_path / "capped.yaml")
    for name in ("b1", "b2"):
        server.add_pod(pod(name))
    api = kubernetes.config.new_client_from_config(config_file=str(server.kc))

    def one(name: str, n: int):
        action = Action(action="preempt", cluster="k", job_id=f"uid-{name}", project="free-proj", reason="r",
                        rule="unfunded-burst", source="kubernetes", scheduler_job=f"ml/{name}", mode="stop",
                        observed={"uid": f"uid-{name}"}, action_id=f"plan{n}:0", dry_run=False)
        return cycle.apply_plan(lambda: warehouse.open_reader(pods_warehouse),
                                lambda: warehouse.open_writer(pods_warehouse), [action], EvictionBackend(api=api, cluster="k"),
                                dry_run=False, planned_at=NOW, cfg=cfg, applied_at=NOW + timedelta(minutes=n))

    first, second = one("b1", 1), one("b2", 2)
    assert [o.outcome for _, o in first.results] == ["done"]
    assert [o.outcome for _, o in second.results] == ["refused"]
    assert "the cap of 1 preemptions per rolling hour is reached (1 performed)" in second.results[0][1].detail
    assert evictions(server) == ["/api/v1/namespaces/ml/pods/b1/eviction"]
