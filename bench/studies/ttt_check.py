"""Does a campaign's own-problem probe rise under the G = 8 training schedule? Issue #20's campaign-scale check,
pre-registered in docs/results/ttt_check.md (plan written before the run, results after).

Arms on ``pbe-hard-heldout``, bundled tiny proposer, 100 iterations, seeds 0..S-1, run one after another (the
arms interleaved within a seed):

* ``vpo-g8``: VPO, ``train.group 8`` (the trained proposer samples 8 completions per prompt), a step every
  iteration on that iteration's group (``train.every 1``, ``train.batch 1``), one epoch, lr 1e-3;
* ``none-g8``: no training, ``group 8``: the same search shape, so the two differ by the updates only.

Both probe settings are the measurement, not the schedule: every own problem (12) and 12 held-out ones, 4
completions each, before the first update and every 10 updates (evolve/training/probe.py: fixed prompts and sampling seed).
The check: per seed, the least-squares slope of the own probe per 10 policy versions; its mean over seeds and
95% t interval; met when the interval's lower end is > 0. ``none-g8`` never changes its policy, so its probe is
the ``before`` value at every version (slope 0 by construction). The search metrics (best_auc, best, solved at
equal evaluations; best_auc_wall, best_wall at equal wall clock) come from bench/studies/search_study.py's functions.

    .venv/bin/python bench/studies/ttt_check.py                # 5 seeds (about 70 min on 2 quiet cores)
    .venv/bin/python bench/studies/ttt_check.py --quick        # 2 seeds x 6 iterations: the pipeline

With ``--seed-dir DIR`` each finished run's measurements are kept as ``DIR/ARM-seed-S.json`` and a seed found
there is read, not rerun: a check longer than one session is committed seed by seed and finished by a later one
(run folders do not survive a machine). ``--runs-only`` runs and keeps seeds without the table (to run two seeds
side by side; the table is made by one invocation over all seeds once they are in).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench.studies import search_study  # noqa: E402
from bench.studies.search_study import at_wall, measure, probe_slope  # noqa: E402

SUITE = "pbe-hard-heldout"
PROBE = ["--train-probe-problems", "12", "--train-probe-group", "4"]  # --train-probe-every: --probe-every
ARMS = {"vpo-g8": ["--train", "vpo", "--train-group", "8", "--train-every", "1", "--train-batch", "1", *PROBE],
        "none-g8": ["--train", "none", "--group", "8"]}


def fmt(v: float | None) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:+.4f}"


def run(run_dir: Path, arm: str, seed: int, iterations: int, probe_every: int) -> None:
    """bench/studies/search_study.py's runner with this check's arm flags (and its probe interval for trained arms)."""
    probe = ["--train-probe-every", str(probe_every)] if arm != "none-g8" else []
    search_study.run(run_dir, arm, seed, iterations, [*ARMS[arm], *probe])


def seed_result(seed_dir: Path | None, runs: Path, arm: str, seed: int, iterations: int, probe_every: int) -> dict:
    """One seed's measurements: from ``seed_dir`` if kept there, else run (or read from its run folder) and kept."""
    kept = seed_dir / f"{arm}-seed-{seed}.json" if seed_dir else None
    if kept and kept.is_file():
        return json.loads(kept.read_text())
    d = runs / arm / f"seed-{seed}"
    run(d, arm, seed, iterations, probe_every)
    r = measure(d, iterations)
    if kept:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps({"seed": seed, "arm": arm, "iterations": iterations, **r}, default=float) + "\n")
    return r


def interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, lower, upper) of a 95% t interval."""
    from evolve.stats import mean_ci95

    mean, half = mean_ci95(values)
    return mean, mean - half, mean + half


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed+seeds-1")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated; the check needs vpo-g8 only")
    ap.add_argument("--table", default="ttt_check", help="name of the table, JSON and plot files")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--probe-every", type=int, default=10, help="policy versions between probes")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs-dir", default="runs/ttt_check")
    ap.add_argument("--out", default="docs/results")
    ap.add_argument("--seed-dir", default=None, help="keep each seed's measurements here; read kept seeds")
    ap.add_argument("--runs-only", action="store_true", help="run and keep the seeds; no table")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.iterations, args.probe_every = 2, 6, 2
    from evolve.analysis.arms import difference

    runs = Path(args.runs_dir)
    arms = [a for a in args.arms.split(",") if a]
    res: dict[str, dict[int, dict]] = {a: {} for a in arms}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for arm in arms:
            t = time.perf_counter()
            r = res[arm][seed] = seed_result(Path(args.seed_dir) if args.seed_dir else None, runs, arm, seed,
                                             args.iterations, args.probe_every)
            print(f"seed {seed} {arm}: best_auc {r['best_auc']:.4f} solved {r['solved']:.0f} own slope "
                  f"{probe_slope(r['learning'])} wall {r['account']['wall_seconds']:.0f}s "
                  f"[{time.perf_counter() - t:.0f}s]", flush=True)
    if args.runs_only:
        return
    seeds = sorted(res["vpo-g8"])
    for s in seeds:
        horizon = min(res[a][s]["account"]["wall_seconds"] for a in arms)
        for a in arms:
            res[a][s]["best_auc_wall"], res[a][s]["best_wall"] = at_wall(res[a][s], horizon)
    learn = {s: res["vpo-g8"][s]["learning"] for s in seeds}
    own = [probe_slope(learn[s]) for s in seeds]
    held = [probe_slope([{"step": r["step"], "probe_own": r["probe_heldout"]} for r in learn[s]]) for s in seeds]
    first = [next(r["probe_own"] for r in learn[s] if r["probe_own"] is not None) for s in seeds]
    last = [next(r["probe_own"] for r in reversed(learn[s]) if r["probe_own"] is not None) for s in seeds]
    m, lo, hi = interval([v for v in own if v is not None])
    hm, hlo, hhi = interval([v for v in held if v is not None])
    met = lo > 0
    cmd = " ".join(["python bench/studies/ttt_check.py"] + (["--quick"] if args.quick else []) +
                   ([f"--first-seed {args.first_seed}"] if args.first_seed else []) +
                   ([f"--seeds {args.seeds}"] if args.seeds != 5 and not args.quick else []) +
                   ([f"--arms {args.arms}"] if arms != list(ARMS) else []) +
                   ([f"--table {args.table}"] if args.table != "ttt_check" else []) +
                   ([f"--seed-dir {args.seed_dir}"] if args.seed_dir else []))
    lines = [f"Command: `{cmd}` ({len(seeds)} seeds, "
             f"{args.iterations} iterations, suite {SUITE}, probes every {args.probe_every} versions)", "",
             "### The check: own-problem probe slope (vpo-g8), per 10 policy versions", "",
             "| probe | per seed | mean | 95% CI |", "|---|---|---|---|",
             f"| own | {', '.join(fmt(v) for v in own)} | {fmt(m)} | [{fmt(lo)}, {fmt(hi)}] |",
             f"| held-out | {', '.join(fmt(v) for v in held)} | {fmt(hm)} | [{fmt(hlo)}, {fmt(hhi)}] |",
             f"| own, before → last | {', '.join(f'{a:.3f}→{b:.3f}' for a, b in zip(first, last))} | "
             f"{np.mean(first):.3f} → {np.mean(last):.3f} | |", "",
             f"**{'Met' if met else 'Not met'}**: the interval's lower end is {fmt(lo)}. none-g8: slope 0 by "
             "construction (its policy never changes).", "",
             "### Search (paired by seed, vpo-g8 − none-g8)", ""]
    lines += ["| metric | budget | mean none-g8 | mean vpo-g8 | difference | 95% CI |", "|---|---|---|---|---|---|"] \
        if "none-g8" in arms else ["(none-g8 was not run)"]
    for metric in ("best_auc", "best", "solved", "best_auc_wall", "best_wall") if "none-g8" in arms else ():
        d = difference({s: res["none-g8"][s][metric] for s in seeds}, {s: res["vpo-g8"][s][metric] for s in seeds},
                       metric, ("none-g8", "vpo-g8"))
        budget = "equal wall-clock" if "wall" in metric else "equal evaluations"
        lines.append(f"| {metric} | {budget} | {d.mean_a:.4f} | {d.mean_b:.4f} | {d.diff:+.4f} | "
                     f"[{d.lo:+.4f}, {d.hi:+.4f}] |")
    lines += ["", "### Compute (mean per run)", "", "| arm | wall s | generation s | tokens | evaluation s | "
              "training s | steps | probes s |", "|---|---|---|---|---|---|---|---|"]
    for a in arms:
        acc = {k: np.mean([res[a][s]["account"][k] for s in seeds]) for k in res[a][seeds[0]]["account"]}
        lines.append(f"| {a} | {acc['wall_seconds']:.0f} | {acc['gen_seconds']:.0f} | {acc['gen_tokens']:.0f} | "
                     f"{acc['eval_seconds']:.0f} | {acc['train_seconds']:.0f} | {acc['train_steps']:.0f} | "
                     f"{acc['probe_seconds']:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = runs if args.quick else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.table}_table.md").write_text(text)
    (out / f"{args.table}.json").write_text(json.dumps(
        {"seeds": seeds, "iterations": args.iterations, "suite": SUITE, "arms": ARMS, "own_slopes": own,
         "heldout_slopes": held, "met": met,
         "learning": learn}, indent=1, default=float))
    plot(learn, seeds, out / f"{args.table}.png")


def plot(learn: dict[int, list[dict]], seeds: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, style, colour in (("probe_own", "-", "tab:blue"), ("probe_heldout", "--", "tab:orange")):
        for s in seeds:
            pts = [(r["step"], r[key]) for r in learn[s] if r[key] is not None]
            if pts:
                x, y = zip(*pts)
                ax.plot(x, y, style, color=colour, alpha=0.3, lw=1)
        steps = sorted({r["step"] for s in seeds for r in learn[s] if r[key] is not None})
        means = [np.mean([r[key] for s in seeds for r in learn[s] if r["step"] == k and r[key] is not None])
                 for k in steps]
        ax.plot(steps, means, style, color=colour, lw=2.5, marker="o",
                label=f"{'own' if key == 'probe_own' else 'held-out'} (mean of {len(seeds)} seeds)")
    ax.set(xlabel="policy version (one VPO step per iteration)", ylabel="probe mean set reward",
           title="vpo-g8 on pbe-hard-heldout: fixed probes (thin: seeds)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
