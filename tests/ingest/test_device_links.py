"""Devices derived from DCGM's pod / hpc_job labels for jobs that arrived without them."""

from __future__ import annotations

import datetime as dt

import polars as pl

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.ingest.device_links import link_devices

T0 = dt.datetime(2026, 11, 2, 10, 0)
NOW = dt.datetime(2026, 11, 2, 13, 0)


def _at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def _job(job_id, gpus, *, start=T0, end=None, kind="training", source="kubernetes"):
    return {"cluster": "prod", "job_id": job_id, "project": "llm-pretrain", "user_name": "ada",
            "kind": kind, "gpu_model": "H100", "gpus": gpus, "start_time": start, "end_time": end,
            "state": "Running" if end is None else "Succeeded", "namespace": "research",
            "source": source, "updated_at": NOW}


def _samples(gpu_id, first_min, last_min, *, pod=None, hpc_job=None, sm=0.0, fb=60 << 30):
    minutes = list(range(first_min, last_min + 1))
    n = len(minutes)
    return pl.DataFrame({
        "gpu_id": [gpu_id] * n, "ts": [_at(m) for m in minutes], "sm_active_ratio": [sm] * n,
        "fb_used_bytes": [fb] * n, "namespace": ["research" if pod else None] * n,
        "pod": [pod] * n, "hpc_job": [hpc_job] * n,
    }, schema_overrides={"ts": pl.Datetime("us"), "namespace": pl.String, "pod": pl.String,
                         "hpc_job": pl.String})


def _setup(con):
    inv = pl.DataFrame({
        "cluster": ["prod"] * 4, "gpu_uuid": ["GPU-a", "GPU-b", "GPU-c", "GPU-m"],
        "mig_instance_id": [-1, -1, -1, 3], "host": ["n1"] * 4, "model": ["H100"] * 4,
        "mig_profile": [None, None, None, "1g.10gb"], "gpu_fraction": [1.0, 1.0, 1.0, 1 / 7],
        "first_seen": [T0 - dt.timedelta(days=1)] * 4,
    })
    ids = dict(zip(warehouse.register_gpus(con, inv)["gpu_uuid"], warehouse.register_gpus(con, inv)["gpu_id"]))
    warehouse.upsert(con, "jobs", pl.DataFrame([
        _job("research/pretrain-0", 2.0),             # two whole GPUs, idle: a squatter
        _job("research/notebook-1", 0.5, kind="interactive"),   # half of a shared GPU
        _job("research/infer-2", 1 / 7, kind="inference"),      # one 1g MIG instance
        _job("4242", 1.0, source="slurm-sacct"),      # a Slurm job, seen through hpc_job
    ]))
    return ids


def test_labels_become_allocations_and_reruns_keep_them(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        ids = _setup(con)
        warehouse.write_samples(con, pl.concat([
            _samples(ids["GPU-a"], 1, 90, pod="pretrain-0"),
            _samples(ids["GPU-b"], 2, 90, pod="pretrain-0"),
            _samples(ids["GPU-c"], 5, 90, pod="notebook-1", sm=0.4),
            _samples(ids["GPU-m"], 3, 90, pod="infer-2", sm=0.3),
        ]), "scrape")
        assert link_devices(con, start=T0, end=_at(91)) == 4
        # A later window (the next scrapes) extends nothing but must not add a second interval.
        warehouse.write_samples(con, _samples(ids["GPU-a"], 91, 179, pod="pretrain-0"), "scrape")
        warehouse.write_samples(con, _samples(ids["GPU-b"], 91, 179, pod="pretrain-0"), "scrape")
        assert link_devices(con, start=_at(91), end=_at(180)) == 2
        assert link_devices(con, start=T0, end=_at(180)) == 4      # idempotent over the whole span
        rows = con.execute(
            "SELECT job_id, gpu_id, start_time, end_time, gpu_fraction, source FROM job_allocations "
            "ORDER BY job_id, gpu_id").fetchall()
    # Starts are the first labelled sample; end NULL while running; shares: 2 GPUs over two whole
    # devices = 1.0 each; 0.5 GPU on one whole device = 0.5; 1/7 GPU on a 1/7 instance = 1.0.
    assert [(j, s, e, round(f, 9), src) for j, _, s, e, f, src in rows] == [
        ("research/infer-2", _at(3), None, 1.0, "labels"),
        ("research/notebook-1", _at(5), None, 0.5, "labels"),
        ("research/pretrain-0", _at(1), None, 1.0, "labels"),
        ("research/pretrain-0", _at(2), None, 1.0, "labels"),
    ]


def test_hpc_job_labels_link_slurm_jobs_and_scheduler_allocations_are_left_alone(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        ids = _setup(con)
        # pretrain-0's scheduler already said where it ran: its labels must not add rows.
        warehouse.upsert(con, "job_allocations", pl.DataFrame({
            "cluster": ["prod"], "job_id": ["research/pretrain-0"], "gpu_id": [ids["GPU-c"]],
            "start_time": [T0], "end_time": [None], "gpu_fraction": [1.0], "source": ["simulator"],
        }, schema_overrides={"end_time": pl.Datetime("us")}))
        warehouse.write_samples(con, pl.concat([
            _samples(ids["GPU-a"], 0, 30, hpc_job="4242", sm=0.9),
            _samples(ids["GPU-b"], 0, 30, pod="pretrain-0"),
        ]), "scrape")
        assert link_devices(con, start=T0, end=_at(31)) == 1
        rows = con.execute("SELECT job_id, gpu_id, source FROM job_allocations ORDER BY job_id").fetchall()
    assert rows == [("4242", ids["GPU-a"], "labels"), ("research/pretrain-0", ids["GPU-c"], "simulator")]


def test_a_kubernetes_squatter_is_found_once_its_devices_are_linked(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        ids = _setup(con)
        # pretrain-0 holds 60 GiB on both GPUs with zero SM activity for three hours.
        warehouse.write_samples(con, pl.concat([
            _samples(ids["GPU-a"], 0, 179, pod="pretrain-0"),
            _samples(ids["GPU-b"], 0, 179, pod="pretrain-0"),
        ]), "scrape")
    with warehouse.open_reader(warehouse_file) as con:
        before = queries.squatters_report(con, now=NOW)
    with warehouse.open_writer(warehouse_file) as con:
        link_devices(con, start=T0, end=NOW)
    with warehouse.open_reader(warehouse_file) as con:
        after = queries.squatters_report(con, now=NOW)
    # Without devices the job cannot be judged; with them: idle since 10:30 (start + 30 min grace),
    # 150 min at 13:00 >= 120 -> preempt-eligible, both GPUs idle.
    assert before.filter(pl.col("job_id") == "research/pretrain-0").is_empty()
    found = after.filter(pl.col("job_id") == "research/pretrain-0").row(0, named=True)
    assert (found["finding"], found["severity"], found["gpus_idle"], found["gpus_total"]) == (
        "squatting", "preempt-eligible", 2, 2)
    assert found["idle_since"] == _at(30)


def test_a_scraped_page_links_its_pods_to_known_jobs(warehouse_file):
    from gpuledger.ingest.metrics.scrape import ingest_page

    page = (
        '# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-x0",pci_bus_id="00000000:01:00.0",device="nvidia0",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="n9",DCGM_FI_DRIVER_VERSION="580.1",'
        'namespace="research",pod="trainer-7",container="main"} 0.5\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-x1",pci_bus_id="00000000:02:00.0",device="nvidia1",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="n9",DCGM_FI_DRIVER_VERSION="580.1"} 0\n'
    )
    scraped_at = _at(10)
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.upsert(con, "jobs", pl.DataFrame([_job("research/trainer-7", 1.0)]))
        ingest_page(con, page, location="http://n9:9400/metrics", cluster="prod",
                    scrape_ms=int(scraped_at.replace(tzinfo=dt.UTC).timestamp() * 1000))
        rows = con.execute(
            "SELECT a.job_id, g.gpu_uuid, a.start_time, a.gpu_fraction, a.source FROM job_allocations a "
            "JOIN gpus g USING (gpu_id)").fetchall()
    # Only the labelled GPU is linked, from the scrape's time; the unlabelled one is nobody's.
    assert rows == [("research/trainer-7", "GPU-x0", scraped_at, 1.0, "labels")]


def test_link_devices_command_backfills_links(warehouse_file):
    from typer.testing import CliRunner

    from gpuledger.cli import app

    with warehouse.open_writer(warehouse_file) as con:
        ids = _setup(con)
        # Samples written without linking (as an older gpuledger or a bulk load would leave them).
        con.execute("INSERT INTO gpu_samples (gpu_id, ts, sm_active_ratio, namespace, pod, source) "
                    "VALUES (?, ?, 0.5, 'research', 'pretrain-0', 'bulk')", [ids["GPU-a"], _at(5)]).fetchall()
    result = CliRunner().invoke(app, ["ingest", "link-devices", "--start", "2026-11-02T10:00:00Z",
                                      "--end", "2026-11-02T11:00:00Z", "--warehouse", str(warehouse_file)])
    assert result.exit_code == 0, result.output
    with warehouse.open_reader(warehouse_file) as con:
        assert con.execute("SELECT job_id, start_time FROM job_allocations").fetchall() == [
            ("research/pretrain-0", _at(5))]
