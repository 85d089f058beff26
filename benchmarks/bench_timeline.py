"""kx.timeline of 10,000 runs x 30 entries (300,000 entries): time and size in the notebook.

The store is tests/explore/many_runs.py's agent (plan, draft, search, critique; every fourth
run waits for a review between two sessions), written to a temporary LocalStorage. Figures:

  aggregated  `kx.timeline(journals)` and its mimebundle (what a notebook keeps), warm (Altair
              imported): wall time (target <= 3 s) and bytes (target <= 1 MB)
  first call  the same in a fresh process, Altair's import included (target <= 3 s)
  baseline    the same chart drawn bar by bar (what kx.timeline did before it aggregated:
              272,500 steps and 2,500 waits), measured in the same run: the ratios printed
              are the baseline's time and bytes over the aggregated chart's

Run from a checkout: `python benchmarks/bench_timeline.py` (about a minute), `--runs N` for
another size. Exit status 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "explore")]

from many_runs import write_runs  # noqa: E402

from kassette import LocalStorage  # noqa: E402
from kassette import explore as kx  # noqa: E402
from kassette.explore import _timeline  # noqa: E402

FIRST_CALL = """
import json, sys, time
from kassette import explore as kx
journals = kx.load(sys.argv[1])
began = time.perf_counter()
json.dumps(kx.timeline(journals)._repr_mimebundle_())
print(time.perf_counter() - began)
"""


def shown(journals: kx.Journals) -> tuple[float, int]:
    """Seconds to chart and serialise, and the bytes a notebook keeps."""
    began = time.perf_counter()
    text = json.dumps(kx.timeline(journals)._repr_mimebundle_())
    return time.perf_counter() - began, len(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        write_runs(folder, args.runs)
        journals = kx.load(LocalStorage(folder))
        shown(journals)  # Altair imported, caches warm
        warm = [shown(journals) for _ in range(3)]
        seconds, size = statistics.median(t for t, _ in warm), warm[0][1]
        env = {"PYTHONPATH": str(ROOT)}
        first = float(
            subprocess.run(
                [sys.executable, "-c", FIRST_CALL, f"file:{folder}"],
                capture_output=True,
                text=True,
                check=True,
                timeout=300,
                env=env,
            ).stdout
        )
        _timeline.MOST_BARS = 10**9  # type: ignore[misc]  # every bar, as before
        base_seconds, base_size = shown(journals)
    print(f"{args.runs:,} runs, {len(journals.entries):,} entries")
    print(f"aggregated  {seconds:6.2f} s  {size / 1e6:6.3f} MB   (targets: 3 s, 1 MB)")
    print(f"first call  {first:6.2f} s              (target: 3 s, Altair's import included)")
    print(f"baseline    {base_seconds:6.2f} s  {base_size / 1e6:6.3f} MB   (a bar per step)")
    ratio = f"{base_seconds / seconds:6.1f}x  {base_size / size:6.1f}x"
    print(f"ratio       {ratio}  (baseline / aggregated)")
    return 0 if seconds <= 3 and first <= 3 and size <= 1_000_000 else 1


if __name__ == "__main__":
    sys.exit(main())
