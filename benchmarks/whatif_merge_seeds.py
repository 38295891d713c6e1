"""One outcome file from several single-seed result files of `gpuledger whatif schedule
--simulate-gpus G --seed S --seeds 1 --format json --out FILE` (one process per seed, so a seed
that finished is kept when a later one does not): the outcome block over all of them, as
`--seeds N` would have written it (outcome.document on each file's per-policy summaries).

    .venv/bin/python benchmarks/whatif_merge_seeds.py m1024-s1.json m1024-s2.json ... --out m1024.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuledger.whatif import outcome


def merged(docs: list[dict]) -> dict:
    per_seed, sources, regimes, policies = {}, {}, set(), None
    for doc in docs:
        block = doc["outcome"]
        if len(block["seeds"]) != 1:
            raise SystemExit(f"a file of seeds {block['seeds']}: merge single-seed files (--seed S --seeds 1)")
        (seed,) = block["seeds"]
        if seed in per_seed:
            raise SystemExit(f"seed {seed} is given twice")
        names = tuple(p["policy"] for p in doc["policies"])
        if policies is not None and names != policies:
            raise SystemExit(f"seed {seed} ran {names}, the others {policies}: merge runs of the same policies")
        policies = names
        per_seed[seed] = {p["policy"]: {**p["summary"], "settlement": block["settlement"][str(seed)][p["policy"]]}
                          for p in doc["policies"]}
        sources[seed] = block["sources"][str(seed)]
        regimes.add(block["regime"])
    if len(regimes) != 1:
        raise SystemExit(f"the files come from different runs: {sorted(regimes)}")
    out = dict(docs[0])
    out["outcome"] = outcome.document(per_seed, policies, sources=sources, regime=regimes.pop())
    if "demand_regime" in docs[0]["outcome"]:
        out["outcome"]["demand_regime"] = docs[0]["outcome"]["demand_regime"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    doc = merged([json.loads(p.read_text()) for p in args.results])
    args.out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}: seeds {doc['outcome']['seeds']}")


if __name__ == "__main__":
    main()
