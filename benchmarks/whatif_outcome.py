"""Issue 34's outcome table as markdown, from a result file of
`gpuledger whatif schedule --seeds N --simulate-gpus G --format json --out FILE`: the table (median
[min–max] per policy), then per seed the settlement weeks of one policy — capacity, owed, occupied
(allocated) and delivered GPU-hours, the ceiling min(owed, occupied) ÷ owed and the burst room
(occupied − owed) ÷ occupied — the arithmetic that bounds delivered ÷ owed and burst that month —
and, where the file has them, exempt work's GPU-hours above its team's owed and the ceiling with
exempt work where it ran (deliverable ÷ owed).

    .venv/bin/python benchmarks/whatif_outcome.py data/bench/outcome-256.json [--policy reclaim]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuledger.whatif import outcome


def markdown(doc: dict, policy: str) -> str:
    block = doc["outcome"]
    policies = tuple(block["policies"])
    titles = block["titles"]
    frame = outcome.table_frame(block["rows"], policies)
    lines = [f"Seeds {block['seeds']}; {block['regime']}; median [min–max].", "",
             "| figure | target | " + " | ".join(titles[p] for p in policies) + " |",
             "|---|---|" + "---:|" * len(policies)]
    for row in frame.iter_rows(named=True):
        lines.append(f"| {row['label']} | {row['target']} | " + " | ".join(row[p] for p in policies) + " |")
    heading = (f"Settlement weeks under `{policy}` (GPU-hours; ceiling = min(owed, occupied) ÷ owed; burst room "
               "= (occupied − owed) ÷ occupied, the most burst a week can hold with every team delivered what it "
               "was owed):")
    lines += ["", heading, "",
              "| seed | week from | capacity | owed | occupied | delivered | ceiling | burst room "
              "| exempt above owed | ceiling, exempt where it ran |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for seed, by_policy in block["settlement"].items():
        for w in by_policy.get(policy, []):
            owed = w["owed_gpu_hours"]
            occupied = w["allocated_gpu_hours"]
            ceiling = min(owed, occupied) / owed if owed else float("nan")
            room = max(0.0, occupied - owed) / occupied if occupied else float("nan")
            above = w.get("exempt_above_owed_gpu_hours")
            deliverable = w.get("deliverable_gpu_hours")
            exempt_cells = ("- | -" if above is None or deliverable is None or not owed
                            else f"{above:,.0f} | {deliverable / owed:.3f}")
            lines.append(f"| {seed} | {w['period_start']} | {w['capacity_gpu_hours']:,.0f} | {owed:,.0f} | "
                         f"{occupied:,.0f} | {w['delivered_gpu_hours']:,.0f} | {ceiling:.3f} | {room:.3f} | "
                         f"{exempt_cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("result", type=Path)
    ap.add_argument("--policy", default="reclaim", help="whose settlement weeks to show")
    args = ap.parse_args()
    print(markdown(json.loads(args.result.read_text()), args.policy))


if __name__ == "__main__":
    main()
