"""OS-level isolation for candidate processes (Linux). Worker-level set-up happens once per warm worker;
child-level set-up runs in each forked candidate process before any candidate code.

Layers, each reported in ``WorkerIsolation.describe()`` (``SandboxPool.isolation``) so users know what protects
them; the threat model is in docs/ARCHITECTURE.md:
- the worker is started with a clean environment (no secrets ever enter its process image),
- PID, mount, network and IPC namespaces, entered by the worker's launcher before the worker is forked: the
  worker is init of its PID namespace, so when it dies every candidate and daemon dies with it, and candidates
  see no host process; no network interfaces; SysV IPC and POSIX queues cleared after each candidate,
- an allow-list root (``evaluators/jail.py``) entered by ``chroot`` in each candidate,
- a per-worker unprivileged uid (cannot signal or ptrace the worker, read 0600 files, or write what it does
  not own) — also the handle for killing every process a candidate left behind,
- a per-worker memory and pids cgroup (``evaluators/cgroups.py``) where one is writable,
- rlimits (CPU, address space, processes, file size, open files, no core dumps), own session, a parent-death
  signal set after the uid change, and without root an in-process socket block,
- a seccomp filter (``evaluators/seccomp.py``) in every candidate, root or not.

Without root (``mode``, decided once per pool by ``evaluators/sandbox.py``): ``userns`` enters a new user
namespace (the invoking uid and gid mapped to themselves) together with the others and builds the same jail; the
candidate then drops every capability of that namespace before any of its code runs, so it holds no more than the
user it runs as, confined to the jail. ``landlock`` (user namespaces blocked) confines the candidate's filesystem
view with Landlock instead; ``none`` has neither (only with the user's explicit opt-in).
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

from evaluators import cgroups, jail, landlock, seccomp

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
CLONE_NEWUSER = 0x10000000
PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_DUMPABLE = 36, 1, 24, 4
LAYERS = ("pidns", "netns", "ipcns", "jail", "cgroup", "uid", "userns", "landlock", "seccomp")
MODES = ("root", "userns", "landlock", "none")

_libc = ctypes.CDLL(None, use_errno=True)


def _err() -> str:
    return os.strerror(ctypes.get_errno())


def safe_path(executable: str = sys.executable) -> str:
    """PATH for candidates: the interpreter's own directory first (``python`` runs this interpreter, as evaluators
    that start the program in a subprocess expect), then the usual system directories."""
    return os.pathsep.join([os.path.dirname(executable), os.path.dirname(os.path.realpath(executable)),
                            "/usr/local/bin", "/usr/bin", "/bin"])


def clean_env(workdir: str | None = None) -> dict[str, str]:
    """The whole environment a worker (and so every candidate) gets: nothing inherited from the orchestrator."""
    env = {"PATH": safe_path(), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
    if workdir:
        env.update(HOME=workdir, TMPDIR=workdir)
    return env


class WorkerIsolation:
    """Which layers are active. Plain classes, no dataclasses: every module the worker imports makes each
    fork slower (page tables to copy), so the worker stays small."""

    def __init__(self, mode: str = "root") -> None:
        self.mode = mode
        self.pidns = self.netns = self.ipcns = self.subreaper = self.userns = False
        self.priv = False  # may mount: root, or the owner of a user namespace
        self.jail: str | None = None
        self.uid: int | None = None
        self.cgroup: cgroups.WorkerCgroup | None = None
        self.seccomp: seccomp.Filter | None = None
        self.landlock: landlock.Ruleset | None = None
        self.mqueue: str | None = None
        self.bin = jail.BIN  # first on candidates' PATH: python, python3 → this interpreter
        self.nproc_base = 0  # processes of the candidate's uid already counted against RLIMIT_NPROC
        self.hidden: list[str] = []
        self.notes: list[str] = []

    def describe(self) -> dict:
        fs = "allow-list root (chroot, read-only but the box)" if self.jail else \
            (f"landlock {self.landlock.describe()}" if self.landlock else
             ("unprivileged uid" if self.uid else "none"))
        cg = self.cgroup.describe() if self.cgroup and self.cgroup.ok else \
            {"none": self.cgroup.note if self.cgroup else "disabled"}
        limits = f"cgroup {cg['version']}" if "version" in cg else \
            ("rlimits + pid namespace" if self.pidns else "rlimits")
        sc = "yes" if self.seccomp is not None and self.seccomp.ok else "no"
        out = {"mode": self.mode, "network": "netns" if self.netns else
               ("landlock tcp + socket-block" if self.landlock and self.landlock.version >= 4 else "socket-block"),
               "filesystem": fs, "pid": self.pidns, "ipc": self.ipcns, "uid": self.uid, "userns": self.userns,
               "subreaper": self.subreaper, "cgroup": cg, "limits": limits, "seccomp": sc,
               "landlock": self.landlock.describe() if self.landlock else None,
               "hidden": list(self.hidden), "notes": list(self.notes)}
        out["summary"] = summary(out)
        return out


def summary(d: dict) -> str:
    """One line naming the active layers (what `vevo eval-program` and `vevo run` print)."""
    who = {"root": f"root, candidates as uid {d.get('uid')}" if d.get("uid") else "root",
           "userns": "user namespace", "landlock": "Landlock, no namespaces",
           "none": "NO SANDBOX (opted in)"}.get(d.get("mode", ""), str(d.get("mode")))
    ns = [k for k, on in (("pid", d.get("pid")), ("mount", "chroot" in str(d.get("filesystem"))),
                          ("net", d.get("network") == "netns"), ("ipc", d.get("ipc"))) if on]
    parts = [who]
    if ns:
        parts.append("+".join(ns) + " namespaces")
    parts.append(f"filesystem: {d.get('filesystem')}")
    if d.get("network") != "netns":
        parts.append(f"network: {d.get('network')}")
    parts.append(f"seccomp: {d.get('seccomp')}")
    parts.append(f"limits: {d.get('limits')}")
    return "; ".join(parts)


def _map_ids(uid: int, gid: int) -> str:
    """After unshare(CLONE_NEWUSER): the invoking uid/gid mapped to themselves. '' or why it failed."""
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        except OSError as e:
            if path.endswith("setgroups") and e.errno == 2:
                continue
            return f"{path}: {e.strerror}"
    return ""


def enter_namespaces(disabled: set[str], mode: str = "root") -> tuple[set[str], list[str]]:
    """Called by the worker process before anything else. As root (mode ``root``) unshares PID, mount, network and
    IPC namespaces; mode ``userns`` first a user namespace that owns them (the invoking uid mapped to itself).
    Then forks: the child, init of the new PID namespace, returns and becomes the worker; this process stays
    behind as its launcher, only waiting, so that when the pool kills it the worker gets its parent-death signal
    and the kernel kills every process of the namespace. Returns (entered, notes): the namespaces entered, of
    "user", "pid", "mnt", "net", "ipc"."""
    notes: list[str] = []
    if mode not in ("root", "userns") or (mode == "root" and os.geteuid() != 0):
        return set(), notes
    entered = set()
    if mode == "userns":
        uid, gid = os.getuid(), os.getgid()
        if _libc.unshare(CLONE_NEWUSER) != 0:
            notes.append(f"user namespace: {_err()}")
            return entered, notes
        why = _map_ids(uid, gid)
        if why:
            notes.append(f"user namespace: {why}")
            return entered, notes
        entered.add("user")
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # credentials changed: set it again
    kinds = {"mnt": CLONE_NEWNS, "net": CLONE_NEWNET, "ipc": CLONE_NEWIPC, "pid": CLONE_NEWPID}
    kinds = {k: v for k, v in kinds.items() if k + "ns" not in disabled}
    for k, flag in kinds.items():  # one at a time, so one the kernel refuses costs only itself
        if _libc.unshare(flag) == 0:
            entered.add(k)
        else:
            notes.append(f"{k} namespace: {_err()}")
    if "pid" not in entered:
        return entered, notes
    pid = os.fork()
    if pid:  # the launcher: hold on until the worker ends, die with it either way
        for fd in range(3, 256):
            try:
                os.close(fd)
            except OSError:
                pass
        while True:
            try:
                _, st = os.waitpid(pid, 0)
                os._exit(os.waitstatus_to_exitcode(st) & 0xFF)
            except InterruptedError:
                continue
            except ChildProcessError:
                os._exit(1)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return entered, notes


def _uid_processes(uid: int) -> int:
    """Processes (and threads) of uid on this machine now: RLIMIT_NPROC counts them all for a shared uid."""
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{d}/task"))
            except OSError:
                pass
    return n


def setup_worker(top: str, box: str, hide: list[str], uid: int, python_paths: list[str], disabled: set[str],
                 entered: set[str], box_mb: int = 256, max_pids: int = 512, mode: str = "root") -> WorkerIsolation:
    """Called once in the worker (after ``enter_namespaces``). Never raises: each failed layer is recorded and
    skipped, and ``describe()`` says so (the pool refuses a worker that lacks what its mode promises). ``top``:
    a directory for the worker's mounts; ``box``: inside it, the candidates' writable tmpfs."""
    iso = _setup_worker(top, box, hide, uid, python_paths, disabled, entered, box_mb, max_pids, mode)
    if "seccomp" not in disabled:  # unix sockets only where the jail's root holds none of the host's
        iso.seccomp = seccomp.Filter(denied=seccomp.DENIED + (() if iso.ipcns else seccomp.HOST_IPC),
                                     sockets="unix" if iso.jail else "none")
        if not iso.seccomp.ok:
            iso.notes.append(f"seccomp: {iso.seccomp.reason}")
    return iso


def _setup_worker(top: str, box: str, hide: list[str], uid: int, python_paths: list[str], disabled: set[str],
                  entered: set[str], box_mb: int, max_pids: int, mode: str) -> WorkerIsolation:
    iso = WorkerIsolation(mode)
    iso.pidns, iso.netns, iso.ipcns = "pid" in entered, "net" in entered, "ipc" in entered
    iso.userns = "user" in entered
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
        iso.subreaper = True
    root = os.geteuid() == 0 and mode == "root"
    iso.priv = root or iso.userns
    if "cgroup" not in disabled:
        iso.cgroup = cgroups.WorkerCgroup(f"{os.getpid()}-{os.urandom(4).hex()}", max_pids)
        if not iso.cgroup.ok:
            iso.notes.append(iso.cgroup.note)
    if not iso.priv:
        os.mkdir(box, 0o711)
        iso.bin = os.path.join(top, "bin")  # no jail with its /dev/vevo-bin: the same links beside the box
        os.mkdir(iso.bin, 0o755)
        for name in ("python", "python3"):
            os.symlink(sys.executable, os.path.join(iso.bin, name))
        iso.nproc_base = _uid_processes(os.getuid())
        if mode == "landlock" and "landlock" not in disabled:
            libs = [d for d in jail.LIB_DIRS if os.path.isdir(d)]
            ro = python_paths + libs + [f for f in jail.ETC_FILES if os.path.isfile(f)] + \
                [os.path.realpath(sys.executable), iso.bin] + ["/dev/" + d for d in jail.DEVICES if d != "null"]
            iso.landlock = landlock.Ruleset(ro, [box, "/dev/null"])
            iso.notes += iso.landlock.notes
            if not iso.landlock.ok:
                iso.notes.append(f"landlock: {iso.landlock.reason}")
                iso.landlock = None
        elif mode != "landlock":
            iso.notes.append("no namespaces, no jail: candidates run as the worker's own uid")
        return iso
    if "mnt" not in entered or _libc.mount(b"none", b"/", None, jail.MS_REC | jail.MS_PRIVATE, None) != 0:
        iso.notes.append(f"mount namespace: {_err()}")
    else:
        try:
            jail._mount("tmpfs", top, "tmpfs", jail.MS_NOSUID | jail.MS_NODEV, "size=1m,nr_inodes=64,mode=0755")
            os.mkdir(box, 0o755)
            mount_box(box, box_mb)
            if iso.ipcns:
                iso.mqueue = os.path.join(top, "mq")
                os.mkdir(iso.mqueue, 0o700)
                jail._mount("mqueue", iso.mqueue, "mqueue", jail.MS_NOSUID | jail.MS_NODEV | jail.MS_NOEXEC)
            if "jail" not in disabled:
                root_dir = os.path.join(top, "root")
                os.mkdir(root_dir, 0o755)
                jail.build(root_dir, box, python_paths, hide, iso.notes)
                iso.jail = root_dir
        except (jail.JailError, OSError) as e:
            iso.notes.append(f"jail: {e}")
            iso.jail = None
    if "uid" not in disabled and root:
        iso.uid = uid
    return iso


def mount_box(box: str, box_mb: int) -> None:
    jail._mount("tmpfs", box, "tmpfs", jail.MS_NOSUID | jail.MS_NODEV,
                f"size={box_mb}m,nr_inodes=65536,mode=0711")


def remount_box(iso: WorkerIsolation, box: str, box_mb: int = 256) -> bool:
    """A box whose contents could not be removed (or that is full) is replaced by a fresh tmpfs."""
    try:
        if iso.jail:
            _libc.umount2((iso.jail + box).encode(), 2)
        _libc.umount2(box.encode(), 2)  # MNT_DETACH: the kernel frees it once nothing uses it
        mount_box(box, box_mb)
        if iso.jail:
            jail.rebind_box(iso.jail, box)
        return True
    except (jail.JailError, OSError):
        return False


def clear_ipc(iso: WorkerIsolation) -> int:
    """Remove every SysV IPC object and POSIX message queue a candidate left in the worker's IPC namespace.
    Three small reads when there is nothing (the common case)."""
    if not iso.ipcns:
        return 0
    n = 0
    for kind, rm in (("shm", lambda i: _libc.shmctl(i, 0, None)), ("sem", lambda i: _libc.semctl(i, 0, 0)),
                     ("msg", lambda i: _libc.msgctl(i, 0, None))):  # IPC_RMID == 0
        try:
            with open(f"/proc/sysvipc/{kind}", "rb") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            try:
                ident = int(line.split()[1])
            except (IndexError, ValueError):
                continue
            rm(ident)
            n += 1
    if iso.mqueue:
        try:
            for name in os.listdir(iso.mqueue):
                os.unlink(os.path.join(iso.mqueue, name))
                n += 1
        except OSError:
            pass
    return n


RLIMITS = {n: getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")}
SYS_ioprio_get = {"x86_64": 252, "aarch64": 31}


def own_state() -> dict:
    """This process's limits, nice value, scheduling policy, CPU affinity and I/O priority: what a candidate of
    the same uid could change in the worker were the seccomp filter not there (``seccomp.SELF_ONLY``)."""
    out: dict = {n: resource.getrlimit(r) for n, r in RLIMITS.items()}
    out["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    out["scheduler"] = os.sched_getscheduler(0)
    out["affinity"] = sorted(os.sched_getaffinity(0))
    nr = SYS_ioprio_get.get(os.uname().machine)
    out["ioprio"] = _libc.syscall(nr, 1, 0) if nr else None  # IOPRIO_WHO_PROCESS, self
    return out


def changed_state(before: dict) -> str:
    """'' when ``own_state()`` is still ``before``; else which parts changed, and how, in one line."""
    now = own_state()
    return "; ".join(f"{k} {before[k]} -> {now[k]}" for k in before if now.get(k) != before[k])


class Limits:
    """as_mb: RLIMIT_AS (0: none; the memory cgroup bounds what is touched); cpu_s: RLIMIT_CPU (None: the
    wall-clock limit + 2 s)."""

    def __init__(self, time_limit: float, memory_mb: int, nproc: int = 64, fsize_mb: int = 16, nofile: int = 64,
                 as_mb: int | None = None, cpu_s: int | None = None, disk_mb: int = 256):
        self.time_limit, self.memory_mb, self.nproc, self.fsize_mb, self.nofile = \
            time_limit, memory_mb, nproc, fsize_mb, nofile
        self.disk_mb = disk_mb
        self.as_mb = memory_mb if as_mb is None else as_mb
        self.cpu_s = cpu_s

    @classmethod
    def from_job(cls, job: dict, cgroup: bool) -> "Limits":
        """A job's limits. Without a memory cgroup the address-space limit is the only memory bound, so it is
        never lifted there."""
        as_mb = int(job.get("as_mb", job["memory_mb"]))
        if as_mb == 0 and not cgroup:
            as_mb = int(job["memory_mb"])
        t = float(job["time_limit"])
        threads = job.get("mode") == "openevolve"  # whole programs: process pools burn CPU on every core
        return cls(time_limit=t, memory_mb=int(job["memory_mb"]), nproc=int(job.get("nproc", 64)),
                   fsize_mb=int(job.get("fsize_mb", 16)), nofile=int(job.get("nofile", 64)), as_mb=as_mb,
                   cpu_s=int(t * (os.cpu_count() or 1)) + 2 if threads else None, disk_mb=int(job.get("disk_mb", 256)))


def enter_child(limits: Limits, iso: WorkerIsolation, workdir: str) -> None:
    """In the forked candidate process: new session, rlimits, the allow-list root, private cwd, drop to uid (root)
    or every capability (user namespace), then the parent-death signal (``setuid`` clears one set before it),
    Landlock, and last the seccomp filter. A layer the pool promised that fails here stops the candidate."""
    os.setsid()
    cpu = int(limits.time_limit) + 2 if limits.cpu_s is None else limits.cpu_s
    mem = limits.as_mb * 1024 * 1024 if limits.as_mb else resource.RLIM_INFINITY
    # a box on the host's disk (no tmpfs of disk_mb): no single file larger than the whole budget
    fsize = limits.fsize_mb if iso.priv else min(limits.fsize_mb, limits.disk_mb)
    for res, val in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, mem),
                     (resource.RLIMIT_NPROC, limits.nproc + iso.nproc_base),
                     (resource.RLIMIT_FSIZE, fsize * 1024 * 1024), (resource.RLIMIT_NOFILE, limits.nofile),
                     (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(res, (val, val))
        except (ValueError, OSError):
            pass
    if iso.cgroup is not None and iso.cgroup.ok:
        cgroups._write("/proc/self/oom_score_adj", "1000")  # the OOM killer takes the candidate, not the worker
    if iso.jail:
        os.chroot(iso.jail)
    os.chdir(workdir)
    if iso.uid is not None:
        os.setgroups([])
        os.setgid(iso.uid)
        os.setuid(iso.uid)
    if iso.userns:
        drop_capabilities()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if not iso.netns:
        block_sockets()
    os.umask(0o077)
    if iso.landlock is not None:
        err = iso.landlock.restrict()
        if err:
            raise RuntimeError(f"sandbox: {err}")
    if iso.seccomp is not None and iso.seccomp.ok:
        err = iso.seccomp.load()
        if err:
            raise RuntimeError(f"sandbox: {err}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Empty the bounding set and the effective, permitted and inheritable sets (the ambient set follows): the
    candidate keeps the capabilities the user namespace gave the worker nowhere, and no exec brings them back."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL past the last capability this kernel knows
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data) != 0:
        raise RuntimeError(f"sandbox: capset: {_err()}")


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


def kill_descendants(root_pid: int, wait: float = 5.0) -> bool:
    """Without root: kill every process below us, until none is left. We are a child subreaper, so a descendant
    whose parent dies becomes our child: with no child left there is no descendant left, however fast a fork
    chain ran (each round kills the whole tree it finds; what was forked meanwhile is found in the next).
    False if something was still alive after ``wait`` seconds."""
    import time

    from evaluators.budget import _children

    end = time.monotonic() + wait
    while True:
        reap_orphans()
        try:
            if os.waitpid(-1, os.WNOHANG) != (0, 0):
                continue  # reaped one: look again
        except ChildProcessError:
            return True
        if time.monotonic() > end:
            return False
        seen: set[int] = set()
        stack = _children(os.getpid())
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            stack += _children(pid)  # a killed process keeps its children listed until it is reaped
        time.sleep(0.0005)
