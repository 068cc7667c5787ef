"""How much of a training step do the advantage estimators cost, and how much memory do checkpointing and
micro-batches save?

Times one ``PolicyTrainer.step`` on a ~5M-parameter Llama (batch of 8 completions of ~256 tokens after a 64-token
prompt, CPU, PPO-clip + k3 KL to a frozen copy) against the estimator + set-reward computation for the same batch
(one group: G=8 completions, m=4 answers, d=16 tests, K=100 Dirichlet weights). Prints medians and the ratio;
the target is estimators < 1% of a step.

    .venv/bin/python bench/perf/train_step.py [--repeats 5] [--est-repeats 200] [--threads N]

``--memory``: peak memory of one PolicyTrainer step of a ~100M-parameter Llama (12 layers, d 768, vocab 16384,
tied; batch of 8 completions of 192 tokens after 64-token prompts) run plainly vs with gradient checkpointing
and micro-batches of 1, printed as a ratio. Each variant runs in a fresh process; on CPU the peak is the
resident-set high-water mark (VmHWM, reset through /proc/self/clear_refs after a warm-up step so AdamW's state
and the model are in the baseline, with glibc returning freed blocks of >= 64 KiB at once), on CUDA
``torch.cuda.max_memory_allocated``; both are reported above the baseline, i.e. activations + gradients.
(tracemalloc cannot see torch's allocator, which is why RSS.)

    .venv/bin/python bench/perf/train_step.py --memory [--threads N] [--small]

Measured on the shared 2-core dev box (CPU, 97.5M params, 2,048 tokens, --threads 2): plain 1795.7 MiB in
98 s, checkpointing + micro-batch 1 516.7 MiB in 206 s: ratio 0.288 (what remains is mostly the fp32 gradients,
390 MB, plus one completion's activations).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from proposer.training.estimators import ESTIMATORS
from proposer.backends.logprobs import batch_sequence_logprobs
from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample

G, M, D, K = 8, 4, 16, 100
PROMPT_LEN, COMPLETION_LEN, VOCAB = 64, 256, 4096


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _hwm_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB."""
    vals = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS:", "VmHWM:")):
            vals[line.split(":")[0]] = int(line.split()[1])
    return vals["VmRSS"], vals["VmHWM"]


def memory_child(variant: str, small: bool) -> dict:
    """One warm-up step, then the peak memory of a second one above the state it started from."""
    torch.manual_seed(0)
    if small:  # a quick check of the harness itself
        cfg = LlamaConfig(vocab_size=2048, hidden_size=128, intermediate_size=344, num_hidden_layers=4,
                          num_attention_heads=4, max_position_embeddings=512, tie_word_embeddings=True)
        n, p_len, c_len = 4, 32, 96
    else:
        cfg = LlamaConfig(vocab_size=16384, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                          num_attention_heads=12, max_position_embeddings=512, tie_word_embeddings=True)
        n, p_len, c_len = 8, 64, 192
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = LlamaForCausalLM(cfg).to(dev)
    gen = torch.Generator().manual_seed(0)
    samples = [TrainSample(torch.randint(0, cfg.vocab_size, (p_len,), generator=gen).tolist(),
                           torch.randint(0, cfg.vocab_size, (c_len,), generator=gen).tolist(), None,
                           float(i % 2) * 2 - 1) for i in range(n)]
    tc = TrainConfig(lr=1e-5, minibatch=n, kl_beta=0.0, micro_batch=1 if variant == "ckpt+micro" else 0,
                     gradient_checkpointing=variant == "ckpt+micro")
    trainer = PolicyTrainer(model, tc)
    trainer.step(samples)  # warm-up: AdamW state allocated
    trainer.opt.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        trainer.step(samples)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM to the current RSS
        base, _ = _hwm_kib()
        trainer.step(samples)
        peak = (_hwm_kib()[1] - base) * 1024
    return {"variant": variant, "peak_bytes": peak, "seconds": time.perf_counter() - t0, "device": dev.type,
            "params": sum(p.numel() for p in model.parameters()), "tokens": n * (p_len + c_len)}


def memory_main(threads: int, small: bool) -> None:
    res = {}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    for variant in ("plain", "ckpt+micro"):
        cmd = [sys.executable, __file__, "--memory-child", variant] + (["--small"] if small else []) + \
            (["--threads", str(threads)] if threads else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        res[variant] = json.loads(out.strip().splitlines()[-1])
        r = res[variant]
        print(f"{variant:<11s} {r['device']}: {r['params'] / 1e6:.1f}M params, {r['tokens']} tokens: peak step "
              f"memory {r['peak_bytes'] / 2**20:8.1f} MiB above model + optimizer, {r['seconds']:.1f} s")
    ratio = res["ckpt+micro"]["peak_bytes"] / max(res["plain"]["peak_bytes"], 1)
    print(f"ratio (checkpointing + micro-batch 1) / plain: {ratio:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memory", action="store_true", help="peak memory: checkpointing + micro-batches vs plain")
    ap.add_argument("--memory-child", choices=["plain", "ckpt+micro"], help=argparse.SUPPRESS)
    ap.add_argument("--small", action="store_true", help="with --memory: a small model (harness check)")
    ap.add_argument("--repeats", type=int, default=5, help="timed train steps (after one warm-up)")
    ap.add_argument("--est-repeats", type=int, default=200, help="timed estimator calls per estimator")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.small)))
        return
    if args.memory:
        memory_main(args.threads, args.small)
        return
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
