"""The node agents' command names (issue 20 §1): `gpuledger ingest agent nvml` and `gpuledger
ingest agent pod-resources`; the old spellings (`ingest agent [OPTIONS]`, the top-level `agent`,
`ingest pod-resources`) still run the same command after one deprecation line on stderr."""

from __future__ import annotations

from typer.testing import CliRunner

from gpuledger.cli import app

DEPRECATED = "is deprecated and goes in the next release; use `gpuledger {new}`"


def _run(tmp_path, *args):
    return CliRunner().invoke(app, [*args, "--warehouse", str(tmp_path / "w.duckdb")])


def test_the_new_names_run_without_a_warning(tmp_path):
    nvml = _run(tmp_path, "ingest", "agent", "nvml", "--once")
    # no NVIDIA driver on this machine: the NVML agent's own one-line error, exit 1
    assert nvml.exit_code == 1 and "no NVIDIA driver on this host" in nvml.output
    assert "deprecated" not in nvml.output
    pods = _run(tmp_path, "ingest", "agent", "pod-resources", "--socket", str(tmp_path / "absent.sock"), "--once",
                "--timeout", "0.5")
    assert pods.exit_code == 1 and "PodResources List on unix://" in pods.output
    assert "deprecated" not in pods.output


def test_the_old_spellings_warn_then_run_the_same_command(tmp_path):
    for old, new in ((["ingest", "agent"], "ingest agent nvml"), (["agent"], "ingest agent nvml")):
        result = _run(tmp_path, *old, "--once")
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1, result.output
        assert lines[0] == f"gpuledger {' '.join(old)} {DEPRECATED.format(new=new)}"
        assert "no NVIDIA driver on this host" in lines[1]
    result = _run(tmp_path, "ingest", "pod-resources", "--socket", str(tmp_path / "absent.sock"), "--once",
                  "--timeout", "0.5")
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == (
        f"gpuledger ingest pod-resources {DEPRECATED.format(new='ingest agent pod-resources')}")
    assert "PodResources List on unix://" in result.output


def test_the_group_help_lists_both_agents_and_hides_the_old_name():
    result = CliRunner().invoke(app, ["ingest", "agent", "--help"])
    assert result.exit_code == 0 and "nvml" in result.output and "pod-resources" in result.output
    ingest = CliRunner().invoke(app, ["ingest", "--help"]).output
    assert "agent" in ingest and "pod-resources" not in ingest
