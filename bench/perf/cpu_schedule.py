"""CPU scheduling for tiny/hf proposers: generation (torch threads) and sandboxed evaluation compete for the
same 2 cores. Runs one short campaign per setting, same seed, and prints wall time per iteration and the
ratio to the first setting (measured in the same run).

    .venv/bin/python bench/perf/cpu_schedule.py [--iterations 40] [--suite pbe]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evolve.launch import runner  # noqa: E402
from evolve.config.schema import load_config  # noqa: E402

SETTINGS = [  # (label, pipeline_depth, torch threads)
    ("alternate: depth 0, torch 2 threads", 0, 2),
    ("overlap:   depth 1, torch 2 threads", 1, 2),
    ("overlap:   depth 1, torch 1 thread ", 1, 1),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--suite", default="pbe")
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="vevo-cpu-"))
    rows = []
    try:
        for label, depth, threads in SETTINGS:
            walls = []
            for r in range(a.repeats):
                out = base / f"{depth}-{threads}-{r}"
                cfg = load_config(None, {"suite": a.suite, "proposer.spec": "tiny", "search.iterations": a.iterations,
                                         "search.islands": 1, "search.answers": 4, "search.group": 2, "seed": 0,
                                         "executor.workers": 2, "search.pipeline_depth": depth,
                                         "proposer.threads": threads, "out": str(out), "search.retire_solved": False})
                t = time.perf_counter()
                _, summary = runner.start(cfg, progress=False)
                walls.append(time.perf_counter() - t)
            walls.sort()
            rows.append((label, walls[len(walls) // 2], summary["evaluations"]))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ref = rows[0][1]
    print(f"{a.iterations} iterations of suite {a.suite}, tiny proposer, G=2 x m=4, 2 sandbox workers")
    for label, wall, evals in rows:
        print(f"{label}: {wall:7.1f} s  {1000 * wall / a.iterations:7.0f} ms/iteration  "
              f"{evals:5d} evaluations  x{ref / wall:.2f} vs first")


if __name__ == "__main__":
    main()
