"""Which in-campaign training schedule moves the proposer on the problems being solved: the sweep behind the
default ``train`` schedule (issue #20). The rule was written in docs/results/ttt_sweep.md before the run.

Each configuration is a VPO campaign with the bundled tiny proposer on the first ``--problems`` problems of
``pbe-hard-train`` (sorted ids; never the study's ``pbe-hard-heldout``), seeds 0..S-1, everything but the
schedule equal (islands 2, m 4). After the run, the final policy (the trainer's last snapshot, loaded the way a
resume loads it) and the untrained proposer are probed on the campaign's own problems and on held-out ones
(evolve/training/probe.py: fixed prompts from the seed programs, fixed sampling seed, ``--probe-group`` completions per
problem): the gain is probe(after) - probe(before), paired by seed.

    .venv/bin/python bench/studies/ttt_sweep.py                # 3 schedules x 2 seeds (~35 min on 2 cores)
    .venv/bin/python bench/studies/ttt_sweep.py --quick        # the pipeline, small

Prints one table and writes it (with the command) to --out. Finished runs under --runs-dir are read, not rerun.
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

# name, train section (beyond algo: vpo), G, iteration budget as a share of --iterations (equal evaluations)
CONFIGS = [
    ("A every 10, 8 groups, 1 epoch (old default)", {"every": 10, "batch": 8, "epochs": 1, "replay_older": 0.0}, 2, 1.0),
    ("C every 2, 8 groups, 2 epochs, replay 0.5", {"every": 2, "batch": 8, "epochs": 2, "replay_older": 0.5}, 2, 1.0),
    # D (every 1, 16 groups, 2 epochs, replay 0.5) was dropped during the run: see docs/results/ttt_sweep.md
    ("E G 4, every 2, 8 groups, 2 epochs, replay 0.5", {"every": 2, "batch": 8, "epochs": 2, "replay_older": 0.5}, 4, 0.5),
]


def run_campaign(run_dir: Path, problems: list[str], seed: int, train: dict, group: int, iterations: int) -> float:
    """The campaign (resumed if unfinished); its wall seconds from the archive's clock."""
    from evolve.archive import Archive, archive_path

    db = archive_path(run_dir)
    # the trained G is the search's G, and probes every 5th update, as when this sweep ran (the defaults then)
    train = {"group": group, "probe_every": 5, **train}
    if not (db.is_file() and _finished(db, iterations)):
        cfg = {"problems": problems, "proposer": {"spec": "tiny"}, "seed": seed, "train": {"algo": "vpo", **train},
               "search": {"iterations": iterations, "islands": 2, "answers": 4, "group": group}}
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir.parent / f"{run_dir.name}.json").write_text(json.dumps(cfg))
        args = [sys.executable, "-m", "evolve.cli", "resume" if db.is_file() else "run"]
        args += [str(run_dir)] if db.is_file() else ["--quiet", "--out", str(run_dir), "--proposer", "tiny",
                                                      "--iterations", str(iterations), "--islands", "2",
                                                      "--answers", "4", "--group", str(group), "--seed", str(seed),
                                                      "--train", "vpo"] + \
            [a for p in problems for a in ("--problem", p)] + \
            [a for k, v in train.items() for a in ("--set", f"train.{k}={v}")]
        subprocess.run(args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with Archive(db, readonly=True) as a:
        ms = a.metrics_rows()
    return float(max((m.data.get("wall_seconds") or 0.0) for m in ms)) if ms else 0.0


def _finished(db: Path, iterations: int) -> bool:
    from evolve.archive import Archive, archive_path

    with Archive(db, readonly=True) as a:
        ms = a.metrics_rows()
    return bool(ms) and max(m.iteration for m in ms) >= iterations - 1


def probe_after(run_dir: Path, pool, k: int, group: int) -> dict:
    """The fixed probes of the run's final policy and of the untrained proposer (same prompts, same seed)."""
    import torch

    from evolve.training.campaign import CampaignTrainer
    from evolve.config.schema import load_run_config
    from evolve.training.probe import Prober
    from problems.registry import Registry
    from proposer.backends import make_backend

    cfg = load_run_config(run_dir / "config.yaml")
    reg = Registry()
    reg.load_builtins()
    problems = [reg.get(p) for p in cfg.problems]
    out = {}
    for when in ("before", "after"):
        torch.manual_seed(0)
        backend = make_backend("tiny")
        if when == "after":
            CampaignTrainer(cfg, run_dir, backend)  # loads and publishes the last snapshot, as a resume does
        prober = Prober(problems, seed=cfg.seed, k=k, group=group, m=cfg.search.answers,
                        temperature=cfg.sampling.temperature, max_tokens=cfg.sampling.max_tokens, style="compact")
        with torch.no_grad():
            r = prober.run(backend, pool)
        out[f"own_{when}"], out[f"heldout_{when}"] = r.get("probe_own"), r.get("probe_heldout")
        del backend
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=80)
    ap.add_argument("--problems", type=int, default=8, help="the first N problems of pbe-hard-train (sorted ids)")
    ap.add_argument("--probe-group", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-new-runs", action="store_true", help="only the finished runs under --runs-dir")
    ap.add_argument("--runs-dir", default="runs/ttt_sweep")
    ap.add_argument("--out", default="docs/results/ttt_sweep_table.md")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.iterations, args.problems, args.probe_group = 1, 6, 2, 1
    from evaluators.pool import SandboxPool
    from evolve.archive import archive_path
    from problems.suites import SUITES

    problems = sorted(p.id for p in SUITES["pbe-hard-train"]())[: args.problems]
    runs = Path(args.runs_dir)
    rows = []
    with SandboxPool(workers=2) as pool:
        for seed in range(args.seeds):
            for name, train, group, share in CONFIGS:
                tag = name.split()[0]
                run_dir = runs / f"{tag}-seed{seed}"
                if args.no_new_runs and not archive_path(run_dir).is_file():
                    continue
                wall = run_campaign(run_dir, problems, seed, train, group, max(2, round(args.iterations * share)))
                t = time.perf_counter()
                pr = probe_after(run_dir, pool, k=len(problems), group=args.probe_group)
                row = {"config": name, "seed": seed, "wall_s": wall, **pr,
                       "own_gain": pr["own_after"] - pr["own_before"],
                       "heldout_gain": (pr["heldout_after"] or 0) - (pr["heldout_before"] or 0)}
                rows.append(row)
                print(json.dumps(row), f"(probes {time.perf_counter() - t:.0f} s)", flush=True)
    table = ["| config | seeds | own gain (mean) | own gains | held-out gain (mean) | wall s (mean) |",
             "|---|---|---|---|---|---|"]
    for name, *_ in CONFIGS:
        rs = [r for r in rows if r["config"] == name]
        if not rs:
            continue
        g = [r["own_gain"] for r in rs]
        h = [r["heldout_gain"] for r in rs]
        w = [r["wall_s"] for r in rs]
        table.append(f"| {name} | {len(rs)} | {sum(g) / len(g):+.4f} | {', '.join(f'{x:+.4f}' for x in g)} | "
                     f"{sum(h) / len(h):+.4f} | {sum(w) / len(w):.0f} |")
    cmd = "python bench/studies/ttt_sweep.py" + (" --quick" if args.quick else "")
    text = f"Command: `{cmd}` (problems: {', '.join(problems)}; {args.iterations} iterations at G 2)\n\n" + \
        "\n".join(table) + "\n\nRows:\n\n" + "\n".join(f"    {json.dumps(r)}" for r in rows) + "\n"
    print(text)
    if not args.quick:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
