"""Does a trained proposer make the search better? The pre-registered study of issue #33
(docs/results/decisive_study_plan.md: the plan, committed before any arm ran; results in
docs/results/decisive_study.md).

Arms ``iid``, ``none``, ``grpo``, ``vpo`` (only the flags in ``ARMS`` differ; everything else at the shipped
defaults: G = 8, m = 4, 2 islands, a training step after every iteration), the bundled tiny proposer on the
suite ``pbe-study``, 100 iterations, probes off, seeds 0..23 paired by seed. Within a seed the four arms run in
the plan's order; ``--workers 2`` runs two seeds side by side (a deviation the write-up lists: equal-evaluation
metrics do not depend on timing, because a seed's campaign is deterministic whatever the load; the wall-clock
numbers of such runs are not a quiet machine's).

Registered tests (evolve/stats.py): per contrast B − A paired by seed, the mean with its 95% t interval and the
two-sided sign-flip p (100,000 Monte Carlo patterns, seed 0), Holm within each family. Primary: best_auc at equal
evaluations, vpo − grpo and vpo − none. Secondary (5): best_auc at equal wall clock vpo − grpo, vpo − none (their
runs need ``--wall``; unmeasured they stay nan and still count in Holm's m); solved at T vpo − grpo, vpo − none;
best_auc none − iid.

The equal-wall-clock runs (``--wall``): arms ``none``, ``grpo``, ``vpo`` with ``--budget-seconds W``, W the median
wall clock of the ``none`` arm's primary runs (fixed by them, so they must all be measured first), the area under
best@time over seconds 0..W. With two workers the second runs its seed's arms rotated by one (grpo, vpo, none), so
every arm shares the machine with each of the other two arms alike.

    .venv/bin/python bench/studies/decisive_study.py --workers 2          # the primary runs, then the tables
    .venv/bin/python bench/studies/decisive_study.py --workers 2 --wall   # then the equal-wall-clock runs too
    .venv/bin/python bench/studies/decisive_study.py --workers 2 --final  # and the final policies' best@k slopes
    .venv/bin/python bench/studies/decisive_study.py --quick [--wall] [--final]  # 2 seeds x 4 iterations

The paper's first claim (``--final``): each trained primary run (grpo, vpo) is regenerated from its seed where its
folder is gone (the campaign is deterministic, so its best_auc must equal the measured one; a run that differs is
reported), then `vevo eval --run RUN --k 64 --seed 0 --json` reads its final policy on the suite's problems; per
run, the least-squares slope of the problems' mean best@k on log k over k = 1..64; vpo − grpo paired by seed.

Finished runs under --runs-dir are read, not rerun; an unfinished one is resumed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bench.studies.search_study import at_wall, measure, run, seed_band  # noqa: E402

SUITE = "pbe-study"
COMMON = ["--train-probe-every", "0"]
ARMS = {"iid": ["--strategy", "iid", "--train", "none"], "none": ["--train", "none"],
        "grpo": ["--train", "grpo"], "vpo": ["--train", "vpo"]}
PRIMARY = (("best_auc", "grpo", "vpo"), ("best_auc", "none", "vpo"))
FINAL = (("best_at_k_slope", "grpo", "vpo"),)
FINAL_ARMS, FINAL_K = ("grpo", "vpo"), 64
SECONDARY = (("best_auc_wall", "grpo", "vpo"), ("best_auc_wall", "none", "vpo"), ("solved", "grpo", "vpo"),
             ("solved", "none", "vpo"), ("best_auc", "iid", "none"))
WALL_ARMS = ("none", "grpo", "vpo")
NO_CAP = 100_000  # the wall-clock runs' --iterations: never the rule that stops them
N_RESAMPLES = 100_000
T80 = 0.858  # one-sided t_{0.8} at 23 degrees of freedom (0.842 as df grows): the power term of the MDE


class Measured:
    """Each finished run's measurement, kept in one JSON file (committed with the results) so that a later
    session, whose checkout has no run folders, goes on from the seeds already measured instead of rerunning."""

    def __init__(self, path: Path, iterations: int, budget_seconds: float | None = None):
        self.path, self.lock = path, threading.Lock()
        fixed = {"iterations": iterations, **({"budget_seconds": budget_seconds} if budget_seconds else {})}
        self.data = json.loads(path.read_text()) if path.is_file() else {**fixed, "runs": {}}
        for k, v in fixed.items():
            if self.data.get(k) != v:
                raise SystemExit(f"{path} holds runs of {k} {self.data.get(k)}, not {v}")

    def get(self, arm: str, seed: int) -> dict | None:
        return self.data["runs"].get(f"{arm}/{seed}")

    def put(self, arm: str, seed: int, m: dict) -> None:
        with self.lock:
            self.data["runs"][f"{arm}/{seed}"] = m
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, default=float))
            tmp.replace(self.path)


def one_seed(runs: Path, seed: int, iterations: int, kept: Measured) -> dict[str, dict]:
    out = {}
    for arm, flags in ARMS.items():
        if (m := kept.get(arm, seed)) is not None:
            out[arm] = m
            continue
        d = runs / arm / f"seed-{seed}"
        t = time.perf_counter()
        run(d, arm, seed, iterations, [*flags, *COMMON], suite=SUITE)
        m = json.loads(json.dumps(measure(d, iterations), default=float))
        m["load1"] = os.getloadavg()[0]
        kept.put(arm, seed, m)
        out[arm] = m
        acc = m["account"]
        print(f"seed {seed} {arm}: best_auc {m['best_auc']:.4f} solved {m['solved']:.0f} evaluations "
              f"{m['evaluations']} wall {acc['wall_seconds']:.0f}s "
              f"(train {acc['train_seconds']:.0f}s) [{time.perf_counter() - t:.0f}s]", flush=True)
    return out


def wall_seed(runs: Path, seed: int, order: tuple[str, ...], budget: float, kept: Measured) -> dict[str, dict]:
    """One seed's equal-wall-clock runs, arms in ``order``: best@time's area over seconds 0..budget."""
    out = {}
    for arm in order:
        if (m := kept.get(arm, seed)) is None:
            d = runs / "wall" / arm / f"seed-{seed}"
            run(d, arm, seed, NO_CAP, [*ARMS[arm], *COMMON, "--budget-seconds", repr(budget)], suite=SUITE)
            full = json.loads(json.dumps(measure(d, NO_CAP), default=float))
            auc, best = at_wall(full, budget)
            m = {"best_auc_wall": auc, "best_wall": best, "iterations_done": len(full["clock"][0]),
                 "stopped_by": full["stopped_by"], "evaluations": full["evaluations"], "account": full["account"],
                 "clock": full["clock"], "curve": full["curve"], "load1": os.getloadavg()[0]}
            kept.put(arm, seed, m)
            print(f"seed {seed} {arm} (wall {budget:.1f}s): best_auc_wall {auc:.4f} iterations "
                  f"{m['iterations_done']} stopped by {m['stopped_by']}", flush=True)
        out[arm] = m
    return out


def final_seed(runs: Path, seed: int, iterations: int, primary: dict[str, dict], k: int,
               kept: Measured) -> dict[str, dict]:
    """One seed's trained runs at their final policies: best@k for k = 1..k on the run's problems, its slope on
    log k; the run regenerated first if its folder is gone."""
    import subprocess

    out = {}
    for arm in FINAL_ARMS:
        if (m := kept.get(arm, seed)) is None:
            d = runs / arm / f"seed-{seed}"
            run(d, arm, seed, iterations, [*ARMS[arm], *COMMON], suite=SUITE)
            regen = measure(d, iterations)["best_auc"]
            r = subprocess.run([sys.executable, "-m", "evolve.cli", "eval", "--run", str(d), "--k", str(k), "--seed",
                                "0", "--json", "--quiet"], cwd=ROOT, capture_output=True, text=True, check=True)
            rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
            curve = np.mean([row["best@k"] for row in rows], axis=0)
            slope = float(np.polyfit(np.log(np.arange(1, len(curve) + 1)), curve, 1)[0])
            m = {"best_at_k_slope": slope, "best_at_k": curve.tolist(),
                 "pass_at_k": np.mean([row["pass@k"] for row in rows], axis=0).tolist(),
                 "policy_version": rows[0]["policy_version"], "per_problem": rows,
                 "best_auc_regenerated": float(regen), "best_auc_primary": primary[arm]["best_auc"],
                 "reproduced": abs(float(regen) - primary[arm]["best_auc"]) < 1e-9}
            kept.put(arm, seed, m)
            print(f"seed {seed} {arm} final policy v{m['policy_version']}: best@{k} slope on log k {slope:.4f}, "
                  f"best@1 {curve[0]:.4f} best@{k} {curve[-1]:.4f}; regenerated run "
                  f"{'reproduces' if m['reproduced'] else 'DIFFERS FROM'} the primary best_auc", flush=True)
        out[arm] = m
    return out


def contrast_rows(res: dict, seeds: list[int], family: tuple) -> list[dict]:
    from evolve.stats import holm, paired_contrast, t95

    rows, ps = [], {}
    for metric, a, b in family:
        name = f"{metric}: {b} − {a}"
        if all(metric in res[x].get(s, {}) for x in (a, b) for s in seeds) and seeds:
            xa, xb = (np.array([res[x][s][metric] for s in seeds], dtype=float) for x in (a, b))
            c = paired_contrast(xa, xb, n_resamples=N_RESAMPLES, seed=0)
            c["mean_a"], c["mean_b"] = float(xa.mean()), float(xb.mean())
            c["sd_pairs"] = float((xb - xa).std(ddof=1)) if len(seeds) > 1 else float("nan")
            # the smallest true difference this many seeds detect with 80% power (two-sided 0.05, t approximation)
            c["mde80"] = float((t95(len(seeds) - 1) + T80) * c["sd_pairs"] / np.sqrt(len(seeds)))
        else:  # registered, not measured: nan, still one of Holm's m
            c = {"n": 0, "mean": float("nan"), "lo": float("nan"), "hi": float("nan"), "p_sign_flip": float("nan"),
                 "mean_a": float("nan"), "mean_b": float("nan"), "sd_pairs": float("nan"), "mde80": float("nan")}
        rows.append({"name": name, "metric": metric, "a": a, "b": b, **c})
        ps[name] = c["p_sign_flip"]
    for r, h in zip(rows, holm(ps)):
        r["p_holm"], r["reject"] = h["p_holm"], h["reject"]
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| contrast | n | mean A | mean B | B − A | 95% t CI | sign-flip p | Holm p | decision (α 0.05) | "
             "SD of pairs | MDE (80% power) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dec = "not measured" if r["n"] == 0 else ("reject H0" if r["reject"] else "not rejected")
        lines.append(f"| {r['name']} | {r['n']} | {r['mean_a']:.4f} | {r['mean_b']:.4f} | {r['mean']:+.4f} | "
                     f"[{r['lo']:+.4f}, {r['hi']:+.4f}] | {r['p_sign_flip']:.4f} | {r['p_holm']:.4f} | {dec} | "
                     f"{r['sd_pairs']:.4f} | {r['mde80']:.4f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=24)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--workers", type=int, default=1, help="seeds run side by side (each its four arms in order)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--wall", action="store_true", help="also the equal-wall-clock runs (after the primary ones)")
    ap.add_argument("--final", action="store_true", help="also the trained runs' final policies' best@k (k to 64)")
    ap.add_argument("--runs-dir", default="runs/decisive_study")
    ap.add_argument("--out", default="docs/results")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.iterations = 2, 4
    runs = Path(args.runs_dir)
    out = runs if args.quick else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kept = Measured(out / "decisive_study_runs.json", args.iterations)
    res: dict[str, dict[int, dict]] = {a: {} for a in ARMS}
    with ThreadPoolExecutor(args.workers) as ex:
        done = ex.map(lambda s: one_seed(runs, s, args.iterations, kept), range(args.seeds))
        for seed, got in zip(range(args.seeds), done):
            for arm, m in got.items():
                res[arm][seed] = m
    seeds = sorted(res["none"])
    wall = {}
    if args.wall:
        budget = float(np.median([res["none"][s]["account"]["wall_seconds"] for s in seeds]))
        kept_w = Measured(out / "decisive_study_wall_runs.json", NO_CAP, budget)
        rotated = WALL_ARMS[1:] + WALL_ARMS[:1]
        with ThreadPoolExecutor(args.workers) as ex:
            done = ex.map(lambda s: wall_seed(runs, s, WALL_ARMS if s % 2 == 0 or args.workers == 1 else rotated,
                                              budget, kept_w), seeds)
            for seed, got in zip(seeds, done):
                for arm, m in got.items():
                    res[arm][seed]["best_auc_wall"] = m["best_auc_wall"]
                    wall.setdefault(arm, {})[seed] = m
        wall_note = (f"equal-wall-clock runs: W = {budget:.3f} s (the median wall clock of the none arm's primary "
                     "runs); stopped by: " + ", ".join(
                         f"{a} " + "/".join(sorted({str(wall[a][s]['stopped_by']) for s in seeds})) for a in WALL_ARMS)
                     + "; iterations done (mean): " + ", ".join(
                         f"{a} {np.mean([wall[a][s]['iterations_done'] for s in seeds]):.1f}" for a in WALL_ARMS))
    final = {}
    if args.final:
        k = 2 if args.quick else FINAL_K
        kept_f = Measured(out / "decisive_study_final_runs.json", args.iterations)
        with ThreadPoolExecutor(args.workers) as ex:
            done = ex.map(lambda s: final_seed(runs, s, args.iterations, {a: res[a][s] for a in FINAL_ARMS}, k,
                                               kept_f), seeds)
            for seed, got in zip(seeds, done):
                for arm, m in got.items():
                    res[arm][seed]["best_at_k_slope"] = m["best_at_k_slope"]
                    final.setdefault(arm, {})[seed] = m
        not_repro = [f"{a}/{s}" for a in FINAL_ARMS for s in seeds if not final[a][s]["reproduced"]]
        final_rows = contrast_rows(res, seeds, FINAL)
        final_text = (f"\n\n### The paper's first claim: final policies, slope of best@k on log k (k = 1..{k})\n\n"
                      + table(final_rows) + "\n\nMean best@k over seeds at k = 1, 8, 30, 64: " + "; ".join(
                          f"{a} " + ", ".join(f"{np.mean([final[a][s]['best_at_k'][x - 1] for s in seeds]):.4f}"
                                             for x in (1, 8, 30, 64) if x <= k) for a in FINAL_ARMS)
                      + f". Regenerated runs that differ from their primary best_auc: {not_repro or 'none'}.")
    primary, secondary = contrast_rows(res, seeds, PRIMARY), contrast_rows(res, seeds, SECONDARY)
    acc_lines = ["| arm | wall s | generation s | tokens | evaluation s | training s | train wait s | steps |",
                 "|---|---|---|---|---|---|---|---|"]
    for a in ARMS:
        acc = {k: float(np.mean([res[a][s]["account"].get(k, np.nan) for s in seeds]))
               for k in res[a][seeds[0]]["account"]}
        acc_lines.append(f"| {a} | {acc['wall_seconds']:.0f} | {acc['gen_seconds']:.0f} | {acc['gen_tokens']:.0f} | "
                         f"{acc['eval_seconds']:.0f} | {acc['train_seconds']:.0f} | "
                         f"{acc.get('train_wait_seconds', float('nan')):.0f} | {acc['train_steps']:.0f} |")
    probs = sorted(res["none"][seeds[0]]["per_problem"])
    prob_lines = ["| problem | " + " | ".join(f"{a} solved (of {len(seeds)})" for a in ARMS) + " | " +
                  " | ".join(f"{a} mean best" for a in ARMS) + " |", "|---" * (1 + 2 * len(ARMS)) + "|"]
    for p in probs:
        cells = [str(sum(res[a][s]["per_problem"].get(p, {}).get("first_solve") is not None for s in seeds))
                 for a in ARMS]
        cells += [f"{np.mean([res[a][s]['per_problem'].get(p, {}).get('best') or 0.0 for s in seeds]):.3f}"
                  for a in ARMS]
        prob_lines.append(f"| {p} | " + " | ".join(cells) + " |")
    cmd = ("python bench/studies/decisive_study.py" + (" --quick" if args.quick else f" --workers {args.workers}")
           + (" --wall" if args.wall else "") + (" --final" if args.final else ""))
    text = (f"Command: `{cmd}` ({len(seeds)} seeds, {args.iterations} iterations, suite {SUITE})\n\n"
            + (f"The {wall_note}.\n\n" if wall else "") +
            "### Primary family (Holm within it)\n\n" + table(primary) +
            "\n\n### Secondary family (Holm within it)\n\n" + table(secondary)
            + (final_text if final else "") +
            "\n\n### Compute (mean per run)\n\n" + "\n".join(acc_lines) +
            "\n\n### Per problem (exploratory)\n\n" + "\n".join(prob_lines) +
            "\n\n### Per seed\n\n| seed | " + " | ".join(f"{a} best_auc | {a} solved" for a in ARMS) + " |\n" +
            "|---" * (1 + 2 * len(ARMS)) + "|\n" +
            "\n".join(f"| {s} | " + " | ".join(f"{res[a][s]['best_auc']:.4f} | {res[a][s]['solved']:.0f}"
                                               for a in ARMS) + " |" for s in seeds) + "\n")
    print(text)
    (out / "decisive_study_table.md").write_text(text)
    (out / "decisive_study.json").write_text(json.dumps(
        {"seeds": seeds, "iterations": args.iterations, "suite": SUITE, "arms": ARMS, "common": COMMON,
         "primary": primary, "secondary": secondary,
         "runs": {a: {s: {k: v for k, v in res[a][s].items() if k not in ("curve", "clock")} for s in seeds}
                  for a in ARMS},
         "wall": {a: {s: {k: v for k, v in wall[a][s].items() if k not in ("curve", "clock")} for s in seeds}
                  for a in wall},
         "final": ({"contrasts": final_rows, "runs": {a: {s: {k: v for k, v in final[a][s].items()
                                                               if k != "per_problem"} for s in seeds}
                                                      for a in final}} if final else {})}, indent=1, default=float))
    plot(res, seeds, args.iterations, out)
    if wall:
        plot_wall(wall, seeds, budget, out)


def plot(res, seeds, iterations: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    grid = np.arange(iterations + 1, dtype=float)
    for a in ARMS:
        for ax, k in ((axes[0], 1), (axes[1], 2)):
            m, h = seed_band([res[a][s] for s in seeds], k, grid)
            ax.plot(grid, m, label=a)
            ax.fill_between(grid, m - h, m + h, alpha=0.15)
    axes[0].set(xlabel="iteration", ylabel="mean best score over problems", title=f"{SUITE}: best so far")
    axes[1].set(xlabel="iteration", ylabel="problems solved", title=f"{SUITE}: solved so far")
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "decisive_study.png", dpi=110)


def plot_wall(wall, seeds, budget: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.studies.search_study import wall_curve
    from evolve.analysis.curves import step_at

    fig, ax = plt.subplots(figsize=(6, 4.2))
    grid = np.linspace(0.0, budget, 201)
    for a in WALL_ARMS:
        ys = np.array([step_at(*wall_curve(wall[a][s]), grid, past_end=None) for s in seeds])
        m = ys.mean(0)
        h = 1.96 * ys.std(0, ddof=1) / np.sqrt(len(seeds)) if len(seeds) > 1 else 0 * m
        ax.plot(grid, m, label=a)
        ax.fill_between(grid, m - h, m + h, alpha=0.15)
    ax.set(xlabel="wall seconds", ylabel="mean best score over problems", title=f"{SUITE}: best so far at W")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "decisive_study_wall.png", dpi=110)


if __name__ == "__main__":
    main()
