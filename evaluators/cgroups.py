"""Memory and process-count limits that RLIMITs cannot give: one control group per sandbox worker.

``RLIMIT_AS`` bounds a process's mappings, not the page cache it fills: sixty memfds (or files in a tmpfs) hold
a gigabyte under a 512 MB address-space limit. A memory cgroup charges those pages. The worker moves itself into
its own group once (moving each candidate would cost a migration per fork), sets the limit to its own usage plus
the candidate's allowance before each job, protects itself from the OOM killer (``oom_score_adj`` -1000) and
gives each candidate +1000, so an out-of-memory kill always takes the candidate. A ``pids`` group caps the
processes of the worker's whole tree, whichever uid they run as.

cgroup v2 is used where the memory controller is delegated to our group's children or to an ancestor's we may
write (an ordinary user's systemd subtree: the worker's group is then a sibling of the user's own); otherwise the
v1 memory and pids hierarchies (containers often still mount those). Neither writable: no group, RLIMITs only, and
``SandboxPool.isolation`` says so.
"""
from __future__ import annotations

import os

ROOT = "/sys/fs/cgroup"
PREFIX = "vevo-"


def _own_paths() -> dict[str, str]:
    """controller ('' for v2) → this process's cgroup path, from /proc/self/cgroup."""
    out = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in ctrls.split(",") if ctrls else [""]:
                    out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _write(path: str, value: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


def _read_int(path: str, key: str | None = None) -> int | None:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if key is None:
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return None


def delegated_v2(root: str, own: str) -> tuple[str | None, bool]:
    """The nearest cgroup v2 directory at or above ``own`` (a path below ``root``) where this process may create
    groups with the memory controller: writable, with ``memory`` in its ``cgroup.subtree_control``. An ordinary
    user's own group is usually a leaf with processes (no controllers for children); the delegated subtree systemd
    gives each user (``user@UID.service``, Delegate= memory pids) is an ancestor. (dir or None, pids enabled)."""
    path = os.path.join(root, own.lstrip("/")).rstrip("/")
    while True:
        try:
            with open(os.path.join(path, "cgroup.subtree_control")) as f:
                ctrls = f.read().split()
        except OSError:
            ctrls = []
        if "memory" in ctrls and os.access(path, os.W_OK) and os.access(os.path.join(path, "cgroup.procs"), os.W_OK):
            return path, "pids" in ctrls
        if os.path.realpath(path) == os.path.realpath(root):
            return None, False
        path = os.path.dirname(path)


def _parents() -> tuple[str, str | None, str | None]:
    """(version, memory parent dir, pids parent dir) where this process may create child groups."""
    own = _own_paths()
    if os.path.isfile(os.path.join(ROOT, "cgroup.controllers")):  # pure v2 at /sys/fs/cgroup
        v2, pids = delegated_v2(ROOT, own.get("", "/"))
        if v2 is not None:
            return "v2", v2, v2 if pids else None
    mem = os.path.join(ROOT, "memory", own.get("memory", "/").lstrip("/"))
    pids = os.path.join(ROOT, "pids", own.get("pids", "/").lstrip("/"))
    if "memory" in own and os.path.isfile(os.path.join(mem, "memory.limit_in_bytes")) and os.access(mem, os.W_OK):
        return "v1", mem, pids if "pids" in own and os.access(pids, os.W_OK) else None
    return "", None, None


def sweep_stale() -> None:
    """Remove groups left by workers of a killed orchestrator (rmdir fails on a group still in use)."""
    _, mem, pids = _parents()
    for parent in {p for p in (mem, pids) if p}:
        try:
            names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
        except OSError:
            continue
        for n in names:
            try:
                os.rmdir(os.path.join(parent, n))
            except OSError:
                pass


class WorkerCgroup:
    """The calling worker's own group. ``ok`` is False when no controller could be used."""

    def __init__(self, name: str, max_pids: int) -> None:
        self.version, mem_parent, pids_parent = _parents()
        self.dirs: list[str] = []
        self.mem: str | None = None
        self.ok = False
        self.note = ""
        self._limit = 0
        if mem_parent is None:
            self.note = "no writable memory cgroup"
            return
        try:
            self.mem = os.path.join(mem_parent, PREFIX + name)
            os.mkdir(self.mem)
            self.dirs.append(self.mem)
            if pids_parent is not None and pids_parent != mem_parent:
                p = os.path.join(pids_parent, PREFIX + name)
                os.mkdir(p)
                self.dirs.append(p)
        except OSError as e:
            self.note = f"cgroup: {e}"
            return
        if self.version == "v1":
            _write(os.path.join(self.mem, "memory.swappiness"), "0")
        pids_dir = self.dirs[-1] if pids_parent is not None else None
        self.pids_dir, self._pids = pids_dir, max_pids
        if pids_dir is not None and not _write(os.path.join(pids_dir, "pids.max"), str(max_pids)):
            self.note = "pids.max not writable"
        for d in self.dirs:
            if not _write(os.path.join(d, "cgroup.procs"), "0"):
                self.note = f"cannot join {d}"
                return
        _write("/proc/self/oom_score_adj", "-1000")
        self.ok = True

    def _usage(self) -> int:
        f = "memory.usage_in_bytes" if self.version == "v1" else "memory.current"
        return _read_int(os.path.join(self.mem, f)) or 0  # type: ignore[arg-type]

    def set_candidate_memory(self, mb: int) -> None:
        """Group limit = the worker's own usage now + the candidate's allowance (+ slack for the fork's page
        tables). Rewritten only when the allowance changes."""
        if not self.ok or mb == self._limit:
            return
        limit = self._usage() + (mb + 64) * (1 << 20)
        f = "memory.limit_in_bytes" if self.version == "v1" else "memory.max"
        if _write(os.path.join(self.mem, f), str(limit)):  # type: ignore[arg-type]
            self._limit = mb

    def set_max_pids(self, n: int) -> None:
        """The group's process + thread cap for the next candidate (the worker itself counts too)."""
        if self.ok and self.pids_dir is not None and n != self._pids and \
                _write(os.path.join(self.pids_dir, "pids.max"), str(n)):
            self._pids = n

    def oom_kills(self) -> int:
        if not self.ok:
            return 0
        if self.version == "v1":
            return _read_int(os.path.join(self.mem, "memory.oom_control"), "oom_kill") or 0  # type: ignore[arg-type]
        return _read_int(os.path.join(self.mem, "memory.events"), "oom_kill") or 0  # type: ignore[arg-type]

    def describe(self) -> dict:
        return {"version": self.version, "dirs": list(self.dirs)} if self.ok else {"none": self.note}


def remove(dirs: list[str], wait: float = 2.0) -> None:
    """rmdir the groups of a dead worker (its processes may take a moment to leave)."""
    import time

    end = time.monotonic() + wait
    for d in dirs:
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > end:
                    break
                time.sleep(0.02)
