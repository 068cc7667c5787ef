"""Landlock (Linux 5.13+): the filesystem sandbox an ordinary user gets where user namespaces are blocked.

One ruleset per worker, built once (its fd is inherited by every forked candidate); ``restrict()`` in the
candidate is one ``landlock_restrict_self`` call. The candidate may then read and execute the interpreter's
directories and the shared libraries, read ``/etc/ld.so.cache`` and the harmless device nodes, and do anything
inside its own box; every other path (the home, ``/tmp``, ``/proc``, the checkout, run directories, problem
folders) is refused by the kernel, whatever the file permissions say. With ABI 4+ TCP bind and connect are
refused; with ABI 6+ the candidate can neither signal processes outside its domain (the worker, the orchestrator,
the user's other programs) nor reach abstract unix sockets. Landlock also forbids ptrace of anything outside the
domain at every ABI.
"""
from __future__ import annotations

import ctypes
import os

SYS_create, SYS_add_rule, SYS_restrict = 444, 445, 446  # the same on every architecture (asm-generic numbers)
CREATE_VERSION = 1
RULE_PATH_BENEATH = 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
READ = EXECUTE | READ_FILE | READ_DIR
FS_BITS = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}  # ABI → number of filesystem access bits it handles
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1, 2
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> tuple[int, str]:
    """(ABI version, '') or (0, why there is none)."""
    v = _libc.syscall(SYS_create, None, 0, CREATE_VERSION)
    if v >= 1:
        return int(v), ""
    e = ctypes.get_errno()
    why = {38: "the kernel has no Landlock (ENOSYS)", 95: "Landlock is disabled at boot (EOPNOTSUPP; lsm= lacks "
           "landlock)"}.get(e, f"landlock_create_ruleset: {os.strerror(e)}")
    return 0, why


class Ruleset:
    """read_only: directories and files readable (and executable); writable: directories fully usable."""

    def __init__(self, read_only: list[str], writable: list[str]) -> None:
        self.version, self.reason = abi()
        self.fd = -1
        self.notes: list[str] = []
        if not self.version:
            return
        fs_all = (1 << FS_BITS.get(self.version, 16)) - 1
        net = NET_BIND_TCP | NET_CONNECT_TCP if self.version >= 4 else 0
        scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if self.version >= 6 else 0
        size = ctypes.sizeof(_RulesetAttr) if self.version >= 6 else (16 if self.version >= 4 else 8)
        attr = _RulesetAttr(fs_all, net, scoped)
        fd = _libc.syscall(SYS_create, ctypes.byref(attr), size, 0)
        if fd < 0:
            self.version, self.reason = 0, f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"
            return
        import fcntl

        self.fd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64)  # clear of the low fds a forked candidate rewires
        os.close(fd)
        for paths, access in ((read_only, READ), (writable, fs_all)):
            for p in paths:
                self._add(p, access)
        if self.version < 6:
            self.notes.append(f"Landlock ABI {self.version} < 6: signals to processes outside the sandbox are "
                              "not blocked")

    def _add(self, path: str, access: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):  # files take file rights only
                access &= EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)
            rule = _PathBeneath(access, pfd)
            if _libc.syscall(SYS_add_rule, self.fd, RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                self.notes.append(f"landlock rule {path}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(pfd)

    @property
    def ok(self) -> bool:
        return self.fd >= 0

    def restrict(self) -> str:
        """In the candidate: '' once the calling process is confined, else why not."""
        if self.fd < 0:
            return self.reason
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"no_new_privs: {os.strerror(ctypes.get_errno())}"
        if _libc.syscall(SYS_restrict, self.fd, 0) != 0:
            return f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
        os.close(self.fd)
        return ""

    def describe(self) -> str:
        parts = [f"ABI {self.version}", "filesystem"]
        if self.version >= 4:
            parts.append("tcp")
        if self.version >= 6:
            parts.append("signals, abstract sockets")
        return " ".join(parts[:2]) + (" + " + ", ".join(parts[2:]) if parts[2:] else "")
