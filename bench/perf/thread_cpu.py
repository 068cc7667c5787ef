"""Where a command's cores go, per thread: CPU time and time spent runnable but waiting for a core (Linux
``/proc/PID/task/TID/schedstat``), for the command and every process it starts, polled until it exits.

Why: a thread that runs slower beside another one is either waiting (for a core: the run-queue column; for the
interpreter lock: neither column, it sleeps) or computing slower (more CPU time for the same work: caches and
memory shared with the other core). The campaign's loop is its process's first thread ("main").

    python bench/perf/thread_cpu.py -- vevo run --suite pbe-hard-heldout --proposer tiny --iterations 12 \\
        --group 8 --answers 4 --seed 0 --train vpo --out /tmp/r
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (``/proc/PID/task/TID/children``)."""
    out = [pid]
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                for child in f.read().split():
                    out += descendants(int(child))
    except OSError:  # gone meanwhile
        pass
    return out


def sample(root: int, last: dict) -> None:
    """The latest (name, cpu ns, run-queue ns) of every thread under ``root`` into ``last``."""
    for pid in descendants(root):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    cpu, wait, _ = map(int, f.read().split())
            except (OSError, ValueError):
                continue
            last[(pid, int(tid))] = (name, cpu, wait)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=float, default=0.02, help="seconds between polls")
    ap.add_argument("--min-cpu", type=float, default=0.05, help="leave out threads with less CPU time (seconds)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the command after --")
    if not os.path.exists("/proc/self/schedstat"):
        sys.exit("thread_cpu: this kernel has no /proc/PID/schedstat")
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    except OSError as e:
        sys.exit(f"thread_cpu: cannot run {cmd[0]}: {e.strerror or e}")
    last: dict = {}
    while proc.poll() is None:
        sample(proc.pid, last)
        time.sleep(args.every)
    wall = time.monotonic() - t0
    rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for (pid, tid), (name, cpu, wait) in last.items():
        who = "main" if (pid, tid) == (proc.pid, proc.pid) else (
            f"{name} (other threads)" if pid == proc.pid else f"pid {pid} {name}")
        row = rows[who]
        row[0] += cpu / 1e9
        row[1] += wait / 1e9
        row[2] += 1
    print(f"{' '.join(cmd)}\nexit {proc.returncode}, {wall:.1f} s wall, load average {os.getloadavg()}")
    for who, (cpu, wait, n) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
        if cpu >= args.min_cpu:
            print(f"  {who:40s} cpu {cpu:7.2f} s  waiting for a core {wait:6.2f} s  ({n} thread{'s' * (n > 1)})")


if __name__ == "__main__":
    main()
