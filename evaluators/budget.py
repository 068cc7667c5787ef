"""Disk and process budgets the worker checks itself, where the kernel gives it no bound of its own.

Root and user-namespace workers give each candidate a tmpfs box of ``disk_mb`` and a pid namespace (or a pids
cgroup): the kernel enforces both. A Landlock worker (an ordinary user, no namespaces) writes its box on the host's
disk, and RLIMIT_NPROC counts every process of the user, the orchestrator's and other workers' included. There the
worker measures, while the candidate runs (every ``EVERY`` seconds) and once after it ends: the bytes the box holds
(allocated blocks, at most ``MAX_ENTRIES`` entries) and the processes and threads of its own tree (the worker is
a child subreaper, so every descendant stays in that tree). A candidate over either is stopped and its result
says why. What a check every EVERY seconds cannot promise: a fast writer overshoots by what it writes in that
time, and a burst of processes shorter than it is not seen; `vevo doctor` says so.
"""
from __future__ import annotations

import os

EVERY = 0.02        # seconds between checks while a candidate runs
MAX_ENTRIES = 65536  # a box with more entries is over budget (a tmpfs box has as many inodes)


def box_bytes(path: str, max_entries: int = MAX_ENTRIES) -> int:
    """Bytes allocated under path (symlinks not followed); -1 past max_entries."""
    total, n, stack = 0, 0, [path]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                n += 1
                if n > max_entries:
                    return -1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return total


_HAS_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN


def _children_by_scan(pid: int) -> list[int]:
    """Without /proc/PID/task/TID/children: every process whose parent is pid (a scan of /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
            if int(stat[stat.rfind(b")") + 2:].split()[1]) == pid:
                out.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _children(pid: int) -> list[int]:
    """The children of every thread of pid."""
    if not _HAS_CHILDREN:
        return _children_by_scan(pid)
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            pass
    return out


def tree_tasks(root: int, cap: int) -> int:
    """Processes and threads below ``root`` (not counting it), counted up to cap + 1."""
    n, seen, stack = 0, {root}, _children(root)
    while stack and n <= cap:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
        stack += _children(pid)
    return n


class Budget:
    """One candidate's disk and process budget, checked by the worker (``over`` returns why, '' when within)."""

    def __init__(self, box: str, disk_mb: int, nproc: int, procs: bool = True):
        self.box, self.nproc, self.procs = box, nproc, procs
        base = box_bytes(box)
        self.limit = max(base, 0) + disk_mb * (1 << 20)
        self.disk_mb = disk_mb

    def over(self, running: bool = True) -> str:
        used = box_bytes(self.box)
        if used < 0:
            return f"the box holds more than {MAX_ENTRIES} entries"
        if used > self.limit:
            return f"wrote past its disk budget of {self.disk_mb} MB"
        if running and self.procs:
            n = tree_tasks(os.getpid(), self.nproc)
            if n > self.nproc:
                return f"ran more than {self.nproc} processes and threads"
        return ""
