"""`make bench`: run the benchmarks, each as its own process, write bench/results.json and the
generated block of BENCHMARKS.md (issue 14).

    make bench                                   # everything at 256, 1,024 and 4,096 GPUs
    BENCH_SIZES=256,1024 make bench              # fewer sizes (BENCH_ONLY= to pick parts)
    BENCH_PART_ARGS='prometheus=--days-4096 2' make bench   # options for one part's script
    .venv/bin/python benchmarks/run.py --sizes 256,1024 --only analytics,prometheus
    .venv/bin/python benchmarks/run.py --render-only   # BENCHMARKS.md again from results.json

Parts: ingest, analytics (per size), prometheus (all sizes in one run), dashboard (1,024 GPUs),
browser (every dashboard page in Chromium, per size), storage and whatif (when their scripts take --json). A partial run merges into the existing
results.json: only the sections it measured are replaced, each with its own command and date.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import PARTS, SIZES, Context, header, merge_runs, parse_part_args, plan, run_part
from harness_datasets import build_command, build_missing, shown, to_build
from harness_report import render, replace_block
from harness_targets import evaluate

ROOT = HERE.parent


def _csv(text: str, allowed=None, cast=str) -> list:
    items = [cast(x.strip()) for x in text.split(",") if x.strip()]
    if allowed is not None:
        unknown = [x for x in items if x not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return items


def _sizes(text: str) -> list[int]:
    try:
        return _csv(text.replace("_", ""), cast=int)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes wants GPU counts separated by commas, e.g. 256,1024; got {text!r}")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_outputs(results: dict, results_path: Path, md_path: Path) -> None:
    """results.json first (the figures are safe even if the markdown cannot be updated)."""
    results["targets"] = evaluate(results)
    _write_atomic(results_path, json.dumps(results, indent=2, sort_keys=False) + "\n")
    if md_path.exists():
        _write_atomic(md_path, replace_block(md_path.read_text(), render(results), md_path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="make bench: run the benchmarks, write bench/results.json and the "
                                             "generated block of BENCHMARKS.md",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--sizes", type=_sizes, default=None, help="GPU counts (default: $BENCH_SIZES or 256,1024,4096)")
    ap.add_argument("--only", type=lambda t: _csv(t, PARTS), default=None,
                    help=f"parts to run (default: $BENCH_ONLY or all: {','.join(PARTS)})")
    ap.add_argument("--part-args", action="append", default=None, metavar="PART=ARGS",
                    help="extra options for one part's script, e.g. 'prometheus=--days-4096 2' (repeatable; "
                         "default: $BENCH_PART_ARGS, items separated by ';')")
    ap.add_argument("--dashboard-gpus", type=int, default=1024)
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results.json")
    ap.add_argument("--benchmarks-md", type=Path, default=ROOT / "BENCHMARKS.md")
    ap.add_argument("--scripts-dir", type=Path, default=HERE)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "data" / "bench")
    ap.add_argument("--raw-dir", type=Path, default=None, help="each script's JSON (default DATA_DIR/harness/raw)")
    ap.add_argument("--gpuledger", default=str(Path(sys.executable).parent / "gpuledger"))
    ap.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per part before it is killed")
    ap.add_argument("--render-only", action="store_true", help="only regenerate BENCHMARKS.md from results.json")
    ap.add_argument("--dry-run", action="store_true", help="print the parts and their commands; run nothing")
    ap.add_argument("--no-build", action="store_true",
                    help="skip the sizes whose week (data/bench/weekN.duckdb) is not built, instead of building it")
    args = ap.parse_args(argv)
    try:  # the environment's defaults, checked like the options
        if args.sizes is None:
            args.sizes = _sizes(os.environ.get("BENCH_SIZES") or ",".join(map(str, SIZES)))
        if args.only is None:
            args.only = _csv(os.environ.get("BENCH_ONLY") or ",".join(PARTS), PARTS)
    except argparse.ArgumentTypeError as exc:
        ap.error(f"$BENCH_SIZES / $BENCH_ONLY: {exc}")

    results = json.loads(args.results.read_text()) if args.results.exists() else {}
    if args.render_only:
        write_outputs(results, args.results, args.benchmarks_md)
        return 0
    items = args.part_args if args.part_args is not None else \
        [x for x in (os.environ.get("BENCH_PART_ARGS") or "").split(";") if x.strip()]
    try:
        part_args = parse_part_args(items)
    except ValueError as exc:
        ap.error(str(exc))
    ctx = Context(root=ROOT, part_args=part_args, scripts_dir=args.scripts_dir, data_dir=args.data_dir,
                  raw_dir=args.raw_dir or args.data_dir / "harness" / "raw", gpuledger=args.gpuledger,
                  timeout_s=args.timeout, dashboard_gpus=args.dashboard_gpus,
                  echo=lambda line: print(line, flush=True))
    if args.dry_run:
        building = [] if args.no_build else to_build(ctx, args.only, args.sizes)
        for n in building:
            print(f"dataset {n}: {shown(ctx, build_command(ctx, n))}")
        for part in plan(ctx, args.only, args.sizes, building=building):
            line = part.skip and f"skipped: {part.skip}" or shlex.join(
                [os.path.relpath(ctx.python, ROOT), os.path.relpath(part.script, ROOT), *part.args, "--json", "OUT"])
            print(f"{part.name}: {line}" + ("  (+ the warehouse it reads, chosen when it runs)" if part.prepare else ""))
        return 0
    invoked = shlex.join([os.path.relpath(sys.executable, ROOT), "benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])])
    command = f"make bench ({invoked})" if os.environ.get("MAKELEVEL") else invoked
    results.update(header(ctx, command))
    m = results["machine"]
    print(f"make bench: sizes {args.sizes}, parts {args.only}; {m['cores']} cores, {m['memory_gib']} GiB, "
          f"commit {results['commit']}", flush=True)
    build_failed = {} if args.no_build else build_missing(ctx, args.only, args.sizes)
    new_runs = []
    for part in plan(ctx, args.only, args.sizes, build_failed):
        new_runs.append(run_part(ctx, part, results))
        results["runs"] = merge_runs(results.get("runs") or [], new_runs[-1:])
        if new_runs[-1]["status"] != "skipped":  # a run that measured nothing does not become "the last run"
            write_outputs(results, args.results, args.benchmarks_md)  # after every part: a crash keeps the rest
    failed = [r["name"] for r in new_runs if r["status"] == "failed"]
    skipped = [r["name"] for r in new_runs if r["status"] == "skipped"]
    if len(skipped) == len(new_runs):
        print("\nnothing was measured (every part skipped): results and BENCHMARKS.md left as they were", flush=True)
        return 0
    met = [t for t in results["targets"] if t["met"]]
    print(f"\nwrote {os.path.relpath(args.results, ROOT)} and {os.path.relpath(args.benchmarks_md, ROOT)}: "
          f"{len(new_runs) - len(failed) - len(skipped)} parts ok, failed: {failed or 'none'}, skipped: "
          f"{skipped or 'none'}; targets met {len(met)} of {len(results['targets'])}", flush=True)
    for t in results["targets"]:
        if t["met"] is False:
            print(f"  missed: {t['target']}: {t['measured']:.4g} {t['unit']} against {t['limit']:g} "
                  f"({t['factor']:.2f}× the limit)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
