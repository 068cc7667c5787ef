"""The budgets a worker without a tmpfs box or pid namespace checks itself (evaluators/budget.py), and its sweep."""
from __future__ import annotations

import os
import time

from evaluators import budget, isolation
from evaluators.forked import in_child


def test_box_bytes_counts_allocated_bytes_and_refuses_a_flood_of_entries(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * (1 << 20))
    with open(tmp_path / "sparse", "wb") as f:  # 1 GB apparent, nothing allocated: no disk used
        f.truncate(1 << 30)
    os.symlink("/", tmp_path / "root")  # never followed
    assert (1 << 20) <= budget.box_bytes(str(tmp_path)) < (2 << 20)
    for i in range(20):
        (tmp_path / f"e{i}").touch()
    assert budget.box_bytes(str(tmp_path), max_entries=10) == -1
    b = budget.Budget(str(tmp_path), disk_mb=1, nproc=4, procs=False)
    assert b.over() == ""
    (tmp_path / "g").write_bytes(b"y" * (2 << 20))
    assert b.over() == "wrote past its disk budget of 1 MB"


def _chain_is_swept() -> str:
    """As a subreaper: a fork chain (each process forks, then exits) and threads; the tree is counted, then killed
    to the last process."""
    import threading

    isolation._libc.prctl(isolation.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if os.fork() == 0:  # finite, and holding no fd of the test's: a chain the sweep missed ends on its own
        os.closerange(3, 1 << 16)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                if os.fork():
                    os._exit(0)
            except OSError:
                pass
        os._exit(0)
    if os.fork() == 0:
        for _ in range(5):
            threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        time.sleep(60)
        os._exit(0)
    time.sleep(0.3)
    n = budget.tree_tasks(os.getpid(), 100)
    if n < 6:
        return f"counted {n} tasks, want at least the sleeper's 6"
    if not isolation.kill_descendants(os.getpid(), wait=5.0):
        return "something outlived the sweep"
    try:
        os.waitpid(-1, os.WNOHANG)
        return "a child is left"
    except ChildProcessError:
        return ""


def test_a_fast_fork_chain_does_not_outlive_the_sweep():
    for _ in range(3):
        assert in_child(_chain_is_swept) == ""
