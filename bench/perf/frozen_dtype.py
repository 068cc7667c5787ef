"""What ``train.frozen_dtype bf16`` (a LoRA's frozen base products in bf16, proposer/backends/fast_logprobs.py) costs
in precision and saves in time, on a trained campaign's own groups: fp32 against bf16 in one process.

* **time**: each group's training forward + backward and its reference forward (the adapter off), summed over the
  groups, medians of --repeats passes, the two dtypes interleaved;
* **log-probs**: |bf16 - fp32| over every completion token (mean, 99th percentile, max), with a trained-looking
  adapter (B ~ N(0, 0.02));
* **updates**: two trainers from the same fresh adapter (the campaign's lr, KL and clip) each take one step per
  group, in order, on the same samples (the groups' tokens, advantages drawn once from a fixed seed): how far
  apart their adapters end, against how far they moved (``|bf16 - fp32| / |fp32 - start|``) and the cosine of
  the two moves, after 1, 10 and every step. Adam turns a tiny gradient into a full step in its sign, so the
  first step's gap is mostly such signs, and it shrinks as the updates add up. For scale, the same for a third
  trainer in fp32 through transformers' forward (``fast_forward`` off: the same function, fp32 rounding apart).

    python bench/perf/frozen_dtype.py [RUN ...] [--groups 30] [--repeats 3]

RUN: finished `vevo run --train ...` folders (default: one made here, 30 iterations of pbe-hard-heldout at G = 8,
seed 0, `--train vpo`). The bundled tiny model, a rank-8 LoRA, one torch thread.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.perf.group_forward import run_groups, tiny_lora  # noqa: E402
from proposer.backends import fast_logprobs  # noqa: E402
from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample  # noqa: E402


def timings(model, groups, bf16: bool) -> tuple[float, float]:
    """(training forward + backward, reference forward) summed over ``groups``."""
    params = [p for p in model.parameters() if p.requires_grad]
    train = ref = 0.0
    for prompt, comps in groups:
        for p in params:
            p.grad = None
        t = time.perf_counter()
        logp, _ = fast_logprobs.group_logprobs(model, prompt, comps, frozen_bf16=bf16)
        logp.sum().backward()
        train += time.perf_counter() - t
        t = time.perf_counter()
        with torch.no_grad(), model.disable_adapter():
            fast_logprobs.group_logprobs(model, prompt, comps, frozen_bf16=bf16)
        ref += time.perf_counter() - t
    return train, ref


def logprob_gap(model, groups) -> torch.Tensor:
    gaps = []
    with torch.no_grad():
        for prompt, comps in groups:
            a, mask = fast_logprobs.group_logprobs(model, prompt, comps)
            b, _ = fast_logprobs.group_logprobs(model, prompt, comps, frozen_bf16=True)
            gaps.append((a - b)[mask.bool()].abs())
    return torch.cat(gaps)


def trajectories(groups) -> list[tuple[int, str, float, float]]:
    """(step, other, |other - fp32| / |fp32 - start|, cosine of the two moves) along one step per group, for the
    bf16 trainer and the fp32 one through transformers' forward."""
    g = torch.Generator().manual_seed(1)
    advantages = [torch.randn(len(c), generator=g).tolist() for _, c in groups]
    arms = {"fp32": {}, "bf16": dict(frozen_bf16=True), "fp32 via transformers": dict(fast_forward=False)}
    paths = {}
    for name, kw in arms.items():
        trainer = PolicyTrainer(tiny_lora(0.0), TrainConfig(lr=1e-3, minibatch=64, kl_beta=1e-3, **kw))
        start = torch.cat([p.detach().flatten().clone() for p in trainer.params])
        paths[name] = []
        for (prompt, comps), adv in zip(groups, advantages):
            trainer.step([TrainSample(prompt, c, None, a) for c, a in zip(comps, adv)])
            paths[name].append(torch.cat([p.detach().flatten().clone() for p in trainer.params]) - start)
    out = []
    for i, a in enumerate(paths["fp32"]):
        if i in (0, 9) or i == len(groups) - 1:
            for other in ("bf16", "fp32 via transformers"):
                b = paths[other][i]
                out.append((i + 1, other, float((b - a).norm() / a.norm()),
                            float(torch.nn.functional.cosine_similarity(a, b, 0))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--groups", type=int, default=30, help="the first N groups of the runs")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}; bf16 in hardware here (AMX or AVX512-BF16): "
          f"{fast_logprobs.frozen_bf16_pays()}")
    with tempfile.TemporaryDirectory() as tmp:
        runs = args.runs
        if not runs:
            runs = [Path(tmp) / "run"]
            made = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--suite", "pbe-hard-heldout",
                                   "--proposer", "tiny", "--iterations", "30", "--group", "8", "--answers", "4",
                                   "--seed", "0", "--train", "vpo", "--out", str(runs[0])],
                                  cwd=ROOT, capture_output=True, text=True)
            if made.returncode:
                sys.exit(f"frozen_dtype: the run to measure failed: {(made.stderr.strip().splitlines() or ['?'])[-1]}")
        groups = run_groups(runs, "frozen_dtype")[: args.groups]
    print(f"{len(groups)} groups, {sum(len(c) for _, cs in groups for c in cs)} completion tokens")
    model = tiny_lora(0.02)
    t = {False: [], True: []}
    for _ in range(args.repeats):
        for bf16 in (False, True):
            t[bf16].append(timings(model, groups, bf16))
    (tf, rf), (tb, rb) = ((statistics.median(x[0] for x in t[k]), statistics.median(x[1] for x in t[k]))
                          for k in (False, True))
    print(f"training forward + backward: fp32 {tf:.2f} s, bf16 {tb:.2f} s ({tf / tb:.2f}x); reference forward: "
          f"fp32 {rf:.2f} s, bf16 {rb:.2f} s ({rf / rb:.2f}x)  (medians of {args.repeats})")
    gap = logprob_gap(model, groups)
    print(f"|log-prob bf16 - fp32| over {gap.numel()} tokens: mean {float(gap.mean()):.2e}, p99 "
          f"{float(gap.quantile(0.99)):.2e}, max {float(gap.max()):.2e}")
    for step, other, rel, cos in trajectories(groups):
        print(f"after step {step:3d}: |{other} - fp32| / |fp32 - start| = {rel:.2e}, cosine of the moves {cos:.6f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
