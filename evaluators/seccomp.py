"""A seccomp filter for every candidate, root or not: the system calls that reach past the sandbox fail with EPERM.

A classic BPF program built here, not libseccomp: it is a few dozen instructions, built once per worker (a ctypes
buffer every forked candidate inherits), so each candidate pays two ``prctl`` calls to load it and nothing to
compile it, and the sandbox needs no shared library that a container may lack. The syscall numbers are the kernel's
(x86_64 and aarch64; ``tests/evaluators/test_sandbox_user.py`` checks them against libseccomp's table where it is
installed).
Another architecture gets no filter, and the sandbox report says so.

Denied: tracing and reading other processes (ptrace, process_vm_readv/writev, pidfd_getfd, kcmp), the kernel's
programmable and keyed parts (bpf, perf_event_open, keyctl, add_key, request_key, userfaultfd, io_uring), every
mount and root change (mount, umount2, the new mount API, pivot_root, chroot), new namespaces (unshare, setns, and
``clone`` with any CLONE_NEW* flag; ``clone3``, whose flags sit behind a pointer a filter cannot read, answers
ENOSYS so glibc falls back to ``clone``), kernel modules, kexec, reboot, swap, accounting, clock and time setting,
syslog, quotas, iopl/ioperm and handle-based opens. A 32-bit (int 0x80) or x32 call from the 64-bit candidate is
refused as well: its numbers differ, so a filter for one table must not let the other through.

On the calling process only (``SELF_ONLY``): resource limits, nice value, scheduling policy and affinity, I/O
priority, page migration; aimed at another pid they fail with EPERM. Sockets by allow-list: ``socketpair`` for
AF_UNIX, and ``socket`` only for the families the mode allows (``program``'s ``sockets``): never UDP, raw, packet,
netlink or MPTCP; inet stream sockets only where the problem allows network (none does today).
"""
from __future__ import annotations

import ctypes
import os
import platform

from .forked import in_child

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
EPERM, ENOSYS = 1, 38
# BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K, ALU_AND_K = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54
CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080
X32_BIT = 0x40000000

DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "bpf", "perf_event_open",
          "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
          "mount", "umount2", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
          "pivot_root", "chroot", "unshare", "setns", "init_module", "finit_module", "delete_module", "kexec_load",
          "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "adjtimex",
          "clock_adjtime", "syslog", "quotactl", "quotactl_fd", "open_by_handle_at", "name_to_handle_at", "vhangup",
          "iopl", "ioperm", "umount", "uselib", "lookup_dcookie", "process_madvise", "process_mrelease")
# Without an IPC namespace (Landlock, none) SysV IPC objects and POSIX message queues are the host user's, shared
# with every other process of the uid and outliving the candidate: creating or opening one is refused there.
HOST_IPC = ("shmget", "semget", "msgget", "mq_open")

# Calls that act on a process named by an argument: allowed on the calling process only (every listed argument
# equals its value; args are (index, value) on the low 32 bits, which is all a pid_t or an int holds). Without root
# a candidate shares its uid with the worker and the orchestrator, and the kernel lets a process change the limits,
# the nice value and the scheduling of any process of its uid: one candidate could starve or kill the next.
SELF_ONLY: dict[str, tuple[tuple[int, int], ...]] = {
    "prlimit64": ((0, 0),),                      # pid 0: this process (setrlimit/getrlimit use it so)
    "setpriority": ((0, 0), (1, 0)),             # PRIO_PROCESS, who 0 (not PRIO_PGRP, not PRIO_USER: all the uid's)
    "sched_setparam": ((0, 0),), "sched_setscheduler": ((0, 0),), "sched_setattr": ((0, 0),),
    "sched_setaffinity": ((0, 0),),
    "ioprio_set": ((0, 1), (1, 0)),              # IOPRIO_WHO_PROCESS, who 0
    "migrate_pages": ((0, 0),), "move_pages": ((0, 0),),
}
AF_UNIX, AF_INET, AF_INET6, SOCK_STREAM, IPPROTO_TCP = 1, 2, 10, 1, 6
SOCK_FLAGS = 0o4000 | 0o2000000  # SOCK_NONBLOCK | SOCK_CLOEXEC, or-ed into socket()'s type

# (audit arch, syscall numbers); names absent from an architecture do not exist there
TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438, "kcmp": 312,
        "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249, "userfaultfd": 323,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "mount": 165, "umount2": 166,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "reboot": 169,
        "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
        "clock_adjtime": 305, "syslog": 103, "quotactl": 179, "quotactl_fd": 443, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "vhangup": 153, "iopl": 172, "ioperm": 173, "uselib": 134,
        "lookup_dcookie": 212, "clone": 56, "clone3": 435, "process_madvise": 440, "process_mrelease": 448,
        "prlimit64": 302, "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144,
        "sched_setattr": 314, "sched_setaffinity": 203, "ioprio_set": 251, "migrate_pages": 256, "move_pages": 279,
        "socket": 41, "socketpair": 53, "shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240}),
    "aarch64": (0xC00000B7, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438, "kcmp": 272,
        "bpf": 280, "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "mount": 40, "umount2": 39,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294, "reboot": 142,
        "swapon": 224, "swapoff": 225, "acct": 89, "settimeofday": 170, "clock_settime": 112, "adjtimex": 171,
        "clock_adjtime": 266, "syslog": 116, "quotactl": 60, "quotactl_fd": 443, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "vhangup": 58, "lookup_dcookie": 18, "clone": 220, "clone3": 435,
        "process_madvise": 440, "process_mrelease": 448, "prlimit64": 261, "setpriority": 140,
        "sched_setparam": 118, "sched_setscheduler": 119, "sched_setattr": 274, "sched_setaffinity": 122,
        "ioprio_set": 30, "migrate_pages": 238, "move_pages": 239, "socket": 198, "socketpair": 199,
        "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180}),
}

_libc = ctypes.CDLL(None, use_errno=True)


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def program(arch: str, denied: tuple[str, ...] = DENIED, extra: dict[str, int] | None = None,
            self_only: bool = True, sockets: str | None = "none") -> list[tuple]:
    """The filter as (code, jt, jf, k) instructions for ``arch``. ``extra``: more calls to refuse, name → errno
    (tests use it to play a kernel without user namespaces or Landlock). ``self_only``: the ``SELF_ONLY`` calls
    on the caller alone. ``sockets``: which ``socket()`` families a candidate may open: ``"none"`` (no inet, no
    unix: Landlock mode, where a unix socket path of the host is reachable), ``"unix"`` (unix sockets too: a jail
    whose root holds no socket of the host), ``"inet"`` (unix and TCP over IPv4/IPv6; no UDP, raw or MPTCP),
    None (no socket rule). ``socketpair`` (a connected pair, reaching nothing) is always allowed for AF_UNIX."""
    audit, nrs = TABLES[arch]
    rules = [(nrs[n], EPERM) for n in denied if n in nrs]
    rules += [(TABLES[arch][1][n] if n in nrs else _extra_nr(arch, n), e) for n, e in (extra or {}).items()]
    rules = [(nr, e) for nr, e in rules if nr is not None]
    no = ("err", EPERM)
    # symbolic: ("jeq"/"jge"/"jset", k, jump if true, jump if false), ("ld", offset), ("and", k), ("label", name);
    # a jump is None (the next instruction), a label, or a return of the tail ("allow", "kill", ("err", e))
    prog: list = [("ld", 4), ("jeq", audit, None, "kill"), ("ld", 0)]
    if arch == "x86_64":
        prog.append(("jge", X32_BIT, "kill", None))
    for nr, err in rules:
        prog.append(("jeq", nr, ("err", err), None))
    for name, conds in (SELF_ONLY.items() if self_only else ()):
        prog.append(("jeq", nrs[name], None, f"not-{name}"))
        for j, (arg, value) in enumerate(conds):
            prog += [("ld", 16 + 8 * arg), ("jeq", value, "allow" if j == len(conds) - 1 else None, no)]
        prog.append(("label", f"not-{name}"))
    if sockets is not None:
        unix = "allow" if sockets in ("unix", "inet") else no
        inet = "inet" if sockets == "inet" else no
        prog += [("jeq", nrs["socketpair"], None, "not-socketpair"), ("ld", 16), ("jeq", AF_UNIX, "allow", no),
                 ("label", "not-socketpair"),
                 ("jeq", nrs["socket"], None, "not-socket"), ("ld", 16), ("jeq", AF_UNIX, unix, None),
                 ("jeq", AF_INET, inet, None), ("jeq", AF_INET6, inet, no),
                 ("label", "inet"), ("ld", 24), ("and", 0xFFFFFFFF & ~SOCK_FLAGS), ("jeq", SOCK_STREAM, None, no),
                 ("ld", 32), ("jeq", 0, "allow", None), ("jeq", IPPROTO_TCP, "allow", no),
                 ("label", "not-socket"), ("ld", 0)]
    prog += [("jeq", nrs["clone3"], ("err", ENOSYS), None), ("jeq", nrs["clone"], None, "allow"),
             ("ld", 16), ("jset", CLONE_NEW, ("err", EPERM), "allow")]
    return _assemble(prog, sorted({e for _, e in rules} | {ENOSYS, EPERM}))


def _assemble(prog: list, errs: list[int]) -> list[tuple]:
    """Resolve labels into one-byte relative jumps; the returns (allow, kill, each errno) go at the end."""
    tail = {"allow": RET_ALLOW, "kill": RET_KILL_PROCESS} | {("err", e): RET_ERRNO | e for e in errs}
    code = [ins for ins in prog if ins[0] != "label"]
    pos, n = {}, 0
    for ins in prog:
        if ins[0] == "label":
            pos[ins[1]] = n
        else:
            n += 1
    for i, lab in enumerate(tail):
        pos[lab] = len(code) + i
    out = []
    for i, ins in enumerate(code):
        if ins[0] == "ld":
            out.append((LD_W_ABS, 0, 0, ins[1]))
            continue
        if ins[0] == "and":
            out.append((ALU_AND_K, 0, 0, ins[1]))
            continue
        op = {"jeq": JEQ_K, "jge": JGE_K, "jset": JSET_K}[ins[0]]
        jt = 0 if ins[2] is None else pos[ins[2]] - i - 1
        jf = 0 if ins[3] is None else pos[ins[3]] - i - 1
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError("seccomp program too long for one-byte jumps")
        out.append((op, jt, jf, ins[1]))
    return out + [(RET_K, 0, 0, k) for k in tail.values()]


def _extra_nr(arch: str, name: str) -> int | None:
    more = {"x86_64": {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446},
            "aarch64": {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446}}
    return more.get(arch, {}).get(name)


def arch() -> str | None:
    m = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m) if m in TABLES or m in ("amd64", "arm64") else None


class Filter:
    """The compiled filter, built once; ``load()`` installs it in the calling process (a forked candidate)."""

    def __init__(self, denied: tuple[str, ...] = DENIED, extra: dict[str, int] | None = None,
                 self_only: bool = True, sockets: str | None = "none") -> None:
        a = arch()
        self.reason = "" if a else f"no syscall table for architecture {platform.machine()}"
        self.ok = a is not None
        if not self.ok:
            return
        ins = program(a, denied, extra, self_only, sockets)
        self._buf = (_Filter * len(ins))(*[_Filter(*x) for x in ins])
        self._prog = _Prog(len(ins), ctypes.cast(self._buf, ctypes.POINTER(_Filter)))
        self.size = len(ins)

    def load(self) -> str:
        """'' on success, else why not. Sets no_new_privs first (required without CAP_SYS_ADMIN; and a candidate
        must never gain privileges through exec anyway)."""
        if not self.ok:
            return self.reason
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"no_new_privs: {os.strerror(ctypes.get_errno())}"
        if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self._prog), 0, 0) != 0:
            return f"seccomp: {os.strerror(ctypes.get_errno())}"
        return ""


def probe() -> tuple[bool, str]:
    """Can this process's children load the filter? Tried in a forked child (a filter cannot be removed)."""
    f = Filter()
    if not f.ok:
        return False, f.reason

    def attempt() -> str:
        err = f.load()
        if err:
            return err
        # the filter works: ptrace must now fail with EPERM
        return "" if _libc.syscall(TABLES[arch()][1]["ptrace"], 0, 0, 0, 0) == -1 and \
            ctypes.get_errno() == EPERM else "filter loaded but ptrace was not refused"

    err = in_child(attempt)
    return (not err), (err or f"{len(program(arch()))} BPF instructions, {len(DENIED)} calls refused, "
                              f"{len(SELF_ONLY)} on the calling process only, sockets by family")
