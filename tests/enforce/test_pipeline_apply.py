"""The Dagster enforcement assets in-process against the Kubernetes stand-in: the apply asset acts
on its own cycle's plan only — after an eviction a PodDisruptionBudget refused, a quiet cycle (its
plan recorded no rows) sends nothing, where the newest-plan-in-the-audit rule sent the refused
eviction again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
from gpuledger.pipelines.defs.enforcement.assets import enforcement_actions, enforcement_plan
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger import warehouse
from tests.helpers.k8s_standin import KubeStandIn

pytest.importorskip("kubernetes")


@pytest.fixture
def server():
    s = KubeStandIn().start()
    yield s
    s.close()


def pod(name: str) -> dict:  # `want` waits for GPUs (Pending), as the warehouse has it
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {"app": name}},
            "spec": {"containers": [{"name": "main"}]},
            "status": {"phase": "Pending" if name == "want" else "Running"}}


@pytest.mark.slow
def test_a_quiet_cycle_after_a_refused_eviction_sends_nothing(server, tmp_path):
    from typer.testing import CliRunner

    from gpuledger.cli import app

    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)  # fresh data: the apply re-checks by the clock
    kc = server.write_kubeconfig(tmp_path / "kc", context="k")
    config = tmp_path / "c.yaml"
    config.write_text(f"""
currency: USD
org:
  name: acme
  children:
    - {{name: funded-proj, shares: 1}}
    - {{name: free-proj, shares: 1}}
budgets:
  - {{node: funded-proj, gpu_hours: 1000, period: "{now:%Y-%m}"}}
rate_card:
  - {{gpu_model: H100, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}}
sources:
  kubernetes: {{kubeconfig: "{kc}", cluster: k}}
policy:
  enforcement:
    dry_run: false
    pipeline_apply: true
    pipeline_backend: kubernetes
""")
    path = tmp_path / "w.duckdb"
    assert CliRunner().invoke(app, ["config", "load", "--config", str(config), "-w", str(path)]).exit_code == 0
    with warehouse.open_writer(path) as con:  # unfunded `burst` runs on 8 H100s that funded `want` waits for
        for name, project, start in (("burst", "free-proj", now - timedelta(hours=1)), ("want", "funded-proj", None)):
            con.execute("INSERT INTO jobs (cluster, job_id, scheduler_job, project, name, namespace, kind, gpu_model, "
                        "gpus, min_runtime_s, submit_time, start_time, state, source, updated_at) VALUES "
                        "('k', ?, ?, ?, ?, 'ml', 'training', 'H100', 8, 3600, ?, ?, ?, 'kubernetes', ?)",
                        [f"uid-{name}", f"ml/{name}", project, name, now - timedelta(hours=2), start,
                         "RUNNING" if start else "PENDING", now])
    for name in ("burst", "want"):
        server.add_pod(pod(name))
    server.pdbs.append({"metadata": {"name": "burst-pdb", "namespace": "ml"},
                        "spec": {"selector": {"matchLabels": {"app": "burst"}}}, "status": {"disruptionsAllowed": 0}})
    instance = dg.DagsterInstance.ephemeral()
    resources = {"warehouse": Warehouse(path=str(path)), "gpuledger_config": GpuledgerConfig(path=str(config))}

    def cycle(at: datetime) -> dict:
        planned = dg.materialize([enforcement_plan], resources=resources, instance=instance,
                                 run_config={"ops": {"enforcement_plan": {"config": {"as_of": at.isoformat()}}}})
        applied = dg.materialize([enforcement_actions], resources=resources, instance=instance)
        assert planned.success and applied.success
        (event,) = applied.asset_materializations_for_node("enforcement_actions")
        return {k: v.value for k, v in event.metadata.items()}

    def evictions() -> int:
        return sum(1 for c in server.calls if c["path"].endswith("/eviction"))

    first = cycle(now)
    assert first["applied"] is True and first["outcome_refused"] == 1 and evictions() == 1  # the PDB said no
    with warehouse.open_writer(path) as con:  # both jobs end: the next cycle has nothing to decide
        con.execute("UPDATE jobs SET end_time = ?", [now + timedelta(minutes=1)])
        rows = con.execute("SELECT count(*) FROM enforcement_audit").fetchone()[0]
    quiet = cycle(now + timedelta(minutes=5))
    with warehouse.open_reader(path) as con:
        assert con.execute("SELECT count(*) FROM enforcement_audit").fetchone()[0] == rows  # recorded nothing
    assert quiet["applied"] is False and quiet["why_not"] == "this cycle's plan holds nothing to act on"
    assert evictions() == 1  # the refused eviction of the cycle before is not sent again
