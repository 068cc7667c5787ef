"""Loop overhead: ms per iteration of the campaign loop itself, with an instant proposer and an instant evaluator,
while the archive grows past 10,000 programs; and the same workload through OpenEvolve 0.4.x for comparison.

Acceptance target: <= 1 ms/iteration, flat (OpenEvolve was measured at 5 -> 49 ms of overhead per iteration as its
archive grows to ~900 programs).

    .venv/bin/python bench/perf/loop_overhead.py            # full: vevo to 15k programs, OpenEvolve to 1,500 (~3-5 min)
    .venv/bin/python bench/perf/loop_overhead.py --quick    # ~1 min (once the OpenEvolve venv exists)
    .venv/bin/python bench/perf/loop_overhead.py --no-openevolve

vevo side: a ``Campaign`` built directly (temp run dir, real SQLite file, one pbe problem, 2 islands) with an
in-process backend that returns G completions of m fresh programs (``def f(x): return x + k``, k from a counter, so
every candidate is new and gets evaluated and archived) and an evaluator that returns a d-entry vector from a hash
of the code at once (never solved, so the problem is never retired). m=4, G=2: 8 programs per iteration;
pipeline_depth 0 and 1. The time of iteration t is the gap between the ``on_iteration`` callbacks of t-1 and t,
so it covers everything the loop does: selection, prompt, parse/apply/dedupe, evaluate call, island update, the
SQLite transaction (WAL, synchronous=NORMAL: survives kill -9) and the checkpoint. A third column reruns depth 0
with ``PRAGMA synchronous=FULL`` (config ``archive_sync: full``: an fsync per commit) to show what durability
against power loss costs.
The archive grows to 15,000 so the 10k window is complete; a single campaign passes the 100 window in ~10
iterations, so that window also pools a few extra short campaigns (``--small-runs``).
The instant proposer and evaluator are `bench/perf/instant.py`.

OpenEvolve side: `bench/perf/openevolve_side.py` (a scratch venv, a stub OpenAI-compatible server, a driver that timestamps every admitted child).

Number of problems: the same loop over 1,000 copies of the problem (2,000 islands) against one problem, 400
iterations each (``--many-problems``): the per-iteration cost must not grow with the campaign's width either
(before the checkpoint became incremental it re-serialised every island each iteration: 11.8 ms/iteration at
1,000 problems).

Archive scale (``--archive-sizes``): `bench/perf/archive_scale.py`.

    .venv/bin/python bench/perf/loop_overhead.py --archive-sizes 1000,100000,1000000   # ~5 min, ~1 GB of temp disk

Windows (`bench/perf/windows.py`): the iterations after which the archive holds between T/1.5 and T*1.5 programs (capped at what the run
reached), T = 100, 1,000, 10,000; ms/iteration is the median over the window of 4-iteration means (a pipelined
loop alternates short and long gaps). Wall-clock numbers are printed, never asserted; the machine's load is
printed with them.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.perf.archive_scale import SCALE_ITERATIONS, SCALE_PROBLEMS, archive_scale  # noqa: E402
from bench.perf.instant import FreshBackend, HashEvaluator, bench_problem  # noqa: E402
from bench.perf.openevolve_side import DEFAULT_OE_VENV, ensure_oe_venv, run_openevolve  # noqa: E402
from bench.perf.windows import (ROLL, TARGETS, WINDOW_FACTOR, machine_load, med, pct, rolling,  # noqa: E402
                                window_bounds, window_samples)




SMALL_RUN_PROGRAMS = 150  # extra short campaigns give the 100 window more than ~10 samples


SCALING_ITERATIONS, SCALING_SKIP = 400, 50  # the many-problems comparison


def run_vevo(run_dir: str | Path, programs: int, depth: int, m: int = 4, group: int = 2, islands: int = 2,
             seed: int = 0, synchronous: str | None = None, n_problems: int = 1, members: int = 1,
             policy: str = "ucb") -> dict:
    """Grow a fresh campaign's archive to at least `programs` programs; per-iteration timings and sizes.

    Returns iterations, ms (per iteration 1..N, gap between on_iteration callbacks), sizes (archive programs after
    each iteration: the seed + m*G per iteration), seen (iteration numbers in callback order), and what the archive
    holds at the end (count, ids, per-iteration metrics) for correctness checks.

    synchronous: a diagnostic only -- "FULL" runs the campaign with ``archive_sync: full`` (an fsync per
    commit); None keeps the default (NORMAL).
    n_problems > 1: that many copies of the problem under their own ids (islands x n_problems islands, a seed
    each), to show that the per-iteration cost does not grow with the number of problems.
    members > 1: a proposer portfolio of that many members (one instant backend behind them all, so every
    program stays fresh) chosen by ``policy``: what choosing, rewarding and attributing cost per iteration."""
    from evolve.search.campaign import Campaign
    from evolve.config.schema import CampaignConfig

    import dataclasses

    per_iter = m * group
    iterations = max(1, -(-(programs - n_problems) // per_iter))  # the seeds are the first programs
    problem = bench_problem()
    probs = [problem] if n_problems == 1 else \
        [dataclasses.replace(problem, id=f"{problem.id}#{k}") for k in range(n_problems)]
    cfg = CampaignConfig(problems=[p.id for p in probs], proposer={"spec": "fresh"}, seed=seed,
                         search={"iterations": iterations, "islands": islands, "answers": m, "group": group,
                                 "pipeline_depth": depth}, portfolio={"policy": policy},
                         archive_sync="full" if synchronous == "FULL" else "normal")
    stamps: list[float] = []
    seen: list[int] = []

    def on_iteration(camp, it: int) -> None:
        stamps.append(time.perf_counter())
        seen.append(it)

    backend = FreshBackend(m)
    team = None
    if members > 1:
        from evolve.policies.portfolio import Member

        team = [(Member(f"m{i}"), backend) for i in range(members)]
    camp = Campaign(cfg, run_dir, probs, backend, HashEvaluator(), on_iteration=on_iteration, members=team)
    try:
        t0 = time.perf_counter()
        summary = camp.run()
        wall = time.perf_counter() - t0
        count = camp.archive.count_programs()
        ids = [r.id for r in camp.archive.programs()]
        metrics = camp.archive.metrics_rows()
    finally:
        camp.close()
    ms = [(b - a) * 1e3 for a, b in zip([t0] + stamps[:-1], stamps)]
    return {"depth": depth, "synchronous": synchronous, "iterations": iterations, "per_iteration": per_iter, "ms": ms,
            "sizes": [n_problems + per_iter * it for it in seen], "seen": seen, "wall_s": wall, "count": count, "ids": ids,
            "metrics": metrics, "summary": summary, "n_problems": n_problems}


def fmt(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def _label(r: dict) -> str:
    return f"vevo depth{r['depth']}" + (f" sync={r['synchronous']}*" if r.get("synchronous") else "")


def report(vevo_runs: list[dict], oe: dict | None, oe_note: str) -> None:
    cols = []  # (label, [(sizes, ms per iteration) per run], programs per iteration)
    for r in vevo_runs:
        runs = [(r["sizes"], r["ms"])] + [(x["sizes"], x["ms"]) for x in r.get("extra", [])]
        cols.append((_label(r), runs, r["per_iteration"]))
    if oe is not None:
        cols.append(("openevolve", [(oe["sizes"], oe["ms"])], 1))
    w = 26
    print(f"\nms per iteration: median over the window of (time of {ROLL} consecutive iterations) / {ROLL}; "
          "ms/program = ms/iteration / programs per iteration (vevo 8, openevolve 1); n = iterations in the window")
    extra = max((len(r.get("extra", [])) for r in vevo_runs), default=0)
    if extra:
        print(f"(vevo's 100 window pools {extra} more short campaigns grown to ~{SMALL_RUN_PROGRAMS} programs: "
              "one campaign passes it in ~10 iterations)")
    head = f"{'archive':>8} {'window':>11} | " + " | ".join(f"{c[0]:^{w}}" for c in cols)
    print(head)
    print(f"{'programs':>8} {'(programs)':>11} | " + " | ".join(f"{'ms/iter':>9} {'ms/prog':>9} {'n':>5} " for _ in cols))
    print("-" * len(head))
    medians: dict[tuple[str, int], float | None] = {}
    for t in TARGETS:
        cells = []
        for label, runs, per in cols:
            xs = [x for sizes, ms in runs for x in window_samples(sizes, rolling(ms), t)]
            m = med(xs)
            medians[(label, t)] = m
            cells.append(f"{fmt(m):>9} {fmt(None if m is None else m / per, 3):>9} {len(xs):>5} ")
        print(f"{t:>8} {f'{int(t / WINDOW_FACTOR)}-{int(t * WINDOW_FACTOR)}':>11} | " + " | ".join(cells))
    if any(r.get("synchronous") for r in vevo_runs):
        print("* archive_sync: full for this run (PRAGMA synchronous=FULL: an fsync per commit); the default is "
              "normal (WAL: survives kill -9)")
    if oe is not None:
        print("\nratio openevolve / vevo at the same archive size (medians above):")
        for label, _, per in cols[:-1]:
            parts = []
            for t in TARGETS:
                o, v = medians[("openevolve", t)], medians[(label, t)]
                parts.append(f"{t}: n/a" if o is None or v is None else
                             f"{t}: {o / v:.1f}x/iteration, {o / (v / per):.1f}x/program")
            print(f"  vs {label:<24} " + "   ".join(parts))
    print()
    for r in vevo_runs:
        ms = r["ms"][1:]
        print(f"{_label(r)}: {r['iterations']} iterations, {r['count']} programs in the archive, wall {r['wall_s']:.1f}s;"
              f" single-iteration gaps: median {fmt(med(ms))} ms, p90 {fmt(pct(ms, .9))} ms, "
              f"mean {fmt(statistics.fmean(ms) if ms else None)} ms")
    if oe is not None:
        ms = oe["ms"]
        print(f"openevolve {oe['version']}: {oe['iterations_done']} iterations ({oe['admitted']} children admitted, "
              f"{oe['errors']} failed, database holds {oe['final_size']} programs; "
              f"{'finished' if oe['finished'] else 'stopped at the time budget'}), wall {oe['wall_s']:.1f}s; "
              f"single-iteration gaps: median {fmt(med(ms))} ms, p90 {fmt(pct(ms, .9))} ms, "
              f"mean {fmt(statistics.fmean(ms) if ms else None)} ms")
        print("openevolve split (medians per window; controller and worker run concurrently, two tasks in flight):")
        wk = oe["workers"]
        reached = max(oe["sizes"]) if oe["sizes"] else 0
        for t in TARGETS:
            b = window_bounds(t, reached)
            if b is None:
                continue
            sub = med(window_samples(oe["sizes"], oe["submit_ms"], t))
            add = med(window_samples(oe["sizes"], oe["add_ms"], t))
            sel = [x for x in wk if b[0] <= x["n_snapshot"] <= b[1]]
            line = (f"  ~{t:>5} programs: controller: sample + snapshot of every program + submit {fmt(sub)} ms, "
                    f"database.add {fmt(add)} ms")
            if sel:
                task = med([(x["t1"] - x["t0"]) * 1e3 for x in sel])
                llm = med([x["llm"] * 1e3 for x in sel])
                ev = med([x["eval"] * 1e3 for x in sel])
                rest = med([(x["t1"] - x["t0"] - x["llm"] - x["eval"]) * 1e3 for x in sel])
                line += (f"; worker task {fmt(task)} ms = LLM call {fmt(llm)} + evaluate_program {fmt(ev)} + "
                         f"rebuild programs from the snapshot, prompt, parse {fmt(rest)}")
            print(line)
        st = oe["stub"]
        if st.get("n"):
            print(f"  stub server (the only 'waiting' on the LLM): {st['n']} requests, "
                  f"{1e3 * st['handler_s'] / st['n']:.2f} ms/request in its handler; the trivial evaluate() itself "
                  f"is a hash of a ~50-byte file (~0.01 ms)")
        if oe["sizes"] and max(oe["sizes"]) < TARGETS[-1] / WINDOW_FACTOR:
            print("  (OpenEvolve is not grown to 10k programs: its time per iteration grows with the database, "
                  "so that would take hours; raise --oe-iterations / --oe-budget to go further)")
    if oe_note:
        print(oe_note)


def portfolio_overhead(a, tmp: Path, programs: int, depths: list[int], log) -> None:
    """ms/iteration of one proposer and of an N-member ucb portfolio, runs interleaved (1, N, 1, N, ...) so a
    shared machine's load drifts over both; per run the median of 4-iteration means after the first 50
    iterations; the ratio of the runs' medians, and of the fastest runs (the least disturbed by other load)."""
    import shutil

    print(f"\nportfolio overhead: {programs} programs (8 per iteration), 2 islands, instant proposer + trivial "
          f"evaluator, {a.repeats} interleaved runs each; machine: {machine_load()}")
    for depth in depths:
        res: dict[int, list[float]] = {1: [], a.portfolio: []}
        for k in range(a.repeats):
            for n in (1, a.portfolio):
                log(f"depth {depth}, {n} member(s), run {k + 1}")
                d = tmp / f"pf-{depth}-{n}-{k}"
                r = run_vevo(d, programs, depth, members=n)
                shutil.rmtree(d, ignore_errors=True)
                res[n].append(med([x for x in rolling(r["ms"])[50:] if x is not None]))
        one, many = med(res[1]), med(res[a.portfolio])
        print(f"  depth {depth}: 1 proposer {fmt(one, 3)} ms/iteration (runs {', '.join(fmt(x, 3) for x in res[1])}); "
              f"{a.portfolio} members {fmt(many, 3)} ms/iteration (runs "
              f"{', '.join(fmt(x, 3) for x in res[a.portfolio])}); ratio of medians {many / one:.3f}, of the "
              f"fastest runs {min(res[a.portfolio]) / min(res[1]):.3f}")
    print(f"machine after: {machine_load()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="~1 minute: vevo to 2,000 programs, OpenEvolve to 700")
    ap.add_argument("--programs", type=int, default=None,
                    help="vevo archive size to grow to (default 15,000, so the 10k window 6,667-15,000 is complete)")
    ap.add_argument("--depths", default="0,1", help="pipeline depths to run (default 0,1)")
    ap.add_argument("--no-openevolve", action="store_true", help="vevo half only")
    ap.add_argument("--oe-iterations", type=int, default=None,
                    help="OpenEvolve iterations (default 1,500, so its 1k window 667-1,500 is complete)")
    ap.add_argument("--oe-budget", type=float, default=None, help="seconds OpenEvolve may run (default 300)")
    ap.add_argument("--oe-venv", type=Path, default=DEFAULT_OE_VENV, help="scratch venv (reused if present)")
    ap.add_argument("--dir", default=None, help="parent folder for the temp run folders (default: system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the temp run folder")
    ap.add_argument("--small-runs", type=int, default=5,
                    help=f"extra short campaigns (to {SMALL_RUN_PROGRAMS} programs) per column for the 100 window")
    ap.add_argument("--no-fsync-diagnostic", action="store_true",
                    help="skip the extra vevo depth0 run with PRAGMA synchronous=FULL (shows the fsync cost)")
    ap.add_argument("--many-problems", type=int, default=1000,
                    help="also time a campaign over this many problems (copies of one, 2 islands each) against one "
                         "problem, same iterations (0 skips)")
    ap.add_argument("--portfolio", type=int, default=0, metavar="N",
                    help="only compare one proposer against a portfolio of N members (ucb), interleaved runs")
    ap.add_argument("--repeats", type=int, default=3,
                    help="--portfolio: runs of each kind; --archive-sizes: resumes of each size")
    ap.add_argument("--archive-sizes", default=None, metavar="N,N,...",
                    help="only the archive-scale study: a synthetic archive of each size (e.g. 1000,100000,1000000) "
                         "resumed in a fresh process: restore seconds, ms/iteration, RSS per program")
    ap.add_argument("--scale-problems", type=int, default=SCALE_PROBLEMS, help="--archive-sizes: problems")
    ap.add_argument("--scale-iterations", type=int, default=SCALE_ITERATIONS,
                    help="--archive-sizes: iterations the resumed campaign runs")
    ap.add_argument("--scale-depth", type=int, default=1, help="--archive-sizes: pipeline depth")
    ap.add_argument("--profile", choices=("cpu", "mem"), default=None,
                    help="--archive-sizes: cProfile the resumed iterations, or tracemalloc the restored campaign")
    a = ap.parse_args()
    programs = a.programs or (2_000 if a.quick else 15_000)
    oe_iters = a.oe_iterations or (700 if a.quick else 1_500)
    oe_budget = a.oe_budget or (60.0 if a.quick else 300.0)
    depths = [int(x) for x in a.depths.split(",") if x.strip()]

    def log(msg: str) -> None:
        print(f"[loop_overhead] {msg}", file=sys.stderr, flush=True)

    tmp = tempfile.mkdtemp(prefix="vevo-loop-overhead-", dir=a.dir)
    log(f"run folder {tmp}")
    if a.portfolio > 1:
        return portfolio_overhead(a, Path(tmp), a.programs or 4_000, depths, log)
    if a.archive_sizes:
        try:
            return archive_scale([int(x) for x in a.archive_sizes.split(",") if x.strip()], a, Path(tmp), log)
        finally:
            if not a.keep:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
    t_all = time.perf_counter()
    load_before = machine_load()
    try:
        problem = bench_problem()
        vevo_runs = []
        for depth in depths:
            log(f"vevo: pipeline_depth={depth}, growing the archive to {programs} programs")
            vevo_runs.append(run_vevo(Path(tmp) / f"vevo-depth{depth}", programs, depth))
        if not a.no_fsync_diagnostic:
            log("vevo: diagnostic run, pipeline_depth=0 with archive_sync: full (an fsync per iteration)")
            vevo_runs.append(run_vevo(Path(tmp) / "vevo-fsync", programs, 0, synchronous="FULL"))
        for i, r in enumerate(vevo_runs):
            if r["count"] != 1 + r["iterations"] * r["per_iteration"]:
                log(f"warning: archive holds {r['count']} programs, expected {1 + r['iterations'] * r['per_iteration']}")
            r["extra"] = [run_vevo(Path(tmp) / f"vevo-small-{i}-{k}", SMALL_RUN_PROGRAMS, r["depth"],
                                   synchronous=r["synchronous"]) for k in range(a.small_runs)]
        scaling = []
        if a.many_problems > 1:
            for depth in depths:
                log(f"vevo: pipeline_depth={depth}, 1 problem vs {a.many_problems} problems, {SCALING_ITERATIONS} "
                    "iterations each")
                pair = [run_vevo(Path(tmp) / f"vevo-scaling-{n}-{depth}", n + 8 * SCALING_ITERATIONS, depth,
                                 n_problems=n) for n in (1, a.many_problems)]
                scaling.append((depth, pair))
        oe, note = None, ""
        if not a.no_openevolve:
            try:
                py, version, note = ensure_oe_venv(a.oe_venv, log)
                log(f"openevolve {version} in {a.oe_venv}: {oe_iters} iterations, budget {oe_budget:.0f}s")
                oe = run_openevolve(Path(tmp) / "openevolve", py, oe_iters, oe_budget, islands=2,
                                    seed_code=problem.seed_code, d=max(problem.n_tests, 1), log=log)
            except Exception as e:  # report the vevo half anyway
                note = f"openevolve: not measured ({type(e).__name__}: {e})"
        print(f"\nloop overhead: problem {problem.id} (d={problem.n_tests}), 2 islands, instant proposer + "
              f"trivial evaluator; vevo m=4 answers x G=2 completions = 8 programs/iteration, "
              f"SQLite archive in {tmp}")
        if oe is not None:
            print(f"openevolve {oe['version']} (scratch venv {a.oe_venv}): 1 program/iteration, stub OpenAI server "
                  f"on 127.0.0.1, full rewrites, 1 worker process, 2 islands, population_size above the run length")
        report(vevo_runs, oe, note)
        if scaling:
            print(f"\nper-iteration cost against the number of problems (2 islands each; median of 4-iteration means "
                  f"over iterations {SCALING_SKIP}-{SCALING_ITERATIONS}; the checkpoint rewrites only the islands "
                  "an iteration changed):")
            for depth, pair in scaling:
                cells = []
                for r in pair:
                    xs = [x for x in rolling(r["ms"])[SCALING_SKIP:] if x is not None]
                    n = r["n_problems"]
                    cells.append(f"{n} problem{'s' if n > 1 else ''} {fmt(med(xs))} ms/iteration")
                print(f"  vevo depth{depth}: " + ", ".join(cells))
        print(f"\nmachine: before {load_before}; after {machine_load()} (timings of a shared machine: spread between "
              "runs comes mostly from other load)")
        print(f"total bench wall time {time.perf_counter() - t_all:.0f}s")
    finally:
        if not a.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
