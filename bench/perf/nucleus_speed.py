"""Top-p sampling and training with the partial-sort nucleus against the code before it (one full sort per row), in
one run: the older tree comes from `git archive` of --baseline (default: the commit before the nucleus landed) and
both trees are timed in worker processes, interleaved, on the bundled model with one torch thread.

    python bench/perf/nucleus_speed.py --repeats 5

Prints per tree: a group of 8 sampled by the fast sampler (200 tokens a row, EOS off) at T = 1 with top-p 1 (no
nucleus), 0.95 and 0.9, and at T = 0.7 with top-p 0.9; one lean training step on a campaign group of 8 at top-p 1
and 0.9; the ratios old / new and the load average.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = [("sample T=1 top_p=1", 1.0, 1.0), ("sample T=1 top_p=0.95", 1.0, 0.95), ("sample T=1 top_p=0.9", 1.0, 0.9),
         ("sample T=0.7 top_p=0.9", 0.7, 0.9), ("step top_p=1", 1.0, 1.0), ("step top_p=0.9", 1.0, 0.9)]


def worker(tree: str, repeats: int) -> dict:
    """Times every case in the tree at `tree` (imported from there, not from this checkout)."""
    sys.path[:0] = [tree, f"{tree}/bench/perf"]
    import torch
    from learner_speed import campaign_prompt, median_time  # the tree's own (the same in the baseline)

    from proposer.backends import make_backend
    from proposer.backends import fast_sampler as fs
    from proposer.backends.base import SamplingParams
    from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample

    torch.set_num_threads(1)
    be = make_backend("tiny", threads=1)
    prompt = campaign_prompt(be)
    ids = be.encode_prompt(prompt, 384)[0]
    group = be.generate([prompt], 8, SamplingParams(temperature=1.0, max_tokens=384, seed=1))[0]
    samples = [TrainSample.from_completion(c, a) for c, a in zip(group, [1, -1, .5, -.5, 0, 1, -1, 0])]
    out = {"tree": tree, "completion_tokens": sum(len(s.completion_ids) for s in samples)}
    for name, temp, top_p in CASES:
        if name.startswith("sample"):
            def fn(temp=temp, top_p=top_p):
                fs.sample(be.model, [ids] * 8, 200, temp, top_p, {-1}, torch.Generator().manual_seed(0))
        else:
            trainer = PolicyTrainer(be.model, TrainConfig(lr=0.0, movement=False, temperature=temp, top_p=top_p))
            def fn(trainer=trainer):
                trainer.step(samples)
        fn()  # warm-up
        out[name] = median_time(fn, repeats)
    return out


def baseline_rev() -> str:
    """The parent of the commit that added ``nucleus`` to proposer/backends/logprobs.py."""
    added = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%H", "-S", "def nucleus(", "--",
                            "proposer/backends/logprobs.py"], capture_output=True, text=True, check=True).stdout.split()
    if not added:
        sys.exit("nucleus_speed: no commit adds `def nucleus(` here; pass --baseline REV")
    return added[-1] + "^"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per case and tree (medians)")
    ap.add_argument("--rounds", type=int, default=2, help="worker processes per tree, interleaved")
    ap.add_argument("--baseline", default=None, help="git revision of the old code (default: before the nucleus)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeats)))
        return
    rev = args.baseline or baseline_rev()
    print(f"load average before: {os.getloadavg()}; baseline {rev}")
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(old, filter="data")
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for name, tree in (("old", old), ("new", ROOT)):
                r = subprocess.run([sys.executable, __file__, "--worker", str(tree), "--repeats", str(args.repeats)],
                                   capture_output=True, text=True, cwd=tree)
                if r.returncode:
                    sys.exit(f"nucleus_speed: the {name} worker failed: {r.stderr.strip().splitlines()[-1]}")
                runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    for name, _, _ in CASES:
        o = statistics.median(r[name] for r in runs["old"])
        n = statistics.median(r[name] for r in runs["new"])
        unit = f"{8 * 200 / o:6.0f} -> {8 * 200 / n:6.0f} tok/s" if name.startswith("sample") else \
            f"{o:.3f} -> {n:.3f} s ({runs['new'][0]['completion_tokens']} completion tokens)"
        print(f"{name:24s} old -> new: {unit}  ({o / n:.2f}x)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
