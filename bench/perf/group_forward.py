"""The trainer's group forward (`fast_logprobs.group_logprobs`: a step's training forward and backward, and its
reference forward) on a trained campaign's own groups, this tree against an older one, in the same run.

Why the run's own groups: what a step costs depends on their shapes. Completions of one group differ in length (a
row cut at the token budget beside short ones), and attention padded to the longest row pays for every row at
that length; a sampled bench group is nearly even. Each tree times the same groups on the bundled tiny model with a
rank-8 LoRA (one torch thread, the campaign's), in a process of its own, the trees interleaved; the medians of
--repeats processes are compared, and so are the two trees' log-probs (they agree to fp32 rounding, not bits).
Both trees run in fp32 (``train.frozen_dtype fp32``); bench/perf/frozen_dtype.py sets fp32 against bf16.

    python bench/perf/group_forward.py --baseline REV [RUN ...] [--repeats 3]

RUN: finished `vevo run --train ...` folders (default: one made here, 30 iterations of pbe-hard-heldout at G = 8,
seed 0, `--train vpo`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_groups(runs: list[Path], who: str = "group_forward") -> list[tuple[list[int], list[list[int]]]]:
    """(prompt ids, completions' ids) of every group of ``runs`` with a non-empty completion (the trainer drops
    empty ones), as a step trains on them."""
    sys.path.insert(0, str(ROOT))
    from evolve.archive import ARCHIVE_NAME, Archive

    out = []
    for run in runs:
        if not (run / ARCHIVE_NAME).is_file():
            sys.exit(f"{who}: {run} is not a run folder (no {ARCHIVE_NAME} in it)")
        with Archive(run / ARCHIVE_NAME, readonly=True) as a:
            for g in a.groups_by_id(a.group_ids()):
                comps = [c for c in g.completions if c.token_ids and c.prompt_token_ids]
                if comps:
                    out.append((list(comps[0].prompt_token_ids), [list(c.token_ids) for c in comps]))
    return out


def attention_waste(groups: list[tuple[list[int], list[list[int]]]]) -> float:
    """The completion rows' attention work padded to each group's longest row over the work of the rows alone
    (query positions x keys seen), summed over the groups."""
    padded = own = 0
    for prompt, comps in groups:
        p, n_in = len(prompt), max(len(c) for c in comps) - 1
        padded += len(comps) * n_in * (p + n_in)
        own += sum((len(c) - 1) * (p + len(c) - 1) for c in comps)
    return padded / own if own else 1.0


def tiny_lora(b_std: float = 0.02):
    """The bundled tiny model (CPU, one thread) in a rank-8 LoRA, its B drawn from N(0, b_std) so a trained adapter
    acts (0: a fresh adapter, B = 0), from seed 0; imported from whichever tree is first on ``sys.path``."""
    import torch

    from proposer.backends import make_backend
    from proposer.training.lora import wrap_lora

    be = make_backend("tiny", device="cpu", threads=1)
    torch.manual_seed(0)
    model = wrap_lora(be.model, rank=8)
    for name, p in model.named_parameters():
        if "lora_B" in name and b_std:
            p.data.normal_(0.0, b_std)
    return model


def worker(tree: Path, groups_file: Path, out: Path, inner: int) -> None:
    """In ``tree``'s code: each group's forward + backward and reference forward (no gradients, the adapter off),
    medians of ``inner``; the first pass's log-probs to ``out`` + ``.pt``."""
    sys.path.insert(0, str(tree))
    import torch

    torch.set_num_threads(1)
    from proposer.backends import fast_logprobs

    groups = json.loads(groups_file.read_text())
    model = tiny_lora(0.02)  # a trained adapter acts: B is not zero
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    logps, train, ref = [], [], []
    for prompt, comps in groups:
        tt, tr = [], []
        for i in range(inner):
            for p in params:
                p.grad = None
            t = time.perf_counter()
            logp, _ = fast_logprobs.group_logprobs(model, prompt, comps)
            logp.sum().backward()
            tt.append(time.perf_counter() - t)
            t = time.perf_counter()
            with torch.no_grad(), model.disable_adapter():  # as PolicyTrainer's reference: the base model
                fast_logprobs.group_logprobs(model, prompt, comps)
            tr.append(time.perf_counter() - t)
            if i == 0:
                logps.append(logp.detach())
        train.append(statistics.median(tt))
        ref.append(statistics.median(tr))
    torch.save(logps, str(out) + ".pt")
    out.write_text(json.dumps({"train": train, "ref": ref}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--baseline", help="the older tree's git revision (required)")
    ap.add_argument("--repeats", type=int, default=3, help="processes per tree (interleaved)")
    ap.add_argument("--inner", type=int, default=3, help="timings per group in a process")
    ap.add_argument("--worker", nargs=3, metavar=("TREE", "GROUPS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(Path(args.worker[0]), Path(args.worker[1]), Path(args.worker[2]), args.inner)
    if not args.baseline:
        ap.error("--baseline REV is required (the tree to compare with)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from learner_speed import git_tree

    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_p = Path(tmp)
        runs = args.runs
        if not runs:
            runs = [tmp_p / "run"]
            subprocess.run([str(Path(sys.executable).parent / "vevo"), "run", "--suite", "pbe-hard-heldout", "--proposer",
                            "tiny", "--iterations", "30", "--group", "8", "--answers", "4", "--seed", "0", "--train",
                            "vpo", "--out", str(runs[0]), "--quiet"], check=True, capture_output=True)
        groups = run_groups(runs)
        if not groups:
            sys.exit("group_forward: no groups with completions in " + ", ".join(map(str, runs)))
        gfile = tmp_p / "groups.json"
        gfile.write_text(json.dumps(groups))
        trees = {"this tree": ROOT, f"baseline {args.baseline}": git_tree(args.baseline, tmp_p / "baseline")}
        times: dict[str, list[dict]] = {k: [] for k in trees}
        for r in range(args.repeats):
            for label, tree in trees.items():
                out = tmp_p / f"{r}-{len(times[label])}-{tree.name}.json"
                subprocess.run([sys.executable, __file__, "--worker", str(tree), str(gfile), str(out), "--inner",
                                str(args.inner)], check=True, cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)))
                times[label].append({**json.loads(out.read_text()), "logps": str(out) + ".pt"})
        import torch

        new, old = (torch.load(times[k][0]["logps"]) for k in trees)
        diff = max(float((a - b).abs().max()) for a, b in zip(new, old))
    toks = sum(len(p) + sum(len(c) for c in cs) for p, cs in groups)
    print(f"{len(groups)} groups of {', '.join(map(str, runs))}: {toks} tokens; attention padded to each group's "
          f"longest row would do {attention_waste(groups):.2f}x the rows' own")
    total = {k: {part: statistics.median(sum(t[part]) for t in v) for part in ("train", "ref")}
             for k, v in times.items()}
    (a, b) = trees
    for part, name in (("train", "training forward + backward"), ("ref", "reference forward (no gradients)")):
        per = sorted(statistics.median(x) / statistics.median(y) for x, y in zip(
            zip(*(t[part] for t in times[a])), zip(*(t[part] for t in times[b]))))
        print(f"  {name}: {a} {total[a][part]:.2f} s, {b} {total[b][part]:.2f} s "
              f"({total[a][part] / total[b][part]:.2f}x; per group {per[0]:.2f}x to {per[-1]:.2f}x, "
              f"median {statistics.median(per):.2f}x)")
    print(f"  log-probs: the trees agree within {diff:.1e}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
