"""Which training defaults move the tiny proposer, measured: the sweep behind the shipped ``train_*`` defaults.

For each configuration (learning rate, LoRA rank or full fine-tuning, group size G, epochs), starting from the
bundled tiny proposer: ``steps`` VPO steps on ``pbe-hard-train`` (``evolve.training.study.train``: batch problems × G
completions of m answers), then on ``pbe-hard-heldout``, never trained on:

* movement on held-out prompts: completions sampled once from the *untrained* model (the same tokens for every
  configuration); KL(new || old) per token estimated as mean (r log r - r + 1), r = pi_new / pi_old, and the
  fraction of those positions whose greedy token changed;
* what the movement does: parse rate, best@8, pass@8 and reward diversity of the trained proposer (budget 16
  candidates per problem), against the untrained row.

    .venv/bin/python bench/studies/train_sweep.py [--steps 6] [--quick] [--out docs/results/train_sweep.md]

Prints one table and writes it (with the command) to --out. Numbers are single runs with one seed: they rank
configurations by how much they move the policy, they do not say which proposer is better (that is
bench/studies/replicate_vpo.py's job).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

CONFIGS = [  # name, lora rank (0: full fine-tuning), lr, G, epochs
    ("lora8 lr1e-5 (old default)", 8, 1e-5, 2, 1),
    ("lora8 lr1e-4", 8, 1e-4, 2, 1),
    ("lora8 lr1e-3", 8, 1e-3, 2, 1),
    ("lora8 lr3e-3", 8, 3e-3, 2, 1),
    ("lora32 lr1e-3", 32, 1e-3, 2, 1),
    ("full lr1e-5", 0, 1e-5, 2, 1),
    ("full lr1e-4", 0, 1e-4, 2, 1),
    ("lora8 lr1e-3 G4", 8, 1e-3, 4, 1),
    ("lora8 lr1e-3 2 epochs", 8, 1e-3, 2, 2),
]


def probe_set(backend, problems, pool, m: int, seed: int):
    """Held-out prompts and two completions each from the untrained model: (prompt ids, completion ids)."""
    from proposer.answers.scoring import seed_prompt
    from proposer.backends.base import SamplingParams

    seeds = pool.evaluate_many([(p, p.seed_code) for p in problems])
    prompts = [seed_prompt(p, s, m) for p, s in zip(problems, seeds)]
    groups = backend.generate(prompts, 2, SamplingParams(temperature=1.0, max_tokens=256, seed=seed))
    return [(list(c.prompt_token_ids), list(c.token_ids)) for g in groups for c in g if c.token_ids]


def movement(model, probes, before) -> dict:
    """KL(new || old) and greedy changes on the probe tokens; before = (logp, greedy) of the untrained model."""
    import torch

    from proposer.backends.logprobs import completion_logprobs
    from proposer.training.trainer import movement_sums

    with torch.no_grad():
        lp, mask, greedy = completion_logprobs(model, [p for p, _ in probes], [c for _, c in probes],
                                               with_argmax=True)
    s = movement_sums(lp, before[0], mask, greedy, before[1])
    return {"heldout_kl": s["policy_kl"] / s["tokens"], "heldout_greedy_changed": s["greedy_changed"] / s["tokens"]}


def run(cfg, args, train_probs, held, pool, probes, before) -> dict:
    import torch

    from evolve.training.study import evaluate_proposer, train
    from proposer.backends import make_backend

    name, rank, lr, group, epochs = cfg
    backend = make_backend("tiny")
    t = time.perf_counter()
    hist = []
    if lr > 0:
        from evolve.config.schema import CampaignConfig

        run_cfg = CampaignConfig(search={"answers": args.answers, "group": group}, seed=0,
                                 sampling={"max_tokens": args.max_tokens},
                                 train={"algo": "vpo", "batch": args.batch, "group": group, "lr": lr, "lora": rank > 0,
                                        "lora_rank": max(rank, 1), "epochs": epochs, "probe_every": 0})
        hist = train(backend, train_probs, pool, run_cfg, steps=args.steps, log=lambda s: None)
    t_train = time.perf_counter() - t
    model = backend.model
    model.eval()
    row = {"config": name, "train_s": round(t_train, 1)}
    row.update(movement(model, probes, before))
    if hist:
        row["step_policy_kl"] = sum(h.get("policy_kl", 0.0) for h in hist) / len(hist)
        row["train_reward_first"] = hist[0]["mean_set_reward"]
        row["train_reward_last"] = hist[-1]["mean_set_reward"]
    with torch.no_grad():
        ev = evaluate_proposer(backend, held, pool, k=8, m=args.answers, n=16, max_tokens=args.max_tokens, seed=1)
    row.update({"parse_rate": ev["parse_rate"], "best@8": ev["best@8"], "pass@8": ev["pass@8"],
                "diversity": ev["diversity"]})
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4, help="problems per step")
    ap.add_argument("--answers", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--quick", action="store_true", help="2 steps, 3 configurations, 4 held-out problems")
    ap.add_argument("--only", help="comma-separated config indices")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "train_sweep.md"))
    args = ap.parse_args()

    import torch

    from evaluators.pool import SandboxPool
    from problems.suites import SUITES
    from proposer.backends import make_backend
    from proposer.backends.logprobs import completion_logprobs

    torch.manual_seed(0)
    train_probs, held = SUITES["pbe-hard-train"](), SUITES["pbe-hard-heldout"]()
    configs = [("untrained", 8, 0.0, 2, 1)] + CONFIGS
    if args.quick:
        args.steps, held, configs = 2, held[:4], configs[:1] + CONFIGS[2:4]
    if args.only:
        configs = [configs[0]] + [CONFIGS[int(i)] for i in args.only.split(",")]
    rows = []
    with SandboxPool(workers=2) as pool:
        base = make_backend("tiny")
        probes = probe_set(base, held, pool, args.answers, seed=123)
        with torch.no_grad():
            lp, _, greedy = completion_logprobs(base.model, [p for p, _ in probes], [c for _, c in probes],
                                                with_argmax=True)
        before = (lp, greedy)
        del base
        for cfg in configs:
            row = run(cfg, args, train_probs, held, pool, probes, before)
            rows.append(row)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    cols = ["config", "heldout_kl", "heldout_greedy_changed", "step_policy_kl", "train_reward_first",
            "train_reward_last", "parse_rate", "best@8", "pass@8", "diversity", "train_s"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols)
                     + " |")
    table = "\n".join(lines)
    print(table)
    cmd = "python bench/studies/train_sweep.py " + " ".join(sys.argv[1:])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# Training sweep (tiny proposer)\n\nCommand: `{cmd.strip()}` ({args.steps} VPO steps of "
                   f"{args.batch} problems × G completions × {args.answers} answers on pbe-hard-train; held-out: "
                   f"pbe-hard-heldout)\n\n{table}\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
