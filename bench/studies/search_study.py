"""Does in-campaign training make the search better? The pre-registered study of issue #20
(docs/results/search_study.md holds the plan, written before the run, then the results).

Arms ``none``, ``grpo``, ``vpo``: campaigns with the bundled tiny proposer on ``pbe-hard-heldout``, seeds
0..S-1, everything but ``train.algo`` equal and at the shipped defaults of the time (``SCHEDULE``: the default
training schedule then, pinned since the default changed). Seeds are run one after another, the arms interleaved
within a seed, so load on the machine falls on every arm alike. Per run, from its archive alone:

* at equal evaluations (every arm proposes the same candidates per iteration): ``best_auc`` (primary: the mean
  over iterations 0..T of the mean over problems of the best score found so far), ``best`` and ``solved`` at T;
* at equal wall-clock time: per seed, the horizon W is the shortest of the arms' runs; ``best_auc_wall`` (the
  same area, over seconds 0..W) and ``best_wall`` (at W);
* the account (evolve/analysis/account.py): generation, evaluation, training, probe and wall seconds;
* learning (trained arms): the fixed probes' reward on the campaign's own problems and on held-out ones, by
  policy version (evolve/training/probe.py); the slope of the own probe per 10 versions, per seed, then its mean and 95%
  t interval over seeds. ``none`` never changes its policy, so its probe is its trained arms' ``before`` value at
  every version, by construction (same problems, prompts and sampling seed).

Differences are trained arm minus ``none`` (and vpo minus grpo), paired by seed, with a 95% t interval
(evolve/analysis/arms.py).

    .venv/bin/python bench/studies/search_study.py               # 10 seeds x 3 arms (about an hour on 2 quiet cores)
    .venv/bin/python bench/studies/search_study.py --quick       # 2 seeds x 6 iterations: the pipeline

Finished runs under --runs-dir are read, not rerun; an unfinished one is resumed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ARMS = ("none", "grpo", "vpo")
SUITE = "pbe-hard-heldout"
# the schedule this study was registered and run with (the shipped defaults then; docs/results/search_study.md):
# a step every 10 iterations on 8 archive groups of G = 2, probes every 5th update; pinned so that it reruns as run
SCHEDULE = ["--train-every", "10", "--train-batch", "8", "--train-group", "2", "--train-probe-every", "5"]


def run(run_dir: Path, arm: str, seed: int, iterations: int, flags: list[str] | None = None,
        suite: str = SUITE) -> None:
    """One campaign of ``suite`` through the CLI; ``flags`` (default ``--train ARM``) set the arm. A finished
    run is read, not rerun; an unfinished or killed one (or one with a raised budget) is resumed."""
    from evolve.archive import Archive, archive_path

    from evolve.liveness import NAME as RUNNING

    db = archive_path(run_dir)
    if db.is_file():
        with Archive(db, readonly=True) as a:
            ms = a.metrics_rows()
        # a run killed after its last iteration's metrics but before that iteration's training step still holds
        # running.json (removed whenever a run ends otherwise): resume finishes the step
        if ms and max(m.iteration for m in ms) >= iterations - 1 and not (run_dir / RUNNING).exists():
            return
        args = ["resume", str(run_dir), "--iterations", str(iterations)]  # unfinished, or a raised budget
    else:
        arm_flags = flags if flags is not None else ["--train", arm, *SCHEDULE]
        args = ["run", "--quiet", "--suite", suite, "--proposer", "tiny", "--iterations", str(iterations),
                "--seed", str(seed), *arm_flags, "--out", str(run_dir)]
    subprocess.run([sys.executable, "-m", "evolve.cli", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def _area(xs: np.ndarray, ys: np.ndarray, horizon: float, step: float) -> tuple[float, float]:
    """(mean of the step function over [0, horizon] on a grid of `step`, its value at horizon)."""
    from evolve.analysis.curves import step_at

    grid = np.arange(0.0, horizon + 1e-9, step)
    vals = step_at(xs, ys, grid, past_end=None)
    return float(vals.mean()), float(vals[-1])


def measure(run_dir: Path, iterations: int) -> dict:
    from evolve.archive import Archive, archive_path
    from evolve.analysis.account import account, wall_clock
    from evolve.analysis.curves import run_curves
    from evolve.training.probe import learning

    db = archive_path(run_dir)
    xs, solved, best = run_curves(db, "iterations")
    from evolve.search.campaign import summarize
    from evolve.launch.runner import seed_result

    with Archive(db, readonly=True) as a:
        metrics, training = a.metrics_rows(), a.training_rows()
        summary = summarize(a)
    it, wall = wall_clock(metrics)
    auc, at_t = _area(xs, best, iterations, 1.0)
    kept = seed_result(-1, summary)  # per problem: first solve iteration (None: never) and best scalar
    return {"best_auc": auc, "best": at_t, "solved": _area(xs, solved, iterations, 1.0)[1],
            "per_problem": kept["per_problem"], "evaluations": kept["evaluations"], "stopped_by": kept["stopped_by"],
            "curve": (xs.tolist(), best.tolist(), solved.tolist()), "clock": (it.tolist(), wall.tolist()),
            "account": account(metrics, training), "learning": learning(training)}


def wall_curve(m: dict) -> tuple[np.ndarray, np.ndarray]:
    """best@time: the iteration curve put on the run's own clock (the value after iteration i holds from the
    wall second iteration i was committed); (seconds, best)."""
    from evolve.analysis.curves import on_clock

    xs, best, _ = m["curve"]
    return on_clock(xs, best, *m["clock"])


def at_wall(m: dict, horizon: float) -> tuple[float, float]:
    """(area under best@time over [0, horizon], its value at horizon)."""
    return _area(*wall_curve(m), horizon, max(horizon / 500, 1e-3))


def probe_slope(learn: list[dict]) -> float | None:
    """Least-squares slope of the own probe per 10 policy versions (None with fewer than 3 probes)."""
    pts = [(r["step"], r["probe_own"]) for r in learn if r.get("probe_own") is not None]
    if len(pts) < 3:
        return None
    x, y = np.array(pts, float).T
    return float(np.polyfit(x, y, 1)[0] * 10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs-dir", default="runs/search_study")
    ap.add_argument("--out", default="docs/results")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.iterations = 2, 6
    from evolve.analysis.arms import difference, t95
    from evolve.stats import mean_ci95

    runs = Path(args.runs_dir)
    res: dict[str, dict[int, dict]] = {a: {} for a in ARMS}
    for seed in range(args.seeds):
        for arm in ARMS:
            d = runs / arm / f"seed-{seed}"
            t = time.perf_counter()
            run(d, arm, seed, args.iterations)
            res[arm][seed] = measure(d, args.iterations)
            acc = res[arm][seed]["account"]
            print(f"seed {seed} {arm}: best_auc {res[arm][seed]['best_auc']:.4f} solved {res[arm][seed]['solved']:.0f} "
                  f"wall {acc['wall_seconds']:.0f}s (train {acc['train_seconds']:.0f}s) [{time.perf_counter() - t:.0f}s]",
                  flush=True)
    seeds = sorted(res["none"])
    for s in seeds:  # equal wall-clock: the shortest arm of the seed sets the horizon
        horizon = min(res[a][s]["account"]["wall_seconds"] for a in ARMS)
        for a in ARMS:
            res[a][s]["best_auc_wall"], res[a][s]["best_wall"] = at_wall(res[a][s], horizon)
            res[a][s]["horizon_s"] = horizon
    metrics = ("best_auc", "best", "solved", "best_auc_wall", "best_wall")
    diffs = []
    for a, b in (("none", "grpo"), ("none", "vpo"), ("grpo", "vpo")):
        for m in metrics:
            diffs.append(difference({s: res[a][s][m] for s in seeds}, {s: res[b][s][m] for s in seeds}, m, (a, b)))
    lines = ["| metric | budget | B − A | mean A | mean B | difference | 95% CI | SD of pairs | MDE (80% power) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for d in diffs:
        pairs = np.array([res[d.b][s][d.metric] - res[d.a][s][d.metric] for s in seeds])
        sd = float(pairs.std(ddof=1)) if len(pairs) > 1 else float("nan")
        mde = (t95(len(pairs) - 1) + 0.883) * sd / np.sqrt(len(pairs))  # t_{0.8, 9} = 0.883
        budget = "equal wall-clock" if "wall" in d.metric else "equal evaluations"
        lines.append(f"| {d.metric} | {budget} | {d.b} − {d.a} | {d.mean_a:.4f} | {d.mean_b:.4f} | {d.diff:+.4f} | "
                     f"[{d.lo:+.4f}, {d.hi:+.4f}] | {sd:.4f} | {mde:.4f} |")
    acc_lines = ["| arm | wall s | generation s | tokens | evaluation s | training s | steps | probes s |",
                 "|---|---|---|---|---|---|---|---|"]
    for a in ARMS:
        acc = {k: np.mean([res[a][s]["account"][k] for s in seeds]) for k in res[a][seeds[0]]["account"]}
        acc_lines.append(f"| {a} | {acc['wall_seconds']:.0f} | {acc['gen_seconds']:.0f} | {acc['gen_tokens']:.0f} | "
                         f"{acc['eval_seconds']:.0f} | {acc['train_seconds']:.0f} | {acc['train_steps']:.0f} | "
                         f"{acc['probe_seconds']:.0f} |")
    slope_lines = ["| arm | seeds with ≥ 3 probes | own probe slope per 10 versions (mean) | 95% CI | held-out slope | "
                   "own before → last (mean) |", "|---|---|---|---|---|---|"]
    slopes = {}
    for a in ("grpo", "vpo"):
        own = [probe_slope(res[a][s]["learning"]) for s in seeds]
        held = [probe_slope([{"step": r["step"], "probe_own": r["probe_heldout"]} for r in res[a][s]["learning"]])
                for s in seeds]
        own_v = np.array([v for v in own if v is not None])
        held_v = np.array([v for v in held if v is not None])
        firsts = [next((r["probe_own"] for r in res[a][s]["learning"] if r["probe_own"] is not None), np.nan)
                  for s in seeds]
        lasts = [next((r["probe_own"] for r in reversed(res[a][s]["learning"]) if r["probe_own"] is not None), np.nan)
                 for s in seeds]
        mean, half = mean_ci95(own_v)
        ci = f"[{mean - half:+.4f}, {mean + half:+.4f}]" if own_v.size >= 2 else "n/a"
        slopes[a] = own
        slope_lines.append(f"| {a} | {own_v.size} | {mean:+.4f} | {ci} | "
                           f"{held_v.mean() if held_v.size else float('nan'):+.4f} | {np.nanmean(firsts):.3f} → "
                           f"{np.nanmean(lasts):.3f} |")
    slope_lines.append("| none | (policy never changes) | 0 by construction | | | |")
    cmd = "python bench/studies/search_study.py" + (" --quick" if args.quick else "")
    text = (f"Command: `{cmd}` ({len(seeds)} seeds, {args.iterations} iterations, suite {SUITE})\n\n"
            "### Differences (paired by seed)\n\n" + "\n".join(lines) + "\n\n### Compute (mean per run)\n\n" +
            "\n".join(acc_lines) + "\n\n### Learning: fixed probes (evolve/training/probe.py)\n\n" + "\n".join(slope_lines) +
            "\n\n### Per seed\n\n| seed | " + " | ".join(f"{a} best_auc | {a} solved | {a} wall s" for a in ARMS) +
            " |\n" + "|---" * (1 + 3 * len(ARMS)) + "|\n" +
            "\n".join(f"| {s} | " + " | ".join(f"{res[a][s]['best_auc']:.4f} | {res[a][s]['solved']:.0f} | "
                                               f"{res[a][s]['account']['wall_seconds']:.0f}" for a in ARMS) + " |"
                      for s in seeds) + "\n")
    print(text)
    out = Path(args.out)
    if args.quick:
        out = runs
    out.mkdir(parents=True, exist_ok=True)
    (out / "search_study_table.md").write_text(text)
    (out / "search_study.json").write_text(json.dumps(
        {"seeds": seeds, "iterations": args.iterations, "suite": SUITE,
         "runs": {a: {s: {k: v for k, v in res[a][s].items() if k not in ("curve", "clock")} for s in seeds}
                  for a in ARMS},
         "differences": [d.__dict__ for d in diffs], "probe_slopes": slopes}, indent=1, default=float))
    plot(res, seeds, args.iterations, out)


def seed_band(runs: list[dict], k: int, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over runs of curve ``k`` (1: best, 2: solved) on ``grid``, and the half-width of its normal 95% band."""
    from evolve.analysis.curves import step_at

    ys = np.array([step_at(np.asarray(r["curve"][0]), np.asarray(r["curve"][k]), grid, past_end=None) for r in runs])
    m = ys.mean(0)
    return m, (1.96 * ys.std(0, ddof=1) / np.sqrt(len(runs)) if len(runs) > 1 else 0 * m)


def plot(res, seeds, iterations: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evolve.analysis.curves import step_at

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    grid = np.arange(iterations + 1, dtype=float)
    for a in ARMS:
        m, h = seed_band([res[a][s] for s in seeds], 1, grid)
        axes[0].plot(grid, m, label=a)
        axes[0].fill_between(grid, m - h, m + h, alpha=0.2)
        horizon = min(min(res[b][s]["account"]["wall_seconds"] for b in ARMS) for s in seeds)
        tg = np.linspace(0, horizon, 200)
        wy = []
        for s in seeds:
            wy.append(step_at(*wall_curve(res[a][s]), tg, past_end=None))
        wy = np.array(wy)
        axes[1].plot(tg, wy.mean(0), label=a)
        if a != "none":
            pts = [(r["step"], r["probe_own"]) for s in seeds for r in res[a][s]["learning"] if r["probe_own"] is not None]
            if pts:
                v = sorted({p[0] for p in pts})
                axes[2].plot(v, [np.mean([y for x, y in pts if x == k]) for k in v], marker="o", label=f"{a} own")
            pts = [(r["step"], r["probe_heldout"]) for s in seeds for r in res[a][s]["learning"]
                   if r["probe_heldout"] is not None]
            if pts:
                v = sorted({p[0] for p in pts})
                axes[2].plot(v, [np.mean([y for x, y in pts if x == k]) for k in v], ls="--", label=f"{a} held-out")
    axes[0].set(xlabel="iteration (equal evaluations)", ylabel="mean best score over problems",
                title=f"best@t, mean and 95% CI over {len(seeds)} seeds")
    axes[1].set(xlabel="wall seconds (to the shortest run of all seeds)", ylabel="mean best score",
                title="best@time (equal wall clock)")
    axes[2].set(xlabel="policy version", ylabel="probe mean set reward", title="fixed probes (mean over seeds)")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "search_study.png", dpi=110)


if __name__ == "__main__":
    main()
