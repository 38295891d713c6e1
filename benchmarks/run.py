"""Run every benchmark module present in benchmarks/ (``make bench``): analytics_bench, and
ingest_bench when it exists. Each module's ``main()`` prints its own markdown table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["ingest_bench", "analytics_bench"]


def main() -> int:
    sys.path.insert(0, str(HERE.parent))
    found = [HERE / f"{name}.py" for name in ORDER if (HERE / f"{name}.py").exists()]
    found += sorted(p for p in HERE.glob("*_bench.py") if p.stem not in ORDER)
    for path in found:
        print(f"\n## {path.stem}\n", flush=True)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
