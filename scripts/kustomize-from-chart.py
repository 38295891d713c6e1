"""Write the Kustomize base and components from the Helm chart, so the two cannot drift.

    .venv/bin/python scripts/kustomize-from-chart.py        (after editing deploy/helm/gpuledger)

Renders deploy/helm/gpuledger with real Helm (scripts/fetch-helm.sh puts it in .cache/tools/)
for release `gpuledger` in namespace `gpuledger`, drops Helm's own labels and the config checksum
(Kustomize's hashed ConfigMap name does that job), and writes:

  deploy/kubernetes/base/workload.yaml                        every object of the default values but
                                                              the ConfigMap (the base's generator makes it)
  deploy/kubernetes/components/servicemonitor/servicemonitor.yaml
  deploy/kubernetes/components/prometheusrule/prometheusrule.yaml
  deploy/kubernetes/components/pod-resources-agent/daemonset.yaml, spool.yaml,
                                              statefulset-patch.yaml (the writer's node-holdings container)

tests/deploy/test_helm.py renders both ways and fails on any difference.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy/helm/gpuledger"
KUSTOMIZE = REPO / "deploy/kubernetes"
HELM = REPO / ".cache/tools/helm-3.17.3/helm"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version",
               "app.kubernetes.io/managed-by")
HEADER = ("# Generated from deploy/helm/gpuledger by scripts/kustomize-from-chart.py: edit the chart, then run\n"
          "# the script. tests/deploy/test_helm.py fails when the chart and this file differ.\n")


def helm() -> Path:
    if not HELM.exists():
        subprocess.run(["bash", str(REPO / "scripts/fetch-helm.sh")], check=True)
    return HELM


def render(*sets: str, values: list[Path] = ()) -> list[dict]:
    argv = [str(helm()), "template", "gpuledger", str(CHART), "--namespace", "gpuledger"]
    for s in sets:
        argv += ["--set", s]
    for v in values:
        argv += ["--values", str(v)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        sys.exit(f"helm template failed: {done.stderr.strip()}")
    return [strip_helm(o) for o in yaml.safe_load_all(done.stdout) if o]


def strip_helm(obj: dict) -> dict:
    """The object as Kustomize would ship it: no Helm bookkeeping labels, no config checksum."""
    def clean(meta: dict) -> None:
        for key in HELM_LABELS:
            meta.get("labels", {}).pop(key, None)
        meta.get("annotations", {}).pop("checksum/config", None)
        if meta.get("annotations") == {}:
            del meta["annotations"]
    clean(obj["metadata"])
    template = obj.get("spec", {}).get("template")
    if template:
        clean(template["metadata"])
    return obj


def dump(path: Path, objects: list, comment: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "---\n".join(yaml.safe_dump(o, sort_keys=False, width=120) for o in objects)
    path.write_text(HEADER + comment + text)


def main() -> None:
    base = render()
    dump(KUSTOMIZE / "base/workload.yaml", [o for o in base if o["kind"] != "ConfigMap"])
    (monitor,) = [o for o in render("metrics.serviceMonitor.enabled=true") if o["kind"] == "ServiceMonitor"]
    dump(KUSTOMIZE / "components/servicemonitor/servicemonitor.yaml", [monitor])
    (rule,) = [o for o in render("metrics.prometheusRule.enabled=true") if o["kind"] == "PrometheusRule"]
    dump(KUSTOMIZE / "components/prometheusrule/prometheusrule.yaml", [rule])
    agent = render("nodeAgent.enabled=true")
    dump(KUSTOMIZE / "components/pod-resources-agent/daemonset.yaml", [o for o in agent if o["kind"] == "DaemonSet"])
    dump(KUSTOMIZE / "components/pod-resources-agent/spool.yaml",
         [o for o in agent if o["kind"] == "PersistentVolumeClaim"],
         "# the spool's claim in each namespace; an overlay names their ReadWriteMany storage class\n")
    (writer,) = [o for o in agent if o["kind"] == "StatefulSet"]
    spec = writer["spec"]["template"]["spec"]
    patch = [{"op": "add", "path": "/spec/template/spec/volumes/-",
              "value": next(v for v in spec["volumes"] if v["name"] == "holdings-spool")},
             {"op": "add", "path": "/spec/template/spec/containers/-",
              "value": next(c for c in spec["containers"] if c["name"] == "node-holdings")}]
    dump(KUSTOMIZE / "components/pod-resources-agent/statefulset-patch.yaml", [patch],
         "# the writer pod's node-holdings container and the spool it reads (a JSON patch)\n")
    print("wrote the Kustomize base and components from the chart")


if __name__ == "__main__":
    main()
