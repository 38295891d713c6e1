"""`gpuledger whatif schedule` with the quick lane's settings replaced for the run (issue 34).

The cached simulated months are named by the simulator's fingerprint, which covers the whole config
(`whatif/seeds.simulator_fingerprint`), so `whatif schedule -c CONFIG` with another lane builds every
month again (~10 min a seed at 1,024 GPUs). The lane does not change what is simulated, only how it
is replayed: this script sets `policy.enforcement.quick_lane` on the config the replays are given (the
outcome's provenance names it) and passes every other argument to `gpuledger` unchanged. It reproduced
every figure of the session-21 sweep on the seeds checked (BENCHMARKS.md, issue 34, session 21).

    .venv/bin/python benchmarks/whatif_lane.py --reserve-share 0.05 --reserve-share-whole 0.003 \\
        --max-running-per-project 16 -- whatif schedule --simulate-gpus 1024 --days 30 --seed 1 \\
        --seeds 1 --policies quick-lane --sim-dir SIM --no-progress --format json --out lane-s1.json
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reserve-share", type=float, help="quick_lane.reserve_share")
    parser.add_argument("--reserve-share-whole", type=float, help="quick_lane.reserve_share_whole")
    parser.add_argument("--max-running-per-project", type=int, help="quick_lane.max_running_per_project")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the arguments of `gpuledger`")
    args = parser.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    settings = {k: v for k, v in (("reserve_share", args.reserve_share),
                                  ("reserve_share_whole", args.reserve_share_whole),
                                  ("max_running_per_project", args.max_running_per_project)) if v is not None}

    from gpuledger.cli import app
    from gpuledger.cli import whatif as whatif_cli
    from gpuledger.config import QuickLane

    try:
        QuickLane.model_validate({**QuickLane().model_dump(), **settings})
    except ValueError as exc:  # pydantic's ValidationError: name the setting, no traceback
        parser.error(" ".join(line.strip() for line in str(exc).splitlines()[1:3]))
    load = whatif_cli._load

    def with_lane(*a, **k):  # the config every replay of the run is given (and its provenance names)
        cfg, *others = load(*a, **k)
        enforcement = cfg.policy.enforcement
        lane = QuickLane.model_validate({**enforcement.quick_lane.model_dump(), **settings})
        policy_cfg = cfg.policy.model_copy(update={"enforcement": enforcement.model_copy(update={"quick_lane": lane})})
        return (cfg.model_copy(update={"policy": policy_cfg}), *others)

    whatif_cli._load = with_lane
    print(f"quick_lane for this replay: {settings}", file=sys.stderr)
    app(rest, prog_name="gpuledger")


if __name__ == "__main__":
    main(sys.argv[1:])
