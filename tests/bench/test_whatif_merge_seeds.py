"""benchmarks/whatif_merge_seeds.py: single-seed result files merged give the outcome block that one
`--seeds N` run gives (the same summaries, min / median / max over the same seeds), and files of
different policies are refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import whatif_merge_seeds  # noqa: E402


def _run(tmp_path, *extra) -> dict:
    args = ["whatif", "schedule", "--simulate-gpus", "8", "--days", "1", "--policies", "priority,quick-lane",
            "--sim-dir", str(tmp_path / "sims"), "--no-progress", "--format", "json", *extra]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _numbers(rows: list[dict]) -> list[float]:
    return [v[k] for r in rows for p in ("priority", "quick-lane") if (v := r.get(p)) for k in ("min", "median", "max")]


@pytest.mark.slow
def test_single_seed_files_merge_into_the_seeds_outcome(tmp_path):
    both = _run(tmp_path, "--seeds", "2")
    one, two = _run(tmp_path, "--seed", "1", "--seeds", "1"), _run(tmp_path, "--seed", "2", "--seeds", "1")
    merged = whatif_merge_seeds.merged([two, one])["outcome"]  # any order: seeds sort
    assert merged["seeds"] == [1, 2]
    # the files keep 6 decimals, so a median of two rounded values may differ in the last one
    assert _numbers(merged["rows"]) == pytest.approx(_numbers(both["outcome"]["rows"]), abs=2e-6)
    assert [r["figure"] for r in merged["rows"]] == [r["figure"] for r in both["outcome"]["rows"]]
    assert merged["settlement"] == both["outcome"]["settlement"]
    # the two seeds differ somewhere, so the merge is not one seed's figures twice
    assert one["outcome"]["rows"] != two["outcome"]["rows"]
    with pytest.raises(SystemExit, match=r"a file of seeds \[1, 2\]: merge single-seed files"):
        whatif_merge_seeds.merged([one, both])
    with pytest.raises(SystemExit, match="seed 1 is given twice"):
        whatif_merge_seeds.merged([one, one])
    other = _run(tmp_path, "--seed", "3", "--seeds", "1", "--policies", "priority")
    with pytest.raises(SystemExit, match="merge runs of the same policies"):
        whatif_merge_seeds.merged([one, other])
    # one seed's policies run as two processes join into the file one process writes
    apart = [_run(tmp_path, "--seed", "1", "--seeds", "1", "--policies", name) for name in ("quick-lane", "priority")]
    joined = whatif_merge_seeds.merged(apart)
    assert [p["policy"] for p in joined["policies"]] == ["priority", "quick-lane"]
    assert joined["outcome"]["rows"] == whatif_merge_seeds.merged([one])["outcome"]["rows"]
    assert joined["outcome"]["settlement"] == one["outcome"]["settlement"]
    # only the quick-lane file names the lane (the defaults: no reserve, 4 per project); the join keeps it
    assert "quick lane" in apart[0]["outcome"]["regime"] and "quick lane" not in apart[1]["outcome"]["regime"]
    assert joined["outcome"]["regime"] == one["outcome"]["regime"]
    assert joined["outcome"]["regime"].endswith("quick lane: no reserve, at most 4 lane jobs per project")
    # policy 4 replayed with another lane is another run: refused, whichever file it comes in
    reserved = _run(tmp_path, "--seed", "2", "--seeds", "1", "--lane-reserve", "0.2")
    assert reserved["outcome"]["regime"].endswith("quick lane: reserve 0.2 of each pool, at most 4 lane jobs per project")
    with pytest.raises(SystemExit, match="the files come from different runs"):
        whatif_merge_seeds.merged([one, reserved])
    # kept to the policies they share, they merge: seed 1's priority column beside seed 3's
    shared = whatif_merge_seeds.merged([one, other], ("priority",))["outcome"]
    assert shared["seeds"] == [1, 3] and set(shared["settlement"]["1"]) == {"priority"}
    assert shared["regime"] == other["outcome"]["regime"]  # without policy 4 its lane is not said
    assert all(set(r) - {"figure", "label", "kind", "target"} == {"priority"} for r in shared["rows"])
    with pytest.raises(SystemExit, match="seed 3 did not run quick-lane"):
        whatif_merge_seeds.merged([one, other], ("priority", "quick-lane"))
