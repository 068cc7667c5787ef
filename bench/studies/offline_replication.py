"""VPO against GRPO (and max@k) at a real training length, without evolution: the offline replication of issue #33
(docs/results/decisive_study_plan.md, "Offline replication at a real training length"; results in
docs/results/offline_replication.md).

`vevo train` of the bundled tiny proposer on the training split ``pbe-hard-train`` for 300 steps under each
algorithm, training seeds 0-2, every other key at its default; then `vevo eval --k 64 --seed 0` of every trained
model (and of the untrained one, for reference) on the 19 held-out problems of `traces_check.heldout()`, disjoint
from the training split. Reported: the mean over problems of best@k and pass@k for k = 1..64, per algorithm the
mean over its seeds with a 95% t band (2 degrees of freedom). Descriptive, as the plan registers it: no test.
Paper anchors for the reading (arXiv 2605.22817): Maze best@30 VPO .593 vs GRPO .432; MuSiQue .832 vs .728.

    .venv/bin/python bench/studies/offline_replication.py --workers 2   # about an hour on 2 cores
    .venv/bin/python bench/studies/offline_replication.py --quick       # the pipeline on a tiny budget

Every trained model and evaluation is kept under --runs-dir and read, not redone, when started again.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench.studies.traces_check import evaluate, heldout, vevo  # noqa: E402

TRAIN_SUITE = "pbe-hard-train"
ALGOS = ("vpo", "grpo", "max_at_k")
ANCHORS = "paper (arXiv 2605.22817) best@30, VPO vs GRPO: Maze 0.593 vs 0.432; MuSiQue 0.832 vs 0.728"
SHOWN_K = (1, 4, 16, 30, 64)


def train(runs: Path, algo: str, seed: int, steps: int) -> str:
    out = runs / f"{algo}-{seed}"
    if not (out / "config.json").is_file():
        vevo("train", "--proposer", "tiny", "--suite", TRAIN_SUITE, "--algo", algo, "--steps", str(steps),
             "--seed", str(seed), "--out", str(out), "--quiet")
        print(f"trained {algo} seed {seed} ({steps} steps)", flush=True)
    return f"hf:{out}"


def train_reward(runs: Path, algo: str, seed: int, last: int = 30) -> tuple[float, float]:
    """Mean set reward of the first and of the last `last` steps (from the model's train_log.jsonl)."""
    rows = [json.loads(x) for x in (runs / f"{algo}-{seed}" / "train_log.jsonl").read_text().splitlines() if x]
    r = [x["mean_set_reward"] for x in rows if "mean_set_reward" in x]
    return float(np.mean(r[:last])), float(np.mean(r[-last:]))


def band(ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over rows and the half-width of its 95% t interval."""
    from evolve.stats import t95

    m = ys.mean(0)
    return m, (t95(len(ys) - 1) * ys.std(0, ddof=1) / np.sqrt(len(ys)) if len(ys) > 1 else 0 * m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workers", type=int, default=1, help="trainings (then evaluations) run side by side")
    ap.add_argument("--runs-dir", default="runs/offline_replication")
    ap.add_argument("--out", default="docs/results")
    a = ap.parse_args()
    cfg = {"seeds": [0, 1, 2], "steps": 300, "k": 64}
    problems = heldout()
    if a.quick:
        cfg, problems = {"seeds": [0, 1], "steps": 2, "k": 2}, problems[:2]
    runs = Path(a.runs_dir).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    jobs = [(algo, s) for s in cfg["seeds"] for algo in ALGOS]
    with ThreadPoolExecutor(a.workers) as ex:
        specs = dict(zip(jobs, ex.map(lambda j: train(runs, *j, cfg["steps"]), jobs)))
        evals = dict(zip(["tiny", *specs], ex.map(lambda sp: evaluate(runs, sp, problems, cfg["k"]),
                                                  ["tiny", *specs.values()])))
    k = cfg["k"]

    def curves(ev: dict, key: str) -> np.ndarray:  # mean over problems, k = 1..K
        return np.mean([r[key] for r in ev["problems"]], axis=0)

    res: dict[str, dict] = {}
    for arm in ("untrained", *ALGOS):
        evs = [evals["tiny"]] if arm == "untrained" else [evals[(arm, s)] for s in cfg["seeds"]]
        res[arm] = {key: np.array([curves(ev, key) for ev in evs]) for key in ("best_curve", "pass_curve")}
    shown = [x for x in SHOWN_K if x <= k]
    lines = ["| proposer | seeds | " + " | ".join(f"best@{x}" for x in shown) + " | " +
             " | ".join(f"pass@{x}" for x in shown) + " | train set reward, first → last 30 steps |",
             "|---" * (3 + 2 * len(shown)) + "|"]
    for arm, r in res.items():
        cells = []
        for key in ("best_curve", "pass_curve"):
            m, h = band(r[key])
            cells += [f"{m[x - 1]:.4f}" + (f" ± {h[x - 1]:.4f}" if len(r[key]) > 1 else "") for x in shown]
        if arm == "untrained":
            tr = "—"
        else:
            pairs = [train_reward(runs, arm, s) for s in cfg["seeds"]]
            tr = f"{np.mean([p[0] for p in pairs]):.4f} → {np.mean([p[1] for p in pairs]):.4f}"
        lines.append(f"| {arm} | {len(r['best_curve'])} | " + " | ".join(cells) + f" | {tr} |")
    at = min(30, k) - 1
    vpo, grpo = res["vpo"]["best_curve"][:, at], res["grpo"]["best_curve"][:, at]
    per_seed = ", ".join(f"seed {s}: {v - g:+.4f}" for s, v, g in zip(cfg["seeds"], vpo, grpo))
    cmd = "python bench/studies/offline_replication.py" + (" --quick" if a.quick else f" --workers {a.workers}")
    text = (f"Command: `{cmd}` (train on {TRAIN_SUITE}, {cfg['steps']} steps, training seeds "
            f"{', '.join(map(str, cfg['seeds']))}; `vevo eval --k {k} --seed 0` on {len(problems)} held-out problems; "
            "± is the 95% t half-width over training seeds)\n\n" + "\n".join(lines) +
            f"\n\nbest@{at + 1}, VPO − GRPO by training seed: {per_seed}; mean {np.mean(vpo - grpo):+.4f}, "
            f"ratio {np.mean(vpo) / np.mean(grpo):.3f}. {ANCHORS}.\n")
    print(text)
    out = runs if a.quick else Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "offline_replication_table.md").write_text(text)
    (out / "offline_replication.json").write_text(json.dumps(
        {"config": cfg, "train_suite": TRAIN_SUITE, "problems": problems, "algos": ALGOS,
         "curves": {arm: {key: v.tolist() for key, v in r.items()} for arm, r in res.items()},
         "per_problem": {arm: [evals["tiny"]["problems"]] if arm == "untrained" else
                         [evals[(arm, s)]["problems"] for s in cfg["seeds"]] for arm in res}}, indent=1))
    plot(res, k, out)


def plot(res: dict, k: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ks = np.arange(1, k + 1)
    for ax, key, name in ((axes[0], "best_curve", "best@k"), (axes[1], "pass_curve", "pass@k")):
        for arm, r in res.items():
            m, h = band(r[key])
            ax.plot(ks, m, label=arm, linestyle="--" if arm == "untrained" else "-")
            ax.fill_between(ks, m - h, m + h, alpha=0.15)
        ax.set(xscale="log", xlabel="k (candidates per problem)", ylabel=f"mean {name} over held-out problems",
               title=f"offline replication: {name}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "offline_replication.png", dpi=110)


if __name__ == "__main__":
    main()
