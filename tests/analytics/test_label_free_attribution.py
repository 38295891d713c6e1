"""Attribution from the scheduler side (issue 20, part 2): dcgm-exporter pages without their pod /
hpc_job labels plus device holdings give what the labelled pages give; where labels and holdings
disagree the holdings decide and every disagreeing sample is counted and shown; MIG instances are
matched by GPU UUID + GPU instance id; a time-sliced GPU is split by requested fractions with its
activity unknown; a device no one held is unallocated capacity.

Pages are dcgm-exporter's text format and go through the real scrape ingest (`ingest_page`).
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.ingest.holdings.store import holdings_frame, link_holdings, write_holdings
from gpuledger.ingest.metrics.scrape import ingest_pages

T0 = dt.datetime(2026, 11, 2, 10, 0)
NOW = dt.datetime(2026, 11, 2, 13, 0)
MINUTES = 180  # pages every minute, 10:00 .. 12:59
BASE = ('gpu="{gpu}",UUID="{uuid}",pci_bus_id="00000000:0{gpu}:00.0",device="nvidia{gpu}",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="n9",DCGM_FI_DRIVER_VERSION="580.1"')
LABELS = re.compile(r',(?:namespace|pod|container|hpc_job)="[^"]*"')


def _at(minute: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


def _ms(t: dt.datetime) -> int:
    return int(t.replace(tzinfo=dt.UTC).timestamp() * 1000)


def _page(minute: int, devices: list[dict]) -> str:
    """One scrape: per device its SM activity, energy counter (mJ, +300 J a minute: 5 W) and the
    labels dcgm-exporter's pod / Slurm mapping would add at that minute."""
    lines = ["# TYPE DCGM_FI_PROF_SM_ACTIVE gauge", "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"]
    for d in devices:
        labels = BASE.format(gpu=d["gpu"], uuid=d["uuid"]) + d.get("mig", "")
        for lo, hi, extra in d.get("labels", []):
            if lo <= minute < hi:
                labels += extra
        lines.append(f'DCGM_FI_PROF_SM_ACTIVE{{{labels}}} {d["sm"](minute)}')
        lines.append(f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {1_000_000 + minute * 300_000}')
    return "\n".join(lines) + "\n"


POD = ',namespace="research",pod="trainer-7",container="main"'
DEVICES = [
    # trainer-7 on GPU 0 from 10:00 to 12:00, SM 0.5
    {"gpu": 0, "uuid": "GPU-x0", "sm": lambda m: 0.5, "labels": [(0, 120, POD)]},
    # Slurm job 4242 on GPU 1 from 10:00 to 11:30, SM 0.25 then nothing
    {"gpu": 1, "uuid": "GPU-x1", "sm": lambda m: 0.25 if m < 90 else 0.0,
     "labels": [(0, 90, ',hpc_job="4242"')]},
    # GPU 2: busy, but no one held it
    {"gpu": 2, "uuid": "GPU-x2", "sm": lambda m: 0.8},
]


def _jobs(con) -> None:
    def job(job_id, name, source, end):
        return {"cluster": "prod", "job_id": job_id, "scheduler_job": name, "project": "llm-pretrain",
                "user_name": "ada", "kind": "training", "gpu_model": "H100", "gpus": 1.0, "start_time": T0,
                "end_time": end, "state": "Succeeded", "namespace": "research", "source": source,
                "updated_at": NOW}
    warehouse.upsert(con, "jobs", pl.DataFrame([
        job("uid-7", "research/trainer-7", "kubernetes", _at(120)),   # job_id is the pod uid
        job("4242", "4242", "slurm-sacct", _at(90)),
    ]))
    warehouse.upsert(con, "rate_card", pl.DataFrame({
        "gpu_model": ["H100"], "tier": ["reserved"], "effective_from": [dt.datetime(2026, 1, 1)],
        "price_per_gpu_hour": [Decimal("2.00")], "currency": ["USD"], "budget_weight": [1.0]},
        schema_overrides={"price_per_gpu_hour": pl.Decimal(18, 6)}))


HOLDINGS = [
    # the kubelet's PodResources: trainer-7 (uid-7) held GPU-x0 10:00..12:00
    {"cluster": "prod", "source": "pod-resources", "scheduler_job": "research/trainer-7", "pod_uid": "uid-7",
     "host": "n9", "device_id": "GPU-x0", "gpu_uuid": "GPU-x0", "first_seen": T0, "last_seen": _at(120),
     "ended": True, "namespace": "research", "pod": "trainer-7", "container": "main",
     "resource": "nvidia.com/gpu"},
    # the Slurm prolog on a node without a driver: index 1 only, 10:00..11:30
    {"cluster": "prod", "source": "slurm-prolog", "scheduler_job": "4242", "host": "n9",
     "device_id": "index:1", "gpu_index": 1, "first_seen": T0, "last_seen": _at(90), "ended": True},
]


def _warehouse(path, devices, *, strip: bool, holdings: list[dict] | None, holdings_first: bool = True):
    with warehouse.open_writer(path) as con:
        _jobs(con)
        if holdings and holdings_first:
            write_holdings(con, holdings_frame(holdings))
            link_holdings(con)  # devices not known yet: they wait
        pages = [(_page(m, devices), "http://n9:9400/metrics", _ms(_at(m))) for m in range(MINUTES)]
        # an hour of scrapes a batch, as a scrape round writes them
        for h in range(0, MINUTES, 60):
            ingest_pages(con, [(LABELS.sub("", t) if strip else t, loc, ms) for t, loc, ms in pages[h:h + 60]],
                         cluster="prod")
        if holdings and not holdings_first:
            write_holdings(con, holdings_frame(holdings))
            link_holdings(con)
    return path


def _figures(path):
    with warehouse.open_reader(path) as con:
        usage = queries.usage_report(con, start=T0, end=NOW, by="job", now=NOW)
        charge = queries.chargeback_report(con, "2026-11-02", level="job", now=NOW)
        alloc = con.sql("SELECT a.job_id, g.gpu_uuid, g.mig_instance_id, a.start_time, a.end_time, "
                        "a.gpu_fraction FROM job_allocations a JOIN gpus g USING (gpu_id) "
                        "ORDER BY ALL").pl()
    cols = ["job_id", "gpu_hours_allocated", "gpu_hours_active", "gpu_hours_idle", "gpu_hours_unknown",
            "energy_kwh"]
    return usage.select(cols).sort("job_id"), charge.sort("line_kind", "job_id", nulls_last=True), alloc


def _quarantined(path):
    with warehouse.open_reader(path) as con:
        return con.execute("SELECT location, raw_text, reason FROM quarantine WHERE source = 'attribution' "
                           "ORDER BY location").fetchall()


@pytest.mark.parametrize("holdings_first", [True, False], ids=["holdings-then-samples", "samples-then-holdings"])
def test_label_free_pages_plus_holdings_equal_the_labelled_pages(tmp_path, holdings_first):
    labelled = _figures(_warehouse(tmp_path / "labelled.duckdb", DEVICES, strip=False, holdings=None))
    label_free = _figures(_warehouse(tmp_path / "free.duckdb", DEVICES, strip=True, holdings=HOLDINGS,
                                     holdings_first=holdings_first))
    usage, charge, alloc = label_free
    # trainer-7: 2 h x 1 GPU = 2.0 GPU-h, SM 0.5 -> 1.0 active; 4242: 1.5 GPU-h, SM 0.25 -> 0.375.
    # Energy: +300 J a minute, counted from the sample before; the 10:00 sample has none, so
    # 4242 has 89 increments (10:01..11:29) = 26.7 kJ = 0.0074167 kWh, trainer-7 119 = 0.0099167 kWh.
    assert usage.rows() == [
        ("4242", 1.5, 0.375, 1.125, 0.0, pytest.approx(89 * 300 / 3.6e6)),
        ("uid-7", 2.0, 1.0, 1.0, 0.0, pytest.approx(119 * 300 / 3.6e6)),
    ]
    assert usage.equals(labelled[0])
    assert charge.equals(labelled[1])
    assert alloc.equals(labelled[2])
    # $2.00 per GPU-hour: 4242 $3.00, trainer-7 $4.00
    jobs = {r["job_id"]: r["amount"] for r in charge.iter_rows(named=True) if r["job_id"]}
    assert jobs == {"4242": Decimal("3.00"), "uid-7": Decimal("4.00")}
    assert _quarantined(tmp_path / "free.duckdb") == []


def test_labels_that_disagree_are_overruled_counted_and_shown(tmp_path):
    wrong = [
        # the labels say 4242 ran on GPU 0 for the first half hour: the kubelet says trainer-7 held it
        {**DEVICES[0], "labels": [(0, 30, ',hpc_job="4242"'), (30, 120, POD)]},
        DEVICES[1],
        # the labels say trainer-7 ran on GPU 2 from 11:00 to 11:30: no one held GPU 2
        {**DEVICES[2], "labels": [(60, 90, POD)]},
    ]
    path = _warehouse(tmp_path / "w.duckdb", wrong, strip=False, holdings=HOLDINGS)
    usage, _, alloc = _figures(path)
    # The scheduler side decides: the same figures as without any labels.
    assert usage.rows() == [
        ("4242", 1.5, 0.375, 1.125, 0.0, pytest.approx(89 * 300 / 3.6e6)),
        ("uid-7", 2.0, 1.0, 1.0, 0.0, pytest.approx(119 * 300 / 3.6e6)),
    ]
    assert set(alloc["gpu_uuid"]) == {"GPU-x0", "GPU-x1"}  # GPU 2 is nobody's: unallocated capacity
    shown = _quarantined(path)
    # 30 one-minute samples each (10:00-10:29 and 11:00-11:29), one line per device and hour.
    assert [(loc, raw) for loc, raw, _ in shown] == [
        ("prod/n9 GPU-x0 hour 2026-11-02T10:00Z", "labels: 4242; scheduler: research/trainer-7"),
        ("prod/n9 GPU-x2 hour 2026-11-02T11:00Z", "labels: research/trainer-7; scheduler: (nobody)"),
    ]
    assert shown[0][2] == "30 samples 10:00-10:29Z labelled 4242, held by research/trainer-7: attributed to the holder"
    assert shown[1][2] == "30 samples 11:00-11:29Z labelled research/trainer-7, held by no one: unallocated capacity"
    with warehouse.open_reader(path) as con:
        assert con.execute("SELECT count(*) FROM attribution_disagreements").fetchall() == [(60,)]
    # Re-linking over everything counts nothing twice.
    with warehouse.open_writer(path) as con:
        link_holdings(con)
    assert _quarantined(path) == shown


def test_a_device_no_one_held_is_idle_capacity_not_a_jobs_idle(tmp_path):
    path = _warehouse(tmp_path / "w.duckdb", DEVICES, strip=True, holdings=HOLDINGS)
    _, charge, _ = _figures(path)
    idle = charge.filter(pl.col("line_kind") == "idle")
    # Capacity 10:00-13:00 = 3 GPUs x 3 h = 9 GPU-h; held 2.0 + 1.5 -> idle 5.5 GPU-h, GPU 2's
    # 3 h among them although it was busy (SM 0.8): no job is charged for it.
    assert idle["gpu_hours"].sum() == pytest.approx(5.5)
    assert charge.filter(pl.col("line_kind") != "idle")["gpu_hours"].sum() == pytest.approx(3.5)


MIG_BASE = ',GPU_I_PROFILE="1g.10gb",GPU_I_ID="{gi}"'


def test_mig_instances_are_matched_by_gpu_uuid_and_instance_id(tmp_path):
    devices = [
        {"gpu": 3, "uuid": "GPU-m", "mig": MIG_BASE.format(gi=7), "sm": lambda m: 0.6},
        {"gpu": 3, "uuid": "GPU-m", "mig": MIG_BASE.format(gi=9), "sm": lambda m: 0.1},
    ]
    holdings = [
        # the old MIG UUID form names parent and instance; the newer one arrives resolved (NVML)
        {"cluster": "prod", "source": "pod-resources", "scheduler_job": "research/trainer-7",
         "pod_uid": "uid-7", "host": "n9", "device_id": "MIG-GPU-m/7/0", "gpu_uuid": "GPU-m",
         "mig_instance_id": 7, "first_seen": T0, "last_seen": _at(120), "ended": True},
        {"cluster": "prod", "source": "pod-resources", "scheduler_job": "4242", "pod_uid": None,
         "host": "n9", "device_id": "MIG-0f0f", "gpu_uuid": "GPU-m", "mig_instance_id": 9,
         "first_seen": T0, "last_seen": _at(90), "ended": True},
    ]
    path = _warehouse(tmp_path / "w.duckdb", devices, strip=True, holdings=holdings)
    usage, _, alloc = _figures(path)
    assert alloc.select("job_id", "mig_instance_id").rows() == [("4242", 9), ("uid-7", 7)]
    # A 1g instance is 1/7 of the GPU: trainer-7 2 h / 7, SM 0.6; 4242 1.5 h / 7, SM 0.1.
    got = {r[0]: r[1:4] for r in usage.rows()}
    assert got["uid-7"] == pytest.approx((2 / 7, 2 / 7 * 0.6, 2 / 7 * 0.4))
    assert got["4242"] == pytest.approx((1.5 / 7, 1.5 / 7 * 0.1, 1.5 / 7 * 0.9))


def test_a_time_sliced_gpu_is_split_by_fractions_with_activity_unknown(tmp_path):
    devices = [{"gpu": 0, "uuid": "GPU-x0", "sm": lambda m: 0.9}]
    share = {"cluster": "prod", "source": "pod-resources", "host": "n9", "gpu_uuid": "GPU-x0",
             "first_seen": T0, "ended": True, "resource": "nvidia.com/gpu"}
    holdings = [
        # 4 replicas of GPU-x0: trainer-7 asked for 2 (replicas ::0 and ::1), 4242 for 1 (::2)
        {**share, "scheduler_job": "research/trainer-7", "pod_uid": "uid-7", "device_id": "GPU-x0::0",
         "share": 0.25, "last_seen": _at(120)},
        {**share, "scheduler_job": "research/trainer-7", "pod_uid": "uid-7", "device_id": "GPU-x0::1",
         "share": 0.25, "last_seen": _at(120)},
        {**share, "scheduler_job": "4242", "pod_uid": None, "device_id": "GPU-x0::2", "share": 0.25,
         "last_seen": _at(60)},
    ]
    path = _warehouse(tmp_path / "w.duckdb", devices, strip=True, holdings=holdings)
    usage, _, alloc = _figures(path)
    assert alloc.select("job_id", "gpu_fraction").rows() == [("4242", 0.25), ("uid-7", 0.5)]
    # trainer-7: 2 h x 0.5 = 1.0 GPU-h; 4242 (10:00-11:00): 1 h x 0.25 = 0.25 GPU-h. While both held
    # the GPU (the 10:00 hour) the device's SM 0.9 is nobody's in particular: unknown, never 0.9
    # copied to each. trainer-7 alone in the 11:00 hour (0.5 GPU-h) keeps its activity: 0.45
    # active, 0.05 idle. (An hour piece that overlaps another holder's is unknown as a whole.)
    got = {r[0]: r[1:5] for r in usage.rows()}
    assert got["4242"] == pytest.approx((0.25, 0.0, 0.0, 0.25))
    assert got["uid-7"] == pytest.approx((1.0, 0.45, 0.05, 0.5))
