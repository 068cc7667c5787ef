"""The within-archive A/B of training: the trained policy and its frozen start proposing side by side.

Each campaign has two members of one portfolio, ``policy`` (the bundled tiny proposer, trained by VPO during the
run) and ``base`` (the same weights with the LoRA adapter switched off: the policy's starting point, never trained),
chosen by ``round_robin`` (each gets half the iterations, in shuffled rounds), on ``pbe-hard-heldout``. Both
propose into one archive, from the same islands and the same parent selection, and every program is attributed.
Per member and seed: improvements per 100 proposals (a proposal is one answer asked for: completions × m; an
improvement is a program that beats max(parent, seed) or passes a test its parent fails, evolve/analysis/portfolio_stats.py)
and problems first solved. Paired over seeds (policy − base, the same campaign): mean and 95% t interval. The
per-policy-version trend pools the seeds: for every version v of the policy, the two members' rates over the
iterations in which v was the newest policy (base's iterations are assigned to the version in effect then).

    .venv/bin/python bench/studies/portfolio_ab.py            # 10 seeds x 100 iterations (~35 min on 2 shared cores)
    .venv/bin/python bench/studies/portfolio_ab.py --quick    # 2 seeds x 8 iterations: a smoke run of the pipeline

Campaigns that already have a finished archive under --runs-dir are read, not rerun (--fresh reruns them);
an unfinished one is resumed. Parameters are fixed before the run; nothing is tuned toward an answer.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

MEMBERS = ("policy", "base")


def paired(diffs: list[float]) -> dict:
    from evolve.stats import mean_ci95

    mean, half = mean_ci95(diffs)
    return {"n": len(diffs), "mean": mean, "ci95": half}


def config(args, seed: int) -> dict:
    # 8 archive groups of the search's G per step, probes every 5th: the defaults when this study was registered
    return {"suite": args.suite, "seed": seed, "train": {"algo": "vpo", "every": args.train_every, "batch": 8,
                                                         "group": args.group, "probe_every": 5},
            "search": {"iterations": args.iterations, "islands": args.islands, "answers": args.answers,
                       "group": args.group},
            "proposers": [{"name": "policy", "spec": "tiny", "train": True},
                          {"name": "base", "spec": "tiny", "train": False}],
            "portfolio": {"policy": "round_robin"}}


def run_campaigns(args, log) -> list[Path]:
    import yaml

    from evolve.archive import archive_path

    vevo = [sys.executable, "-m", "evolve.cli"]  # run from ROOT: this checkout's code, whatever is installed
    runs = []
    for seed in range(args.seeds):
        run = Path(args.runs_dir) / f"seed{seed}"
        runs.append(run)
        done = archive_path(run)
        if done.exists() and not args.fresh and _finished(run, args.iterations):
            log(f"seed {seed}: finished archive at {run}, read as is")
            continue
        t0 = time.perf_counter()
        if done.exists() and not args.fresh:
            cmd = vevo + ["resume", str(run), "--quiet"]
        else:
            if run.exists():
                import shutil

                shutil.rmtree(run)
            run.parent.mkdir(parents=True, exist_ok=True)
            cfg_path = run.parent / f"seed{seed}.yaml"
            cfg_path.write_text(yaml.safe_dump(config(args, seed), sort_keys=False))
            cmd = vevo + ["run", str(cfg_path), "--out", str(run), "--quiet"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        log(f"seed {seed}: {time.perf_counter() - t0:.0f}s")
    return runs


def _finished(run: Path, iterations: int) -> bool:
    from evolve.archive import Archive, archive_path

    with Archive(archive_path(run), readonly=True) as a:
        last = a.last_iteration() or 0
        probs = json.loads(a.get_meta("problems", "[]") or "[]")
        return last >= iterations or len(a.solved_problems()) >= len(probs)


def analyse(runs: list[Path]) -> dict:
    from evolve.archive import Archive, archive_path
    from evolve.analysis.portfolio_stats import improving_programs, member_stats

    per_seed, trend = [], {}
    for run in runs:
        with Archive(archive_path(run), readonly=True) as a:
            st = member_stats(a)
            rows = a.portfolio_rows()
            groups = a.groups_by_id(a.group_ids())
            good = improving_programs(a)
        # the newest policy version in effect at each iteration (from the policy member's own rows)
        effect, v = {}, 0
        for r in rows:
            if r.member == "policy":
                v = max(v, r.policy_version)
            effect[r.iteration] = v
        member = {r.iteration: r.member for r in rows}
        for g in groups:
            cell = trend.setdefault(effect.get(g.iteration, 0), {m: {"proposals": 0, "improvements": 0,
                                                                     "iterations": 0} for m in MEMBERS})
            cell[member[g.iteration]]["proposals"] += len(g.completions) * g.m
            cell[member[g.iteration]]["iterations"] += 1
        for _, it, ok in good:
            if ok and it in member:
                trend[effect[it]][member[it]]["improvements"] += 1
        per_seed.append({"run": str(run), "members": {m: {k: st.get(m, {}).get(k, 0) for k in
                                                          ("iterations", "proposals", "programs", "improvements",
                                                           "improvement_rate", "solved_first", "tokens",
                                                           "gen_seconds")} for m in MEMBERS},
                         "policy_versions": max(effect.values(), default=0)})
    rate = paired([s["members"]["policy"]["improvement_rate"] - s["members"]["base"]["improvement_rate"]
                   for s in per_seed])
    first = paired([s["members"]["policy"]["solved_first"] - s["members"]["base"]["solved_first"] for s in per_seed])
    means = {m: {k: sum(s["members"][m][k] for s in per_seed) / len(per_seed)
                 for k in ("improvement_rate", "solved_first", "proposals", "improvements")} for m in MEMBERS}
    for cell in trend.values():
        for m in MEMBERS:
            c = cell[m]
            c["rate"] = 100.0 * c["improvements"] / c["proposals"] if c["proposals"] else None
    return {"per_seed": per_seed, "means": means, "paired_rate": rate, "paired_solved_first": first,
            "trend": {str(k): trend[k] for k in sorted(trend)}}


def render(args, res: dict, minutes: float) -> str:
    def f(x, p=2):
        return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{p}f}"

    lines = ["# Portfolio A/B: the trained policy and its frozen start in one archive", "",
             f"Command: `{' '.join(['python', 'bench/studies/portfolio_ab.py'] + args.argv)}`", "",
             f"Date: {time.strftime('%Y-%m-%d')}; machine: 2 shared cores, no GPU; {minutes:.0f} min.", "",
             f"Setup: {args.seeds} seeds (0..{args.seeds - 1}) × {args.iterations} iterations on {args.suite}, "
             f"{args.islands} islands, m={args.answers}, G={args.group}; members `policy` (tiny, VPO every "
             f"{args.train_every} iterations, LoRA) and `base` (the same weights, adapter off), "
             "`portfolio.policy: round_robin`.", "",
             "## Per member (mean over seeds)", "",
             "| member | improvements / 100 proposals | problems first solved | proposals | improvements |",
             "|---|---|---|---|---|"]
    for m in MEMBERS:
        x = res["means"][m]
        lines.append(f"| {m} | {f(x['improvement_rate'])} | {f(x['solved_first'])} | {f(x['proposals'], 0)} | "
                     f"{f(x['improvements'], 1)} |")
    r, s = res["paired_rate"], res["paired_solved_first"]
    lines += ["", "## Paired over seeds (policy − base)", "",
              "| measure | mean difference | 95% CI | seeds |", "|---|---|---|---|",
              f"| improvements / 100 proposals | {f(r['mean'])} | ± {f(r['ci95'])} | {r['n']} |",
              f"| problems first solved | {f(s['mean'])} | ± {f(s['ci95'])} | {s['n']} |", "",
              "## Per seed", "", "| seed | policy rate | base rate | policy first solved | base first solved | "
              "policy versions |", "|---|---|---|---|---|---|"]
    for i, sd in enumerate(res["per_seed"]):
        p, b = sd["members"]["policy"], sd["members"]["base"]
        lines.append(f"| {i} | {f(p['improvement_rate'])} | {f(b['improvement_rate'])} | {p['solved_first']} | "
                     f"{b['solved_first']} | {sd['policy_versions']} |")
    lines += ["", "## Per policy version (seeds pooled; base's iterations assigned to the version in effect)", "",
              "| version | policy iterations | policy rate | base iterations | base rate |", "|---|---|---|---|---|"]
    for v, cell in res["trend"].items():
        lines.append(f"| {v} | {cell['policy']['iterations']} | {f(cell['policy']['rate'])} | "
                     f"{cell['base']['iterations']} | {f(cell['base']['rate'])} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--train-every", type=int, default=10)
    ap.add_argument("--islands", type=int, default=2)
    ap.add_argument("--answers", type=int, default=4)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--suite", default="pbe-hard-heldout")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results"))
    ap.add_argument("--runs-dir", default=str(ROOT / "runs" / "portfolio_ab"))
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    args.argv = sys.argv[1:]
    if args.quick:
        args.seeds, args.iterations, args.train_every = 2, 8, 4

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    t0 = time.perf_counter()
    runs = run_campaigns(args, log)
    res = analyse(runs)
    minutes = (time.perf_counter() - t0) / 60
    text = render(args, res, minutes)
    print(text)
    if not args.quick:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "portfolio_ab.json").write_text(json.dumps({"args": {k: v for k, v in vars(args).items()},
                                                           **res}, indent=1))
        (out / "portfolio_ab.md").write_text(text)
        log(f"wrote {out / 'portfolio_ab.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
