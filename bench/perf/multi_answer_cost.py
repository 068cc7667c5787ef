"""What does one multi-answer completion save over m single-answer completions?

Same model (the bundled tiny proposer unless --model), same problem and parent: (A) G completions of a prompt
asking for m answers, versus (B) m*G completions of the same prompt asking for 1 answer, batched in one call
the way the backend batches them, and (C) the same m*G single-answer completions one generate() call each. For each arm: wall time, prompt tokens processed (prefill), generated tokens, and
*evaluated candidates* (answers that parse and apply, deduplicated by normalised AST within the arm as the
campaign does). Prints per-candidate costs and the ratio B/A.

    .venv/bin/python bench/perf/multi_answer_cost.py [--m 4] [--group 2] [--repeats 5] [--problems 4] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from proposer.answers.mutate import MutationError, apply_answer, normalized_hash  # noqa: E402
from problems.suites import pbe  # noqa: E402
from proposer.backends.base import SamplingParams  # noqa: E402
from proposer.answers.parsing import parse_answers  # noqa: E402
from proposer.answers.prompting import PromptContext, build_prompt  # noqa: E402


def prompt_for(problem, m: int) -> str:
    fn = pbe.compile_fn(problem.seed_code)
    vec = []
    for t in problem.tests:
        try:
            got = fn(list(t.args[0]) if isinstance(t.args[0], list) else t.args[0])
            vec.append(1.0 if type(got) is type(t.expected) and got == t.expected else 0.0)
        except Exception:  # noqa: BLE001
            vec.append(0.0)
    ctx = PromptContext(problem_id=problem.id, description=problem.description, parent_code=problem.seed_code,
                        parent_vector=vec, test_labels=[problem.test_label(i) for i in range(problem.n_tests)], m=m)
    return build_prompt(ctx)


def arm(backend, problem, m: int, n: int, seed: int, max_tokens: int, calls: int = 1) -> dict:
    """n completions of the m-answer prompt, in ``calls`` generate() calls of n // calls each."""
    prompt = prompt_for(problem, m)
    t0 = time.perf_counter()
    group = []
    for c in range(calls):
        sp = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed + c)
        group += backend.generate([prompt], n // calls, sp)[0]
    wall = time.perf_counter() - t0
    hashes, applied = set(), 0
    for c in group:
        for a in parse_answers(c.text, m):
            try:
                child = apply_answer(problem.seed_code, a)
            except MutationError:
                continue
            applied += 1
            hashes.add(normalized_hash(child))
    return {"wall": wall, "gen_tokens": sum(len(c.token_ids) for c in group),
            "prompt_tokens": sum(len(c.prompt_token_ids) for c in group), "applied": applied,
            "candidates": len(hashes)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", help="'tiny' or a model folder")
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--group", type=int, default=2, help="G: completions per prompt in the multi-answer arm")
    ap.add_argument("--repeats", type=int, default=3, help="seeds per problem")
    ap.add_argument("--problems", type=int, default=4, help="pbe train problems to use")
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    from proposer.backends import make_backend

    spec = "tiny" if args.model == "tiny" else f"hf:{args.model}"
    backend = make_backend(spec, device=args.device, threads=args.threads)
    problems = pbe.generate_pbe(args.problems, pbe.DEFAULT_SEED, "train")
    arm(backend, problems[0], args.m, 1, 0, 16)  # warm-up
    arms = (("multi", args.m, args.group, 1), ("single", 1, args.m * args.group, 1),
            ("single-seq", 1, args.m * args.group, args.m * args.group))
    keys = ("wall", "gen_tokens", "prompt_tokens", "applied", "candidates")
    tot = {name: dict.fromkeys(keys, 0.0) for name, *_ in arms}
    per_run: dict[str, list[float]] = {name: [] for name, *_ in arms}
    for p in problems:
        for r in range(args.repeats):
            seed = 1000 * r + 17
            for name, m, n, calls in arms:
                res = arm(backend, p, m, n, seed, args.max_tokens, calls)
                for k, v in res.items():
                    tot[name][k] += v
                per_run[name].append(res["wall"] / max(res["candidates"], 1))
    print(f"model {spec}, m={args.m}, G={args.group}; {len(problems)} pbe problems x {args.repeats} seeds, "
          f"{args.threads} threads on {args.device}\n  multi: {args.group} completions x {args.m} answers (one call)"
          f"\n  single: {args.m * args.group} completions x 1 answer (one batched call)\n  single-seq: the same, "
          f"one call per completion (no batching across them)")
    print(f"{'arm':10} {'wall s':>8} {'prompt tok':>11} {'gen tok':>9} {'applied':>8} {'cands':>6} "
          f"{'s/cand':>8} {'gen tok/cand':>13} {'all tok/cand':>13} {'median s/cand':>14}")
    row = {}
    for name, *_ in arms:
        t = tot[name]
        c = max(t["candidates"], 1)
        row[name] = (t["wall"] / c, t["gen_tokens"] / c, (t["gen_tokens"] + t["prompt_tokens"]) / c)
        print(f"{name:10} {t['wall']:8.2f} {int(t['prompt_tokens']):11d} {int(t['gen_tokens']):9d} "
              f"{int(t['applied']):8d} {int(t['candidates']):6d} {row[name][0]:8.4f} {row[name][1]:13.1f} "
              f"{row[name][2]:13.1f} {statistics.median(per_run[name]):14.4f}")
    a = row["multi"]
    for name in ("single", "single-seq"):
        b = row[name]
        print(f"ratio {name}/multi per evaluated candidate: wall {b[0] / a[0]:.2f}x, generated tokens "
              f"{b[1] / a[1]:.2f}x, prompt+generated tokens {b[2] / a[2]:.2f}x")
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
