"""The tiny proposer on a problem whose entry point is `solve`, with and without the renaming of proposer/answers/naming.py.

The problem `vevo problems new sq --kind io` writes (entry point `solve`, sum of squares), then one short
campaign per seed and per mode: "renamed" (what `--proposer tiny` does) and "as-is" (the
problem shown under its own name, as before). Prints the best score, whether it was solved, and the statuses.

    python bench/perf/entry_name.py --iterations 10 --seeds 3
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from evolve.config.schema import load_config
from evolve.launch.runner import start
from problems.scaffold import new_problem
from proposer.backends import make_backend


def scaffold(root: Path) -> Path:
    new_problem("sq", "io", root)  # entry point solve, sum of squares, 3 tests, seed `return 0`
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        probs = scaffold(Path(tmp) / "probs")
        print("mode     seed  best   solved  statuses")
        for mode in ("renamed", "as-is"):
            for seed in range(args.seeds):
                backend = make_backend("tiny", seed=seed)
                if mode == "as-is":
                    backend.entry_name = None
                cfg = load_config(None, {"problems_dir": [str(probs)], "search.iterations": args.iterations,
                                         "seed": seed, "out": str(Path(tmp) / f"{mode}-{seed}")})
                _, s = start(cfg, progress=False, backend=backend)
                b = s["best"]["sq"]
                print(f"{mode:8s} {seed:4d}  {b['scalar']:.3f}  {str(bool(s['solved'])):6s}  {s['status_counts']}",
                      flush=True)


if __name__ == "__main__":
    main()
