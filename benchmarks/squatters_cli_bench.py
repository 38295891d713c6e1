"""`gpuledger report squatters` (idle_60m) as the user waits, against the process-start floor and
the same PromQL against a real Prometheus, all alternated run by run (issue 41: CLI <= 3x a bare
`python -c "import typer"`, and >= 5x faster than the PromQL where that takes longer than the floor).

    .venv/bin/python benchmarks/squatters_cli_bench.py --warehouse W.duckdb [--tsdb DIR] \
        [--before-tree DIR] [--runs 9] [--json OUT]

W is a materialized warehouse (`gpuledger pipelines run-once`, as benchmarks/prometheus_bench.py
makes weekN-materialized.duckdb); DIR a TSDB of the same samples (prom_data.build_tsdb). The PromQL
is prometheus_bench's idle question (prom_compare.PROMQL["idle"]) at the warehouse's last squatting
evaluation, timed as its HTTP round trip after one cold query. ``--before-tree`` times another
checkout's CLI too (a `git archive` of a commit with the package-dir folders linked under gpuledger/:
warehouse, pipelines, enforce, dashboards), run with that tree first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cli_timing as ct

BIN = Path(sys.executable).parent


def _last_evaluation(path: Path):
    from gpuledger.warehouse.engine import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        evaluated = con.execute("SELECT max(evaluated_at) FROM squatting_evaluations").fetchall()[0][0]
        threshold = json.loads(con.execute("SELECT content_json FROM config_versions ORDER BY version DESC LIMIT 1")
                               .fetchall()[0][0])["policy"]["squatting"]["idle_threshold_ratio"]
    finally:
        con.close()
    return evaluated, threshold


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", type=Path, required=True)
    ap.add_argument("--tsdb", type=Path, default=None)
    ap.add_argument("--before-tree", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    ct.compile_sources(HERE.parent)
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(args.warehouse), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("GPULEDGER_CONFIG", None)
    cli = [str(BIN / "gpuledger"), "report", "squatters"]
    variants = {"floor": (ct.FLOOR, env), "cli": (cli, env)}
    if args.before_tree:
        ct.compile_sources(args.before_tree)
        variants["cli_before"] = (cli, {**env, "PYTHONPATH": str(args.before_tree)})
    prom = promql = at = None
    if args.tsdb:
        import prom_compare as pc

        evaluated, threshold = _last_evaluation(args.warehouse)
        promql, at = pc.PROMQL["idle"].format(thr=threshold), pc.epoch(evaluated) - 0.001
        prom = pc.Prometheus(args.tsdb, args.tsdb.parent / f"{args.tsdb.name}.bench.log")
        prom.query(promql, at)  # cold: its blocks read once, as the harness's first (untimed) ask
    wall = {k: [] for k in [*variants, *(["promql"] if prom else [])]}
    cpu = {k: [] for k in variants}
    loads = [os.getloadavg()[0]]
    try:
        for _ in range(args.runs):
            for name, (argv, run_env) in variants.items():
                w, c, err = ct.run_once(argv, run_env)
                if ct.COMPUTED_NOTE in err:
                    raise SystemExit(f"{name}: the answer was computed, not read: {err.strip()}")
                wall[name].append(w)
                cpu[name].append(c)
            if prom:
                began = time.perf_counter()
                prom.query(promql, at)
                wall["promql"].append(time.perf_counter() - began)
            loads.append(os.getloadavg()[0])
    finally:
        if prom:
            prom.stop()
    med = statistics.median
    out = {"warehouse": str(args.warehouse), "runs": args.runs, "load_1min": [round(x, 2) for x in loads],
           "wall_s": {k: round(med(v), 4) for k, v in wall.items()},
           "cpu_s": {k: round(med(v), 4) for k, v in cpu.items()}, "promql": promql}
    floor_w, floor_c = med(wall["floor"]), med(cpu["floor"])
    for name in variants:
        if name != "floor":
            out[f"{name}_over_floor"] = round(med(wall[name]) / floor_w, 2)
            out[f"{name}_over_floor_cpu"] = round(med(cpu[name]) / floor_c, 2)
            if prom:
                out[f"promql_over_{name}"] = round(med(wall["promql"]) / med(wall[name]), 2)
    if prom:
        out["promql_over_floor"] = round(med(wall["promql"]) / floor_w, 2)
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
