"""What the candidates' seccomp filter costs: loading it in a forked child, and each system call under it.

    .venv/bin/python bench/perf/seccomp_cost.py [--n 200] [--repeats 5]

Forks a child that exits at once, with no filter, with a 12-instruction filter (no denied calls, only the clone
rules) and with the full filter (``evaluators/seccomp.py``), alternating, medians; then times getppid() in a
child before and after loading the full filter.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evaluators import seccomp  # noqa: E402


def fork_exit(f: seccomp.Filter | None, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            if f is not None:
                f.load()
            os._exit(0)
        os.waitpid(pid, 0)
    return (time.perf_counter() - t) / n * 1e6


def per_syscall(f: seccomp.Filter, n: int = 200_000) -> tuple[float, float]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        t0 = time.perf_counter()
        for _ in range(n):
            os.getppid()
        t1 = time.perf_counter()
        f.load()
        for _ in range(n):
            os.getppid()
        t2 = time.perf_counter()
        os.write(w, f"{(t1 - t0) / n * 1e9:.0f} {(t2 - t1) / n * 1e9:.0f}".encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    a, b = os.read(r, 100).split()
    return float(a), float(b)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    full, tiny = seccomp.Filter(), seccomp.Filter(denied=())
    if not full.ok:
        raise SystemExit(full.reason)
    res: dict[str, list[float]] = {"no filter": [], f"{tiny.size}-instruction filter": [],
                                   f"full filter ({full.size} instructions)": []}
    for _ in range(a.repeats):
        for (k, v), f in zip(res.items(), (None, tiny, full)):
            v.append(fork_exit(f, a.n))
    base = statistics.median(res["no filter"])
    print(f"fork + exit, medians of {a.repeats} x {a.n}:")
    for k, v in res.items():
        m = statistics.median(v)
        print(f"  {k:32s} {m:8.0f} us  ({m - base:+.0f} us)")
    w, wf = per_syscall(full)
    print(f"getppid(): {w:.0f} ns without the filter, {wf:.0f} ns with it ({wf - w:+.0f} ns per system call)")


if __name__ == "__main__":
    main()
