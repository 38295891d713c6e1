"""The image itself, built and run in `make test` without a container daemon (issue 35):
scripts/build-image.sh builds the Containerfile with buildah (overlay storage where buildah can
mount an overlay container in its cache, else vfs; chroot isolation) on a base made here with
debootstrap when no registry base can be pulled (cached in .cache/image/, so a second run reuses
it), the host's CA bundle handed in as a build secret only when the package index needs it; then, as
the image's user 10001 (`buildah run --isolation chroot --user 10001:10001`): it migrates a
warehouse, loads the Dagster definitions, serves /metrics (fetched from inside the container),
imports every extra the image installs, its dependencies are consistent (`pip check`); and the final
image holds no copy of the proxy's CA. The build records the resolved versions (equal to
constraints.txt's pins), the storage driver and the image digest in build/image/.

The `image` and `container` fixtures are tests/deploy/conftest.py's, shared with test_image.py
(which runs every container of the manifests in it). Slow: a build with the base cached took 192 s
and 189 CPU-s here with overlay storage (vfs: 268 s, 266 CPU-s, and ~57 CPU-s more to make each
working container); debootstrap of the base adds ~1 min the first time."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from gpuledger.warehouse.db import migrations

from gpuledger.extras import EXTRAS
from tests.helpers.image_rig import RECORDS, REPO, buildah, image_extras, run_as_10001

HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700),  # a first build: ~8.5 min here
              pytest.mark.skipif(shutil.which("buildah") is None, reason="needs buildah (make test-deps)")]


def test_it_runs_as_10001_and_migrates_a_warehouse(container):
    assert run_as_10001(container, "id", "-u").strip() == "10001"
    out = run_as_10001(container, "gpuledger", "warehouse", "migrate",
                       env={"GPULEDGER_WAREHOUSE": "/tmp/smoke/gpuledger.duckdb"})
    assert f"schema version {migrations()[-1][0]}" in out, out


def test_it_loads_the_dagster_definitions(container):
    probe = ("from gpuledger.pipelines.definitions import defs\n"
             "d = defs()\n"
             "jobs = sorted(j.name for j in d.resolve_all_job_defs())\n"
             "print(len(jobs), 'ingest_job' in jobs, 'enforcement_apply_job' in jobs)")
    out = run_as_10001(container, "python", "-c", probe, env={"DAGSTER_HOME": "/tmp/dagster-smoke"})
    count, ingest, apply = out.split()[-3:]
    assert int(count) >= 10 and ingest == apply == "True", out


def test_it_serves_metrics(container):
    """`gpuledger metrics serve` on a simulated warehouse, fetched from inside the container
    (chroot isolation shares the host's network: a free port is picked in there too)."""
    script = r"""
set -e
mkdir -p /tmp/metrics
export GPULEDGER_WAREHOUSE=/tmp/metrics/gpuledger.duckdb GPULEDGER_CONFIG=/tmp/metrics/gpuledger.yaml
gpuledger config example >"$GPULEDGER_CONFIG"
gpuledger simulate warehouse --gpus 8 --days 1 --seed 7 >/dev/null
port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
gpuledger metrics serve --address 127.0.0.1 --port "$port" >/tmp/metrics/serve.log 2>&1 &
server=$!
python - "$port" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 120
while True:
    try:
        print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=60).read().decode())
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.5)
PY
kill "$server"
"""
    out = run_as_10001(container, "sh", "-c", script)
    assert re.search(r"^gpuledger_data_timestamp_seconds \d", out, re.MULTILINE), out[-2000:]
    assert "gpuledger_fairshare_factor{" in out


def test_every_extra_the_image_installs_imports(container):
    extras = set(image_extras().split(","))
    modules = sorted(module for module, (extra, _) in EXTRAS.items() if extra in extras)
    assert {"dagster", "kubernetes", "grpc", "streamlit", "apprise", "openpyxl"} <= set(modules)
    probe = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\nprint('ok', len(sys.argv) - 1)"
    out = run_as_10001(container, "python", "-c", probe, *modules, "dagster_postgres", "google.protobuf")
    assert out.split() == ["ok", str(len(modules) + 2)], out
    # the GPU node's NVML extra is not in it
    assert "agent" not in extras
    missing = run_as_10001(container, "python", "-c", "import importlib.util as u; print(u.find_spec('pynvml'))")
    assert missing.strip() == "None"


def test_the_images_dependencies_are_consistent(container):
    # what pip installed in the build stage (constraints.txt's pins) satisfies every requirement
    out = run_as_10001(container, "pip", "check", env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert "No broken requirements found" in out, out


def _pem_blocks(text: str) -> set[str]:
    return set(re.findall(r"-----BEGIN CERTIFICATE-----\n(.*?)-----END CERTIFICATE-----", text, re.DOTALL))


def test_the_final_image_holds_no_copy_of_the_proxys_ca(container):
    record = json.loads((RECORDS / "image.json").read_text())
    # the host's own CAs (the proxy's): its bundle less the public roots Debian ships
    public = set().union(*(_pem_blocks(p.read_text()) for p in Path("/usr/share/ca-certificates/mozilla").glob("*.crt")))
    own = _pem_blocks(HOST_CA.read_text()) - public
    if record["ca_secret"]:
        assert own, "the build used the host's CA, yet the host bundle adds no certificate to the public roots"
    name = container  # the smoke tests wrote only under /tmp
    try:
        mount = buildah("mount", name).stdout.strip()
        root = Path(mount)
        assert not (root / "run/secrets").exists() or not any((root / "run/secrets").iterdir())
        # a distinctive line of each certificate the proxy added, searched in every file of the image
        needles = [block.splitlines()[1] for block in own]
        if needles:
            found = subprocess.run(["grep", "-rlF", "--binary-files=text", *[a for n in needles for a in ("-e", n)],
                                    str(root)], capture_output=True, text=True, timeout=600)
            assert found.returncode == 1 and not found.stdout, f"the proxy's CA is in the image: {found.stdout[:500]}"
        assert (root / "etc/ssl/certs/ca-certificates.crt").read_bytes() != HOST_CA.read_bytes()
    finally:
        buildah("umount", name)


def test_the_build_records_the_resolved_versions_and_the_digest(image):
    record = json.loads((RECORDS / "image.json").read_text())
    inspected = buildah("inspect", "--type", "image", "--format", "{{.FromImageDigest}}", image).stdout.strip()
    assert record["tag"] == image and record["digest"] == inspected and inspected.startswith("sha256:")
    pins = dict(line.split("==", 1) for line in (REPO / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    resolved = dict(line.split("==", 1) for line in (RECORDS / "resolved-versions.txt").read_text().splitlines()
                    if "==" in line)
    assert {"duckdb", "polars", "dagster"} <= set(resolved)
    differ = {name: (resolved[name], pins[name]) for name in resolved if name in pins and resolved[name] != pins[name]}
    assert not differ, f"the image resolved other versions than constraints.txt pins: {differ}"


def test_an_unreachable_package_index_fails_the_build_at_once_in_one_line(tmp_path):
    # a closed port on loopback: refused at once (a black-holed address would wait the 20 s timeout)
    done = subprocess.run(["bash", str(REPO / "scripts/build-image.sh"), "localhost/gpuledger:never"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PIP_INDEX_URL": "https://127.0.0.1:9/simple",
                               "GPULEDGER_IMAGE_RECORDS": str(tmp_path)})
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("build-image: cannot reach the package index https://127.0.0.1:9/simple (")
    assert "set PIP_INDEX_URL to a mirror" in lines[0]
    assert buildah("inspect", "--type", "image", "localhost/gpuledger:never").returncode != 0


def test_a_storage_driver_asked_wrongly_is_one_line_before_any_build(tmp_path):
    def build(cache: Path, storage: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(REPO / "scripts/build-image.sh"), "localhost/gpuledger:never"],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "GPULEDGER_IMAGE_CACHE": str(cache), "GPULEDGER_IMAGE_STORAGE": storage,
                                   "GPULEDGER_IMAGE_RECORDS": str(tmp_path / "records")})

    # a driver buildah has no use for here
    done = build(tmp_path / "new", "btrfs")
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "build-image: GPULEDGER_IMAGE_STORAGE=btrfs: choose overlay or vfs"]
    # a cache made with one driver, asked for the other: its storage root cannot change
    (tmp_path / "old/storage").mkdir(parents=True)
    (tmp_path / "old/storage/driver").write_text("vfs\n")
    done = build(tmp_path / "old", "overlay")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, lines
    assert lines[0].startswith("build-image: GPULEDGER_IMAGE_STORAGE=overlay, but ") and "holds vfs storage" in lines[0]
    assert f"remove {tmp_path / 'old'}/storage or set GPULEDGER_IMAGE_CACHE" in lines[0]
    assert (tmp_path / "old/storage/driver").read_text() == "vfs\n"  # the cache is left as it was
    assert not (tmp_path / "records").exists() or not any((tmp_path / "records").iterdir())
