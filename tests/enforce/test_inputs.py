"""The situation read from the warehouse: Kueue Workloads stand for their pods (the workload row has
no start time by design), pods are reached by their scheduler name, funded workloads are protected
from their pods' start."""

from __future__ import annotations

from datetime import timedelta

from gpuledger.enforce.inputs import _kueue_workloads_stand_for_their_pods, gather
from gpuledger.enforce.model import Finding

from gpuledger import warehouse
from gpuledger.config import parse_config_text

from tests.enforce.test_kubernetes import CONFIG, NOW, _cli

H = timedelta(hours=1)


def _row(job_id, source, *, state, start=None, name="train", scheduler_job=None, **kw):
    return {"cluster": "k", "job_id": job_id, "project": kw.get("project", "funded-proj"), "name": name,
            "namespace": "ml", "kind": "training", "source": source, "user_name": None, "gpus": kw.get("gpus", 4),
            "gpu_model": "H100", "start_time": start, "submit_time": NOW - 2 * H, "priority": 10,
            "scheduler_job": scheduler_job or job_id, "state": state}


def test_admitted_workload_stands_for_its_pods(tmp_path):
    path = tmp_path / "w.duckdb"
    (tmp_path / "c.yaml").write_text(CONFIG)
    assert _cli("config", "load", "--config", str(tmp_path / "c.yaml"), "-w", str(path)).exit_code == 0
    rows = [("ml/workload/train", "kueue", "Admitted", None, "ml/workload/train", 8, 4 * 3600),
            ("uid-0", "kubernetes", "Running", NOW - H, "ml/train-0", 4, 4 * 3600),
            ("uid-1", "kubernetes", "Running", NOW - H + timedelta(minutes=2), "ml/train-1", 4, 4 * 3600),
            ("ml/workload/later", "kueue", "QuotaReserved", None, "ml/workload/later", 8, 0),
            ("uid-solo", "kubernetes", "Running", NOW - H, "ml/solo", 1, 0)]
    with warehouse.open_writer(path) as con:
        for job_id, source, state, start, sched, gpus, min_rt in rows:
            name = job_id.rsplit("/", 1)[-1] if source == "kueue" else sched.split("/")[1].split("-")[0]
            con.execute("INSERT INTO jobs (cluster, job_id, scheduler_job, project, name, namespace, kind, gpu_model, "
                        "gpus, min_runtime_s, submit_time, start_time, state, priority, source, updated_at) VALUES "
                        "('k', ?, ?, 'funded-proj', ?, 'ml', 'training', 'H100', ?, ?, ?, ?, ?, 10, ?, ?)",
                        [job_id, sched, name, gpus, min_rt, NOW - 2 * H, start, state, source, NOW])
    cfg = parse_config_text(CONFIG)
    with warehouse.open_reader(path) as con:
        s = gather(con, cfg, now=NOW)
    by = {j.job_id: j for j in s.jobs}
    # the pods of `train` are represented by their workload; `later` holds quota but runs no pod
    # yet (neither running nor waiting); the bare pod `solo` stays a job of its own
    assert set(by) == {"ml/workload/train", "uid-solo"}
    train = by["ml/workload/train"]
    assert train.running and train.start_time == NOW - H and train.funded
    assert train.protected_until == NOW - H + 4 * H  # the first pod's start + its 4 h minimum runtime
    assert by["uid-solo"].scheduler_job == "ml/solo" and by["uid-solo"].running


def test_workload_squats_only_when_all_its_pods_do():
    rows = [_row("ml/workload/train", "kueue", state="Admitted"),
            _row("p0", "kubernetes", state="Running", start=NOW - 5 * H),
            _row("p1", "kubernetes", state="Running", start=NOW - 5 * H)]

    def squat(job_id, minutes):
        return Finding(cluster="k", job_id=job_id, finding="squatting", severity="preempt-eligible",
                       idle_since=NOW - minutes * timedelta(minutes=1), idle_minutes=minutes, gpus_idle=4, gpus_total=4,
                       gpu_hours_idle=4 * minutes / 60)

    kept, findings = _kueue_workloads_stand_for_their_pods([dict(r) for r in rows], [squat("p0", 150), squat("p1", 130)],
                                                           NOW)
    assert [r["job_id"] for r in kept] == ["ml/workload/train"]
    (f,) = findings
    # the shorter idle stretch counts; GPUs add up
    assert (f.job_id, f.idle_minutes, f.gpus_idle, f.gpus_total) == ("ml/workload/train", 130, 8, 8)
    _, partial = _kueue_workloads_stand_for_their_pods([dict(r) for r in rows], [squat("p0", 150)], NOW)
    assert partial == []  # one pod still works: the workload is not squatting


def test_wholly_idle_gpus_are_counted_apart_from_idle_shares(tmp_path):
    # 3 whole H100 and a 1g MIG instance (1/7) of a fourth on host n1: gpu 1 fully held, gpu 2 half held
    # (a shared GPU), gpu 3 and the MIG instance idle. Idle shares: 3 + 1/7 − 1 − 0.5 = 1.643;
    # wholly idle GPUs: only gpu 3 (gpu 2's free half and the MIG slice cannot host a whole-GPU job).
    path = tmp_path / "w.duckdb"
    (tmp_path / "c.yaml").write_text(CONFIG)
    assert _cli("config", "load", "--config", str(tmp_path / "c.yaml"), "-w", str(path)).exit_code == 0
    with warehouse.open_writer(path) as con:
        for gid, mig, frac in ((1, -1, 1.0), (2, -1, 1.0), (3, -1, 1.0), (4, 1, 1 / 7)):
            con.execute("INSERT INTO gpus (gpu_id, cluster, gpu_uuid, mig_instance_id, host, model, gpu_fraction) "
                        "VALUES (?, 'k', ?, ?, 'n1', 'H100', ?)", [gid, f"GPU-{gid}", mig, frac])
        for job_id, gid, frac in (("a", 1, 1.0), ("b", 2, 0.5)):
            con.execute("INSERT INTO job_allocations (cluster, job_id, gpu_id, start_time, gpu_fraction) "
                        "VALUES ('k', ?, ?, ?, ?)", [job_id, gid, NOW - H, frac])
    with warehouse.open_reader(path) as con:
        s = gather(con, parse_config_text(CONFIG), now=NOW)
    assert abs(s.free_gpus[("k", "H100")] - (3 + 1 / 7 - 1.5)) < 1e-9
    assert s.free_whole_gpus == {("k", "H100"): 1.0}


def test_a_tsdb_windows_data_is_as_new_as_its_coverage(tmp_path):
    """The stale-data guard's 'newest sample' of a 5-min aggregate window (stamped at its start, its
    raw samples up to covered_ms after: migration 021) is its coverage's end: a window starting
    10 min before now that covers 290 s is data 5 min 10 s old, not 10 min; a raw sample is its ts;
    coverage past `now` counts up to `now` only."""
    from gpuledger.enforce.inputs import freshness

    path = tmp_path / "w.duckdb"
    with warehouse.open_writer(path) as con:
        for gid, cluster in ((1, "agg"), (2, "raw"), (3, "late")):
            con.execute("INSERT INTO gpus (gpu_id, cluster, gpu_uuid, host, model) VALUES (?, ?, ?, 'n1', 'H100')",
                        [gid, cluster, f"GPU-{gid}"])
        con.execute("INSERT INTO gpu_samples (gpu_id, ts, covered_ms, source) VALUES (1, ?, 290000, 'prometheus'), "
                    "(2, ?, NULL, 'scrape'), (3, ?, 600000, 'prometheus')",
                    [NOW - timedelta(minutes=10), NOW - timedelta(minutes=10), NOW - timedelta(minutes=2)])
    with warehouse.open_reader(path) as con:
        samples, _ = freshness(con, NOW)
    assert samples == {"agg": NOW - timedelta(minutes=5, seconds=10), "raw": NOW - timedelta(minutes=10), "late": NOW}


def test_spare_behind_owed_reads_the_running_weeks_delivery(tmp_path):
    # 8 H100 installed; funded-proj and free-proj share them 1:1 (entitled 4 each). From NOW − 2 h
    # funded-proj's 8-GPU job runs and free-proj's 8-GPU job waits. In the week running at NOW
    # (Monday 2026-11-16 on): free-proj owed min(4, 8) × 2 h = 8 GPU-h, allocated 0 -> behind;
    # funded-proj owed 8, allocated 8 × 2 = 16 -> not behind. With the setting off nothing is read.
    path = tmp_path / "w.duckdb"
    (tmp_path / "c.yaml").write_text(CONFIG)
    assert _cli("config", "load", "--config", str(tmp_path / "c.yaml"), "-w", str(path)).exit_code == 0
    with warehouse.open_writer(path) as con:
        for gid in range(1, 9):
            con.execute("INSERT INTO gpus (gpu_id, cluster, gpu_uuid, mig_instance_id, host, model, gpu_fraction) "
                        "VALUES (?, 'k', ?, -1, 'n1', 'H100', 1.0)", [gid, f"GPU-{gid}"])
        for job_id, project, start, state in (("run", "funded-proj", NOW - 2 * H, "RUNNING"),
                                              ("wait", "free-proj", None, "PENDING")):
            con.execute("INSERT INTO jobs (cluster, job_id, project, name, namespace, kind, gpu_model, gpus, "
                        "min_runtime_s, submit_time, start_time, state, priority, source, updated_at) VALUES "
                        "('k', ?, ?, ?, 'ml', 'interactive', 'H100', 8, 3600, ?, ?, ?, 10, 'kubernetes', ?)",
                        [job_id, project, job_id, NOW - 2 * H, start, state, NOW])
    cfg = parse_config_text(CONFIG)
    on = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={
        "enforcement": cfg.policy.enforcement.model_copy(update={"spare_behind_owed": True})})})
    with warehouse.open_reader(path) as con:
        assert gather(con, on, now=NOW).behind_owed == frozenset({"free-proj"})
        assert gather(con, cfg, now=NOW).behind_owed is None
