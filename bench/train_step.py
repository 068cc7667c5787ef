"""How much of a training step do the advantage estimators cost?

Times one ``PolicyTrainer.step`` on a ~5M-parameter Llama (batch of 8 completions of ~256 tokens after a 64-token
prompt, CPU, PPO-clip + k3 KL to a frozen copy) against the estimator + set-reward computation for the same batch
(one group: G=8 completions, m=4 answers, d=16 tests, K=100 Dirichlet weights). Prints medians and the ratio;
the target is estimators < 1% of a step.

    .venv/bin/python bench/train_step.py [--repeats 5] [--est-repeats 200] [--threads N]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from proposer.estimators import ESTIMATORS
from proposer.training import PolicyTrainer, TrainConfig, TrainSample, batch_sequence_logprobs

G, M, D, K = 8, 4, 16, 100
PROMPT_LEN, COMPLETION_LEN, VOCAB = 64, 256, 4096


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed train steps (after one warm-up)")
    ap.add_argument("--est-repeats", type=int, default=200, help="timed estimator calls per estimator")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=5,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())

    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, VOCAB, (PROMPT_LEN,), generator=gen).tolist() for _ in range(G)]
    comps = [torch.randint(0, VOCAB, (COMPLETION_LEN - 8 * i,), generator=gen).tolist() for i in range(G)]
    behaviour = batch_sequence_logprobs(model, prompts, comps)
    adv = np.linspace(-1.5, 1.5, G)
    samples = [TrainSample(p, c, b, float(a)) for p, c, b, a in zip(prompts, comps, behaviour, adv)]
    trainer = PolicyTrainer(model, TrainConfig(lr=1e-5, minibatch=8), ref_model=PolicyTrainer.frozen_copy(model))
    trainer.step(samples)  # warm-up
    t_step = median_time(lambda: trainer.step(samples), args.repeats)
    no_kl = PolicyTrainer(model, TrainConfig(lr=1e-5, minibatch=8, kl_beta=0.0))
    no_kl.step(samples)
    t_no_kl = median_time(lambda: no_kl.step(samples), args.repeats)

    rng = np.random.default_rng(0)
    mats = [(rng.random((M, D)) < 0.5).astype(float) for _ in range(G)]
    gids = ["prompt-0"] * G
    print(f"model: Llama {n_params / 1e6:.2f}M params, {torch.get_num_threads()} threads; "
          f"batch {G} x ({PROMPT_LEN} prompt + ~{COMPLETION_LEN} completion) tokens")
    print(f"PolicyTrainer.step (PPO-clip + k3 KL, 1 update): median {t_step * 1e3:8.1f} ms over {args.repeats}")
    print(f"PolicyTrainer.step (kl_beta=0, no ref forward):  median {t_no_kl * 1e3:8.1f} ms over {args.repeats}")
    t_ref = min(t_step, t_no_kl)  # conservative: the cheaper step is the denominator
    est_rng = np.random.default_rng(1)
    for name, fn in ESTIMATORS.items():
        kw = {"rng": est_rng, "n_weights": K} if name == "vpo" else {}
        fn(mats, gids, **kw)
        t = median_time(lambda: fn(mats, gids, **kw), args.est_repeats)
        tag = "  <- target < 1%" if name == "vpo" else ""
        print(f"estimator {name:<10s} (G={G}, m={M}, d={D}{', K=%d' % K if name == 'vpo' else ''}): "
              f"median {t * 1e3:7.3f} ms = {100 * t / t_ref:6.3f}% of the cheaper step{tag}")


if __name__ == "__main__":
    main()
