"""Whether a campaign is running right now, known exactly on its own machine: while `Campaign.run` runs, the run
folder holds `running.json` (pid, host, start time), written as the loop starts and removed when it ends for any
reason the process sees (done, Ctrl-C, an error). A file left behind whose process is gone means the process
was killed (kill -9, out of memory, power loss). `vevo ui` and `vevo runs show` read it for a run's status.
"""
from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal

NAME = "running.json"
State = Literal["running", "killed", "elsewhere", "absent"]
Status = Literal["running", "crashed", "finished", "stopped"]
# a run held by another host that has not committed for this long is reported as crashed
IDLE_SECONDS = 120.0


@contextmanager
def running(run_dir: str | Path) -> Iterator[Path]:
    """Hold the run folder's running.json for the duration of the block; removed on the way out (unless another
    process has taken it over since, e.g. a `vevo resume` started after this one was declared dead)."""
    path = Path(run_dir) / NAME
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
    tmp = path.with_name(f".{NAME}.{os.getpid()}")
    tmp.write_text(json.dumps(mine), encoding="utf-8")
    os.replace(tmp, path)  # a reader sees the whole file or none
    try:
        yield path
    finally:
        if read(run_dir) == mine:
            path.unlink(missing_ok=True)


def read(run_dir: str | Path) -> dict | None:
    """The running.json of a run folder; None when absent or unreadable (a torn or foreign file)."""
    try:
        d = json.loads((Path(run_dir) / NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or not isinstance(d.get("pid"), int) or not isinstance(d.get("host"), str):
        return None
    return d


def alive(pid: int, started: float | None = None) -> bool:
    """Whether process `pid` lives on this machine and is the one that started at `started` (epoch seconds):
    a zombie counts as gone, and so does a newer process that reused the pid (Linux /proc; elsewhere only
    existence is checked)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir() and Path("/proc/stat").is_file():
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return False
        if fields[0] in ("Z", "X"):  # exited, not yet reaped
            return False
        if started is not None:
            btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                         if line.startswith("btime "))
            began = btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
            if began > started + 2.0:  # btime is whole seconds: allow for its rounding
                return False
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def state(run_dir: str | Path) -> State:
    """running: its process is alive on this host; killed: the file is here but its process is gone; elsewhere:
    held by a process on another host (not checkable from here); absent: no campaign holds the folder."""
    d = read(run_dir)
    if d is None:
        return "absent"
    if d["host"] != socket.gethostname():
        return "elsewhere"
    started = d.get("started")
    return "running" if alive(d["pid"], started if isinstance(started, (int, float)) else None) else "killed"


def run_status(run_dir: str | Path, finished: bool) -> Status:
    """A run's status as `vevo ui` and `vevo runs show` say it: running (its process is alive), crashed (the file
    is left but the process is gone: killed), finished (`finished`: its iteration budget is spent or every problem
    solved), stopped (ended short of that: Ctrl-C, an error). A run held by another host is judged by its last
    write to the archive: running if within IDLE_SECONDS, else crashed."""
    live = state(run_dir)
    if live == "running":
        return "running"
    if live == "killed":
        return "crashed"
    if finished:
        return "finished"
    if live == "elsewhere":
        from .archive import archive_path

        db = archive_path(run_dir)
        newest = max((p.stat().st_mtime for p in (db, Path(f"{db}-wal")) if p.exists()), default=0.0)
        return "running" if time.time() - newest < IDLE_SECONDS else "crashed"
    return "stopped"
