"""Replication study: the VPO paper's two claims, on CPU, with the bundled tiny proposer. Rerunnable by anyone.

(a) *Proposer quality.* From the same bundled tiny proposer, train with VPO, GRPO, Multi-RLVR, Max-at-K and CoVRL
    (verifier-free: from the train problems' reference solutions, ``evolve/study.train_covrl``) at equal
    compute (the same steps × problems × G completions × m answers, the run config's training defaults) on
    ``pbe-hard-train``; evaluate on ``pbe-hard-heldout`` (shapes never trained on) at an equal candidate budget:
    pass@k and best@k for k = 1..K from the same samples (unbiased estimators), reward-space diversity, parse rate.
(b) *Search.* Campaigns ``--train none | grpo | vpo | covrl`` (CoVRL: archive references) on
    ``pbe-hard-heldout``, several seeds each, everything else equal (every arm at the trained proposer's G,
    ``train.group``, so all propose the same candidates per iteration; the trained arms on the default schedule, a
    step after every iteration): solved@t curves with a 95% confidence band, and solved@T with its 95% t interval.

    .venv/bin/python bench/studies/replicate_vpo.py            # the full study (~4 h on 2 cores with the default schedule)
    .venv/bin/python bench/studies/replicate_vpo.py --quick    # the same pipeline, small (a few minutes; run in CI)

Prints one table and writes it, with the command and the figures, to --out (docs/results/ by default). Whatever
the numbers say is the result: nothing here is tuned toward an answer (no seed or problem selection; the suite,
seeds 0..S-1, and the defaults are fixed before the run).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ALGOS = ("vpo", "grpo", "multi_rlvr", "max_at_k", "covrl")
ARMS = ("none", "grpo", "vpo", "covrl")
REWARDS = ("vector", "novel", "improvement")  # an arm ALGO+REWARD; vpo+covrl is an algorithm


def quality(args, log) -> dict:
    """Part (a): one row per algorithm (plus the untrained proposer)."""
    import torch

    from evaluators.pool import SandboxPool
    from evolve.config.schema import CampaignConfig
    from evolve.training.study import evaluate_proposer, train
    from problems.suites import SUITES
    from proposer.backends import make_backend

    d = CampaignConfig()  # the shipped training defaults
    train_probs, held = SUITES["pbe-hard-train"](), SUITES["pbe-hard-heldout"]()
    if args.quick:
        held = held[:4]
    rows = {}
    with SandboxPool(workers=2) as pool:
        for algo in ("untrained",) + tuple(args.algos):
            torch.manual_seed(0)
            backend = make_backend("tiny")
            t = time.perf_counter()
            hist = []
            if algo != "untrained":
                run_cfg = d.model_copy(update={"seed": 0, "search": d.search.model_copy(
                    update={"answers": args.answers, "group": args.group}),
                    "train": d.train.model_copy(update={"algo": algo, "batch": args.batch, "group": args.group})})
                hist = train(backend, train_probs, pool, run_cfg, steps=args.steps, log=lambda s: None)
            t_train = time.perf_counter() - t
            with torch.no_grad():
                ev = evaluate_proposer(backend, held, pool, k=args.k, m=args.answers, n=2 * args.k,
                                       max_tokens=d.sampling.max_tokens, seed=1)
            rows[algo] = {"pass_curve": ev["pass_curve"], "best_curve": ev["best_curve"],
                          "diversity": ev["diversity"], "parse_rate": ev["parse_rate"], "train_s": t_train,
                          "train_reward": [h.get("mean_set_reward") for h in hist],
                          "policy_kl": [h.get("policy_kl") for h in hist]}
            log(f"(a) {algo}: pass@1 {ev['pass_curve'][0]:.4f} pass@{args.k} {ev['pass_curve'][-1]:.4f} "
                f"best@1 {ev['best_curve'][0]:.4f} best@{args.k} {ev['best_curve'][-1]:.4f} "
                f"diversity {ev['diversity']:.3f} parse {ev['parse_rate']:.3f} (train {t_train:.0f} s)")
            del backend
    return {"rows": rows, "k": args.k, "n_heldout": len(held), "steps": args.steps, "batch": args.batch,
            "group": args.group, "answers": args.answers, "lr": d.train.lr, "lora": d.train.lora}


def search(args, runs_dir: Path, log) -> dict:
    """Part (b): campaigns per arm and seed through the CLI (each its own process, as a user runs them)."""
    from evolve.archive import archive_path
    from evolve.analysis.curves import ci95, run_curves

    vevo = str(Path(sys.executable).parent / "vevo")
    out: dict = {"arms": {}, "iterations": args.iterations, "seeds": args.seeds}
    for arm in args.arms:
        finals, bests, paths = [], [], []
        for seed in range(args.seeds):
            run = runs_dir / f"{arm}-s{seed}"
            if not archive_path(run).is_file() or args.fresh:
                subprocess.run(["rm", "-rf", str(run)], check=True)
                algo, _, reward = arm.rpartition("+") if arm.rpartition("+")[2] in REWARDS else (arm, "", "")
                # every arm samples the trained proposer's G (equal evaluations per iteration); the training
                # schedule is the run config's default unless --train-every is given
                cmd = [vevo, "run", "--suite", args.suite, "--proposer", "tiny", "--iterations", str(args.iterations),
                       "--islands", "2", "--answers", str(args.answers), "--group", str(args.campaign_group),
                       "--seed", str(seed), "--train", algo, "--out", str(run), "--quiet"]
                if args.train_every:
                    cmd += ["--train-every", str(args.train_every)]
                if reward:
                    cmd += ["--set", f"train.reward={reward}"]
                t = time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                log(f"(b) {arm} seed {seed}: {time.perf_counter() - t:.0f} s")
            xs, solved, best = run_curves(archive_path(run))
            finals.append(float(solved[-1]) if len(solved) else 0.0)
            bests.append(float(best[-1]) if len(best) else 0.0)
            paths.append(str(archive_path(run)))
        m, h = ci95(finals)
        bm, bh = ci95(bests)
        out["arms"][arm] = {"solved_final": finals, "solved_mean": m, "solved_ci95": h, "best_final": bests,
                            "best_mean": bm, "best_ci95": bh, "archives": paths}
        log(f"(b) {arm}: solved@T {m:.2f} ± {h:.2f} (runs {finals})")
    return out


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else ("inf" if a else "n/a")


def report(args, qa: dict | None, sb: dict | None, out_dir: Path, cmd: str) -> str:
    lines = ["# VPO replication on CPU (tiny proposer)\n", f"Command: `{cmd}`\n",
             f"Date: {time.strftime('%Y-%m-%d')}; machine: {os.cpu_count()} cores, no GPU.\n"]
    if qa:
        k = qa["k"]
        ks = [j for j in (1, 10, 30) if j <= k] or [k]
        lines.append(f"## (a) Proposer quality on pbe-hard-heldout ({qa['n_heldout']} problems, budget {2 * k} "
                     f"candidates per problem; training: {qa['steps']} steps × {qa['batch']} problems × G={qa['group']}"
                     f" × m={qa['answers']}, lr {qa['lr']:g}, {'LoRA' if qa['lora'] else 'full'})\n")
        head = ["proposer"] + [f"pass@{j}" for j in ks] + [f"best@{j}" for j in ks] + ["diversity", "parse rate"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for algo, r in qa["rows"].items():
            vals = [f"{r['pass_curve'][j - 1]:.4f}" for j in ks] + [f"{r['best_curve'][j - 1]:.4f}" for j in ks]
            lines.append(f"| {algo} | " + " | ".join(vals) + f" | {r['diversity']:.3f} | {r['parse_rate']:.3f} |")
        rows = qa["rows"]
        if "vpo" in rows and "grpo" in rows:
            j = ks[-1]
            lines.append(f"\nVPO/GRPO best@{j}: {_ratio(rows['vpo']['best_curve'][j - 1], rows['grpo']['best_curve'][j - 1])}"
                         f"; VPO/untrained best@{j}: "
                         f"{_ratio(rows['vpo']['best_curve'][j - 1], rows['untrained']['best_curve'][j - 1])}; "
                         f"VPO/GRPO pass@{j}: {_ratio(rows['vpo']['pass_curve'][j - 1], rows['grpo']['pass_curve'][j - 1])}\n")
        if "covrl" in rows:
            j = ks[-1]
            cov = rows["covrl"]["best_curve"][j - 1]
            vs = [f"CoVRL/{o} best@{j}: {_ratio(cov, rows[o]['best_curve'][j - 1])}" for o in ("untrained", "vpo")
                  if o in rows]
            lines.append("; ".join(vs) + " (CoVRL learns from the train problems' reference solutions and never "
                         "runs the sandbox)\n")
        lines.append("![pass@k and best@k](replicate_vpo_quality.png)\n")
    if sb:
        from evolve.config.schema import CampaignConfig

        t = CampaignConfig().train
        schedule = (f"train every {args.train_every}" if args.train_every else
                    f"the default schedule: a step every {t.every} iteration(s) on {t.batch} group(s)")
        lines.append(f"## (b) Search: campaigns on {args.suite} ({sb['iterations']} iterations, {sb['seeds']} seeds "
                     f"per arm, 2 islands, m={args.answers}, G={args.campaign_group}, {schedule})\n")
        lines += ["| train | solved@T mean | 95% CI | per seed | best@T mean ± 95% CI |", "|---|---|---|---|---|"]
        for arm, r in sb["arms"].items():
            lines.append(f"| {arm} | {r['solved_mean']:.2f} | ± {r['solved_ci95']:.2f} | "
                         f"{', '.join(f'{x:g}' for x in r['solved_final'])} | {r['best_mean']:.4f} ± {r['best_ci95']:.4f} |")
        arms = sb["arms"]
        if "vpo" in arms:
            parts = [f"VPO/{o} solved@T: {_ratio(arms['vpo']['solved_mean'], arms[o]['solved_mean'])}"
                     for o in ("grpo", "none") if o in arms]
            if "covrl" in arms:
                parts.append(f"CoVRL/VPO solved@T: {_ratio(arms['covrl']['solved_mean'], arms['vpo']['solved_mean'])}")
            lines.append("\n" + "; ".join(parts) + "\n")
        for arm in arms:
            if ("+" in arm or arm == "covrl") and "none" in arms:
                lines.append(f"{arm}/none solved@T: {_ratio(arms[arm]['solved_mean'], arms['none']['solved_mean'])}")
        lines.append("![solved@t](replicate_vpo_search.png)\n")
    text = "\n".join(lines)
    (out_dir / "replicate_vpo.md").write_text(text)
    (out_dir / "replicate_vpo.json").write_text(json.dumps({"quality": qa, "search": sb}, indent=1))
    return text


def figures(qa: dict | None, sb: dict | None, out_dir: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from evolve.analysis.curves import plot

    if qa:
        fig = Figure(figsize=(11, 4.2), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, 2)
        for algo, r in qa["rows"].items():
            ks = list(range(1, len(r["pass_curve"]) + 1))
            axes[0].plot(ks, r["pass_curve"], label=algo)
            axes[1].plot(ks, r["best_curve"], label=algo)
        for ax, t in zip(axes, ("pass@k", "best@k")):
            ax.set_xlabel("k (candidates)")
            ax.set_ylabel(t)
            ax.grid(alpha=0.3)
        axes[0].legend()
        fig.savefig(out_dir / "replicate_vpo_quality.png")
    if sb:
        plot({arm: r["archives"] for arm, r in sb["arms"].items()}, "iterations", out_dir / "replicate_vpo_search.png",
             band="ci95")


def main() -> None:
    from evolve.config.schema import CampaignConfig

    d = CampaignConfig()
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small everything: a smoke run of the whole pipeline")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results"))
    ap.add_argument("--runs-dir", default=str(ROOT / "runs" / "replicate"))
    ap.add_argument("--fresh", action="store_true", help="rerun campaigns whose archive already exists")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--arms", default=",".join(ARMS), help="campaign arms: ALGO or ALGO+REWARD (e.g. vpo+novel)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--answers", type=int, default=4)
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--suite", default="pbe-hard-heldout")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=120)
    ap.add_argument("--campaign-group", type=int, default=d.trained_group,
                    help="(b): G of every arm's campaign (default: the trained proposer's train.group)")
    ap.add_argument("--train-every", type=int, default=None, help="(b): iterations between updates (default: "
                    "the run config's schedule)")
    args = ap.parse_args()
    args.algos = [a for a in args.algos.split(",") if a]
    args.arms = [a for a in args.arms.split(",") if a]
    if args.quick:
        args.steps, args.k, args.seeds, args.iterations = 2, 4, 1, 12
        args.algos = [a for a in args.algos if a in ("vpo", "grpo", "covrl")]
        if args.runs_dir == str(ROOT / "runs" / "replicate"):
            args.runs_dir = str(ROOT / "runs" / "replicate-quick")
        if args.out == str(ROOT / "docs" / "results"):
            args.out = str(ROOT / "runs" / "replicate-quick")
    out_dir, runs_dir = Path(args.out), Path(args.runs_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_dir.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, flush=True)
    t0 = time.perf_counter()
    qa = None if args.skip_quality else quality(args, log)
    sb = None if args.skip_search else search(args, runs_dir, log)
    figures(qa, sb, out_dir)
    cmd = "python bench/studies/replicate_vpo.py " + " ".join(sys.argv[1:])
    print(report(args, qa, sb, out_dir, cmd.strip()))
    print(f"wrote {out_dir / 'replicate_vpo.md'} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
