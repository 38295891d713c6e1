"""The gpuledger image, built once per test session and run without a container daemon: buildah with
its storage under .cache/image/ (git-ignored; overlay or vfs, as scripts/build-image.sh chose) and
chroot isolation, which shares the host's network, so a server started in the container answers on
the host's loopback and the host's PostgreSQL and API stand-in answer in there.
tests/deploy/conftest.py makes the `image` and `container` fixtures of test_image_build.py (the image
itself) and test_image.py (every container of the manifests, run in it); tests/conftest.py keeps
both files on one worker, so the image is built once."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache/image"
RECORDS = REPO / "build/image"
TAG = "localhost/gpuledger:test"
USER = "10001:10001"  # the image's user, the manifests' runAsUser / runAsGroup


def image_extras() -> str:
    """The extras the Containerfile installs (its ARG EXTRAS)."""
    found = re.search(r"^ARG EXTRAS=(\S+)$", (REPO / "Containerfile").read_text(), re.MULTILINE)
    assert found, "Containerfile: no ARG EXTRAS="
    return found.group(1)


def storage_driver() -> str:
    """The driver scripts/build-image.sh chose for this cache (overlay where buildah could mount an
    overlay container there, else vfs); a cache from before it recorded one is vfs."""
    recorded = CACHE / "storage/driver"
    return recorded.read_text().strip() if recorded.is_file() else "vfs"


def buildah_argv(*args: str) -> list[str]:
    return ["buildah", "--root", str(CACHE / "storage/root"), "--runroot", str(CACHE / "storage/run"),
            "--storage-driver", storage_driver(), *args]


def buildah(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(buildah_argv(*args), capture_output=True, text=True, timeout=timeout)


def build() -> str:
    """The image built by scripts/build-image.sh (a first build ~8.5 min here, ~5.5 min with the base
    cached); GPULEDGER_IMAGE_REUSE=1 tests the image the last run built (while editing the tests)."""
    if os.environ.get("GPULEDGER_IMAGE_REUSE") and buildah("inspect", "--type", "image", TAG).returncode == 0:
        return TAG
    done = subprocess.run(["bash", str(REPO / "scripts/build-image.sh"), TAG], capture_output=True, text=True,
                          timeout=2400)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1:]
    return TAG


def run_argv(container: str, argv: list[str], *, env: dict[str, str] | None = None,
             volumes: dict[Path, str] | None = None, workdir: str | None = None) -> list[str]:
    """The `buildah run` command line that runs ``argv`` in ``container`` as the image's user, with
    ``env`` added to the image's and each host folder of ``volumes`` bound at its path in there."""
    opts = [f"--env={k}={v}" for k, v in (env or {}).items()]
    opts += [f"--volume={host}:{inside}" for host, inside in (volumes or {}).items()]
    if workdir:
        opts.append(f"--workingdir={workdir}")
    return buildah_argv("run", "--isolation", "chroot", "--user", USER, *opts, container, "--", *argv)


def run_as_10001(container: str, *argv: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run ``argv`` in ``container`` as the image's user; its stdout (a failure shows both streams)."""
    done = subprocess.run(run_argv(container, list(argv), env=env), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout
