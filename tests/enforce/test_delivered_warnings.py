"""A warning reaches someone — and starts the preemption clock — only when it was delivered: its
warn action applied for real on the scheduler (here a Warning Event on the Kubernetes stand-in),
or a squatting alert about the job sent through the alerts outbox (here to a real local webhook).
A warning that was only planned, or applied in a dry run, stays undelivered (audit.load_warnings)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from gpuledger.enforce import audit, cycle
from gpuledger.enforce.backends.kubernetes import EvictionBackend
from gpuledger.enforce.model import Action

from gpuledger import warehouse
from tests.helpers.alert_receivers import receivers_fixture  # noqa: F401 - the `receivers` fixture
from tests.helpers.k8s_standin import KubeStandIn

kubernetes = pytest.importorskip("kubernetes")
NOW = datetime(2026, 11, 20, 12, 0)
IDLE = NOW - timedelta(minutes=70)


def warn(job: str) -> Action:
    return Action(action="warn", cluster="k", job_id=job, project="p", reason="idle 70 min", rule="squatting-warning",
                  stage="warning", idle_since=IDLE, source="kubernetes", scheduler_job=f"ml/{job}", dry_run=False)


@pytest.mark.slow
def test_only_delivered_warnings_start_the_clock(tmp_path, receivers):
    from gpuledger.alerts import outbox
    from gpuledger.channels import notifier_for

    path = tmp_path / "w.duckdb"
    with warehouse.open_writer(path) as con:
        audit.record_plan(con, [warn("applied"), warn("alerted"), warn("planned")], now=NOW)
    with warehouse.open_reader(path) as con:
        assert {k[1]: [w.delivered_at for w in v] for k, v in audit.load_warnings(con).items()} == {
            "applied": [None], "alerted": [None], "planned": [None]}
        _, _, actions = audit.load_plan(con)
    server = KubeStandIn().start()
    try:
        server.add_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "applied", "namespace": "ml",
                                                                        "uid": "uid-applied"}})
        api = kubernetes.config.new_client_from_config(config_file=str(server.write_kubeconfig(tmp_path / "kc", context="k")))
        mine = [a for a in actions if a.job_id == "applied"]
        reader, writer = (lambda: warehouse.open_reader(path)), (lambda: warehouse.open_writer(path))
        cycle.apply_plan(reader, writer, mine, EvictionBackend(api=api, cluster="k"), dry_run=True, planned_at=NOW,
                         applied_at=NOW + timedelta(minutes=2))  # a dry run tells no one
        cycle.apply_plan(reader, writer, mine, EvictionBackend(api=api, cluster="k"), dry_run=False, planned_at=NOW,
                         applied_at=NOW + timedelta(minutes=5))
        assert [e["reason"] for e in server.events] == ["GpuledgerIdleWarning"]
    finally:
        server.close()
    outbox.enqueue(path, [outbox.Alert(key="squatting|k|alerted|x", kind="squatting", channel="oncall_hook",
                                       subject="idle", body="idle", created_at=NOW, not_before=NOW,
                                       severity="warning", payload={"cluster": "k", "job_id": "alerted"})])
    report = outbox.deliver(path, notifier_for)
    assert report.sent == 1 and receivers[0].bodies  # the webhook got it
    with warehouse.open_reader(path) as con:
        delivered = {k[1]: v[0].delivered_at for k, v in audit.load_warnings(con).items()}
        sent_at = con.execute("SELECT sent_at FROM alert_outbox").fetchone()[0]
    assert delivered == {"applied": NOW + timedelta(minutes=5), "alerted": sent_at, "planned": None}
