"""The image and the manifests, run as far as this machine allows (no kubelet, no container runtime
daemon): every container of the rendered Kubernetes base runs in the image that
tests/deploy/test_image_build.py builds (`buildah run`, chroot isolation, as the image's user 10001)
as written — its command (or the image's `gpuledger` entry point) and args, its env names and
values — with its volumes bound at their paths onto a temporary folder (the ConfigMap's keys as
files there), its ports mapped onto free ones (chroot isolation shares the host's network: both
test workers share its loopback), the PostgreSQL Secret onto a real PostgreSQL and the in-cluster API
server onto the local stand-in: the init container migrates and exits 0, the long-running containers
start and their probes (HTTP from the host, exec in the image) answer, the enforcer's dry run exits 0.

`Pod` runs the same containers from a local environment instead (tests/deploy/test_kubernetes.py's
node agent, whose gRPC socket a chroot cannot reach as written)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.deploy.test_kubernetes import BASE, KUBECTL, one, render
from tests.helpers import dagster_rig as rig
from tests.helpers import image_rig
from tests.helpers.k8s_standin import KubeStandIn
from tests.helpers.postgres_rig import PostgresRig, have_postgres

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(KUBECTL is None or not have_postgres(), reason="needs kubectl and PostgreSQL")]


class Pod:
    """The rendered containers, run locally from ``bin_dir``: paths under /var/lib/gpuledger,
    /etc/gpuledger and /tmp map into ``root``; containerPorts map to free ports."""

    def __init__(self, root: Path, bin_dir: Path, config: dict[str, str], secrets: dict[str, dict[str, str]],
                 extra_env: dict[str, str]):
        self.root, self.bin, self.secrets, self.extra_env = root, bin_dir, secrets, extra_env
        self.places = {"/var/lib/gpuledger": root / "data", "/etc/gpuledger": root / "etc", "/tmp": root / "tmp"}
        for place in self.places.values():
            place.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.ports: dict[int, int] = {}
        self.procs: list[subprocess.Popen] = []

    def path(self, text: str) -> str:
        for prefix, local in self.places.items():
            if text == prefix or text.startswith(prefix + "/"):
                return str(local) + text[len(prefix):]
        return text

    def mount(self, container: dict) -> None:
        """ConfigMap keys mounted by subPath become files at their mapped paths."""
        for m in container.get("volumeMounts", []):
            if m["name"] == "config" and "subPath" in m:
                target = Path(self.path(m["mountPath"]))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(self.config[m["subPath"]])
            else:
                Path(self.path(m["mountPath"])).mkdir(parents=True, exist_ok=True)

    def port(self, container_port: int) -> int:
        return self.ports.setdefault(container_port, rig.free_port())

    def exe(self, name: str) -> str:
        """A command's program: the environment's own, else the system's (sh, python)."""
        return str(self.bin / name) if (self.bin / name).exists() else name

    def arg(self, text: str) -> str:
        """An argument or env value as the process sees it: its path mapped into ``root``."""
        return self.path(text)

    def argv(self, container: dict) -> list[str]:
        command = container.get("command") or ["gpuledger"]  # the image's ENTRYPOINT
        ports = {str(p["containerPort"]): str(self.port(p["containerPort"])) for p in container.get("ports", [])}
        raw = container.get("args", [])
        if "-p" in raw:  # a server on the pod's loopback only (no containerPort): its port too
            ports[raw[raw.index("-p") + 1]] = str(self.port(int(raw[raw.index("-p") + 1])))
        args = [ports.get(a, self.arg(a)) for a in raw]
        return [self.exe(command[0]), *command[1:], *args]

    def mapped_ports(self, text: str) -> str:
        """Loopback ports inside a shell or Python one-liner (an exec probe)."""
        for port, local in self.ports.items():
            text = text.replace(f"127.0.0.1:{port}/", f"127.0.0.1:{local}/")
        return text

    def mapped(self, text: str) -> str:
        """Paths and loopback ports inside a shell or Python one-liner (an exec probe)."""
        places = "|".join(re.escape(prefix) for prefix in self.places)  # one pass: a mapped path is not mapped again
        return self.mapped_ports(
            re.sub(rf"(?<![\w/])({places})(?=[/\s\"']|$)", lambda m: str(self.places[m.group(1)]), text))

    def env(self, container: dict) -> dict[str, str]:
        # HOSTNAME: what the container runtime sets, the StatefulSet pod's name (ordinal 0)
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "LANG": "C.UTF-8", "HOSTNAME": "gpuledger-0", **self.extra_env}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = self.arg(item["value"])
            else:
                ref = item["valueFrom"]["secretKeyRef"]
                env[item["name"]] = self.secrets[ref["name"]][ref["key"]]
        return env

    def process(self, container: dict, argv: list[str]) -> tuple[list[str], dict[str, str] | None, Path | None]:
        """How ``argv`` of ``container`` is run here: (command line, environment, working folder)."""
        cwd = Path(self.path(container.get("workingDir", "/var/lib/gpuledger")))
        cwd.mkdir(parents=True, exist_ok=True)
        return argv, self.env(container), cwd

    def start(self, container: dict, log: Path) -> subprocess.Popen:
        self.mount(container)
        argv, env, cwd = self.process(container, self.argv(container))
        out = open(log, "w")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.procs.append(proc)
        return proc

    def probe(self, container: dict, probe: dict) -> bool:
        if "httpGet" in probe:
            named = {p["name"]: p["containerPort"] for p in container["ports"]}
            port = probe["httpGet"]["port"]
            url = f"http://127.0.0.1:{self.port(named.get(port, port))}{probe['httpGet']['path']}"
            try:
                return requests.get(url, timeout=30).status_code == 200
            except requests.RequestException:
                return False
        exe, *rest = probe["exec"]["command"]
        argv, env, cwd = self.process(container, [self.exe(exe), *(self.mapped(a) for a in rest)])
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=120)
        return done.returncode == 0


class ImagePod(Pod):
    """The containers run in the image: the places (/var/lib/gpuledger, /etc/gpuledger, /tmp: the
    pod's volumes) are folders under ``root`` bound at their own paths, so commands, args, env
    values and exec probes run exactly as written but for the ports, which map to free ones."""

    def __init__(self, root: Path, container_name: str, config: dict[str, str],
                 secrets: dict[str, dict[str, str]], extra_env: dict[str, str]):
        super().__init__(root, Path("/opt/gpuledger/bin"), config, secrets, extra_env)
        self.container = container_name

    def exe(self, name: str) -> str:
        return name  # the image's PATH finds it

    def arg(self, text: str) -> str:
        return text

    def mapped(self, text: str) -> str:
        return self.mapped_ports(text)

    def env(self, container: dict) -> dict[str, str]:
        return {k: v for k, v in super().env(container).items() if k != "PATH"}  # the image's own PATH

    def mount(self, container: dict) -> None:
        super().mount(container)
        for path in [self.root, *self.root.rglob("*")]:  # the volumes are the image user's (fsGroup)
            os.chown(path, 10001, 10001)

    def process(self, container: dict, argv: list[str]) -> tuple[list[str], dict[str, str] | None, Path | None]:
        """``argv`` run in the image (`buildah run`) with ``container``'s env, the pod's volumes and
        working folder; buildah itself runs in this process's environment."""
        return image_rig.run_argv(self.container, argv, env=self.env(container),
                                  volumes={local: inside for inside, local in self.places.items()},
                                  workdir=container.get("workingDir", "/var/lib/gpuledger")), None, None


def test_every_container_runs_as_written_and_its_probes_answer(container, tmp_path):
    objects = render(BASE)
    config = one(objects, "ConfigMap")["data"]
    spec = one(objects, "StatefulSet", "gpuledger")["spec"]["template"]["spec"]
    enforcer = one(objects, "CronJob", "gpuledger-enforcer")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    api = KubeStandIn().start()
    with PostgresRig() as pg:
        secrets = {"gpuledger-postgres": {"host": pg.env["DAGSTER_PG_HOST"], "port": pg.env["DAGSTER_PG_PORT"],
                                          "database": pg.env["DAGSTER_PG_DB"], "username": pg.env["DAGSTER_PG_USER"],
                                          "password": pg.env["DAGSTER_PG_PASSWORD"]}}
        # the in-cluster API server is the local stand-in (the pod would use its ServiceAccount)
        pod = ImagePod(tmp_path / "pod", container, config, secrets,
                       {"KUBECONFIG": "/etc/gpuledger/kubeconfig", "DAGSTER_DISABLE_TELEMETRY": "1"})
        api.write_kubeconfig(Path(pod.path("/etc/gpuledger/kubeconfig")))
        logs = tmp_path / "logs"
        logs.mkdir()
        try:
            assert [c["name"] for c in spec["initContainers"]] == ["migrate", "dagster-instance"]
            for init in spec["initContainers"]:
                proc = pod.start(init, logs / f"{init['name']}.log")
                assert proc.wait(timeout=300) == 0, (logs / f"{init['name']}.log").read_text()
            # Dagster's schema is made before its daemon and webserver start together (both creating
            # it on an empty database failed one of them: "type asset_keys already exists")
            assert {"runs", "event_logs", "jobs", "asset_keys"} <= pg.tables(), pg.tables()
            running = {c["name"]: (c, pod.start(c, logs / f"{c['name']}.log")) for c in spec["containers"]}
            deadline = time.monotonic() + 480
            for name, (written, proc) in running.items():
                for kind in ("readinessProbe", "livenessProbe"):
                    if kind in written:
                        rig.until(deadline, f"{name}'s {kind}",
                                  lambda c=written, k=kind, p=proc, n=name: (p.poll() is None or pytest.fail(
                                      f"{n} exited: {(logs / f'{n}.log').read_text()[-3000:]}"))
                                  and pod.probe(c, c[k]), 3.0)
            # the scrape service has no port: it runs round after round (its target is unreachable
            # here, which it reports and survives)
            rig.until(deadline, "the scrape service's first round",
                      lambda: "round 1:" in (logs / "scrape.log").read_text(), 2.0)
            for name, (_, proc) in running.items():
                assert proc.poll() is None, f"{name} stopped: {(logs / f'{name}.log').read_text()[-3000:]}"
            # the enforcer's dry run, once, on the writer's volume
            job = pod.start(enforcer["containers"][0], logs / "enforcer.log")
            assert job.wait(timeout=300) == 0, (logs / "enforcer.log").read_text()[-3000:]
        finally:
            for proc in pod.procs:
                rig.stop(proc)
            api.close()
    # a dry run changes nothing in the cluster
    assert not [c for c in api.calls if c["method"] not in ("GET",)], api.calls
