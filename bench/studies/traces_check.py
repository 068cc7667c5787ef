"""Does training on a campaign's traces make a better proposer for new problems? The pre-registered check of
issue #37 (docs/results/traces_check_plan.md: the plan, committed before any run; results in
docs/results/traces_check.md).

Untrained campaigns of the bundled tiny proposer on ``pbe-hard-train`` (seeds 0-2, 100 iterations) → their traces
(`vevo export --format traces`) → ``offline``: `vevo train --traces` (VPO, 100 steps, training seeds 0-2); against
``online``: `vevo train` on the same problems' seed prompts for the same steps, and the ``untrained`` proposer. Each
proposer is read by `vevo eval --k 30 --seed 0` on 19 held-out problems no campaign saw. Contrasts (primary
family, Holm): offline − untrained and offline − online, best@30 paired by problem (a trained arm's value: its
mean over the training seeds), the 95% t interval beside the sign-flip p.

    .venv/bin/python bench/studies/traces_check.py            # the check (about 45 minutes on 2 cores)
    .venv/bin/python bench/studies/traces_check.py --quick    # the pipeline on a tiny budget (minutes)

Every step's output is kept under --runs-dir and read, not redone, when the command is started again.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TRAIN_SUITE = "pbe-hard-train"
LEAKY = "pbe/hard-reduce-1002"  # a corpus program solves it (docs/results/decisive_study_plan.md's amendment)
FAMILY = (("offline", "untrained"), ("offline", "online"))
ARMS = ("untrained", "offline", "online")


def heldout() -> list[str]:
    from problems.suites import SUITES

    return [p.id for p in SUITES["pbe-heldout"]() + SUITES["pbe-hard-heldout"]() if p.id != LEAKY]


def vevo(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "evolve.cli", *args], cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"vevo {' '.join(args[:2])} failed ({r.returncode}): {r.stderr.strip()[-600:]}")
    return r.stdout


def build(runs: Path, cfg: dict) -> dict[str, list[str]]:
    """The proposers of each arm (specs), making whatever is not made yet."""
    camps, traces = runs / "campaigns", runs / "traces"
    if not all((camps / f"seed-{s}" / "archive.db").is_file() for s in cfg["campaign_seeds"]):
        vevo("run", "--quiet", "--suite", TRAIN_SUITE, "--proposer", "tiny", "--train", "none", "--iterations",
             str(cfg["iterations"]), "--seeds", ",".join(map(str, cfg["campaign_seeds"])), "--train-probe-every",
             "0", "--out", str(camps))
    if not (traces / "manifest.json").is_file():
        vevo("export", str(camps), "--format", "traces", "--out", str(traces))
    arms: dict[str, list[str]] = {"untrained": ["tiny"], "offline": [], "online": []}
    for s in cfg["train_seeds"]:
        for arm, extra in (("offline", ["--traces", str(traces)]), ("online", ["--suite", TRAIN_SUITE])):
            out = runs / f"{arm}-{s}"
            if not (out / "config.json").is_file():
                vevo("train", "--proposer", "tiny", *extra, "--algo", "vpo", "--steps", str(cfg["steps"]), "--seed",
                     str(s), "--out", str(out), "--quiet")
            arms[arm].append(f"hf:{out}")
    return arms


def evaluate(runs: Path, spec: str, problems: list[str], k: int) -> dict:
    """`vevo eval` of one proposer, kept in runs/eval-*.json."""
    name = spec.replace("hf:", "").replace(str(runs), "").strip("/").replace("/", "_") or spec
    path = runs / f"eval-{name}.json"
    if not path.is_file():
        args = ["eval", "--proposer", spec, "--k", str(k), "--seed", "0", "--json", "--quiet"]
        for p in problems:
            args += ["--problem", p]
        path.write_text(vevo(*args))
    return json.loads(path.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs-dir", default="runs/traces_check")
    ap.add_argument("--out", default="docs/results")
    a = ap.parse_args()
    cfg = {"campaign_seeds": [0, 1, 2], "train_seeds": [0, 1, 2], "iterations": 100, "steps": 100, "k": 30}
    problems = heldout()
    if a.quick:
        cfg = {"campaign_seeds": [0], "train_seeds": [0], "iterations": 3, "steps": 2, "k": 2}
        problems = problems[:2]
    runs = Path(a.runs_dir)
    runs.mkdir(parents=True, exist_ok=True)
    arms = build(runs, cfg)
    from evolve.stats import holm, paired_contrast

    k = cfg["k"]
    per: dict[str, dict[str, list[float]]] = {}  # arm -> problem -> best@k curve (mean over the arm's proposers)
    for arm, specs in arms.items():
        curves = [{r["problem"]: r["best_curve"] for r in evaluate(runs, s, problems, k)["problems"]} for s in specs]
        per[arm] = {p: list(np.mean([c[p] for c in curves], axis=0)) for p in problems}
    value = {arm: [per[arm][p][-1] for p in problems] for arm in ARMS}
    rows = []
    for b, a_ in FAMILY:
        c = paired_contrast(value[a_], value[b], n_resamples=100_000, seed=0)
        rows.append({"name": f"best@{k}: {b} − {a_}", **c})
    for r, h in zip(rows, holm({r["name"]: r["p_sign_flip"] for r in rows})):
        r["p_holm"], r["reject"] = h["p_holm"], h["reject"]
    lines = ["| contrast | n | B − A | 95% t CI | sign-flip p | Holm p | decision (α 0.05) |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['n']} | {r['mean']:+.4f} | [{r['lo']:+.4f}, {r['hi']:+.4f}] | "
              f"{r['p_sign_flip']:.4f} | {r['p_holm']:.4f} | {'reject H0' if r['reject'] else 'not rejected'} |"
              for r in rows]
    means = "\n".join(f"| {arm} | {np.mean(value[arm]):.4f} |" for arm in ARMS)
    cmd = "python bench/studies/traces_check.py" + (" --quick" if a.quick else "")
    text = (f"Command: `{cmd}` ({len(problems)} held-out problems, {len(cfg['train_seeds'])} training seeds, "
            f"{cfg['steps']} steps, k = {k})\n\n### Primary family (Holm within it)\n\n" + "\n".join(lines) +
            f"\n\n### Mean best@{k} over the held-out problems\n\n| arm | best@{k} |\n|---|---|\n{means}\n")
    print(text)
    out = runs if a.quick else Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "traces_check_table.md").write_text(text)
    (out / "traces_check.json").write_text(json.dumps({"config": cfg, "problems": problems, "arms": arms,
                                                       "best_curves": per, "contrasts": rows}, indent=1))
    plot(per, problems, k, out)


def plot(per: dict, problems: list[str], k: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    ks = np.arange(1, k + 1)
    for arm in ARMS:
        ys = np.array([per[arm][p] for p in problems])
        m = ys.mean(0)
        h = 1.96 * ys.std(0, ddof=1) / np.sqrt(len(problems)) if len(problems) > 1 else 0 * m
        ax.plot(ks, m, label=arm)
        ax.fill_between(ks, m - h, m + h, alpha=0.15)
    ax.set(xscale="log", xlabel="k (candidates per problem)", ylabel="mean best@k over held-out problems",
           title="traces check: best@k on held-out problems")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "traces_check.png", dpi=110)


if __name__ == "__main__":
    main()
