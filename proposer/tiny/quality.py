"""Sample quality of a proposer on prompts it was not trained on: how many answers parse, apply, run, solve.

Prompt sets (none of them is pretraining data):

* ``fresh``      corpus samples from an index range the pretraining never drew (same generator, same seed);
* ``pbe-train``  the built-in pbe train problems, parent = their seed program (the campaign's first prompt);
* ``pbe-heldout`` the built-in pbe held-out problems, same (held-out problems are never in the corpus, so this
  measures format and search-readiness, not recall);
* ``pbe-train m=1`` the pbe train prompts asking for a single answer (the single-answer baseline).

Per answer slot (m per completion): ``parse`` = parse_answers gives a code answer; ``apply`` = apply_answer
accepts it; ``run`` = the child program executes and f returns on every test input without an exception (in
a separate process with CPU/memory limits); ``solve`` = it passes every test. Rates are over all m * n slots.

    python -m proposer.tiny.quality --model proposer/tiny/checkpoint [--n 4] [--fresh 32]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

_RUNNER = r"""
import json, resource, signal, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
class _TO(Exception):
    pass
def _alarm(*_):
    raise _TO()
signal.signal(signal.SIGALRM, _alarm)
jobs = json.loads(sys.stdin.read())
out = []
for code, inputs, expected in jobs:
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        ns = {"__name__": "candidate"}
        exec(compile(code, "<candidate>", "exec"), ns)
        f = ns["f"]
        got = [f(list(x) if isinstance(x, list) else x) for x in inputs]
        ok = all(type(g) is type(e) and g == e for g, e in zip(got, expected))
        res = "solve" if ok else "run"
    except _TO:
        res = "timeout"
    except BaseException as exc:
        res = "error"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    out.append(res)
sys.stdout.write(json.dumps(out))
"""


def run_programs(jobs: list[tuple[str, list, list]], timeout: float = 60.0) -> list[str]:
    """Status per job (code, inputs, expected): "solve", "run" (no error, some test wrong), "error", "timeout".
    Programs run in a child process (1 GiB address space, 1 s per program); on a batch failure each job is
    retried alone."""
    if not jobs:
        return []
    try:
        p = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(jobs), capture_output=True,
                           text=True, timeout=timeout)
        res = json.loads(p.stdout)
        if len(res) == len(jobs):
            return res
    except (subprocess.TimeoutExpired, json.JSONDecodeError, ValueError):
        pass
    if len(jobs) == 1:
        return ["timeout"]
    return [run_programs([j], timeout=5.0)[0] for j in jobs]


def fresh_items(seed: int, n: int, start: int = 10**7) -> list[dict[str, Any]]:
    """n multi-answer corpus samples far beyond any pretraining index."""
    from proposer.tiny.corpus import generate_corpus

    out = []
    i = start
    while len(out) < n:
        s = generate_corpus(seed, 1, start=i, plain_frac=0.0)[0]
        i += 1
        out.append({"id": f"fresh-{i}", "prompt": s.prompt, "parent": s.meta["parent"], "m": s.m,
                    "inputs": s.meta["inputs"], "expected": s.meta["expected"]})
    return out


def pbe_items(split: str, n: int | None = None, m: int = 4) -> list[dict[str, Any]]:
    """The pbe problems of a split with their seed program as the parent (the campaign's first prompt)."""
    from problems.suites import pbe
    from proposer.answers.prompting import PromptContext, build_prompt

    probs = pbe.generate_pbe(n or (pbe.N_TRAIN if split == "train" else pbe.N_HELDOUT), pbe.DEFAULT_SEED, split)
    out = []
    for p in probs:
        inputs = [t.args[0] for t in p.tests]
        expected = [t.expected for t in p.tests]
        fn = pbe.compile_fn(p.seed_code)
        vec = []
        for x, y in zip(inputs, expected):
            try:
                got = fn(list(x) if isinstance(x, list) else x)
                vec.append(1.0 if type(got) is type(y) and got == y else 0.0)
            except Exception:  # noqa: BLE001 - a seed that errors fails that test
                vec.append(0.0)
        ctx = PromptContext(problem_id=p.id, description=p.description, parent_code=p.seed_code,
                            parent_vector=vec, test_labels=[p.test_label(i) for i in range(p.n_tests)], m=m)
        out.append({"id": p.id, "prompt": build_prompt(ctx), "parent": p.seed_code, "m": m, "inputs": inputs,
                    "expected": expected})
    return out


def measure(backend, items: list[dict[str, Any]], n: int = 4, temperature: float = 1.0, max_tokens: int = 384,
            seed: int = 0, batch_prompts: int = 8) -> dict[str, Any]:
    """Generate n completions per item and score every answer slot (see module docstring)."""
    from proposer.answers.mutate import MutationError, apply_answer, normalized_hash
    from proposer.backends.base import SamplingParams
    from proposer.answers.parsing import parse_answers

    slots = parsed = applied = 0
    jobs: list[tuple[str, list, list]] = []
    completions = stopped = 0
    distinct: list[int] = []
    tokens = 0
    solved_items = set()
    job_item: list[str] = []
    for b in range(0, len(items), batch_prompts):
        chunk = items[b: b + batch_prompts]
        groups = backend.generate([it["prompt"] for it in chunk], n,
                                  SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed + b))
        for it, group in zip(chunk, groups):
            for comp in group:
                completions += 1
                stopped += comp.finish_reason == "stop"
                tokens += len(comp.token_ids or [])
                hashes = set()
                for a in parse_answers(comp.text, it["m"]):
                    slots += 1
                    if a.kind != "code":
                        continue
                    parsed += 1
                    try:
                        child = apply_answer(it["parent"], a)
                    except MutationError:
                        continue
                    applied += 1
                    hashes.add(normalized_hash(child))
                    jobs.append((child, it["inputs"], it["expected"]))
                    job_item.append(it["id"])
                distinct.append(len(hashes))
    status = run_programs(jobs)
    ran = sum(s in ("run", "solve") for s in status)
    solve = sum(s == "solve" for s in status)
    for s, iid in zip(status, job_item):
        if s == "solve":
            solved_items.add(iid)
    pct = (lambda k: round(100.0 * k / slots, 1) if slots else 0.0)
    return {"prompts": len(items), "completions": completions, "answer_slots": slots,
            "parse_pct": pct(parsed), "apply_pct": pct(applied), "run_pct": pct(ran), "solve_pct": pct(solve),
            "stop_pct": round(100.0 * stopped / completions, 1) if completions else 0.0,
            "distinct_per_completion": round(sum(distinct) / len(distinct), 2) if distinct else 0.0,
            "tokens_per_completion": round(tokens / completions, 1) if completions else 0.0,
            "prompts_solved": len(solved_items)}


def report(model_dir: str, n: int = 4, fresh: int = 32, seed: int = 0, corpus_seed: int = 0,
           threads: int | None = None, pbe: int | None = None, max_tokens: int = 384) -> dict[str, dict[str, Any]]:
    """Quality on the three prompt sets (``pbe``: cap on problems per pbe split, None = the whole suite)."""
    from proposer.backends.hf import HFBackend

    backend = HFBackend(model_dir, device="cpu", threads=threads)
    sets = {"fresh": fresh_items(corpus_seed, fresh), "pbe-train": pbe_items("train", pbe),
            "pbe-heldout": pbe_items("heldout", pbe), "pbe-train m=1": pbe_items("train", pbe, m=1)}
    return {name: measure(backend, items, n=n, seed=seed, max_tokens=max_tokens)
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
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = report(args.model, args.n, args.fresh, args.seed, args.corpus_seed, args.threads, args.pbe,
                 args.max_tokens)
    print(json.dumps(res, indent=1) if args.json else markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
