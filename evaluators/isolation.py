"""OS-level isolation for candidate processes (Linux). Worker-level set-up happens once per warm worker;
child-level set-up runs in each forked candidate process before any candidate code.

Layers, strongest first, each reported in ``describe()`` so users know what protects them:
- network namespace with no interfaces (``unshare(CLONE_NEWNET)``; needs root or a user namespace),
- private mount namespace where the whole filesystem is read-only (``mount_setattr``) except a small
  tmpfs that holds one private directory per candidate; chosen paths are hidden under empty tmpfs,
- a per-worker unprivileged uid (cannot signal or ptrace the orchestrator, read 0600 files, or write
  anything it does not own) — also the handle for killing every process a candidate left behind,
- rlimits (CPU, address space, processes, file size, open files, no core dumps), own session/process
  group, scrubbed environment, and as a last resort an in-process socket block.
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_REC, MS_PRIVATE = 1 << 14, 1 << 18
MOUNT_ATTR_RDONLY, AT_RECURSIVE, SYS_mount_setattr = 0x1, 0x8000, 442
PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 36, 1, 4
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class WorkerIsolation:
    """Which layers are active. Plain classes, no dataclasses: every module the worker imports makes each
    fork slower (page tables to copy), so the worker stays small."""

    def __init__(self) -> None:
        self.netns = self.readonly_fs = self.box_tmpfs = self.subreaper = False
        self.uid: int | None = None
        self.hidden: list[str] = []
        self.notes: list[str] = []

    def describe(self) -> dict:
        return {"network": "netns" if self.netns else "socket-block", "filesystem":
                "read-only mount namespace" if self.readonly_fs else ("unprivileged uid" if self.uid else "none"),
                "uid": self.uid, "box_tmpfs": self.box_tmpfs, "subreaper": self.subreaper,
                "hidden": list(self.hidden), "notes": list(self.notes)}


def _err() -> str:
    return os.strerror(ctypes.get_errno())


def setup_worker(box: str, hide: list[str], uid: int, box_mb: int = 256) -> WorkerIsolation:
    """Called once in a fresh worker process. Never raises: each failed layer is recorded and skipped."""
    iso = WorkerIsolation()
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
        iso.subreaper = True
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # worker dies with its orchestrator
    root = os.geteuid() == 0
    if root and _libc.unshare(CLONE_NEWNET) == 0:
        iso.netns = True
    elif root:
        iso.notes.append(f"netns: {_err()}")
    if root and _libc.unshare(CLONE_NEWNS) == 0 and _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0:
        if _libc.mount(b"tmpfs", box.encode(), b"tmpfs", 0, f"size={box_mb}m,mode=0711".encode()) == 0:
            iso.box_tmpfs = True
        expose_for_uid(needed_paths(), iso)
        for p in hide:
            if os.path.isdir(p) and not os.path.commonpath([os.path.abspath(p), box]) == os.path.abspath(p):
                if _libc.mount(b"tmpfs", os.path.abspath(p).encode(), b"tmpfs", 0, b"size=1m,mode=0555") == 0:
                    iso.hidden.append(os.path.abspath(p))
        attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
        if _libc.syscall(SYS_mount_setattr, -100, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
            # the box stays writable: re-clear RDONLY on it alone
            attr2 = _MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
            if iso.box_tmpfs and _libc.syscall(SYS_mount_setattr, -100, box.encode(), 0, ctypes.byref(attr2),
                                               ctypes.sizeof(attr2)) != 0:
                iso.notes.append(f"box rw: {_err()}")
            iso.readonly_fs = True
        else:
            iso.notes.append(f"read-only fs: {_err()}")
    elif root:
        iso.notes.append(f"mount namespace: {_err()}")
    if root:
        iso.uid = uid
    else:
        iso.notes.append("not root: candidates run as the worker's own uid")
    return iso


MS_BIND = 4096


def needed_paths() -> list[str]:
    """Directories a candidate's Python must read: the interpreter's prefixes, sys.path, this package."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cands = [sys.prefix, sys.base_prefix, sys.exec_prefix, here] + [p for p in sys.path if p]
    out = []
    for p in cands:
        p = os.path.realpath(p)
        if os.path.isdir(p) and p not in out:
            out.append(p)
    return out


def _blocked_ancestor(path: str) -> str | None:
    """The first ancestor of path that 'others' cannot traverse (e.g. /root, mode 0700), if any."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        anc = "/" + "/".join(parts[:i])
        try:
            if not os.stat(anc).st_mode & 0o001:
                return anc
        except OSError:
            return None
    return None


def expose_for_uid(paths: list[str], iso: "WorkerIsolation", depth: int = 0) -> None:
    """The interpreter may live under a private directory (pyenv in /root, mode 0700) that the sandbox
    uid cannot traverse. In the worker's own mount namespace, cover that directory with an empty
    tmpfs (hiding the rest of it) and bind-mount back only the subtrees Python needs. A needed directory
    that is itself private (this checkout cloned into a 0700 temp dir) is covered the same way with all of
    its entries bound back, so it becomes traversable."""
    if depth > 3:
        return
    groups: dict[str, set[str]] = {}
    for p in paths:
        anc = _blocked_ancestor(p)
        if anc is not None:
            groups.setdefault(anc, set()).add(p[len(anc) + 1:].split("/")[0])
    for p in paths:  # a needed directory that is itself private (a checkout in a 0700 temp dir): keep all of it
        if os.path.isdir(p) and not os.stat(p).st_mode & 0o001 and p != "/":
            groups.setdefault(p, set()).update(os.listdir(p))
    for anc, kids in groups.items():
        fds = {k: os.open(os.path.join(anc, k), os.O_PATH) for k in kids if os.path.lexists(os.path.join(anc, k))}
        if _libc.mount(b"tmpfs", anc.encode(), b"tmpfs", 0, b"size=1m,mode=0755") != 0:
            iso.notes.append(f"expose {anc}: {_err()}")
            for fd in fds.values():
                os.close(fd)
            continue
        for k, fd in fds.items():
            dst = os.path.join(anc, k)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.mkdir(dst, 0o755)
            else:
                os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o644))
            if _libc.mount(f"/proc/self/fd/{fd}".encode(), dst.encode(), None, MS_BIND | MS_REC, None) != 0:
                iso.notes.append(f"bind {dst}: {_err()}")
            os.close(fd)
        iso.notes.append(f"covered {anc}, kept {sorted(kids)}")
    if groups:
        expose_for_uid(paths, iso, depth + 1)


def scrub_env(workdir: str) -> None:
    """Once per worker, after its imports: candidates inherit only a minimal environment (no secrets, no
    PYTHONPATH of the orchestrator), with HOME and TMPDIR at their working directory, whose path is the same
    for every candidate of a worker. Done here rather than per fork, where it cost ~0.3 ms a candidate (each
    os.environ write in the forked child touched ~20 copy-on-write pages)."""
    os.environ.clear()
    os.environ.update({"PATH": SAFE_PATH, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "HOME": workdir,
                       "TMPDIR": workdir})


class Limits:
    def __init__(self, time_limit: float, memory_mb: int, nproc: int = 64, fsize_mb: int = 16, nofile: int = 64):
        self.time_limit, self.memory_mb, self.nproc, self.fsize_mb, self.nofile = \
            time_limit, memory_mb, nproc, fsize_mb, nofile


def enter_child(limits: Limits, iso: WorkerIsolation, workdir: str) -> None:
    """In the forked candidate process: new session, rlimits, private cwd, drop to uid (the environment was
    scrubbed once, in the worker)."""
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    cpu = int(limits.time_limit) + 2
    mem = limits.memory_mb * 1024 * 1024
    for res, val in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, mem), (resource.RLIMIT_NPROC, limits.nproc),
                     (resource.RLIMIT_FSIZE, limits.fsize_mb * 1024 * 1024), (resource.RLIMIT_NOFILE, limits.nofile),
                     (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(res, (val, val))
        except (ValueError, OSError):
            pass
    os.chdir(workdir)
    if iso.uid is not None:
        os.setgroups([])
        os.setgid(iso.uid)
        os.setuid(iso.uid)
    if not iso.netns:
        block_sockets()
    os.umask(0o077)


def block_sockets() -> None:
    """Fallback when no network namespace is available: refuse socket creation in this process."""
    import socket

    def refused(*a, **k):
        raise PermissionError("network access is disabled in the vevo sandbox")
    socket.socket.connect = refused  # type: ignore[method-assign]
    socket.socket.connect_ex = refused  # type: ignore[method-assign]
    socket.create_connection = refused  # type: ignore[assignment]


def kill_uid(uid: int) -> None:
    """Kill every process owned by uid: kill(-1) from a process running as that uid reaches exactly them
    (a candidate that setsid()s out of its process group is still caught)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(3):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def reap_orphans(wait: float = 0.0) -> int:
    """With the subreaper flag, orphaned grandchildren land here. Reap them; with ``wait`` > 0 keep
    reaping (they were just SIGKILLed) until none is left or the time is up."""
    import time

    n, end = 0, time.monotonic() + wait
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n
        if pid:
            n += 1
        elif time.monotonic() >= end:
            return n
        else:
            time.sleep(0.0005)


def kill_descendants(root_pid: int) -> None:
    """Without root: kill every process whose parent chain reaches us (subreaper keeps orphans ours)."""
    me = os.getpid()
    for _ in range(5):
        victims = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == me:
                continue
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    stat = f.read()
                ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me:
                victims.append(int(d))
        if not victims:
            return
        for v in victims:
            try:
                os.kill(v, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap_orphans()
