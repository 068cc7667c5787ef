"""The candidate's filesystem: an allow-list root built once per worker, entered by ``chroot`` in each candidate.

Inside the worker's private mount namespace a small tmpfs becomes the new root. Into it go, read-only and at
their usual paths (so ``sys.path`` and shared-library paths work unchanged): the interpreter's prefixes and the
import paths that hold installed packages, the shared-library directories, ``/etc/ld.so.cache``, the device
nodes ``null``, ``zero``, ``random`` and ``urandom``, a ``/proc`` of the worker's own PID namespace mounted with
``hidepid=invisible`` (a candidate sees its own uid's processes only), and, writable, the candidate's private
box. Nothing else exists there: not the host's ``/tmp``, ``/run``, ``/home`` or ``/root``, not this checkout,
run directories, problem folders or datasets. An allow-list, so a path nobody thought of is not reachable.

Why ``chroot`` per candidate and not ``pivot_root`` in the worker: the worker must still read the host (an
OpenEvolve evaluator's folder it copies into the box); ``chroot`` is one cheap system call in the child, and a
process without root (the candidate, after its uid drop) cannot leave a chroot.
"""
from __future__ import annotations

import ctypes
import os
import sys

from problems.errors import VevoError

MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 1 << 14, 1 << 18
MS_REMOUNT, MS_RDONLY = 32, 1
MOUNT_ATTR_RDONLY, AT_RECURSIVE, SYS_mount_setattr = 0x1, 0x8000, 442
LIB_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32")
DEVICES = ("null", "zero", "random", "urandom")
ETC_FILES = ("/etc/ld.so.cache",)
SHM = "/dev/shm"
BIN = "/dev/vevo-bin"  # inside our own /dev (never a host bind); first on candidates' PATH: python, python3 → this interpreter

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class JailError(VevoError):
    pass


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(None if src is None else src.encode(), dst.encode(), None if fstype is None else fstype.encode(),
                   flags, None if data is None else data.encode()) != 0:
        raise JailError(f"mount {fstype or 'bind'} {src} on {dst}: {os.strerror(ctypes.get_errno())}")


def _set_readonly(path: str) -> None:
    """Every mount at and below path read-only, in one call (mount_setattr, Linux 5.12+)."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if _libc.syscall(SYS_mount_setattr, -100, path.encode(), AT_RECURSIVE, ctypes.byref(attr),
                     ctypes.sizeof(attr)) != 0:
        raise JailError(f"mount_setattr {path}: {os.strerror(ctypes.get_errno())}")


INSTALLED = ("site-packages", "dist-packages")  # the directories installers write distributions into


def python_paths(extra: tuple[str, ...] = ()) -> list[str]:
    """Directories a candidate's Python reads: the interpreter's prefixes (its executable's directory, the standard
    library, a virtual environment) and the ``site-packages``/``dist-packages`` directories on ``sys.path``, which
    hold installed distributions only. Any other import path is left out: the working directory (``python -m``
    puts it first on ``sys.path``, so vevo started from a home would show the whole home), ``PYTHONPATH`` entries,
    ``.pth`` targets such as another project's editable install, and this checkout (the worker imports its
    packages before forking). ``extra``: paths a caller declares on purpose, bound as they are."""
    out: list[str] = []
    prefixes = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                os.path.dirname(os.path.realpath(sys.executable))]
    installed = [p for p in sys.path if p and os.path.basename(os.path.normpath(p)) in INSTALLED]
    for p in prefixes + installed + list(extra):
        rp = os.path.realpath(p)
        if os.path.isdir(rp) and rp != "/" and rp not in out:
            out.append(rp)
    return out


def left_out(bound: list[str]) -> list[str]:
    """The import paths of this process that ``python_paths`` does not bring into the candidate's view."""
    def inside(p: str) -> bool:
        return any(p == b or p.startswith(b.rstrip("/") + "/") for b in bound)
    return list(dict.fromkeys(rp for rp in (os.path.realpath(p) for p in sys.path if p)
                              if os.path.isdir(rp) and not inside(rp)))


def _outermost(paths: list[str]) -> list[str]:
    """Drop paths inside another listed path: a recursive bind of the outer one already brings them."""
    keep: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in keep):
            keep.append(p)
    return keep


def _mkdirs(root: str, path: str) -> str:
    dst = root + path
    os.makedirs(dst, mode=0o755, exist_ok=True)
    return dst


def _bind(root: str, path: str, notes: list[str]) -> None:
    if os.path.isdir(path):
        dst = _mkdirs(root, path)
    else:
        _mkdirs(root, os.path.dirname(path))
        dst = root + path
        if not os.path.exists(dst):
            os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o644))
    try:
        _mount(path, dst, None, MS_BIND | MS_REC)
    except JailError as e:
        notes.append(str(e))


def build(root: str, box: str, python: list[str], hide: list[str], notes: list[str]) -> None:
    """Make ``root`` (an empty directory) the allow-list root. ``box`` is bound writable at its own path; the
    rest read-only. Called in the worker's private mount namespace after its PID namespace is entered (the
    /proc mounted here is that namespace's). Raises JailError when the root cannot be made safe."""
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755")
    for lib in LIB_DIRS:  # merged-/usr systems: /lib is a symlink to usr/lib; keep it one
        if os.path.islink(lib):
            _mkdirs(root, os.path.dirname(lib))
            os.symlink(os.readlink(lib), root + lib)
    libs = [d for d in LIB_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    for p in _outermost(python + libs):
        _bind(root, p, notes)
    for f in ETC_FILES:
        if os.path.isfile(f):
            _bind(root, f, notes)
    dev = _mkdirs(root, "/dev")
    for d in DEVICES:
        if os.path.exists("/dev/" + d):
            os.close(os.open(f"{dev}/{d}", os.O_CREAT | os.O_WRONLY, 0o644))
            _mount("/dev/" + d, f"{dev}/{d}", None, MS_BIND)
    os.symlink("/proc/self/fd", f"{dev}/fd")
    _mkdirs(root, SHM)
    _mkdirs(root, BIN)
    for name in ("python", "python3"):  # evaluators that run the program with `python`, whatever the system has
        os.symlink(sys.executable, root + BIN + "/" + name)
    proc = _mkdirs(root, "/proc")
    for opt in ("hidepid=invisible", "hidepid=2", None):
        if opt is None:  # a user namespace under a partly masked /proc (a container) may not mount one: go without
            notes.append("no /proc in the jail: the kernel refused to mount one")
            break
        try:
            _mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, opt)
            break
        except JailError:
            continue
    for p in hide:  # paths a problem wants hidden that happen to lie under an allowed directory
        rp = os.path.realpath(p)
        if os.path.isdir(root + rp):
            _mount("tmpfs", root + rp, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,nr_inodes=16,mode=0555")
            notes.append(f"hidden {rp}")
    _mkdirs(root, box)
    _set_readonly(root)
    _mount(box, root + box, None, MS_BIND)  # after the read-only pass: the box alone stays writable
    _mount(None, root + box, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
    mount_shm(root + SHM, 256)


def mount_shm(path: str, mb: int) -> None:
    """A private, writable /dev/shm (multiprocessing's semaphores and shared memory live there)."""
    _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={mb}m,nr_inodes=65536,mode=1777")


def rebind_box(root: str, box: str) -> None:
    """After the box tmpfs was replaced (a box that could not be cleaned), bind the new one into the root."""
    _libc.umount2((root + box).encode(), 2)  # MNT_DETACH
    _mount(box, root + box, None, MS_BIND)
    _mount(None, root + box, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
