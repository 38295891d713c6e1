"""One outcome file from several single-seed result files of `gpuledger whatif schedule
--simulate-gpus G --seed S --seeds 1 --format json --out FILE` (one process per seed, so a seed
that finished is kept when a later one does not): the outcome block over all of them, as
`--seeds N` would have written it (outcome.document on each file's per-policy summaries).

    .venv/bin/python benchmarks/whatif_merge_seeds.py m1024-s1.json m1024-s2.json ... --out m1024.json

A seed's files of different policies are joined first (e.g. the baselines and the managed
policies run as two processes), if they come from the same run options. ``--policies a,b`` keeps
only those policies of each file, so a seed run with every policy merges with seeds run with fewer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuledger.cli.whatif import LANE_SAID
from gpuledger.whatif import outcome
from gpuledger.whatif.model import ALL_POLICIES, QUICK


def kept(doc: dict, policies: tuple[str, ...]) -> dict:
    """``doc`` with only ``policies`` (in that order); a file without one of them is refused."""
    have = {p["policy"]: p for p in doc["policies"]}
    (seed,) = doc["outcome"]["seeds"] or [None]
    if missing := [p for p in policies if p not in have]:
        raise SystemExit(f"seed {seed} did not run {', '.join(missing)}")
    block = dict(doc["outcome"], settlement={s: {p: per[p] for p in policies}
                                             for s, per in doc["outcome"]["settlement"].items()})
    return dict(doc, policies=[have[p] for p in policies], outcome=block)


def combined(docs: list[dict]) -> list[dict]:
    """One file per seed: a seed's files of different policies (e.g. the baselines run apart from
    the managed policies) joined, in ALL_POLICIES' order; the same policy twice is refused."""
    by_seed: dict[int, dict] = {}
    for doc in docs:
        block = doc["outcome"]
        if len(block["seeds"]) != 1:
            raise SystemExit(f"a file of seeds {block['seeds']}: merge single-seed files (--seed S --seeds 1)")
        (seed,) = block["seeds"]
        if seed not in by_seed:
            by_seed[seed] = doc
            continue
        first = by_seed[seed]
        names = {p["policy"] for p in first["policies"]}
        if names & {p["policy"] for p in doc["policies"]} or block["sources"] != first["outcome"]["sources"]:
            raise SystemExit(f"seed {seed} is given twice")
        # only the file that ran policy 4 names its lane (LANE_SAID ...): the rest of the provenance must agree
        regimes = (block["regime"], first["outcome"]["regime"])
        if len({r.split(LANE_SAID)[0] for r in regimes}) != 1:
            raise SystemExit(f"the files come from different runs: {sorted(set(regimes))}")
        both = {p["policy"]: p for p in [*first["policies"], *doc["policies"]]}
        order = [name for name in ALL_POLICIES if name in both]
        settle = {**first["outcome"]["settlement"][str(seed)], **block["settlement"][str(seed)]}
        by_seed[seed] = dict(first, policies=[both[name] for name in order],
                             outcome=dict(first["outcome"], regime=max(regimes, key=len),
                                          settlement={str(seed): {n: settle[n] for n in order}}))
    return list(by_seed.values())


def merged(docs: list[dict], policies: tuple[str, ...] | None = None) -> dict:
    docs = combined(docs)
    if policies:
        docs = [kept(doc, policies) for doc in docs]
    per_seed, sources, regimes, policies = {}, {}, set(), None
    for doc in docs:
        block = doc["outcome"]
        (seed,) = block["seeds"]
        names = tuple(p["policy"] for p in doc["policies"])
        if policies is not None and names != policies:
            raise SystemExit(f"seed {seed} ran {names}, the others {policies}: merge runs of the same policies")
        policies = names
        per_seed[seed] = {p["policy"]: {**p["summary"], "settlement": block["settlement"][str(seed)][p["policy"]]}
                          for p in doc["policies"]}
        sources[seed] = block["sources"][str(seed)]
        regimes.add(block["regime"])
    # the provenance must agree, policy 4's lane (LANE_SAID ...) where it ran, and is said once
    lanes = {r for r in regimes if LANE_SAID in r} if QUICK in policies else set()
    if len({r.split(LANE_SAID)[0] for r in regimes}) != 1 or len(lanes) > 1:
        raise SystemExit(f"the files come from different runs: {sorted(regimes)}")
    out = dict(docs[0])
    regime = lanes.pop() if lanes else regimes.pop().split(LANE_SAID)[0]
    out["outcome"] = outcome.document(per_seed, policies, sources=sources, regime=regime)
    if "demand_regime" in docs[0]["outcome"]:
        out["outcome"]["demand_regime"] = docs[0]["outcome"]["demand_regime"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--policies", default=None, help="keep only these policies of each file, comma-separated")
    args = ap.parse_args()
    keep = tuple(p.strip() for p in args.policies.split(",") if p.strip()) if args.policies else None
    doc = merged([json.loads(p.read_text()) for p in args.results], keep)
    args.out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}: seeds {doc['outcome']['seeds']}")


if __name__ == "__main__":
    main()
