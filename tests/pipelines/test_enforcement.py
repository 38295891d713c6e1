"""The enforcement assets in-process on a small simulated cluster: the plan is recorded every
cycle (dry run); the apply asset does nothing until the config enables it, then applies the newest
plan once."""

from __future__ import annotations

from datetime import datetime

import dagster as dg
import duckdb
import pytest
from gpuledger.pipelines.defs.enforcement.assets import enforcement_actions, enforcement_plan

from tests.pipelines.test_assets import config_file, materialize, metadata, sim, sim_warehouse  # noqa: F401

AS_OF = datetime(2026, 11, 1, 5, 0)


def rows(path, sql):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
def test_plan_is_recorded_and_apply_is_off_unless_configured(sim_warehouse, tmp_path, config_file):
    instance = dg.DagsterInstance.ephemeral()
    run_config = {"ops": {"enforcement_plan": {"config": {"as_of": AS_OF.isoformat()}}}}
    planned = materialize([enforcement_plan], sim_warehouse, instance=instance, run_config=run_config)
    meta = metadata(planned, enforcement_plan)
    assert meta["dry_run"] is True and meta["planned_at_utc"] == AS_OF.isoformat()
    ((n, plans, dry),) = rows(sim_warehouse, "SELECT count(*), count(DISTINCT plan_id), bool_and(dry_run) "
                                             "FROM enforcement_audit WHERE phase = 'planned'")
    assert plans == 1 and dry is True and n == (meta["set_priority"] + meta["warn"] + meta["preempt"] + meta["hold"]
                                               + meta["release"] + meta["none"])

    off = materialize([enforcement_actions], sim_warehouse, instance=instance)
    assert metadata(off, enforcement_actions) == {"applied": False,
                                                  "why_not": "policy.enforcement.pipeline_apply is false"}
    assert rows(sim_warehouse, "SELECT count(*) FROM enforcement_audit WHERE phase = 'applied'") == [(0,)]

    # enabled, still a dry run: every action of the newest plan gets one applied row, nothing acts —
    # through a Kubernetes backend of the simulated cluster (the stand-in API server: it is asked,
    # read-only, what a dry run needs; a Slurm backend would first need a controller to say which
    # cluster it is)
    from tests.helpers.k8s_standin import KubeStandIn

    server = KubeStandIn().start()
    kc = server.write_kubeconfig(tmp_path / "kc", context="sim")
    assert "\nsources:" not in config_file[1]
    text = config_file[1].replace("    pipeline_apply: false", "    pipeline_apply: true").replace(
        "    pipeline_backend: null", "    pipeline_backend: kubernetes") + \
        f"sources:\n  kubernetes: {{kubeconfig: \"{kc}\", cluster: sim}}\n"
    enabled = tmp_path / "enabled.yaml"
    enabled.write_text(text)
    try:
        on = materialize([enforcement_actions], sim_warehouse, instance=instance, config=enabled)
    finally:
        server.close()
    assert not [c for c in server.calls if c["method"] != "GET"]  # a dry run: nothing written
    meta_on = metadata(on, enforcement_actions)
    assert meta_on["applied"] is True and meta_on["dry_run"] is True and meta_on["performed"] == 0
    acted = meta["set_priority"] + meta["warn"] + meta["preempt"]
    assert rows(sim_warehouse, "SELECT count(*), bool_and(dry_run) FROM enforcement_audit "
                               "WHERE phase = 'applied'") == [(acted, True)]
