"""A warm sandbox worker: imports paid once, then one forked, isolated process per candidate.

Started by the pool as ``python -m evaluators.worker FD_IN FD_OUT``; speaks length-prefixed JSON over
two pipes (``multiprocess.connection`` framing). JSON, not pickle, so a compromised worker cannot make the
orchestrator run code. The worker itself never runs candidate code and never sees expected outputs.
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import struct
import sys
import time

from evaluators import budget, harness, isolation, jail

OUT_CAP = 1 << 20          # default stdout/stderr bytes a candidate may print before it is stopped (output_limit)
RESULT_CAP = 64 << 20      # result-channel bytes (large but finite test outputs)
TAIL = 2000
LARGE_FILE = 16 << 20      # problem files above this are bound read-only, not copied
DRAIN_S = 0.005            # how often a running candidate's pipes are drained


class Worker:
    def __init__(self, opts: dict, entered: set[str], notes: list[str], host_pid: int):
        parent = opts.get("box_parent") or "/tmp"
        self.top = os.path.join(parent, f"vevo-box-{host_pid}-{os.urandom(4).hex()}")
        os.mkdir(self.top, 0o700)
        self.box = os.path.join(self.top, "w")
        self.uid = int(opts.get("uid") or (200000 + host_pid % 100000))  # distinct per worker: RLIMIT_NPROC is per uid
        # the built-in suite generators and tests could regenerate expected outputs: candidates never see them
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        own = [os.path.join(root, d) for d in ("problems/suites", "problems/importers", "tests", "runs", ".git")]
        disabled = set(opts.get("disable", []))
        paths = list(opts.get("python_paths") or jail.python_paths())
        self.iso = isolation.setup_worker(self.top, self.box, list(opts.get("hide", [])) + own, self.uid, paths,
                                          disabled, entered, mode=opts.get("mode", "root"))
        self.iso.notes[:0] = notes
        if not os.path.isdir(self.box):  # no mount namespace: a plain private directory
            os.mkdir(self.box, 0o711)
        os.chdir("/")
        self.n = 0
        self.retire = False  # set when the box cannot be cleaned: answer, then exit so the pool starts a fresh one
        for name in opts.get("preload", []):
            try:
                __import__(name)
            except Exception:
                pass
        if not self.iso.netns:  # the fallback socket block runs in every candidate: import its module once here
            import socket  # noqa: F401
        self.devnull = os.open(os.devnull, os.O_RDONLY)  # every candidate's stdin
        self.workdir = os.path.join(self.box, "cand")  # one path, emptied after every candidate
        # the jail's private /dev/shm (a tmpfs of its own, emptied after every candidate) and its bin/python
        self.shm = (self.iso.jail + jail.SHM) if self.iso.jail else None
        self.box_mb = 256
        self.mounts: list[str] = []  # read-only binds of a problem's large data files, undone after each candidate
        os.environ.update(HOME=self.workdir, TMPDIR=self.workdir,  # the rest was set clean by the pool
                          PATH=self.iso.bin + os.pathsep + os.environ.get("PATH", ""))
        self.state = isolation.own_state()  # a candidate that changes it retires this worker
        gc.collect()
        gc.freeze()  # forked candidates' collections skip the worker's objects: fewer copy-on-write page faults

    def run(self, job: dict) -> dict:
        self.n += 1
        workdir = self.workdir
        if os.path.lexists(workdir) and not self._clean(workdir):
            self.retire = True
            return {"worker_error": "candidate box could not be cleaned", "retire": True}
        self._size_box(int(job.get("disk_mb", 256)))
        os.mkdir(workdir, 0o700)
        if self.iso.uid is not None:
            os.chown(workdir, self.iso.uid, self.iso.uid)
        if job.get("mode") == "openevolve":
            harness.ensure_openevolve()  # imported here, where the repository is readable
            job = self._stage_evaluator(job, workdir)
        else:
            harness.precompile(job)  # trusted test code, compiled once here and inherited by every fork
            harness.compile_candidate(job)
        cg = self.iso.cgroup if self.iso.cgroup is not None and self.iso.cgroup.ok else None
        limits = isolation.Limits.from_job(job, cgroup=cg is not None)
        # no tmpfs box and no pid namespace or pids cgroup (Landlock, none): the worker checks the budget itself
        check = None if self.iso.priv else budget.Budget(workdir, limits.disk_mb, limits.nproc, procs=cg is None)
        out_cap = int(job.get("output_mb", 1)) << 20
        if cg is not None:
            cg.set_candidate_memory(limits.memory_mb)
            cg.set_max_pids(max(512, limits.nproc + 64))
            ooms = cg.oom_kills()
        fds: list[int] = []
        try:
            r_res, w_res = os.pipe()
            fds += (r_res, w_res)
            r_out, w_out = os.pipe()
            fds += (r_out, w_out)
            r_err, w_err = os.pipe()
            fds += (r_err, w_err)
            t0 = time.monotonic()
            pid = os.fork()
            if pid == 0:  # ---- candidate process
                try:
                    os.dup2(self.devnull, 0)
                    os.dup2(w_out, 1)
                    os.dup2(w_err, 2)
                    os.dup2(w_res, 3)
                    keep = self.iso.landlock.fd if self.iso.landlock is not None else -1
                    if keep > 4:  # the Landlock ruleset, inherited: restricting to it is the candidate's own call
                        os.closerange(4, keep)
                        os.closerange(keep + 1, 1 << 16)
                    else:
                        os.closerange(4, 1 << 16)
                    isolation.enter_child(limits, self.iso, workdir)
                    harness.main(job, 3)
                except BaseException:
                    try:
                        import traceback
                        os.write(2, traceback.format_exc()[-TAIL:].encode())
                    except BaseException:
                        pass
                finally:
                    try:
                        sys.stdout.flush()
                    except BaseException:
                        pass
                    os._exit(0)
            for fd in (w_res, w_out, w_err):
                os.close(fd)
                fds.remove(fd)
            res = self._supervise(pid, r_res, r_out, r_err, t0, limits.time_limit, _max_records(job), out_cap, check)
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            if not self._clean(workdir):  # the result stands; this worker is replaced after sending it
                self.retire = True
            isolation.clear_ipc(self.iso)
        if cg is not None and res.get("signal") == signal.SIGKILL and cg.oom_kills() > ooms:
            res["oom_kill"] = True
        changed = isolation.changed_state(self.state)
        if changed:  # another process changed this worker's limits or priority: the next candidate would pay
            self.retire = True
            res["retire_reason"] = f"its own limits or priority changed while a candidate ran: {changed}"
        if self.retire:
            res["retire"] = True
        res["wall"] = round(time.monotonic() - t0, 6)
        return res

    def _clean(self, workdir: str) -> bool:
        """Empty the box after a candidate; a box that resists (or hit its inode cap) is replaced whole."""
        while self.mounts:
            isolation._libc.umount2(self.mounts.pop().encode(), 2)  # MNT_DETACH
        if self.shm is not None and not self._empty_shm():
            return False
        if remove_tree(workdir):
            return True
        return isolation.remount_box(self.iso, self.box, self.box_mb) and not os.path.lexists(workdir)

    def _empty_shm(self) -> bool:
        """/dev/shm is private to each candidate: emptied after it, replaced whole when something resists."""
        try:
            names = os.listdir(self.shm)
        except OSError:
            names = []
        if all(remove_tree(os.path.join(self.shm, n)) for n in names):
            return True
        try:
            isolation._libc.umount2(self.shm.encode(), 2)
            jail.mount_shm(self.shm, self.box_mb)
            return True
        except jail.JailError:
            return False

    def _size_box(self, mb: int) -> None:
        """The box and /dev/shm tmpfs sized for this job (a problem's disk_mb): remounted only when it changes."""
        if mb == self.box_mb or not self.iso.priv:
            return
        try:
            jail._mount(None, self.box, None, jail.MS_REMOUNT | jail.MS_NOSUID | jail.MS_NODEV,
                        f"size={mb}m,nr_inodes=65536,mode=0711")
            if self.shm is not None:
                jail._mount(None, self.shm, None, jail.MS_REMOUNT | jail.MS_NOSUID | jail.MS_NODEV,
                            f"size={mb}m,nr_inodes=65536,mode=1777")
            self.box_mb = mb
        except jail.JailError:
            pass

    def _stage_evaluator(self, job: dict, workdir: str) -> dict:
        """OpenEvolve evaluators may sit in a folder the sandbox uid cannot read (a 0700 home or tmp dir):
        copy the folder (small files only) into the candidate's private dir and run it from there."""
        src = os.path.dirname(job["evaluator"])
        dst = os.path.join(workdir, "problem")

        large: list[tuple[str, str]] = []

        def ignore(d, names):
            out = []
            for n in names:
                p = os.path.join(d, n)
                if n == "__pycache__":
                    out.append(n)
                elif os.path.isfile(p) and os.path.getsize(p) > LARGE_FILE:
                    out.append(n)
                    large.append((p, os.path.join(dst, os.path.relpath(p, src))))
            return out
        import shutil  # only OpenEvolve jobs pay for it

        try:
            shutil.copytree(src, dst, ignore=ignore, symlinks=False)
        except (OSError, shutil.Error):
            return job
        if self.iso.uid is not None:
            for d, dirs, files in os.walk(dst):
                for n in [d] + [os.path.join(d, f) for f in files]:
                    os.chown(n, self.iso.uid, self.iso.uid)
        for host, inside in large:
            self._share_read_only(host, inside)
        return dict(job, evaluator=os.path.join(dst, os.path.basename(job["evaluator"])))

    def _share_read_only(self, host: str, inside: str) -> None:
        """A large data file next to the evaluator, made available without copying it: bound read-only at its
        place (where the candidate's root sees it), or, without mount rights, linked to."""
        try:
            os.close(os.open(inside, os.O_CREAT | os.O_WRONLY, 0o444))
            if not self.iso.priv:
                os.unlink(inside)
                os.symlink(host, inside)
                return
            target = (self.iso.jail + inside) if self.iso.jail else inside
            jail._mount(host, target, None, jail.MS_BIND)
            self.mounts.append(target)
            jail._mount(None, target, None, jail.MS_REMOUNT | jail.MS_BIND | jail.MS_RDONLY | jail.MS_NOSUID |
                        jail.MS_NODEV)
        except (OSError, jail.JailError):
            pass

    def _supervise(self, pid: int, r_res: int, r_out: int, r_err: int, t0: float, time_limit: float,
                   max_records: int, out_cap: int = OUT_CAP, check: budget.Budget | None = None) -> dict:
        bufs = {r_res: bytearray(), r_out: bytearray(), r_err: bytearray()}
        caps = {r_res: RESULT_CAP, r_out: out_cap, r_err: out_cap}
        sent = {r_out: 0, r_err: 0, r_res: 0}
        for fd in bufs:
            os.set_blocking(fd, False)
        pidfd = os.pidfd_open(pid)
        sel = select.poll()
        sel.register(pidfd, select.POLLIN)
        deadline = t0 + time_limit
        timed_out = output_limit = False
        status = None
        over = ""
        next_check = t0 + budget.EVERY
        # Wake on the candidate's exit, not on each record it writes: every wake-up is a context switch, and a
        # typical candidate finishes well inside one pipe buffer (64 KB). Pipes are drained every DRAIN_S so a
        # chatty candidate never blocks for long and a flood is caught early.
        while status is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if sel.poll(min(remaining, DRAIN_S) * 1000):
                wpid, st = os.waitpid(pid, os.WNOHANG)
                if wpid:
                    status = st
            for fd in bufs:
                while self._read(fd, bufs, sent, caps, r_res):
                    if sent[fd] > caps[fd]:
                        output_limit = True
                        break
            if output_limit:
                break
            if check is not None and status is None and time.monotonic() >= next_check:
                over = check.over()
                if over:
                    break
                next_check = time.monotonic() + budget.EVERY
        if check is not None and not over:  # what it left on the disk counts too
            over = check.over(running=False)
        forced = status is None
        if forced:  # deadline or flood: stop the whole group now
            self._killgroup(pid)
            _, status = os.waitpid(pid, 0)
        if forced or self._has_children():
            self._killall()
        # every writer is dead now: drain what is left
        for fd in list(bufs):
            for _ in range(10000):
                if not self._read(fd, bufs, sent, caps, r_res):
                    break
        os.close(pidfd)
        if sent[r_res] > RESULT_CAP or sent[r_out] > out_cap or sent[r_err] > out_cap:
            output_limit = True
        records, bad = decode_records(bytes(bufs[r_res]), max_records)
        if bad < 0:
            output_limit, bad = True, 0
        out = {"records": records, "bad_records": bad, "timed_out": timed_out, "output_limit": output_limit,
               "stdout_tail": bytes(bufs[r_out][-TAIL:]).decode("utf-8", "replace"),
               "stderr_tail": bytes(bufs[r_err][-TAIL:]).decode("utf-8", "replace")}
        if os.WIFSIGNALED(status):
            out["signal"] = os.WTERMSIG(status)
        else:
            out["exit_code"] = os.WEXITSTATUS(status)
        if over:
            out["budget"] = over
        return out

    @staticmethod
    def _read(fd, bufs, sent, caps, res_fd) -> bool:
        """Read one chunk. The result channel keeps its head (up to its cap); stdout/stderr keep a tail."""
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            return False
        sent[fd] += len(chunk)
        buf = bufs[fd]
        if fd == res_fd:
            if len(buf) < RESULT_CAP:
                buf.extend(chunk[: RESULT_CAP - len(buf)])
        else:
            buf.extend(chunk)
            if len(buf) > 4 * TAIL:
                del buf[: len(buf) - TAIL]
        return True

    @staticmethod
    def _killgroup(pid: int) -> None:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass

    @staticmethod
    def _has_children() -> bool:
        """As subreaper, every process a finished candidate left behind is now our child."""
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        return True

    def _killall(self) -> None:
        """Nothing a candidate started may outlive its evaluation."""
        if self.iso.uid is not None:
            isolation.kill_uid(self.iso.uid)
        elif self.iso.pidns:  # init of the namespace: kill(-1) reaches every other process in it, and only those
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            isolation.kill_descendants(os.getpid())
        isolation.reap_orphans(wait=2.0)


class _Conn:
    """multiprocess.connection's framing (a 4-byte big-endian length, then the bytes) without importing
    it: the worker stays small, and a small worker forks fast."""

    def __init__(self, fd_in: int, fd_out: int):
        self.fd_in, self.fd_out = fd_in, fd_out

    def _read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            b = os.read(self.fd_in, left)
            if not b:
                raise EOFError
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)

    def recv_bytes(self) -> bytes:
        return self._read(struct.unpack("!i", self._read(4))[0])

    def send_bytes(self, data: bytes) -> None:
        view = memoryview(struct.pack("!i", len(data)) + data)
        while view:
            view = view[os.write(self.fd_out, view):]


def remove_tree(path: str) -> bool:
    """Remove a candidate's directory tree; True when it is gone. Iterative and relative to directory fds, so a
    chain of thousands of nested directories (deeper than PATH_MAX, deeper than any recursion limit) costs
    neither; every fd is closed on every path. A tree that would take more than ``budget`` entries is left
    for the caller to discard whole (the box is a tmpfs of its own)."""
    try:
        os.rmdir(path)  # the common case: the candidate left nothing
        return True
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        try:
            os.unlink(path)
            return True
        except OSError:
            return not os.path.lexists(path)
    stack = [(top, None)]  # (dir fd, name of this dir in the parent below it on the stack)
    budget = 200000
    try:
        while stack and budget > 0:
            fd, _ = stack[-1]
            descended = False
            try:
                names = os.listdir(fd)
            except OSError:
                names = []
            for name in names:
                budget -= 1
                try:
                    os.unlink(name, dir_fd=fd)
                    continue
                except OSError:  # a directory (or not removable): rmdir, else descend
                    pass
                try:
                    os.rmdir(name, dir_fd=fd)
                    continue
                except OSError:
                    pass
                try:
                    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    continue
                stack.append((sub, name))
                descended = True
                break
            if descended:
                continue
            fd, name = stack.pop()
            os.close(fd)
            if stack and name is not None:
                try:
                    os.rmdir(name, dir_fd=stack[-1][0])
                except OSError:
                    budget = 0  # something could not be removed: let the caller discard the box
    finally:
        for fd, _ in stack:
            os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass
    return not os.path.lexists(path)


def _max_records(job: dict) -> int:
    """How many result lines an honest run of this job writes, with room to spare: each case writes one or two,
    plus start/done and the error records."""
    return 4 * len(job.get("cases") or ()) + 64


def decode_records(data: bytes, max_records: int, depth: int = 200) -> tuple[list[dict], int]:
    """The candidate's result lines → (records, bad). bad is -1 when there are more lines than ``max_records``
    (a flood of tiny records would cost the worker gigabytes as Python objects). Nesting deeper than ``depth``
    is refused here, under a recursion limit of its own, so nothing handed to the orchestrator is deeper than
    it can decode."""
    if data.count(b"\n") > max_records:
        return [], -1
    records, bad = [], 0
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 50)
    try:
        for line in data.split(b"\n"):
            if not line:
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError, MemoryError):
                bad += 1
                continue
            if isinstance(rec, dict):
                records.append(rec)
            else:
                bad += 1
    finally:
        sys.setrecursionlimit(old)
    return records, bad


def main() -> None:
    for p in os.environ.get("VEVO_WORKER_PATH", "").split(os.pathsep):
        if p and p not in sys.path:
            sys.path.append(p)
    os.environ.pop("VEVO_WORKER_PATH", None)
    fd_in, fd_out = int(sys.argv[1]), int(sys.argv[2])
    cin = cout = _Conn(fd_in, fd_out)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    isolation._libc.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with its orchestrator
    if os.getppid() != int(os.environ.pop("VEVO_ORCHESTRATOR", "0") or os.getppid()):
        return  # the orchestrator died before the line above
    opts = json.loads(cin.recv_bytes())
    host_pid = os.getpid()
    entered, notes = isolation.enter_namespaces(set(opts.get("disable", [])), opts.get("mode", "root"))
    worker = Worker(opts, entered, notes, host_pid)
    try:  # our pid as the host sees it (/proc here is still the host's mount): 1 inside our PID namespace
        pid = int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        pid = os.getpid()
    hello = {"hello": worker.iso.describe(), "pid": pid, "launcher": host_pid, "box": worker.top}
    cout.send_bytes(json.dumps(hello).encode())
    while True:
        try:
            msg = cin.recv_bytes()
        except (EOFError, OSError):
            break
        job = json.loads(msg)
        if job.get("op") == "stop":
            break
        try:
            res = worker.run(job)
        except Exception as e:  # a worker bug must not look like a candidate result
            res = {"worker_error": f"{type(e).__name__}: {e}"}
        try:
            data = json.dumps(res).encode()
        except (ValueError, TypeError, RecursionError) as e:
            data = json.dumps({"worker_error": f"unencodable result: {type(e).__name__}"}).encode()
        cout.send_bytes(data)
        if worker.retire:
            break


if __name__ == "__main__":
    main()
