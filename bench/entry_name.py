"""The tiny proposer on a problem whose entry point is `solve`, with and without the renaming of proposer/naming.py.

A problem scaffolded by `vevo problems new`, given a pbe-like task (sum of squares, 8 tests, a seed one edit
away), then one short campaign per seed and per mode: "renamed" (what `--proposer tiny` does) and "as-is" (the
problem shown under its own name, as before). Prints the best score, whether it was solved, and the statuses.

    python bench/entry_name.py --iterations 10 --seeds 3
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from evolve.config import load_config
from evolve.runner import start
from problems.scaffold import new_problem
from proposer.backends import make_backend

TOML = '''id = "sq"
title = "sum of squares"
description = "Write solve(xs) for a list of integers xs: square each element, then take the sum of the elements. Return that number."
entry_point = "solve"
seed = "seed.py"
reference = "reference.py"
'''
CASES = [([1, 2, 3], 14), ([], 0), ([-2, 5], 29), ([1], 1), ([4, -1], 17), ([0, 1, 0], 1), ([3, 3], 18), ([-5], 25)]


def scaffold(root: Path) -> Path:
    folder = new_problem("sq", "io", root)
    (folder / "problem.toml").write_text(TOML + "".join(f"\n[[tests]]\nargs = [{xs}]\nexpected = {y}\n"
                                                        for xs, y in CASES))
    seed = (folder / "seed.py").read_text().replace("    return 0\n", "    y = sum(xs)\n    return y\n")
    (folder / "seed.py").write_text(seed)
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
                cfg = load_config(None, {"problems_dir": [str(probs)], "iterations": args.iterations, "seed": seed,
                                         "out": str(Path(tmp) / f"{mode}-{seed}")})
                _, s = start(cfg, progress=False, backend=backend)
                b = s["best"]["sq"]
                print(f"{mode:8s} {seed:4d}  {b['scalar']:.3f}  {str(bool(s['solved'])):6s}  {s['status_counts']}",
                      flush=True)


if __name__ == "__main__":
    main()
