"""Every device placed (issue 41): GKE's device ids (``nvidia<N>``, ``nvidia<N>/gi<G>``, ``…/vgpu<K>``),
current-form MIG ids (``MIG-<uuid>``) on a node agent without NVML, and a whole GPU claimed by two
holders at once refused — through the pod-resources agent's own path (held_devices on the kubelet's
protobuf messages, HoldingTracker, the spool's screen) into a real DuckDB warehouse and its link pass."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.ingest.holdings.checks import screen_holdings
from gpuledger.ingest.holdings.devices import parse_device
from gpuledger.ingest.holdings.pod_resources import HoldingTracker, held_devices
from gpuledger.ingest.holdings.podresources import api_pb2 as pb
from gpuledger.ingest.holdings.store import holdings_frame, link_holdings, partitioned_gpus, write_holdings

T0 = dt.datetime(2026, 11, 2, 10, 0)
M = dt.timedelta(minutes=1)


def _pod(ns, name, resource, *ids):
    return pb.PodResources(namespace=ns, name=name, containers=[pb.ContainerResources(
        name="main", devices=[pb.ContainerDevices(resource_name=resource, device_ids=list(ids))])])


def _listed(*pods):
    return pb.ListPodResourcesResponse(pod_resources=list(pods))


@pytest.mark.parametrize("device_id, index, gi, replica_of", [
    ("nvidia0", 0, -1, None),
    ("nvidia3/gi2", 3, 2, None),
    ("nvidia1/vgpu3", 1, -1, "nvidia1"),
    ("nvidia0/gi1/vgpu2", 0, 1, "nvidia0/gi1"),
])
def test_gke_device_ids_name_the_gpu_index_instance_and_replica(device_id, index, gi, replica_of):
    d = parse_device(device_id)
    assert (d.device_id, d.gpu_uuid, d.gpu_index, d.mig_instance_id, d.replica_of) == (device_id, None, index, gi,
                                                                                        replica_of)


def test_names_that_only_look_like_gke_ids_stay_unknown():
    for text in ("nvidiaX", "nvidia0/gi", "nvidia0/vgpu", "amd0", "nvidia0/gi1/ci0"):
        d = parse_device(text)
        assert (d.gpu_index, d.gpu_uuid, d.mig_instance_id) == (None, None, -1), text


def _jobs(con, pods):
    warehouse.upsert(con, "jobs", pl.DataFrame([
        {"cluster": "prod", "job_id": f"uid-{p}", "scheduler_job": p, "project": "p", "gpu_model": "A100",
         "gpus": 1.0, "start_time": T0, "end_time": None, "state": "Running", "source": "kubernetes",
         "updated_at": T0} for p in pods]))


def _samples(con, gpu_ids: dict, labels: dict[str, str | None]) -> None:
    """Ten minutes of samples on each instance, labelled with the pod dcgm-exporter mapped to it."""
    rows = []
    for name, pod in labels.items():
        for k in range(10):
            ns, _, name_ = pod.partition("/") if pod else (None, None, None)
            rows.append({"gpu_id": gpu_ids[name], "ts": T0 + k * M, "sm_active_ratio": 0.5,
                         "namespace": ns, "pod": name_ or None})
    warehouse.write_samples(con, pl.DataFrame(rows, schema_overrides={"namespace": pl.String, "pod": pl.String}),
                            "scrape")


def _poll(tracker, listed, allocatable=None, at=T0):
    return tracker.observe(held_devices(listed, allocatable), at)


def test_gke_ids_and_unresolved_mig_ids_are_placed_on_their_devices(warehouse_file):
    # Node n9 (NVIDIA plugin, no NVML in the agent): GPU-m split into four 1g.10gb instances, GI 1-4.
    # Node g1 (GKE plugin): GPU-g0 and GPU-g1 at indices 0 and 1, GPU-g0 time-shared by 4.
    # Node g2 (GKE plugin, MIG): GPU-h at index 0, instance GI 2.
    inv = pl.DataFrame({
        "cluster": ["prod"] * 7,
        "gpu_uuid": ["GPU-m"] * 4 + ["GPU-g0", "GPU-g1", "GPU-h"],
        "mig_instance_id": [1, 2, 3, 4, -1, -1, 2],
        "host": ["n9"] * 4 + ["g1", "g1", "g2"],
        "gpu_index": [0, 0, 0, 0, 0, 1, 0],
        "model": ["A100"] * 7,
        "mig_profile": ["1g.10gb"] * 4 + [None, None, "3g.40gb"],
    })
    pods = ["infer/small", "infer/pair", "infer/ghost", "research/trainer", "research/nb", "infer/big"]
    with warehouse.open_writer(warehouse_file) as con:
        ids = warehouse.register_gpus(con, inv)
        gid = {(r["host"], r["gpu_uuid"], r["mig_instance_id"]): r["gpu_id"] for r in ids.iter_rows(named=True)}
        gi = {n: gid[("n9", "GPU-m", n)] for n in (1, 2, 3, 4)}
        # dcgm-exporter's pod mapping: small on GI 2, pair on GI 1 and GI 3, GI 4 idle; ghost nowhere
        _samples(con, {f"gi{n}": gi[n] for n in gi}, {"gi1": "infer/pair", "gi2": "infer/small",
                                                      "gi3": "infer/pair", "gi4": None})
        _jobs(con, pods)
    mig = "nvidia.com/mig-1g.10gb"
    n9 = HoldingTracker(cluster="prod", host="n9")
    g1 = HoldingTracker(cluster="prod", host="g1")
    g2 = HoldingTracker(cluster="prod", host="g2")
    allocatable_g1 = pb.AllocatableResourcesResponse(devices=[pb.ContainerDevices(
        resource_name="nvidia.com/gpu", device_ids=["nvidia1", *(f"nvidia0/vgpu{k}" for k in range(4))])])
    rows = [
        *_poll(n9, _listed(_pod("infer", "small", mig, "MIG-5b2f0c7e-aaaa"),
                           _pod("infer", "pair", mig, "MIG-5b2f0c7e-cccc", "MIG-5b2f0c7e-bbbb"),
                           _pod("infer", "ghost", mig, "MIG-5b2f0c7e-dddd"))),
        *_poll(g1, _listed(_pod("research", "trainer", "nvidia.com/gpu", "nvidia1"),
                           _pod("research", "nb", "nvidia.com/gpu", "nvidia0/vgpu0", "nvidia0/vgpu1")), allocatable_g1),
        *_poll(g2, _listed(_pod("infer", "big", "nvidia.com/mig-3g.40gb", "nvidia0/gi2"))),
    ]
    kept, refused = screen_holdings(rows, source="pod-resources", now=T0 + 10 * M)
    assert refused == []
    with warehouse.open_writer(warehouse_file) as con:
        write_holdings(con, holdings_frame(kept))
        result = link_holdings(con)
        alloc = con.execute("SELECT job_id, gpu_id, gpu_fraction FROM job_allocations ORDER BY ALL").fetchall()
    placed = {}
    for job, gpu, frac in alloc:
        placed.setdefault(job, []).append((gpu, frac))
    # small -> GI 2 (its label); pair's two ids -> GI 1 and GI 3 (paired in order: bbbb -> 1, cccc -> 3)
    assert placed["uid-infer/small"] == [(gi[2], 1.0)]
    assert sorted(placed["uid-infer/pair"]) == sorted([(gi[1], 1.0), (gi[3], 1.0)])
    # GKE: nvidia1 is GPU-g1 whole; two of GPU-g0's four replicas (a quarter each) are half of it, one
    # row; nvidia0/gi2 is instance 2 of GPU-h on g2
    assert placed["uid-research/trainer"] == [(gid[("g1", "GPU-g1", -1)], 1.0)]
    assert placed["uid-research/nb"] == [(gid[("g1", "GPU-g0", -1)], 0.5)]
    assert placed["uid-infer/big"] == [(gid[("g2", "GPU-h", 2)], 1.0)]
    # ghost's MIG id has no label anywhere: not placed (waits, counted), never guessed
    assert "uid-infer/ghost" not in placed
    assert result.no_device == 1


def test_a_whole_gpu_by_index_claimed_by_two_pods_keeps_the_first(warehouse_file):
    g1 = HoldingTracker(cluster="prod", host="g1")
    first = _poll(g1, _listed(_pod("research", "a", "nvidia.com/gpu", "nvidia1")), at=T0)
    both = _poll(g1, _listed(_pod("research", "a", "nvidia.com/gpu", "nvidia1"),
                             _pod("research", "b", "nvidia.com/gpu", "nvidia1")), at=T0 + M)
    kept, refused = screen_holdings([*first, *both], source="pod-resources", now=T0 + M)
    assert {r["scheduler_job"] for r in kept} == {"research/a"}
    assert len(refused) == 1
    assert ("GPU nvidia1 on g1 is held by job research/a" in refused[0].reason
            and "and by job research/b" in refused[0].reason)
    # time-shared replicas of one GPU held by two pods are the point of sharing: both kept
    shared = _poll(HoldingTracker(cluster="prod", host="g1"),
                   _listed(_pod("research", "a", "nvidia.com/gpu", "nvidia0/vgpu0"),
                           _pod("research", "b", "nvidia.com/gpu", "nvidia0/vgpu1")))
    assert screen_holdings(shared, source="pod-resources", now=T0)[1] == []


def _split_a100(con) -> dict[int, int]:
    """Node s1's GPU index 0 (GPU-p, an A100) as the inventory knows it split into two 1g.10gb
    instances, GI 7 and 8, beside its whole-GPU row (GI -1): GI -> gpu_id."""
    ids = warehouse.register_gpus(con, pl.DataFrame({
        "cluster": ["hpc"] * 3, "gpu_uuid": ["GPU-p"] * 3, "mig_instance_id": [-1, 7, 8],
        "host": ["s1"] * 3, "gpu_index": [0, 0, 0], "model": ["A100"] * 3,
        "mig_profile": [None, "1g.10gb", "1g.10gb"]}))
    return dict(zip(ids["mig_instance_id"], ids["gpu_id"], strict=True))


def _prolog_spool(tmp_path, jobs):
    """The spool the Slurm prolog / epilog write on node s1 (deploy/slurm/gpuledger-holdings.sh):
    each (job, start) given GPU index 0, whose UUID nvidia-smi names GPU-p, for 10 minutes."""
    spool = tmp_path / "spool"
    spool.mkdir()
    for job, when in jobs:
        at = int(when.replace(tzinfo=dt.UTC).timestamp())
        (spool / f"{job}.s1.{at}.start").write_text(
            "format\tgpuledger-slurm-gpus/1\nevent\tstart\n"
            f"job_id\t{job}\ncluster\thpc\nnode\ts1\ntime\t{at}\ngpu\t0\tGPU-p\n")
        (spool / f"{job}.s1.{at + 600}.end").write_text(
            "format\tgpuledger-slurm-gpus/1\nevent\tend\n"
            f"job_id\t{job}\ncluster\thpc\nnode\ts1\ntime\t{at + 600}\n")
    return spool


def test_a_slurm_job_on_a_mig_instance_is_charged_for_the_instance_not_the_gpu(tmp_path, warehouse_file):
    # The prolog records what Slurm gave job 4242 on node s1: GPU index 0, and nvidia-smi's UUID for
    # index 0 — the parent GPU-p, split into 1g.10gb instances GI 7 and GI 8 (dcgm-exporter reports the
    # parent's device-level fields as a whole-GPU row too). Job 4243 holds index 0 as well, on the
    # other instance. dcgm-exporter's HPC job mapping labels GI 7 with 4242 and GI 8 with 4243.
    from gpuledger.ingest.holdings.slurm_spool import read_spool

    spool = _prolog_spool(tmp_path, [("4242", T0), ("4243", T0)])
    read = read_spool(spool)
    assert read.quarantined == [] and len(read.holdings) == 2
    with warehouse.open_writer(warehouse_file) as con:
        gid = _split_a100(con)
        rows = [{"gpu_id": gid[gi], "ts": T0 + k * M, "sm_active_ratio": 0.5, "hpc_job": job}
                for gi, job in ((7, "4242"), (8, "4243")) for k in range(10)]
        warehouse.write_samples(con, pl.DataFrame(rows), "scrape")
        warehouse.upsert(con, "jobs", pl.DataFrame([
            {"cluster": "hpc", "job_id": job, "project": "p", "gpu_model": "A100", "gpus": 1 / 7,
             "start_time": T0, "end_time": T0 + 10 * M, "state": "COMPLETED", "source": "slurm", "updated_at": T0}
            for job in ("4242", "4243")]))
        # two jobs on one GPU at once: refused while the GPU is whole, both kept once the inventory
        # knows it partitioned (the CLI reads partitioned_gpus before it screens)
        assert len(screen_holdings(read.holdings, source="slurm-gpus", now=T0 + 10 * M)[1]) == 1
        assert partitioned_gpus(con) == {"hpc/GPU-p", "hpc/s1/index 0"}
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "slurm-gpus", "--spool", str(spool),
                           "-w", str(warehouse_file)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr  # the summary line goes to the console (stderr)
    assert "2 GPU holdings" in said and "2 job x device intervals linked" in said and "quarantined" not in said
    with warehouse.open_reader(warehouse_file) as con:
        alloc = con.execute("SELECT job_id, gpu_id, start_time, end_time FROM job_allocations ORDER BY ALL").fetchall()
    # each job on its own instance for its 10 minutes; the whole GPU row (GI -1) charged to no one
    assert alloc == [("4242", gid[7], T0, T0 + 10 * M), ("4243", gid[8], T0, T0 + 10 * M)]


def test_a_slurm_job_on_an_unlabelled_mig_instance_is_never_charged_the_whole_gpu(tmp_path, warehouse_file):
    # As above, but dcgm-exporter runs without its HPC job mapping: no sample names job 4242 or 4243,
    # so which instance each holds cannot be told. Before, both holdings fell to the parent's
    # whole-GPU row (GI -1, which dcgm-exporter reports beside the instances): each job charged a whole
    # A100 for its 10 minutes, 2 x 1 x 10/60 = 0.333 GPU-h for 2 x 1/7 x 10/60 = 0.0476 held.
    # Now neither is placed, the summary says why, and each job counts its own record's 1/7 GPU.
    # Job 4244 holds the same GPU at 11:00, after the instances were destroyed (only the whole GPU
    # reports then): it is the whole GPU, placed.
    from gpuledger.analytics.queries import usage_report
    from gpuledger.ingest.holdings.slurm_spool import read_spool

    spool = _prolog_spool(tmp_path, [("4242", T0), ("4243", T0), ("4244", T0 + 60 * M)])
    assert len(read_spool(spool).holdings) == 3
    with warehouse.open_writer(warehouse_file) as con:
        gid = _split_a100(con)
        rows = [{"gpu_id": gid[gi], "ts": T0 + k * M, "sm_active_ratio": 0.5} for gi in (-1, 7, 8) for k in range(10)]
        rows += [{"gpu_id": gid[-1], "ts": T0 + 60 * M + k * M, "sm_active_ratio": 0.5} for k in range(10)]
        warehouse.write_samples(con, pl.DataFrame(rows), "scrape")
        warehouse.upsert(con, "jobs", pl.DataFrame([
            {"cluster": "hpc", "job_id": job, "project": "p", "gpu_model": "A100", "gpus": 1 / 7,
             "start_time": T0, "end_time": T0 + 10 * M, "state": "COMPLETED", "source": "slurm", "updated_at": T0}
            for job in ("4242", "4243")]
            + [{"cluster": "hpc", "job_id": "4244", "project": "q", "gpu_model": "A100", "gpus": 1.0,
                "start_time": T0 + 60 * M, "end_time": T0 + 70 * M, "state": "COMPLETED", "source": "slurm",
                "updated_at": T0}]))
        # what an earlier pass (before the instances reported) wrote: the whole GPU for job 4242
        warehouse.upsert(con, "job_allocations", pl.DataFrame([
            {"cluster": "hpc", "job_id": "4242", "gpu_id": gid[-1], "start_time": T0, "end_time": T0 + 10 * M,
             "gpu_fraction": 1.0, "source": "slurm-prolog"}]))
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "slurm-gpus", "--spool", str(spool),
                           "-w", str(warehouse_file)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "1 job x device intervals linked, 0 waiting for their device" in said, said
    assert ("2 Slurm holdings of a MIG-partitioned GPU not placed: no instance of it is labelled with their job"
            in said), said
    with warehouse.open_reader(warehouse_file) as con:
        alloc = con.execute("SELECT job_id, gpu_id, start_time, end_time FROM job_allocations").fetchall()
        usage = usage_report(con, start=T0, end=T0 + 120 * M, by="project")
    assert alloc == [("4244", gid[-1], T0 + 60 * M, T0 + 70 * M)]
    # 2 jobs x 1/7 GPU x 10/60 h = 1/21 = 0.047619 GPU-h (the whole GPU twice would be 1/3)
    assert usage.filter(pl.col("project") == "p")["gpu_hours_allocated"].item() == pytest.approx(1 / 21)
    assert usage.filter(pl.col("project") == "q")["gpu_hours_allocated"].item() == pytest.approx(10 / 60)
