"""`gpuledger report balance` and the balance credited in `report fairshare`, through the CLI on a real
(simulated, 8 GPUs x 2 days) warehouse with a 12-hour window, so four settlement periods carry."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuledger import warehouse
from gpuledger.analytics.delivery_balance import next_balance, open_credit
from gpuledger.config_store import stored_config


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    d = tmp_path_factory.mktemp("balance")
    path = d / "w.duckdb"
    done = _cli("simulate", "warehouse", "--gpus", "8", "--days", "2", "--interval", "600", "--seed", "5", "-w", str(path))
    assert done.returncode == 0, done.stderr
    with warehouse.open_reader(path) as con:
        text = stored_config(con).content_text
    assert "window_days: 7" in text and "credit_fair_share: false" in text
    half_day = text.replace("window_days: 7", "window_days: 0.5")
    out = []
    for name, cfg in (("plain", half_day), ("credit", half_day.replace("credit_fair_share: false",
                                                                       "credit_fair_share: true"))):
        (d / f"{name}.yaml").write_text(cfg)
        copy = d / f"{name}.duckdb"
        copy.write_bytes(path.read_bytes())
        loaded = _cli("config", "load", "-c", str(d / f"{name}.yaml"), "-w", str(copy))
        assert loaded.returncode == 0, loaded.stderr
        out.append(copy)
    return out


def _json(done: subprocess.CompletedProcess) -> list[dict]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_the_history_carries_each_balance_into_the_next_period_and_nodes_sum_projects(wh):
    plain, _ = wh
    rows = _json(_cli("report", "balance", "--history", "--format", "json", "-w", str(plain)))
    by_node: dict[str, list[dict]] = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(r)
    assert len(by_node["acme"]) >= 4  # 2 days of 12-h periods (the first and last may be partial)
    carried_somewhere = False
    projects = {"ci-evals", "notebooks", "inference-serving", "search-ranking", "llm-posttrain", "llm-pretrain",
                "protein-design", "vision-eval", "vision-gen"}
    for node in projects:
        balance = 0.0
        for r in sorted(by_node[node], key=lambda r: r["period_start"]):
            assert r["gpu_hours_carried_in"] == pytest.approx(balance, abs=1e-6)
            balance = next_balance(balance, r["gpu_hours_owed"], r["gpu_hours_allocated"])
            assert r["gpu_hours_balance"] == pytest.approx(balance, abs=1e-6)
            carried_somewhere |= r["gpu_hours_carried_in"] > 0.01
    assert carried_somewhere, "no project carried a balance: the test would not see a wrong carry"
    # a node's balance is its projects' sum, period by period
    for r in by_node["acme"]:
        parts = [x["gpu_hours_balance"] for n in projects for x in by_node[n] if x["period_start"] == r["period_start"]]
        assert r["gpu_hours_balance"] == pytest.approx(sum(parts), abs=1e-6)
    # the default view is the running period only
    current = _json(_cli("report", "balance", "--format", "json", "-w", str(plain)))
    newest = max(r["period_start"] for r in rows)
    assert {r["period_start"] for r in current} == {newest}
    assert len(current) == len(by_node)


@pytest.mark.slow
def test_credit_ranks_fair_share_on_usage_less_the_open_balance(wh):
    plain, credit = wh
    plain_fs = {r["node"]: r for r in _json(_cli("report", "fairshare", "--format", "json", "-w", str(plain)))}
    credit_fs = {r["node"]: r for r in _json(_cli("report", "fairshare", "--format", "json", "-w", str(credit)))}
    current = {r["node"]: r for r in _json(_cli("report", "balance", "--format", "json", "-w", str(credit)))}
    credited = 0
    for node, r in credit_fs.items():
        if r["fs_rank"] is None:
            continue  # inner nodes sum their projects
        b = current[node]
        owes = open_credit(b["gpu_hours_carried_in"], b["gpu_hours_owed"], b["gpu_hours_allocated"])
        raw = plain_fs[node]["usage_raw_gpu_hours"]
        assert r["gpu_hours_decayed"] == pytest.approx(raw)  # the plain usage is still shown beside it
        assert r["usage_raw_gpu_hours"] == pytest.approx(max(0.0, raw - owes), abs=1e-6)
        credited += owes > 0.01
    assert credited, "no project had an open balance: nothing was credited"


@pytest.mark.slow
def test_an_unknown_node_is_a_usage_error_naming_the_choices(wh):
    plain, _ = wh
    done = _cli("report", "balance", "--node", "nope", "-w", str(plain))
    assert done.returncode == 2
    assert "'nope' is not in the org tree" in done.stderr and "vision-eval" in done.stderr
    assert "Traceback" not in done.stderr
