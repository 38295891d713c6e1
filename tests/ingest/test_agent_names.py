"""The node agents' command names (issue 20 §1): `gpuledger ingest agent nvml` and `gpuledger
ingest agent pod-resources`; the old spellings (`ingest agent [OPTIONS]`, the top-level `agent`,
`ingest pod-resources`) still run the same command after one deprecation line on stderr."""

from __future__ import annotations

from typer.testing import CliRunner

from gpuledger.cli import app

REMOVED = "was removed (deprecated the release before): use `gpuledger {new}`"


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


def test_the_old_spellings_name_their_replacement_and_run_nothing(tmp_path):
    for old, said in ((["ingest", "agent"], f"gpuledger ingest agent [OPTIONS] {REMOVED.format(new='ingest agent nvml [OPTIONS]')}"),
                      (["agent"], f"gpuledger agent {REMOVED.format(new='ingest agent nvml')}"),
                      (["ingest", "pod-resources"], f"gpuledger ingest pod-resources "
                                                    f"{REMOVED.format(new='ingest agent pod-resources')}")):
        result = _run(tmp_path, *old, "--once")
        assert result.exit_code == 2, result.output
        assert result.output.strip() == said
        assert not (tmp_path / "w.duckdb").exists()


def test_the_group_help_lists_both_agents_and_hides_the_old_name():
    result = CliRunner().invoke(app, ["ingest", "agent", "--help"])
    assert result.exit_code == 0 and "nvml" in result.output and "pod-resources" in result.output
    ingest = CliRunner().invoke(app, ["ingest", "--help"]).output
    assert "agent" in ingest and "pod-resources" not in ingest
