"""The Kubernetes node agent (issue 20, part 3) against a real gRPC server on a unix socket that
speaks the kubelet's own PodResources v1 service (the same generated stubs, from the kubelet's
api.proto): holdings with first / last seen, time-sliced shares, MIG, DRA, restarts, and the
committed stubs still matching the proto."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import grpc
import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.ingest.holdings.pod_resources import (
    PodResourcesClient,
    PodResourcesError,
    held_devices,
    run_pod_resources_agent,
)
from gpuledger.ingest.holdings.podresources import api_pb2 as pb
from gpuledger.ingest.holdings.podresources import api_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 11, 2, 10, 0)


class Kubelet(pb_grpc.PodResourcesListerServicer):
    """Answers List / GetAllocatableResources from whatever the test sets; counts the calls."""

    def __init__(self):
        self.pods: list = []
        self.devices: list = []
        self.calls: list[str] = []

    def List(self, request, context):  # noqa: N802 - the service's method name
        self.calls.append("List")
        return pb.ListPodResourcesResponse(pod_resources=self.pods)

    def GetAllocatableResources(self, request, context):  # noqa: N802
        self.calls.append("GetAllocatableResources")
        return pb.AllocatableResourcesResponse(devices=self.devices)


@pytest.fixture
def kubelet(tmp_path):
    servicer = Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    sock = tmp_path / "kubelet.sock"
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    servicer.socket = str(sock)
    yield servicer
    server.stop(grace=None)


def _pod(ns, name, *containers):
    return pb.PodResources(namespace=ns, name=name, containers=list(containers))


def _container(name, resource, *ids, dra=()):
    return pb.ContainerResources(name=name, devices=[pb.ContainerDevices(resource_name=resource, device_ids=list(ids))],
                                 dynamic_resources=list(dra))


TRAINER = _pod("research", "trainer-7", _container("main", "nvidia.com/gpu", "GPU-x0"))
SHARED_A = _pod("research", "nb-a", _container("main", "nvidia.com/gpu", "GPU-x1::0", "GPU-x1::1"))
SHARED_B = _pod("research", "nb-b", _container("main", "nvidia.com/gpu", "GPU-x1::2"))
MIG = _pod("infer", "small", _container("srv", "nvidia.com/mig-1g.10gb", "MIG-GPU-m/7/0"))
NIC = _pod("net", "router", _container("c", "example.com/nic", "nic-0"))
DRA = _pod("research", "claimant", pb.ContainerResources(name="main", dynamic_resources=[pb.DynamicResource(
    claim_name="gpu-claim", claim_namespace="research", claim_resources=[pb.ClaimResource(
        driver_name="gpu.nvidia.com", pool_name="node-9", device_name="gpu-3")])]))
ALLOCATABLE = [pb.ContainerDevices(resource_name="nvidia.com/gpu",
                                   device_ids=["GPU-x0", "GPU-x1::0", "GPU-x1::1", "GPU-x1::2", "GPU-x1::3"])]


def test_a_poll_reads_gpus_mig_replicas_and_dra_and_skips_other_resources(kubelet):
    kubelet.pods = [TRAINER, SHARED_A, SHARED_B, MIG, NIC, DRA]
    kubelet.devices = ALLOCATABLE
    client = PodResourcesClient(kubelet.socket, timeout_s=5)
    try:
        held = held_devices(client.list(), client.allocatable())
    finally:
        client.close()
    got = sorted((h.pod, h.device_id, h.gpu_uuid, h.mig_instance_id, h.share) for h in held)
    # GPU-x1 has 4 replicas on the node: each held replica is a quarter of the GPU.
    assert got == [
        ("claimant", "dra:gpu.nvidia.com/node-9/gpu-3", None, -1, None),
        ("nb-a", "GPU-x1::0", "GPU-x1", -1, 0.25),
        ("nb-a", "GPU-x1::1", "GPU-x1", -1, 0.25),
        ("nb-b", "GPU-x1::2", "GPU-x1", -1, 0.25),
        ("small", "MIG-GPU-m/7/0", "GPU-m", 7, None),
        ("trainer-7", "GPU-x0", "GPU-x0", -1, None),
    ]
    assert kubelet.calls == ["List", "GetAllocatableResources"]


def test_polls_become_intervals_and_land_as_allocations(kubelet, warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        warehouse.register_gpus(con, pl.DataFrame({"cluster": ["prod"] * 2, "gpu_uuid": ["GPU-x0", "GPU-x1"],
                                                   "host": ["n9"] * 2, "gpu_index": [0, 1], "model": ["H100"] * 2}))
        warehouse.upsert(con, "jobs", pl.DataFrame([
            {"cluster": "prod", "job_id": f"uid-{p}", "scheduler_job": f"research/{p}", "project": "p",
             "gpu_model": "H100", "gpus": 1.0, "start_time": T0, "end_time": None, "state": "Running",
             "source": "kubernetes", "updated_at": T0} for p in ("trainer-7", "nb-a")]))
    kubelet.devices = ALLOCATABLE
    # poll 1 (10:00) and 2 (10:01): both pods; poll 3 (10:02): trainer-7 gone
    states = [[TRAINER, SHARED_A], [TRAINER, SHARED_A], [SHARED_A]]
    clock = iter([T0, T0 + dt.timedelta(minutes=1), T0 + dt.timedelta(minutes=2)])
    written = []

    def write(rows):
        written.append(rows)
        kubelet.pods = states[min(len(written), 2)]  # what the next poll will see
        from gpuledger.ingest.holdings.store import holdings_frame, link_holdings, write_holdings
        with warehouse.open_writer(warehouse_file) as con:
            write_holdings(con, holdings_frame(rows))
            link_holdings(con)

    kubelet.pods = states[0]
    client = PodResourcesClient(kubelet.socket, timeout_s=5)
    try:
        polls = run_pod_resources_agent(client, write, cluster="prod", host="n9", interval_s=0, count=3,
                                        clock=lambda: next(clock))
    finally:
        client.close()
    assert polls == 3
    with warehouse.open_reader(warehouse_file) as con:
        held = con.execute("SELECT scheduler_job, device_id, first_seen, last_seen, ended, share "
                           "FROM device_holdings ORDER BY ALL").fetchall()
        alloc = con.execute("SELECT job_id, start_time, end_time, gpu_fraction, source FROM job_allocations "
                            "ORDER BY ALL").fetchall()
    m1, m2 = T0 + dt.timedelta(minutes=1), T0 + dt.timedelta(minutes=2)
    assert held == [
        ("research/nb-a", "GPU-x1::0", T0, m2, False, 0.25),
        ("research/nb-a", "GPU-x1::1", T0, m2, False, 0.25),
        ("research/trainer-7", "GPU-x0", T0, m1, True, None),  # last seen at 10:01, gone at 10:02
    ]
    # nb-a: two of GPU-x1's four replicas = half the GPU, still held; trainer-7 10:00-10:01.
    assert alloc == [("uid-nb-a", T0, None, 0.5, "pod-resources"),
                     ("uid-trainer-7", T0, m1, 1.0, "pod-resources")]


@pytest.mark.slow
def test_a_restarted_agent_extends_what_it_left_open(kubelet, warehouse_file):
    kubelet.pods, kubelet.devices = [TRAINER], ALLOCATABLE
    for minute in (0, 5):  # two runs of the agent, one poll each
        result = subprocess.run(
            [sys.executable, "-m", "gpuledger.cli", "ingest", "agent", "pod-resources",
             "--socket", kubelet.socket, "--once", "--cluster", "prod", "--host", "n9", "-w", str(warehouse_file)],
            capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
        assert result.returncode == 0, result.stderr
        assert "1 polls" in result.stderr and "1 holdings on n9" in result.stderr
    with warehouse.open_reader(warehouse_file) as con:
        rows = con.execute("SELECT scheduler_job, device_id, ended, last_seen >= first_seen FROM device_holdings").fetchall()
    assert rows == [("research/trainer-7", "GPU-x0", False, True)]  # one holding, not two


def _agent(kubelet, *args):
    return subprocess.run(
        [sys.executable, "-m", "gpuledger.cli", "ingest", "agent", "pod-resources", "--socket", kubelet.socket,
         "--once", "--cluster", "prod", *args], capture_output=True, text=True, timeout=60, cwd=REPO, check=False)


@pytest.mark.slow
def test_on_a_cluster_the_agents_hand_their_holdings_to_the_writer_through_the_spool(kubelet, tmp_path):
    # Two nodes' agents write the shared spool; the one writer reads it. The agents never open
    # the warehouse (one writer; flock holds on one kernel only).
    spool, wh = tmp_path / "spool", tmp_path / "wh.duckdb"
    spool.mkdir()
    kubelet.pods, kubelet.devices = [TRAINER], ALLOCATABLE
    for node in ("n9", "n9", "n10"):  # n9's agent restarts once: it resumes from its own file
        done = _agent(kubelet, "--host", node, "--spool", str(spool), "-w", str(wh))
        assert done.returncode == 0, done.stderr
        assert f"1 holdings on {node}, in {spool / f'prod.{node}.json'}" in done.stderr
    assert not wh.exists() and sorted(p.name for p in spool.iterdir()) == ["prod.n10.json", "prod.n9.json"]
    (spool / "prod.n11.json").write_text('{"format": "gpuledger.node-holdings/1", "holdings": [{"host": "n11"}]}')

    def read():
        done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "node-holdings", "--spool", str(spool),
                               "-w", str(wh)], capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
        assert done.returncode == 0, done.stderr
        assert "2 GPU holdings from 3 node files" in done.stderr and "1 files or records quarantined" in done.stderr
        with warehouse.open_reader(wh) as con:
            return con.execute("SELECT host, scheduler_job, device_id, ended, source FROM device_holdings "
                               "ORDER BY host").fetchall()

    first = read()
    # one holding per node (n9's restart extended its holding, did not start a second one)
    assert first == [("n10", "research/trainer-7", "GPU-x0", False, "pod-resources"),
                     ("n9", "research/trainer-7", "GPU-x0", False, "pod-resources")]
    assert read() == first  # reading again changes nothing
    with warehouse.open_reader(wh) as con:
        bad = con.execute("SELECT source, reason FROM quarantine").fetchall()
    assert bad == [("node-holdings", "prod.n11.json: holdings[0]: no cluster, source, scheduler_job, device_id, "
                                     "first_seen, last_seen, ended")] * 1
    # the pod goes: n9's next poll ends its holding, and the writer's next read says so
    kubelet.pods = []
    assert _agent(kubelet, "--host", "n9", "--spool", str(spool)).returncode == 0
    with warehouse.open_reader(wh) as con:
        assert con.execute("SELECT count(*) FROM device_holdings WHERE ended").fetchone()[0] == 0
    read()
    with warehouse.open_reader(wh) as con:
        assert con.execute("SELECT host FROM device_holdings WHERE ended").fetchall() == [("n9",)]


def test_a_missing_socket_is_a_clear_error(tmp_path):
    client = PodResourcesClient(str(tmp_path / "absent.sock"), timeout_s=0.5)
    try:
        with pytest.raises(PodResourcesError, match=r"PodResources List on unix://.*absent\.sock: UNAVAILABLE"):
            client.list()
    finally:
        client.close()


def test_the_committed_stubs_match_the_kubelets_proto(tmp_path):
    pytest.importorskip("grpc_tools")
    proto = "gpuledger/ingest/holdings/podresources/api.proto"
    done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO), f"--descriptor_set_out={tmp_path}/d.pb",
                           str(REPO / proto)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    from google.protobuf import descriptor_pb2

    fresh = descriptor_pb2.FileDescriptorSet.FromString((tmp_path / "d.pb").read_bytes()).file[0]
    for message in fresh.message_type:  # protoc adds json names the generated module leaves out
        for f in message.field:
            f.ClearField("json_name")
    committed = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    assert fresh == committed
    assert pb.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == "v1.PodResourcesLister"


# --- issue 36: an older kubelet, a relative socket, one GPU listed for two pods ----------------------
class OldKubelet(Kubelet):
    """A kubelet before 1.21 (or with KubeletPodResourcesGetAllocatable off): List only."""

    def GetAllocatableResources(self, request, context):  # noqa: N802
        self.calls.append("GetAllocatableResources")
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")


@pytest.fixture
def old_kubelet(tmp_path):
    servicer = OldKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    (tmp_path / "pr").mkdir()
    server.add_insecure_port(f"unix:{tmp_path / 'pr' / 'kubelet.sock'}")
    server.start()
    yield servicer
    server.stop(grace=None)


@pytest.mark.slow
def test_a_kubelet_without_get_allocatable_still_gives_holdings_from_list(old_kubelet, tmp_path):
    old_kubelet.pods = [TRAINER, SHARED_A]
    wh = tmp_path / "wh.duckdb"
    # a relative --socket (made absolute: gRPC would read "unix://pr/..." as a host and log lines)
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "agent", "pod-resources", "--socket",
                           "pr/kubelet.sock", "--count", "2", "--interval", "0.5", "--cluster", "prod", "--host", "n9",
                           "-w", str(wh)], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no gRPC log lines
    assert f"2 polls of {tmp_path / 'pr' / 'kubelet.sock'}; last: 3 holdings on n9" in lines[0]
    assert "does not serve GetAllocatableResources: UNIMPLEMENTED" in lines[0]
    assert "time-sliced replica shares unknown" in lines[0]
    assert old_kubelet.calls == ["List", "GetAllocatableResources", "List"]  # asked once, not every poll
    with warehouse.open_reader(wh) as con:
        held = con.execute("SELECT device_id, gpu_uuid, share FROM device_holdings ORDER BY 1").fetchall()
    assert held == [("GPU-x0", "GPU-x0", None), ("GPU-x1::0", "GPU-x1", None), ("GPU-x1::1", "GPU-x1", None)]


SHARING = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


@pytest.mark.slow
def test_without_get_allocatable_the_device_plugins_config_gives_the_replica_count(old_kubelet, tmp_path):
    # the plugin's config says 4 replicas of each nvidia.com/gpu: nb-a holds 2 of GPU-x1's 4
    # (0.25 each); the whole GPU-x0 is no replica (no share)
    old_kubelet.pods = [TRAINER, SHARED_A]
    (tmp_path / "plugin.yaml").write_text(SHARING)
    wh = tmp_path / "wh.duckdb"
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "agent", "pod-resources", "--socket",
                           "pr/kubelet.sock", "--once", "--cluster", "prod", "--host", "n9", "--sharing-config",
                           "plugin.yaml", "-w", str(wh)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "time-sliced replica shares from plugin.yaml" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    with warehouse.open_reader(wh) as con:
        held = con.execute("SELECT device_id, share FROM device_holdings ORDER BY 1").fetchall()
    assert held == [("GPU-x0", None), ("GPU-x1::0", 0.25), ("GPU-x1::1", 0.25)]
    bad = tmp_path / "bad.yaml"
    bad.write_text("sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 0}\n")
    refused = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "agent", "pod-resources", "--socket",
                              "pr/kubelet.sock", "--once", "--sharing-config", str(bad), "-w", str(wh)],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"gpuledger: --sharing-config {bad}: sharing.timeSlicing.resources[0]: expected a name and replicas 1..1024"]


def test_the_device_plugins_renames_and_mps_are_read():
    from gpuledger.ingest.holdings.pod_resources import configured_replicas

    text = ("sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
            "    - {name: nvidia.com/gpu, replicas: 8}\n"
            "  mps:\n    resources:\n    - {name: nvidia.com/gpu, rename: nvidia.com/gpu.mps, replicas: 2}\n")
    assert configured_replicas(text) == {"nvidia.com/gpu.shared": 8, "nvidia.com/gpu.mps": 2}
    with pytest.raises(ValueError, match="no sharing.timeSlicing.resources"):
        configured_replicas("version: v1\n")
    # an allocatable answer, where the kubelet gives one, wins over the config: GPU-x1 has 4 there
    listed = pb.ListPodResourcesResponse(pod_resources=[SHARED_B])
    allocatable = pb.AllocatableResourcesResponse(devices=ALLOCATABLE)
    got = held_devices(listed, allocatable, configured={"nvidia.com/gpu": 10})
    assert [(h.device_id, h.share) for h in got] == [("GPU-x1::2", 0.25)]
    assert [h.share for h in held_devices(listed, None, configured={"nvidia.com/gpu": 10})] == [0.1]
    assert [h.share for h in held_devices(listed, None)] == [None]


def test_one_whole_gpu_listed_for_two_pods_keeps_the_first_and_quarantines_the_second(kubelet, tmp_path):
    kubelet.pods = [TRAINER, _pod("research", "intruder", _container("main", "nvidia.com/gpu", "GPU-x0"))]
    kubelet.devices = ALLOCATABLE
    wh = tmp_path / "wh.duckdb"
    done = _agent(kubelet, "--host", "n9", "-w", str(wh))
    assert done.returncode == 0, done.stderr
    with warehouse.open_reader(wh) as con:
        held = con.execute("SELECT scheduler_job, device_id FROM device_holdings").fetchall()
        bad = con.execute("SELECT source, reason FROM quarantine").fetchall()
    # same first-seen (one poll): the first holder by job name is kept
    assert held == [("research/intruder", "GPU-x0")]
    assert len(bad) == 1 and bad[0][0] == "pod-resources"
    assert "GPU GPU-x0 on n9 is held by job research/intruder" in bad[0][1]
    assert "and by job research/trainer-7" in bad[0][1] and "a whole GPU serves one job" in bad[0][1]
