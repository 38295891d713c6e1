"""A team lead's hold and release of a Kueue Workload (issue 38) through the Kubernetes stand-in
(tests/helpers/k8s_standin.py: real HTTP, the official client): a pending Workload is held with
``spec.active=false`` and an Event, released with ``spec.active=true``; a dry run sends nothing
and says what it would; a Workload that Kueue admitted since the plan is never held (a hold never
stops work); a second hold of a held Workload is ``unchanged``."""

from __future__ import annotations

import pytest
from gpuledger.enforce.apply import apply_actions
from gpuledger.enforce.backends.kueue import KueueBackend
from gpuledger.enforce.model import Action

from tests.helpers.k8s_standin import KubeStandIn

kubernetes = pytest.importorskip("kubernetes")


@pytest.fixture
def kueue(tmp_path):
    server = KubeStandIn().start()
    api = kubernetes.config.new_client_from_config(config_file=str(server.write_kubeconfig(tmp_path / "kc",
                                                                                            context="k")))
    yield server, KueueBackend(api=api, cluster="k")
    server.close()


def workload(name: str, *, admitted: bool = False) -> dict:
    conditions = [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}] if admitted \
        else []
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"active": True, "priority": 1, "podSets": []}, "status": {"conditions": conditions}}


def lead(action: str, name: str) -> Action:
    return Action(action=action, cluster="k", job_id=f"ml/workload/{name}", project="vision", source="kueue",
                  reason=f"{action} by team vision's lead", rule="team-hold")


@pytest.mark.slow
def test_a_pending_workload_is_held_then_released(kueue):
    server, backend = kueue
    server.kueue_workloads[("ml", "w")] = workload("w")
    dry = apply_actions([lead("hold", "w")], backend, dry_run=True)
    assert [o.outcome for _, o in dry.results] == ["dry-run"] and '"active": false' in dry.results[0][1].detail
    assert server.kueue_workloads[("ml", "w")]["spec"]["active"] is True  # the dry run sent nothing
    held = apply_actions([lead("hold", "w")], backend, dry_run=False)
    assert [(o.outcome, o.detail.split(";")[0]) for _, o in held.results] == [
        ("done", "Workload ml/w spec.active=false (held by its team lead)")]
    assert server.kueue_workloads[("ml", "w")]["spec"]["active"] is False
    assert [e["reason"] for e in server.events] == ["GpuledgerHeld"]
    again = apply_actions([lead("hold", "w")], backend, dry_run=False)
    assert [o.outcome for _, o in again.results] == ["unchanged"]
    released = apply_actions([lead("release", "w")], backend, dry_run=False)
    assert [o.outcome for _, o in released.results] == ["done"]
    assert server.kueue_workloads[("ml", "w")]["spec"]["active"] is True
    assert [e["reason"] for e in server.events] == ["GpuledgerHeld", "GpuledgerReleased"]


def test_a_workload_admitted_since_the_plan_is_not_held(kueue):
    server, backend = kueue
    server.kueue_workloads[("ml", "r")] = workload("r", admitted=True)
    run = apply_actions([lead("hold", "r")], backend, dry_run=False)
    (_, outcome), = run.results
    assert (outcome.outcome, outcome.cause) == ("skipped", "not-waiting")
    assert "a hold never stops a started job" in outcome.detail
    assert server.kueue_workloads[("ml", "r")]["spec"]["active"] is True and server.events == []


def test_a_leads_order_reaches_a_waiting_workload_and_skips_one_admitted_since(kueue):
    server, backend = kueue
    server.kueue_workloads[("ml", "w")] = workload("w")
    server.kueue_workloads[("ml", "r")] = workload("r", admitted=True)
    order = [Action(action="set-priority", cluster="k", job_id=f"ml/workload/{n}", project="vision", source="kueue",
                    reason="team vision's lead put it #1", rule="team-order", priority=503_002) for n in ("w", "r")]
    run = apply_actions(order, backend, dry_run=False)
    assert [(a.job_id, o.outcome, o.cause) for a, o in run.results] == [
        ("ml/workload/w", "done", None), ("ml/workload/r", "skipped", "not-waiting")]
    assert server.kueue_workloads[("ml", "w")]["spec"]["priority"] == 503_002
    assert server.kueue_workloads[("ml", "r")]["spec"]["priority"] == 1  # admitted: left as it runs
