"""deploy/kubernetes: `kubectl kustomize` (the kubectl 1.32 on these machines, Kustomize 5.5)
renders the base and the example overlay; every object validates against the Kubernetes OpenAPI
schemas offline (kubernetes-validate) for 1.32 and the newest minor it bundles (the
ServiceMonitor, a CRD, has none); and the rendered objects keep the deployment's promises:
restricted security context everywhere, one writer pod holding the volume, the enforcer off and a
dry run under its own ServiceAccount, ingest read-only, the ServiceMonitor behind its flag."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpuledger.config import load_config

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy/kubernetes"
OVERLAY = REPO / "deploy/overlays/example"
KUBECTL = shutil.which("kubectl", path="/usr/bin:/usr/local/bin")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs kubectl (>= 1.27 for Kustomize 5)")


def render(folder: Path) -> list[dict]:
    done = subprocess.run([KUBECTL, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return render(BASE)


@pytest.fixture(scope="module")
def overlay() -> list[dict]:
    return render(OVERLAY)


def newest_minor() -> str:
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    versions = [p.name.split("-")[0].lstrip("v") for p in schemas.iterdir() if p.name.endswith("-local-strict")]
    return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))


def one(objects, kind, name=None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


def pod_specs(objects) -> list[tuple[str, dict]]:
    out = []
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "Deployment", "DaemonSet"):
            out.append((obj["metadata"]["name"], obj["spec"]["template"]["spec"]))
        elif obj["kind"] == "CronJob":
            out.append((obj["metadata"]["name"], obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("which", ["base", "overlay"])
def test_every_object_validates_against_the_openapi_schemas(which, request):
    objects = request.getfixturevalue(which)
    crds = []
    for version in ("1.32.0", newest_minor()):
        for obj in objects:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                crds.append(obj["kind"])
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is invalid for {version}: {exc}")
    assert set(crds) == ({"ServiceMonitor", "PrometheusRule"} if which == "overlay" else set())


def test_every_pod_runs_restricted(base):
    specs = pod_specs(base)
    assert {name for name, _ in specs} == {"gpuledger", "gpuledger-enforcer"}
    for name, spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec.get("initContainers", []) + spec["containers"]:
            ctx = container["securityContext"]
            where = f"{name}/{container['name']}"
            assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False, where
            assert ctx["capabilities"] == {"drop": ["ALL"]}, where
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"], where
            assert container["image"] == "ghcr.io/gpuledger/gpuledger:0.1.0", where
            # the root filesystem is read-only: /tmp is a volume (Streamlit and Dagster write there)
            assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"]), where
            if container.get("ports") and name == "gpuledger":
                assert container.get("readinessProbe") or container.get("livenessProbe"), where


def test_one_writer_pod_holds_the_warehouse_volume(base):
    writer = one(base, "StatefulSet", "gpuledger")
    assert writer["spec"]["replicas"] == 1
    claim = writer["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    spec = writer["spec"]["template"]["spec"]
    names = {c["name"] for c in spec["containers"]}
    assert names == {"dagster-daemon", "dagster-webserver", "scrape", "dashboards", "metrics"}
    # every container of the pod mounts the one volume: flock serializes them on this kernel
    for container in spec["initContainers"] + spec["containers"]:
        assert any(m["name"] == "data" for m in container["volumeMounts"]), container["name"]
    # migrations by one process each, before the containers start: the warehouse, then Dagster's
    # schema in PostgreSQL (the daemon and the webserver creating it at once collide)
    migrate, instance = spec["initContainers"]
    assert migrate["args"] == ["warehouse", "migrate"]
    assert instance["command"] == ["dagster", "instance", "migrate"]
    daemon = next(c for c in spec["containers"] if c["name"] == "dagster-daemon")
    assert instance["env"] == daemon["env"]  # the same DAGSTER_HOME and DAGSTER_PG_* secrets
    assert {"DAGSTER_HOME", "DAGSTER_PG_HOST", "DAGSTER_PG_PASSWORD"} <= {e["name"] for e in instance["env"]}
    assert instance["volumeMounts"] == daemon["volumeMounts"]  # dagster.yaml in DAGSTER_HOME
    # the enforcer, another pod, mounts the same claim only on the writer's node
    enforcer = one(base, "CronJob", "gpuledger-enforcer")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert enforcer["volumes"][0]["persistentVolumeClaim"]["claimName"] == "data-gpuledger-0"
    affinity = enforcer["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert affinity["topologyKey"] == "kubernetes.io/hostname"
    assert affinity["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "writer"


def test_enforcer_is_off_and_a_dry_run_under_its_own_account(base, overlay):
    cron = one(base, "CronJob", "gpuledger-enforcer")
    assert cron["spec"]["suspend"] is True
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "gpuledger-enforcer"
    assert "--yes" not in spec["containers"][0]["args"]
    config = one(base, "ConfigMap")["data"]["gpuledger.yaml"]
    assert yaml.safe_load(config)["policy"]["enforcement"]["dry_run"] is True
    # the enforcer's RBAC is the enforcement issue's file, bound to that account
    binding = one(base, "ClusterRoleBinding", "gpuledger-enforcer")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpuledger-enforcer", "namespace": "gpuledger"}]
    # the overlay switches it on, still without --yes
    on = one(overlay, "CronJob", "gpuledger-enforcer")
    assert on["spec"]["suspend"] is False
    assert "--yes" not in on["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_ingest_reads_only(base):
    role = one(base, "ClusterRole", "gpuledger-ingest")
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    resources = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert resources == {("", "pods"), ("", "nodes"), ("", "namespaces"), ("kueue.x-k8s.io", "workloads")}
    writer = one(base, "StatefulSet")["spec"]["template"]["spec"]
    assert writer["serviceAccountName"] == "gpuledger"
    assert one(base, "ClusterRoleBinding", "gpuledger-ingest")["subjects"][0]["name"] == "gpuledger"


def test_servicemonitor_only_behind_its_flag(base, overlay):
    assert not [o for o in base if o["kind"] == "ServiceMonitor"]
    monitor = one(overlay, "ServiceMonitor")
    service = one(overlay, "Service", "gpuledger-metrics")
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())


def test_network_policy_selects_the_writer_and_no_pdb_pretends(base):
    writer_labels = one(base, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    policy = one(base, "NetworkPolicy", "gpuledger-writer")
    ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    container_ports = {p["containerPort"] for c in one(base, "StatefulSet")["spec"]["template"]["spec"]["containers"]
                       for p in c.get("ports", [])}
    # the Dagster UI (:3000) listens on the pod's loopback only: no port, no Service, no rule
    assert ports == container_ports == {8501, 9464}
    assert all(rule["from"] for rule in policy["spec"]["ingress"])  # each port from named sources only
    selector = policy["spec"]["podSelector"]
    assert all(writer_labels.get(k) == v for k, v in selector["matchLabels"].items())
    # one replica: a PDB allowing one disruption blocks nothing, so none (the chart's option is minAvailable: 1)
    assert not [o for o in base if o["kind"] == "PodDisruptionBudget"]
    assert not [o for o in base if o["kind"] == "Namespace"]  # `kubectl delete -k` keeps the namespace


def test_the_shipped_configs_load(base, overlay, tmp_path):
    for objects in (base, overlay):
        data = one(objects, "ConfigMap")["data"]
        (tmp_path / "gpuledger.yaml").write_text(data["gpuledger.yaml"])
        cfg = load_config(tmp_path / "gpuledger.yaml")
        assert cfg.sources.kubernetes is not None and cfg.sources.scrape is not None
        assert data["dagster.yaml"] == (BASE / "base/dagster.yaml").read_text()


def test_one_scraper_and_the_prometheus_secret(base):
    spec = one(base, "StatefulSet", "gpuledger")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    for name in ("dagster-daemon", "dagster-webserver"):  # runs start from either
        env = {e["name"]: e.get("value") for e in containers[name]["env"]}
        assert env["GPULEDGER_SCRAPE_SERVICE"] == "1", name  # ingest_job leaves the targets to `scrape`
        refs = [f["secretRef"] for f in containers[name]["envFrom"]]
        assert {"name": "gpuledger-prometheus", "optional": True} in refs, name  # tenant / bearer token
    assert containers["scrape"]["args"] == ["ingest", "scrape", "--every", "60s", "--heartbeat", "/tmp/scrape.heartbeat"]
    assert "GPULEDGER_SCRAPE_SERVICE" not in {e["name"] for e in containers["scrape"]["env"]}


def test_the_node_agents_run_as_restricted_as_a_hostpath_allows(overlay):
    agents = one(overlay, "DaemonSet", "gpuledger-pod-resources")
    assert agents["metadata"]["namespace"] == "gpuledger-node-agent"  # privileged, apart from the app's
    spec = agents["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False  # it needs no Kubernetes API
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    pod = spec["securityContext"]
    # uid 0 only to connect to the kubelet's root-owned socket; group 10001 so the writer reads its files
    assert (pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"]) == (0, 10001, 10001)
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    (agent,) = spec["containers"]
    ctx = agent["securityContext"]
    assert ctx == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert agent["image"] == "ghcr.io/gpuledger/gpuledger:0.1.0" and agent["resources"]["limits"]["memory"]
    assert agent["args"][:3] == ["ingest", "agent", "pod-resources"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    # the one hostPath is the kubelet's socket directory, mounted read-only
    assert [v["hostPath"]["path"] for v in volumes.values() if "hostPath" in v] == ["/var/lib/kubelet/pod-resources"]
    assert mounts["pod-resources"]["readOnly"] is True
    socket = agent["args"][agent["args"].index("--socket") + 1]
    assert socket.startswith(mounts["pod-resources"]["mountPath"] + "/")
    # it writes the shared spool, never the warehouse's claim; the writer's node-holdings reads it
    spool = agent["args"][agent["args"].index("--spool") + 1]
    assert mounts["holdings-spool"]["mountPath"] == spool
    # a claim in each namespace (the agents' and the writer's) on the one ReadWriteMany share
    claims = [o for o in overlay if o["kind"] == "PersistentVolumeClaim"
              and o["metadata"]["name"] == volumes["holdings-spool"]["persistentVolumeClaim"]["claimName"]]
    assert sorted(c["metadata"]["namespace"] for c in claims) == ["gpuledger", "gpuledger-node-agent"]
    claim = next(c for c in claims if c["metadata"]["namespace"] == "gpuledger")
    assert {c["spec"]["accessModes"][0] for c in claims} == {"ReadWriteMany"}
    assert {c["spec"]["storageClassName"] for c in claims} == {"nfs-client"}
    assert "data" not in volumes and "GPULEDGER_WAREHOUSE" not in {e["name"] for e in agent["env"]}
    writer = one(overlay, "StatefulSet", "gpuledger")["spec"]["template"]["spec"]
    reader = next(c for c in writer["containers"] if c["name"] == "node-holdings")
    assert reader["args"][:4] == ["ingest", "node-holdings", "--spool", spool]
    spool_mount = next(m for m in reader["volumeMounts"] if m["name"] == "holdings-spool")
    assert spool_mount["mountPath"] == spool and spool_mount["readOnly"] is True
    assert {v["name"]: v for v in writer["volumes"]}["holdings-spool"]["persistentVolumeClaim"]["claimName"] == \
        claim["metadata"]["name"]


@pytest.mark.slow
def test_the_node_agent_and_the_writers_reader_run_as_written(overlay, tmp_path):
    """The DaemonSet's command and the writer's node-holdings command, run here as the manifests
    write them (paths mapped into a temporary folder, the kubelet a real gRPC server on a unix
    socket speaking its PodResources service): the holding lands in the warehouse."""
    import sys
    from concurrent import futures

    import grpc

    from gpuledger import warehouse
    from gpuledger.ingest.holdings.podresources import api_pb2_grpc as pb_grpc
    from tests.deploy.test_image import Pod
    from tests.ingest.test_pod_resources import ALLOCATABLE, TRAINER, Kubelet

    kubelet_dir = tmp_path / "kubelet"
    kubelet_dir.mkdir()
    servicer = Kubelet()
    servicer.pods, servicer.devices = [TRAINER], ALLOCATABLE
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix:{kubelet_dir / 'kubelet.sock'}")
    server.start()

    class NodePod(Pod):
        def env(self, container):  # the downward API's node name
            plain = {**container, "env": [e for e in container.get("env", []) if "value" in e]}
            named = {e["name"]: "gpu-node-1" for e in container.get("env", []) if "fieldRef" in e.get("valueFrom", {})}
            return {**super().env(plain), **named}

    agents = one(overlay, "DaemonSet", "gpuledger-pod-resources")["spec"]["template"]["spec"]["containers"][0]
    writer = one(overlay, "StatefulSet", "gpuledger")["spec"]["template"]["spec"]
    reader = next(c for c in writer["containers"] if c["name"] == "node-holdings")
    pod = NodePod(tmp_path / "pod", Path(sys.executable).parent, one(overlay, "ConfigMap")["data"], {}, {})
    pod.places["/var/lib/kubelet/pod-resources"] = kubelet_dir
    try:
        agent = pod.start({**agents, "args": [*agents["args"], "--count", "2"]}, tmp_path / "agent.log")
        assert agent.wait(timeout=120) == 0, (tmp_path / "agent.log").read_text()
        assert "2 polls" in (tmp_path / "agent.log").read_text()
        assert pod.probe(agents, agents["livenessProbe"])  # its node's spool file is fresh
        migrate = next(c for c in writer["initContainers"] if c["name"] == "migrate")
        assert pod.start(migrate, tmp_path / "migrate.log").wait(timeout=120) == 0  # the schema first
        loop = pod.start(reader, tmp_path / "reader.log")  # --every 60s: its first read is at once
        deadline = time.monotonic() + 90
        while "node files" not in (tmp_path / "reader.log").read_text() and time.monotonic() < deadline:
            assert loop.poll() is None, (tmp_path / "reader.log").read_text()
            time.sleep(0.5)
        assert pod.probe(reader, reader["livenessProbe"])  # its heartbeat was touched after the read
        loop.terminate()  # SIGTERM: stops between reads, exit 0
        assert loop.wait(timeout=60) == 0, (tmp_path / "reader.log").read_text()
        assert "1 GPU holdings from 1 node files" in (tmp_path / "reader.log").read_text()
    finally:
        for proc in pod.procs:
            if proc.poll() is None:
                proc.kill()
        server.stop(grace=None)
    with warehouse.open_reader(pod.path("/var/lib/gpuledger/gpuledger.duckdb")) as con:
        assert con.execute("SELECT cluster, host, scheduler_job, device_id FROM device_holdings").fetchall() == [
            ("prod", "gpu-node-1", "research/trainer-7", "GPU-x0")]
