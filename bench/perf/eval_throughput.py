"""Candidates/second: the warm-worker sandbox vs a fresh `python` subprocess per candidate (the usual
approach), on the same MBPP problems (reference solutions + their asserts), same parallelism, one run.

    .venv/bin/python bench/perf/eval_throughput.py [--n 200] [--workers 2] [--repeats 3] [--layer-costs] [--as-user NAME]

It also prints where the sandbox's CPU goes per candidate (this process, the workers, the candidate processes
they fork) and the workers' and candidates' minor page faults: on a VM the fork's page-table copy and the
copy-on-write faults after it are most of the cost, which is what to watch when changing the worker.
With --layer-costs it also runs the sandbox with each isolation layer left off in turn (``SandboxPool(disable=)``)
and prints what each layer costs per candidate against all layers on, measured in the same run (as an ordinary
user also with user namespaces and Landlock both off, the unsandboxed baseline the user-namespace jail is paid
against). With --as-user NAME (run as root) the whole bench runs again as that ordinary user (created if missing),
under an interpreter that user can run (``bench/checks/as_user.py``): the sandbox it measures is then the non-root one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluators.pool import SandboxPool  # noqa: E402
from problems.model import AssertCase, Problem  # noqa: E402

MBPP = next((d / "shared" / "data" / "mbpp" / "mbpp.jsonl" for d in (ROOT.parent, ROOT.parent.parent)
             if (d / "shared" / "data").is_dir()), ROOT.parent / "shared" / "data" / "mbpp" / "mbpp.jsonl")


def load(n: int) -> list[tuple[Problem, str]]:
    items = []
    with open(MBPP) as f:
        for line in f:
            row = json.loads(line)
            p = Problem(id=f"mbpp/{row['task_id']}", seed_code="", entry_point=None, time_limit=10,
                        setup_code=row.get("test_setup_code") or "",
                        tests=[AssertCase(t) for t in row["test_list"]])
            items.append((p, row["code"]))
            if len(items) >= n:
                break
    return items


def fresh_subprocess(problem: Problem, code: str) -> bool:
    """The usual approach: write program + tests to a file, run a new interpreter, read the verdicts."""
    body = code + "\n" + problem.setup_code + "\nimport json\nres = []\n"
    for t in problem.tests:
        body += f"try:\n    exec({t.code!r})\n    res.append(1)\nexcept BaseException:\n    res.append(0)\n"
    body += "print(json.dumps(res))\n"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cand.py")
        Path(path).write_text(body)
        try:
            out = subprocess.run([sys.executable, path], capture_output=True, timeout=10, cwd=d, text=True)
            return all(json.loads(out.stdout.strip().splitlines()[-1]))
        except Exception:
            return False


def _proc_usage(pid: int) -> tuple[float, float, int, int]:
    """(own CPU s, reaped children's CPU s, own minor faults, children's minor faults) of a process."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return (int(f[11]) + int(f[12])) / tck, (int(f[13]) + int(f[14])) / tck, int(f[7]), int(f[8])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layer-costs", action="store_true", help="also time the sandbox with each layer off")
    ap.add_argument("--as-user", metavar="NAME", help="run as this ordinary user (from root; created if missing)")
    a = ap.parse_args()
    if a.as_user:
        sys.exit(as_user(a.as_user))
    items = load(a.n)
    sb, fr = [], []
    usage = [0.0, 0.0, 0.0, 0, 0]  # orchestrator CPU, workers CPU, candidates CPU, worker faults, candidate faults
    with SandboxPool(workers=a.workers) as pool:
        pool.evaluate_many(items[:10])  # warm-up
        # Test compute is the same in both approaches; a few MBPP tasks spend seconds in their own tests
        # (mbpp/123 sums amicable numbers below 10,000), which says nothing about the harness. Measure the
        # tasks whose tests run under 50 ms, as MBPP's nearly all do, and say how many were left out.
        walls = [e.artifacts.get("wall") or 0.0 for e in pool.evaluate_many(items)]
        heavy = [p.id for (p, _), w in zip(items, walls) if w > 0.05]
        items = [it for it, w in zip(items, walls) if w <= 0.05]
        for _ in range(a.repeats):
            pids = [h.worker_pid for h in pool._all]
            before, cpu = [_proc_usage(p) for p in pids], time.process_time()
            t = time.perf_counter()
            evs = pool.evaluate_many(items)
            sb.append(len(items) / (time.perf_counter() - t))
            usage[0] += time.process_time() - cpu
            if [h.worker_pid for h in pool._all] == pids:  # no worker was replaced meanwhile
                for u0, u1 in zip(before, [_proc_usage(p) for p in pids]):
                    for k in range(4):
                        usage[1 + k] += u1[k] - u0[k]
            ok_sb = sum(e.solved for e in evs)
            t = time.perf_counter()
            with ThreadPoolExecutor(a.workers) as ex:
                oks = list(ex.map(lambda it: fresh_subprocess(*it), items))
            fr.append(len(items) / (time.perf_counter() - t))
        iso = pool.isolation
    s, f = statistics.median(sb), statistics.median(fr)
    print(f"problems: {len(items)} MBPP (reference solutions), workers: {a.workers}, repeats: {a.repeats}; "
          f"left out (tests alone > 50 ms): {', '.join(heavy) or 'none'}")
    print(f"running as uid {os.getuid()} under {sys.executable}; sandbox: {iso.get('summary')}")
    print(f"isolation: {iso['network']}, {iso['filesystem']}, pid namespace {iso.get('pid')}, ipc namespace "
          f"{iso.get('ipc')}, cgroup {iso.get('cgroup')}, uid {iso['uid']}")
    print(f"sandbox (warm fork):      {s:8.1f} candidates/s  (solved {ok_sb}/{len(items)})")
    print(f"fresh python subprocess:  {f:8.1f} candidates/s  (solved {sum(oks)}/{len(items)})")
    print(f"ratio (medians of {a.repeats} repeats): {s / f:.1f}x  (target >= 10x)")
    n = a.repeats * len(items)
    print(f"sandbox CPU per candidate: orchestrator {usage[0] / n * 1e3:.2f} ms, workers {usage[1] / n * 1e3:.2f} ms, "
          f"candidate processes {usage[2] / n * 1e3:.2f} ms; minor page faults per candidate: workers "
          f"{usage[3] / n:.0f}, candidate processes {usage[4] / n:.0f} (a fork's cost is mostly these)")
    if a.layer_costs:
        layer_costs(items, a.workers, a.repeats)


def layer_costs(items, workers: int, repeats: int) -> None:
    """ms per candidate with every layer on, then with each one off (alternating, medians): the difference is
    what that layer costs."""
    from evaluators.isolation import LAYERS

    configs = [()] + [(layer,) for layer in LAYERS]
    if os.geteuid() != 0:  # the ordinary user's fallbacks: Landlock only, then nothing (the opted-in baseline)
        configs.append(("userns", "landlock"))
    times: dict[tuple, list[float]] = {c: [] for c in configs}
    pools = {c: SandboxPool(workers=workers, disable=c, unsafe_no_sandbox=True) for c in configs}
    try:
        for p in pools.values():
            p.evaluate_many(items[:10])
        for _ in range(repeats):
            for c, p in pools.items():
                t = time.perf_counter()
                p.evaluate_many(items)
                times[c].append((time.perf_counter() - t) / len(items) * 1e3)
    finally:
        for p in pools.values():
            p.close()
    base = statistics.median(times[()])
    print(f"layer costs (wall ms per candidate, {workers} workers, medians of {repeats}): all layers on {base:.3f}")
    for c, p in zip(configs[1:], list(pools.values())[1:]):
        m = statistics.median(times[c])
        print(f"  without {'+'.join(c):15s} {m:.3f} ms  -> the layer costs {base - m:+.3f} ms per candidate  "
              f"[{p.plan['mode']}]")


def as_user(name: str) -> int:
    """Re-run this bench (same flags but --as-user) as ordinary user ``name``."""
    from bench.checks import as_user as au

    user = au.ensure_user(name)
    py = au.user_python(user)
    args, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
        elif x == "--as-user":
            skip = True
        elif not x.startswith("--as-user="):
            args.append(x)
    return subprocess.run(au.argv_as(user, [py, str(Path(__file__).resolve())] + args), cwd="/").returncode


if __name__ == "__main__":
    main()
