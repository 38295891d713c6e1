"""deploy/kubernetes: `kubectl kustomize` (the kubectl 1.32 on these machines, Kustomize 5.5)
renders the base and the example overlay; every object validates against the Kubernetes OpenAPI
schemas offline (kubernetes-validate) for 1.32 and the newest minor it bundles (the
ServiceMonitor, a CRD, has none); and the rendered objects keep the deployment's promises:
restricted security context everywhere, one writer pod holding the volume, the enforcer off and a
dry run under its own ServiceAccount, ingest read-only, the ServiceMonitor behind its flag."""

from __future__ import annotations

import shutil
import subprocess
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
    assert set(crds) == ({"ServiceMonitor"} if which == "overlay" else set())


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
    assert spec["initContainers"][0]["args"] == ["warehouse", "migrate"]  # migrations by one process
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


def test_network_policy_and_pdb_select_the_writer(base):
    writer_labels = one(base, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    policy = one(base, "NetworkPolicy", "gpuledger-writer")
    ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    container_ports = {p["containerPort"] for c in one(base, "StatefulSet")["spec"]["template"]["spec"]["containers"]
                       for p in c.get("ports", [])}
    assert ports == container_ports == {3000, 8501, 9464}
    for obj in (policy, one(base, "PodDisruptionBudget")):
        selector = obj["spec"].get("podSelector") or obj["spec"]["selector"]
        assert all(writer_labels.get(k) == v for k, v in selector["matchLabels"].items())


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
    assert containers["scrape"]["args"] == ["ingest", "scrape", "--every", "60s"]
    assert "GPULEDGER_SCRAPE_SERVICE" not in {e["name"] for e in containers["scrape"]["env"]}
