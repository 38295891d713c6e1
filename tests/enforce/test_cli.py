"""`gpuledger enforce` commands beyond the backends: the plan table, the kill switch, the plan-file
backend, explain's errors, a bad plan file."""

from __future__ import annotations

import json

from gpuledger import warehouse

from tests.enforce.test_kubernetes import (  # noqa: F401 - fixtures used by name
    CONFIG,
    NOW,
    WL,
    _audit,
    _cli,
    kubeconfig,
    kueue_warehouse,
    server,
    workload,
)

AT = "2026-11-20T12:00:00"


def test_plan_table_names_actions_and_reasons(kueue_warehouse):
    out = _cli("enforce", "plan", "--now", AT, "--no-record", "-w", str(kueue_warehouse))
    assert out.exit_code == 0, out.output
    assert "DRY RUN" not in out.output  # policy.enforcement.dry_run is false in this warehouse's config
    assert "(not recorded)" in out.output and "2 set-priority, 0 warn, 0 preempt, 0 none" in out.output
    assert "ml/workload/funded" in out.output and "funded: above unfunded work" in out.output
    assert _audit(kueue_warehouse, "SELECT count(*) FROM enforcement_audit") == [(0,)]  # --no-record


def _load(tmp_path, path, text):
    (tmp_path / "c2.yaml").write_text(text)
    out = _cli("config", "load", "--config", str(tmp_path / "c2.yaml"), "-w", str(path))
    assert out.exit_code == 0, out.output


def test_kill_switch_plans_none_and_applies_nothing(kueue_warehouse, tmp_path):
    _load(tmp_path, kueue_warehouse, CONFIG.replace("    dry_run: false", "    dry_run: false\n    kill_switch: true"))
    plan = json.loads(_cli("enforce", "plan", "--format", "json", "--now", AT, "-w", str(kueue_warehouse)).output)
    assert {a["action"] for a in plan["actions"]} == {"none"}
    out = _cli("enforce", "apply", "--backend", "slurm", "--yes", "--now", AT, "-w", str(kueue_warehouse))
    assert out.exit_code == 0 and "the kill switch is on" in out.output
    assert _audit(kueue_warehouse) == []


def test_config_dry_run_wins_over_yes(kueue_warehouse, tmp_path):
    _load(tmp_path, kueue_warehouse, CONFIG.replace("    dry_run: false", "    dry_run: true"))
    out = _cli("enforce", "apply", "--backend", "plan-file", "--out", str(tmp_path / "o.json"), "--yes", "--now", AT,
               "-w", str(kueue_warehouse))
    assert out.exit_code == 0 and "dry run: 0 action(s) performed" in out.output
    assert not (tmp_path / "o.json").exists()


def test_plan_file_backend_writes_the_actions_once(kueue_warehouse, tmp_path):
    target = tmp_path / "actions.json"
    first = _cli("enforce", "apply", "--backend", "plan-file", "--out", str(target), "--yes", "--now", AT,
                 "-w", str(kueue_warehouse))
    assert first.exit_code == 0 and "applied: 2 action(s) performed" in first.output
    written = json.loads(target.read_text())["actions"]
    assert sorted((a["action"], a["job_id"]) for a in written) == [("set-priority", "ml/workload/burst"),
                                                                   ("set-priority", "ml/workload/funded")]
    with warehouse.open_reader(kueue_warehouse) as con:
        state = con.execute("SELECT job_id, declared_priority, applied_priority FROM enforcement_job_state "
                            "ORDER BY job_id").fetchall()
    assert [(j, d) for j, d, _ in state] == [("ml/workload/burst", 10), ("ml/workload/funded", 10)]
    assert all(p > 100_000 for _, _, p in state)


def test_explain_unknown_job_and_bad_plan_file_are_one_line_usage_errors(kueue_warehouse, tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for args in (["enforce", "explain", "nope"], ["enforce", "apply", "--backend", "slurm", "--plan", str(bad)]):
        done = subprocess.run([sys.executable, "-m", "gpuledger.cli", *args, "-w", str(kueue_warehouse)],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "no enforcement record" in subprocess.run(
        [sys.executable, "-m", "gpuledger.cli", "enforce", "explain", "nope", "-w", str(kueue_warehouse)],
        capture_output=True, text=True, timeout=120, check=False).stderr


def test_real_preemption_is_counted_and_an_api_error_is_recorded(server, kueue_warehouse, tmp_path):
    from datetime import timedelta

    kc = kubeconfig(server, tmp_path / "kc")
    with warehouse.open_writer(kueue_warehouse) as con:  # funded work waiting for 8 H100s
        con.execute("INSERT INTO jobs (cluster, job_id, project, name, namespace, kind, gpu_model, gpus, "
                    "min_runtime_s, submit_time, state, priority, source, updated_at) VALUES ('k', "
                    "'ml/workload/waiting', 'funded-proj', 'waiting', 'ml', 'training', 'H100', 8, 3600, ?, "
                    "'PENDING', 10, 'kueue', ?)", [NOW - timedelta(minutes=5), NOW])
    for n in ("funded", "burst", "waiting"):  # the waiting one holds no quota (QuotaReserved False)
        server.kueue_workloads[("ml", n)] = workload(n, priority=10, admitted=n != "waiting")
    # the funded workload's priority patch fails once: recorded, the others go on
    server.fail_next[("PATCH", f"{WL}/funded")] = (500, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                        "reason": "InternalError", "code": 500,
                                                        "message": "etcd timed out"})
    out = _cli("enforce", "apply", "--backend", "kueue", "--yes", "--kubeconfig", str(kc), "--now", AT,
               "-w", str(kueue_warehouse))
    assert out.exit_code == 0, out.output
    assert "applied: 3 action(s) performed, 0 already done before, 1 failed or refused" in out.output
    rows = _audit(kueue_warehouse)
    assert ("applied", "set-priority", "ml/workload/funded", "error", False, "500 etcd timed out") in rows
    assert ("applied", "preempt", "ml/workload/burst", "done", False, None) in rows
    assert server.kueue_workloads[("ml", "burst")]["spec"]["active"] is False
    counted = _cli("enforce", "preemptions", "-w", str(kueue_warehouse)).output
    assert counted.split()[:2] == ["1", "k/ml/workload/burst"]
    # the failed action is tried again by the next apply of the same plan; the done ones are not
    plan_id = _audit(kueue_warehouse, "SELECT DISTINCT plan_id FROM enforcement_audit")[0][0]
    plan = tmp_path / "p.json"
    with warehouse.open_reader(kueue_warehouse) as con:
        from gpuledger.enforce import audit
        from gpuledger.enforce.backends.planfile import to_json

        pid, at, actions = audit.load_plan(con, plan_id)
    plan.write_text(to_json(actions, plan_id=pid, planned_at=at))
    again = _cli("enforce", "apply", "--plan", str(plan), "--backend", "kueue", "--yes", "--kubeconfig", str(kc),
                 "-w", str(kueue_warehouse))
    assert "applied: 1 action(s) performed, 3 already done before" in again.output
    assert server.kueue_workloads[("ml", "funded")]["spec"]["priority"] > 500_000


def test_a_quiet_dry_run_cycle_stores_only_what_changed(kueue_warehouse, tmp_path):
    _load(tmp_path, kueue_warehouse, CONFIG.replace("    dry_run: false", "    dry_run: true"))
    for at in ("2026-11-20T12:00:00", "2026-11-20T12:05:00", "2026-11-20T12:10:00"):
        assert _cli("enforce", "plan", "--now", at, "-w", str(kueue_warehouse)).exit_code == 0
    # 2 set-priority rows the first cycle; the same dry-run decisions later add nothing
    assert _audit(kueue_warehouse, "SELECT count(DISTINCT plan_id), count(*) FROM enforcement_audit") == [(1, 2)]
