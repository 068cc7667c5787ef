"""Sample quality of a proposer on prompts it was not trained on: how many answers parse, apply, run, solve.

Prompt sets (none of them is pretraining data):

* ``fresh``      corpus samples from an index range the pretraining never drew (same generator, same seed);
* ``pbe-train``  the built-in pbe train problems, parent = their seed program (the campaign's first prompt);
* ``pbe-heldout`` the built-in pbe held-out problems, same (held-out problems are never in the corpus, so this
  measures format and search-readiness, not recall);
* ``pbe-train m=1`` the pbe train prompts asking for a single answer (the single-answer baseline).

Per answer slot (m per completion), scored as a campaign scores a batch (proposer/answers/scoring.py, in vevo's sandbox):
``parse`` = the answer is code or a SEARCH/REPLACE diff; ``apply`` = it applies to the parent; ``run`` = the child
program ran to the end (status ok or wrong); ``solve`` = it passes every test. Rates are over all m * n slots;
an answer that repeats an earlier one of its prompt runs once and counts in every slot it fills.

    python -m proposer.tiny.quality --model proposer/tiny/checkpoint [--n 4] [--fresh 32]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def fresh_items(seed: int, n: int, start: int = 10**7) -> list[dict[str, Any]]:
    """n multi-answer corpus samples far beyond any pretraining index, each as a problem (its tests: the sample's
    inputs and expected outputs, entry point f) with the sample's prompt."""
    from problems.model import CallCase, Problem
    from proposer.tiny.corpus import generate_corpus

    out = []
    i = start
    while len(out) < n:
        s = generate_corpus(seed, 1, start=i, plain_frac=0.0)[0]
        i += 1
        tests = [CallCase(args=(x,), expected=y) for x, y in zip(s.meta["inputs"], s.meta["expected"])]
        problem = Problem(id=f"fresh-{i}", seed_code=s.meta["parent"], tests=tests, entry_point="f", time_limit=5.0)
        out.append({"id": problem.id, "prompt": s.prompt, "parent": s.meta["parent"], "m": s.m, "problem": problem})
    return out


def pbe_items(split: str, evaluator, n: int | None = None, m: int = 4, alias: str | None = "f") -> list[dict[str, Any]]:
    """The pbe problems of a split with their seed program as the parent: the campaign's first prompt (the seed
    evaluated by ``evaluator``; ``alias``: the function name the model writes, the tiny model's by default)."""
    from problems.suites import pbe
    from proposer.answers.scoring import seed_prompt

    probs = pbe.generate_pbe(n or (pbe.N_TRAIN if split == "train" else pbe.N_HELDOUT), pbe.DEFAULT_SEED, split)
    seeds = evaluator.evaluate_many([(p, p.seed_code) for p in probs]) if probs else []
    return [{"id": p.id, "prompt": seed_prompt(p, ev, m, alias=alias), "parent": p.seed_code, "m": m, "problem": p}
            for p, ev in zip(probs, seeds)]


def measure(backend, items: list[dict[str, Any]], evaluator, n: int = 4, temperature: float = 1.0,
            max_tokens: int = 384, seed: int = 0, batch_prompts: int = 8) -> dict[str, Any]:
    """Generate n completions per item and score every answer slot (see module docstring)."""
    from proposer.answers import naming
    from proposer.backends.base import SamplingParams
    from proposer.answers.scoring import score_completions

    slots = parsed = applied = ran = solve = completions = stopped = tokens = 0
    distinct: list[int] = []
    solved_items = set()
    for b in range(0, len(items), batch_prompts):
        chunk = items[b: b + batch_prompts]
        groups = backend.generate([it["prompt"] for it in chunk], n,
                                  SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed + b))
        for it, group in zip(chunk, groups):
            completions += len(group)
            stopped += sum(c.finish_reason == "stop" for c in group)
            tokens += sum(len(c.token_ids or []) for c in group)
            sc = score_completions(it["problem"], [c.text for c in group], it["m"], evaluator,
                                   parent_code=it["parent"], alias=naming.entry_name(backend))
            for kinds, row, evs in zip(sc.triage.kinds or [], sc.triage.slots, sc.slot_evaluations()):
                slots += len(kinds)
                parsed += sum(k in ("code", "diff") for k in kinds)
                applied += sum(s.kind != "zero" for s in row)
                ran += sum(ev is not None and ev.status in ("ok", "wrong") for ev in evs)
                solve += sum(ev is not None and ev.solved for ev in evs)
                distinct.append(len({(s.kind, s.ref) for s in row if s.kind != "zero"}))
                if any(ev is not None and ev.solved for ev in evs):
                    solved_items.add(it["id"])
    pct = (lambda k: round(100.0 * k / slots, 1) if slots else 0.0)
    return {"prompts": len(items), "completions": completions, "answer_slots": slots,
            "parse_pct": pct(parsed), "apply_pct": pct(applied), "run_pct": pct(ran), "solve_pct": pct(solve),
            "stop_pct": round(100.0 * stopped / completions, 1) if completions else 0.0,
            "distinct_per_completion": round(sum(distinct) / len(distinct), 2) if distinct else 0.0,
            "tokens_per_completion": round(tokens / completions, 1) if completions else 0.0,
            "prompts_solved": len(solved_items)}


def report(model_dir: str, n: int = 4, fresh: int = 32, seed: int = 0, corpus_seed: int = 0,
           threads: int | None = None, pbe: int | None = None, max_tokens: int = 384,
           workers: int = 2) -> dict[str, dict[str, Any]]:
    """Quality on the three prompt sets (``pbe``: cap on problems per pbe split, None = the whole suite), the
    answers run in a vevo sandbox pool of ``workers``."""
    from evaluators.pool import SandboxPool
    from proposer.answers import naming
    from proposer.backends.hf import HFBackend

    backend = HFBackend(model_dir, device="cpu", threads=threads)
    alias = naming.entry_name(backend)
    with SandboxPool(workers=workers) as pool:
        sets = {"fresh": fresh_items(corpus_seed, fresh), "pbe-train": pbe_items("train", pool, pbe, alias=alias),
                "pbe-heldout": pbe_items("heldout", pool, pbe, alias=alias),
                "pbe-train m=1": pbe_items("train", pool, pbe, m=1, alias=alias)}
        return {name: measure(backend, items, pool, n=n, seed=seed, max_tokens=max_tokens)
                for name, items in sets.items() if items}


def markdown(results: dict[str, dict[str, Any]]) -> str:
    cols = ["prompts", "completions", "answer_slots", "parse_pct", "apply_pct", "run_pct", "solve_pct",
            "stop_pct", "distinct_per_completion", "tokens_per_completion", "prompts_solved"]
    lines = ["| prompt set | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "checkpoint"))
    ap.add_argument("--n", type=int, default=4, help="completions per prompt")
    ap.add_argument("--fresh", type=int, default=32, help="fresh corpus prompts")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--corpus-seed", type=int, default=0, help="seed of the corpus the fresh prompts come from")
    ap.add_argument("--pbe", type=int, default=None, help="cap on problems per pbe split (default: whole suite)")
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--workers", type=int, default=2, help="sandbox workers running the answers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = report(args.model, args.n, args.fresh, args.seed, args.corpus_seed, args.threads, args.pbe,
                 args.max_tokens, args.workers)
    print(json.dumps(res, indent=1) if args.json else markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
