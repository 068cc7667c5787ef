"""The fast sampler and the lean training step against an older tree, in one run: the older tree comes from `git
archive` of --baseline (default: the parent of the last commit that changed proposer/backends/fast_sampler.py) and
both trees are timed in worker processes, interleaved, on the bundled model with one torch thread.

    python bench/perf/sampler_speed.py --repeats 5
    python bench/perf/sampler_speed.py --baseline 1939749^    # the top-p nucleus's change (2026-12-05)

Prints per case: a group of 8 sampled by the fast sampler (200 tokens a row, EOS off) at T = 1 with top-p 1, 0.95
and 0.9, at T = 0.7 with top-p 0.9, at T = 1 under a LoRA whose B is non-zero (learner_speed's case), and 4 + 4 rows
of two prompts (the multi-prompt layout); one lean training step under the LoRA on a campaign group of 8 at top-p
1 and 0.9. Then old -> new, the ratio, whether the sampled tokens and log-probs are the same, and the load average.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLER = "proposer/backends/fast_sampler.py"
# (name, temperature, top_p, layout)
CASES = [("sample T=1 top_p=1", 1.0, 1.0, "group"), ("sample T=1 top_p=0.95", 1.0, 0.95, "group"),
         ("sample T=1 top_p=0.9", 1.0, 0.9, "group"), ("sample T=0.7 top_p=0.9", 0.7, 0.9, "group"),
         ("sample T=1 lora", 1.0, 1.0, "lora"), ("sample T=1 two prompts", 1.0, 1.0, "two prompts"),
         ("step top_p=1", 1.0, 1.0, "step"), ("step top_p=0.9", 1.0, 0.9, "step")]
SHORT = "# sort the list, then keep the first three elements\n<answer_1>"


def worker(tree: str, repeats: int) -> dict:
    """Times every case in the tree at `tree` (imported from there, not from this checkout)."""
    sys.path[:0] = [tree, f"{tree}/bench/perf"]
    import torch
    from learner_speed import campaign_prompt, median_time  # the tree's own (the same in the baseline)

    from proposer.backends import make_backend
    from proposer.backends import fast_sampler as fs
    from proposer.backends.base import SamplingParams
    from proposer.training.lora import wrap_lora
    from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample

    torch.set_num_threads(1)
    be = make_backend("tiny", threads=1)
    prompt = campaign_prompt(be)
    ids, short = be.encode_prompt(prompt, 384)[0], be.encode_prompt(SHORT, 384)[0]
    group = be.generate([prompt], 8, SamplingParams(temperature=1.0, max_tokens=384, seed=1))[0]
    samples = [TrainSample.from_completion(c, a) for c, a in zip(group, [1, -1, .5, -.5, 0, 1, -1, 0])]
    torch.manual_seed(0)
    lora = wrap_lora(be.model, rank=8)  # the base model stays reachable: base_model(lora)'s own weights
    for n, p in lora.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0.0, 0.02)
    out = {"tree": tree, "completion_tokens": sum(len(s.completion_ids) for s in samples), "hash": {}}
    for name, temp, top_p, layout in CASES:
        if layout == "step":
            trainer = PolicyTrainer(lora, TrainConfig(lr=0.0, movement=False, temperature=temp, top_p=top_p))
            def fn(trainer=trainer):
                trainer.step(samples)
        else:
            rows = [ids] * 4 + [short] * 4 if layout == "two prompts" else [ids] * 8
            def fn(temp=temp, top_p=top_p, rows=rows, layout=layout):
                if layout == "lora":
                    return fs.sample(lora, rows, 200, temp, top_p, {-1}, torch.Generator().manual_seed(0))
                with lora.disable_adapter():
                    return fs.sample(lora, rows, 200, temp, top_p, {-1}, torch.Generator().manual_seed(0))
        first = fn()  # warm-up; a sampling case's tokens and log-probs hashed
        if layout != "step":
            out["hash"][name] = hashlib.sha1(repr(first).encode()).hexdigest()
        out[name] = median_time(fn, repeats)
    return out


def baseline_rev() -> str:
    """The parent of the last commit that changed the fast sampler."""
    last = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%H", "--", SAMPLER],
                          capture_output=True, text=True, check=True).stdout.strip()
    if not last:
        sys.exit(f"sampler_speed: no commit changes {SAMPLER} here; pass --baseline REV")
    return last + "^"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per case and tree (medians)")
    ap.add_argument("--rounds", type=int, default=2, help="worker processes per tree, interleaved")
    ap.add_argument("--baseline", default=None, help="git revision of the old code (default: before the last "
                    "change to the fast sampler)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeats)))
        return
    rev = args.baseline or baseline_rev()
    print(f"load average before: {os.getloadavg()}; baseline {rev}")
    from learner_speed import git_tree  # this script's folder is on sys.path

    with tempfile.TemporaryDirectory() as tmp:
        old = git_tree(rev, Path(tmp) / "old")
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for name, tree in (("old", old), ("new", ROOT)):
                r = subprocess.run([sys.executable, __file__, "--worker", str(tree), "--repeats", str(args.repeats)],
                                   capture_output=True, text=True, cwd=tree)
                if r.returncode:
                    sys.exit(f"sampler_speed: the {name} worker failed: {r.stderr.strip().splitlines()[-1]}")
                runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    for name, *_ in CASES:
        o = statistics.median(r[name] for r in runs["old"])
        n = statistics.median(r[name] for r in runs["new"])
        if name.startswith("sample"):
            same = "same" if runs["old"][0]["hash"][name] == runs["new"][0]["hash"][name] else "DIFFERENT"
            unit = f"{8 * 200 / o:6.0f} -> {8 * 200 / n:6.0f} tok/s, {same} tokens and log-probs"
        else:
            unit = f"{o:.3f} -> {n:.3f} s ({runs['new'][0]['completion_tokens']} completion tokens)"
        print(f"{name:24s} old -> new: {unit}  ({o / n:.2f}x)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
