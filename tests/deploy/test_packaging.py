"""Packaging (issue 7 §1): the wheel holds only the `gpuledger` package — the top-level folders the
product card fixes (`warehouse/`, `enforce/`, `pipelines/`, `dashboards/`) are mapped inside it —
so installing gpuledger next to a distribution that ships a top-level `enforce/` leaves both
intact, and `gpuledger[agent]` pulls neither Dagster, Streamlit nor the Kubernetes client.

Real wheels, a real fresh venv, real pip (the index is needed only for the dry-run resolution)."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"gpuledger": "gpuledger", "warehouse": "gpuledger/warehouse", "enforce": "gpuledger/enforce",
          "pipelines": "gpuledger/pipelines", "dashboards": "gpuledger/dashboards"}

pytestmark = pytest.mark.slow


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    # -v: the build backend's own warnings are part of what a newcomer reads on `pip install -e .`
    built = _pip(Path(sys.executable), "wheel", "--no-deps", "-v", "-w", str(out), str(ROOT))
    assert built.returncode == 0, built.stderr
    (out / "build-log.txt").write_text(built.stdout + built.stderr)
    # another distribution that ships a top-level `enforce/` package
    other = tmp_path_factory.mktemp("other")
    (other / "enforce").mkdir()
    (other / "enforce" / "__init__.py").write_text("OWNER = 'other'\n")
    (other / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "other-enforce"\nversion = "1.0"\n'
        '[tool.setuptools]\npackages = ["enforce"]\n')
    built = _pip(Path(sys.executable), "wheel", "--no-deps", "-q", "-w", str(out), str(other))
    assert built.returncode == 0, built.stderr
    return {"gpuledger": next(out.glob("gpuledger-*.whl")), "other": next(out.glob("other_enforce-*.whl")),
            "build-log": out / "build-log.txt"}


def _source_files() -> set[str]:
    """Every file the wheel must carry, under its installed name."""
    wanted = set()
    for folder, installed in MAPPED.items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".sql", ".yaml"} and "__pycache__" not in path.parts:
                wanted.add(f"{installed}/{path.relative_to(ROOT / folder).as_posix()}")
    return wanted


def test_wheel_holds_only_gpuledger_and_every_source_file(wheels):
    names = zipfile.ZipFile(wheels["gpuledger"]).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"gpuledger", "gpuledger-0.1.0.dist-info"}
    # a package folder missing from pyproject's explicit `packages` list shows up here
    missing = sorted(_source_files() - set(names))
    assert missing == [], f"add their packages to pyproject's [tool.setuptools] packages: {missing}"


def test_build_warns_of_no_package_setuptools_would_ignore(wheels):
    # issue 22 §7: a folder without __init__.py (the dashboards' app_pages/ and sql/) that is not in
    # `packages` made setuptools print ~80 lines of "Package would be ignored" on every install
    log = wheels["build-log"].read_text()
    assert "Building wheel" in log or "Created wheel" in log  # the log is the backend's (not empty)
    assert "would be ignored" not in log and "is absent from the `packages` configuration" not in log


def test_install_beside_a_top_level_enforce_keeps_both(wheels, tmp_path):
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    for wheel in (wheels["other"], wheels["gpuledger"]):  # gpuledger second: it must not overwrite
        done = _pip(python, "install", "--no-deps", "--no-index", "-q", str(wheel))
        assert done.returncode == 0, done.stderr
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    assert (site / "enforce" / "__init__.py").read_text() == "OWNER = 'other'\n"
    assert (site / "gpuledger" / "enforce" / "__init__.py").is_file()
    assert (site / "gpuledger" / "warehouse" / "migrations" / "001_initial.sql").is_file()
    # uninstalling the other distribution deletes none of gpuledger's files
    done = _pip(python, "uninstall", "-y", "-q", "other-enforce")
    assert done.returncode == 0, done.stderr
    assert not (site / "enforce").exists()
    assert (site / "gpuledger" / "enforce" / "__init__.py").is_file()


def test_agent_extra_pulls_no_dagster_streamlit_or_kubernetes(wheels, tmp_path):
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    report = tmp_path / "report.json"
    done = _pip(env / "bin" / "python", "install", "--dry-run", "-q", "--report", str(report),
                f"{wheels['gpuledger']}[agent]")
    assert done.returncode == 0, done.stderr
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"gpuledger", "nvidia-ml-py", "polars", "duckdb"} <= names
    assert not {n for n in names if n.startswith(("dagster", "streamlit", "kubernetes"))}
