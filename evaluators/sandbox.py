"""Which sandbox candidates get here, decided once per pool and said out loud.

The chain: ``root`` (namespaces, allow-list root, a uid per worker, cgroups) → ``userns`` (an ordinary user: the
same namespaces and allow-list root inside a user namespace the user owns) → ``landlock`` (user namespaces blocked:
the filesystem restricted to the interpreter and the box by Landlock, signals scoped where the ABI allows) →
``none``. Every mode adds the seccomp filter where the kernel takes one. ``none`` runs untrusted code with the
user's full rights, so a pool refuses it (``SandboxUnavailable``, one line naming what was missing and why) unless
the user opted in by name (``--unsafe-no-sandbox``, config ``executor.unsafe_no_sandbox``).

Each probe runs in a forked child, so nothing it tries (a namespace, a filter) sticks to the caller.
"""
from __future__ import annotations

import ctypes
import errno
import os

from problems.errors import VevoError

from . import cgroups, jail, landlock, seccomp
from .forked import in_child

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC = \
    0x10000000, 0x00020000, 0x20000000, 0x40000000, 0x08000000
OPT_IN = "--unsafe-no-sandbox (config executor.unsafe_no_sandbox: true)"


class SandboxUnavailable(VevoError):
    """No layer that confines candidates is available and the user did not accept running them unconfined."""



def _sysctl(name: str) -> str | None:
    try:
        with open("/proc/sys/" + name.replace(".", "/")) as f:
            return f.read().strip()
    except OSError:
        return None


def _userns_attempt() -> str:
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER) != 0:
        e = ctypes.get_errno()
        return f"unshare(CLONE_NEWUSER): {os.strerror(e)}" + \
            (" (refused by a seccomp profile or container policy)" if e == errno.EPERM else "")
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        try:
            with open(path, "w") as f:
                f.write(text)
        except FileNotFoundError:
            if not path.endswith("setgroups"):
                return f"{path}: missing"
        except OSError as e:
            return f"writing {path}: {e.strerror}"
    if _libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC) != 0:
        return f"unshare(mount, pid, net, ipc) in the user namespace: {os.strerror(ctypes.get_errno())}"
    if _libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None) != 0:
        return f"making mounts private: {os.strerror(ctypes.get_errno())}"
    target = b"/tmp" if os.path.isdir("/tmp") else b"/"
    if _libc.mount(b"tmpfs", target, b"tmpfs", 2 | 4, b"size=64k") != 0:
        return f"mounting a tmpfs in the user namespace: {os.strerror(ctypes.get_errno())}"
    return ""


def userns_probe() -> tuple[bool, str]:
    """Can an ordinary process here build the jail in a user namespace of its own? (ok, reason)."""
    err = in_child(_userns_attempt)
    if not err:
        return True, "unshare(user, mount, pid, net, ipc) and tmpfs mounts work"
    for name, bad in (("kernel.apparmor_restrict_unprivileged_userns", "1"), ("user.max_user_namespaces", "0"),
                      ("kernel.unprivileged_userns_clone", "0")):
        if _sysctl(name) == bad:
            return False, f"user namespaces are blocked: {name}={bad} ({err})"
    return False, f"user namespaces are blocked: {err}"


def landlock_probe() -> tuple[bool, str]:
    v, why = landlock.abi()
    if not v:
        return False, f"Landlock is unavailable: {why}"
    scope = "filesystem" + (", tcp" if v >= 4 else "") + (", signals, abstract sockets" if v >= 6 else
                                                        " (signals not scoped before ABI 6)")
    return True, f"ABI {v}: {scope}"


def cgroup_probe() -> tuple[bool, str]:
    version, mem, pids = cgroups._parents()
    if mem is None:
        own = cgroups._own_paths().get("", "/")
        return False, f"no writable cgroup with the memory controller delegated (own v2 group {own})"
    return True, f"{version} memory at {mem}" + (f", pids at {pids}" if pids else ", no pids controller")


def probe(disable: frozenset[str] = frozenset()) -> dict:
    """Every layer: {name: {"ok": bool, "reason": str}}, plus the mode the chain picks."""
    root = os.geteuid() == 0
    layers = {"root": (root, f"running as uid {os.geteuid()}")}
    layers["userns"] = (False, "disabled") if "userns" in disable else userns_probe()
    layers["landlock"] = (False, "disabled") if "landlock" in disable else landlock_probe()
    layers["seccomp"] = (False, "disabled") if "seccomp" in disable else seccomp.probe()
    layers["cgroup"] = (False, "disabled") if "cgroup" in disable else cgroup_probe()
    out = {k: {"ok": bool(ok), "reason": why} for k, (ok, why) in layers.items()}
    out["bound"] = {"ok": True, "reason": bound_reason()}
    mode = "root" if root else "userns" if layers["userns"][0] else "landlock" if layers["landlock"][0] else "none"
    out["mode"] = {"ok": mode != "none", "reason": mode}
    gaps = mode_gaps(mode, out)
    out["gaps"] = {"ok": not gaps, "reason": "; ".join(f"{k}: {v}" for k, v in gaps) or "nothing beyond the threat "
                   "model's table (docs/ARCHITECTURE.md)", "items": [list(g) for g in gaps]}
    return out


def mode_gaps(mode: str, layers: dict) -> list[tuple[str, str]]:
    """What a mode cannot promise, layer by layer: (layer, why). Root promises the whole table; the others say
    here what they do without and what stands in for it."""
    cg, sc = layers["cgroup"]["ok"], layers["seccomp"]["ok"]
    lv = landlock.abi()[0] if mode == "landlock" else 0
    out: list[tuple[str, str]] = []
    if mode in ("userns", "landlock", "none"):
        out.append(("uid", "candidates run as your own uid (no uid per worker): what stops them acting on your "
                    "other processes is " + ("the seccomp filter (process-scoped calls on self only)" if sc else
                                             "nothing: no seccomp filter here")))
        if not cg:
            out.append(("memory", "no delegated memory cgroup: RLIMIT_AS bounds mappings, not page cache or memfd "
                        "pages a candidate fills"))
    if mode in ("landlock", "none"):
        out.append(("pid", "no pid namespace: candidates are killed as the worker's descendants (it is a child "
                    "subreaper and kills until it has no child left)" +
                    ("" if lv >= 6 else "; they may signal any of your processes (Landlock < 6 scopes no signals)")))
        out.append(("processes", "a delegated pids cgroup bounds the worker's tree; RLIMIT_NPROC still counts all "
                    "your processes" if cg else
                    "RLIMIT_NPROC counts all your processes: a candidate may take the whole headroom (nproc above "
                    "what ran when its worker started), leaving a concurrent candidate on another worker none; the "
                    "worker checks its candidate's own tree against nproc every 20 ms and stops one over it"))
        out.append(("disk", "the box is on the host's disk: disk_mb is a budget the worker checks every 20 ms and "
                    "after the candidate (no file larger than disk_mb); a fast writer overshoots by what it writes "
                    "in that time"))
        out.append(("network", "no network namespace: " + ("the seccomp filter refuses inet, UDP, MPTCP, raw, "
                    "netlink and unix socket() (socketpair only)" if sc else "only an in-process socket block "
                    "(a candidate can undo it)") + ("" if lv >= 4 else "; Landlock < 4 has no TCP rule")))
        out.append(("ipc", "no IPC namespace: " + ("SysV IPC and POSIX message queues are refused by the seccomp "
                    "filter" if sc else "SysV IPC objects and message queues are your user's and outlive a "
                    "candidate")))
        out.append(("shm", "no private /dev/shm: multiprocessing's semaphores are unavailable"))
    if mode == "landlock":
        out.append(("filesystem", "Landlock: read-only the interpreter's prefixes, site-packages and libraries, "
                    "write the box; everything else of yours is refused by the kernel"))
    if mode == "none":
        out.append(("filesystem", "none: candidates read and write everything your uid can"))
    return out


def bound_reason() -> str:
    """What a candidate's filesystem view holds besides its box (read-only), and the import paths kept out."""
    paths = jail.python_paths()
    libs = [d for d in jail.LIB_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    out = f"read-only: {', '.join(paths + libs + list(jail.ETC_FILES))}, /dev/{{{','.join(jail.DEVICES)}}}"
    kept = jail.left_out(paths)
    return out + (f"; import paths not bound: {', '.join(kept)}" if kept else "")


def refusal(layers: dict) -> str:
    return (f"no sandbox for candidates: {layers['userns']['reason']}; {layers['landlock']['reason']}; "
            f"candidate code would run with all of uid {os.getuid()}'s rights (read ~, kill its processes): "
            f"run as root, allow user namespaces or Landlock, or accept the risk with {OPT_IN}")


def plan(disable: frozenset[str] = frozenset(), unsafe_no_sandbox: bool = False) -> dict:
    """The pool's mode, decided once: the probe's layers and ``mode``. Raises SandboxUnavailable for ``none``
    without the opt-in."""
    layers = probe(frozenset(disable))
    mode = layers["mode"]["reason"]
    if mode == "none" and not unsafe_no_sandbox:
        raise SandboxUnavailable(refusal(layers))
    return {"mode": mode, "layers": layers}


def doctor_lines(report: dict) -> list[str]:
    """`vevo doctor` text: one line per layer."""
    names = {"root": "root", "userns": "user namespaces", "landlock": "Landlock", "seccomp": "seccomp filter",
             "cgroup": "cgroup limits", "bound": "candidates see", "mode": "candidates run under"}
    lines = [f"{names.get(k, k):22} {'yes' if v['ok'] else 'no ':4} {v['reason']}" for k, v in report.items()
             if k != "gaps"]
    gaps = report.get("gaps", {}).get("items") or []
    mode = report.get("mode", {}).get("reason", "")
    if gaps:
        lines.append(f"not promised in {mode} mode, layer by layer:")
        lines += [f"  {k:20} {v}" for k, v in gaps]
    else:
        lines.append(f"not promised in {mode} mode: {report.get('gaps', {}).get('reason', '')}")
    return lines
