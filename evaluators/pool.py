"""A pool of warm sandbox workers. ``evaluate_many`` keeps input order, so results are deterministic
whatever the number of workers; a worker that dies or wedges is replaced and its candidate is
reported as ``killed``."""
from __future__ import annotations

import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Iterable

from multiprocess.connection import Connection

from problems.model import Problem

from . import cgroups, isolation, jail, sandbox
from .recheck import BestTracker
from .judge import build_job, score
from .types import Evaluation

# What candidates import often, paid once per worker. Not `random` (nor `statistics`, which imports it): it
# registers an at-fork hook that reseeds in every forked candidate, ~40 copy-on-write page faults each (no
# MBPP solution and 4 of 164 HumanEval tests import it; those pay the import themselves).
DEFAULT_PRELOAD = ("math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string", "fractions",
                   "decimal", "operator", "typing", "copy", "json", "cmath")
GRACE = 5.0  # seconds past a candidate's deadline before the worker itself is presumed wedged
PIPELINE = 2  # jobs in flight per worker: one running, one waiting in its pipe


class _WorkerHandle:
    def __init__(self, opts: dict):
        r1, w1 = os.pipe()  # orchestrator → worker
        r2, w2 = os.pipe()  # worker → orchestrator
        root = str(Path(__file__).resolve().parent.parent)
        # A clean environment from the start: what the orchestrator holds (API keys, tokens) never enters the
        # worker's process image, where a candidate could read it back. Nothing to scrub later.
        env = isolation.clean_env()
        env["PYTHONPATH"] = root
        env["VEVO_ORCHESTRATOR"] = str(os.getpid())
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[k] = "1"
        # -S: no site/.pth processing, a smaller worker (forks faster); the orchestrator's sys.path comes along
        # so candidates can import what is installed (numpy, ...).
        env["VEVO_WORKER_PATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        self.proc = subprocess.Popen([sys.executable, "-S", "-m", "evaluators.worker", str(r1), str(w2)],
                                     pass_fds=(r1, w2), env=env, stdin=subprocess.DEVNULL, cwd="/",
                                     start_new_session=True)
        os.close(r1)
        os.close(w2)
        self.tx, self.rx = Connection(w1, readable=False), Connection(r2, writable=False)
        self.tx.send_bytes(json.dumps(opts).encode())
        hello = self._recv(30.0)
        if hello is None or "hello" not in hello:
            self.kill()
            raise RuntimeError("sandbox worker failed to start")
        self.isolation, self.box = hello["hello"], hello.get("box")
        missing = _missing_layers(opts.get("mode", "root"), self.isolation, set(opts.get("disable", [])))
        if missing:
            self.kill()
            raise sandbox.SandboxUnavailable(f"sandbox worker could not set up {missing}: "
                                             + "; ".join(self.isolation.get("notes", []))[:400])
        self.worker_pid = int(hello.get("pid") or self.proc.pid)  # the worker itself; proc is its launcher
        self.cgroup_dirs = list(self.isolation.get("cgroup", {}).get("dirs", []))

    def _recv(self, timeout: float) -> dict | None:
        if not self.rx.poll(timeout):
            return None
        return self.recv()

    def recv(self) -> dict | None:
        """One message; None when the worker is gone. A message that arrived but does not decode (it carries a
        candidate's values, so it is hostile input) is that candidate's ``crash``, whatever the decoder raised;
        the worker stays."""
        try:
            data = self.rx.recv_bytes()
        except (EOFError, OSError, ValueError):
            return None
        try:
            msg = json.loads(data)
        except Exception as e:  # RecursionError, MemoryError, ValueError: all the candidate's doing
            return {"undecodable": f"{type(e).__name__}"}
        return msg if isinstance(msg, dict) else {"undecodable": "not an object"}

    def send(self, job: dict) -> bool:
        try:
            self.tx.send_bytes(json.dumps(job).encode())
            return True
        except (OSError, ValueError):
            return False

    def kill(self) -> None:
        if getattr(self, "worker_pid", None):  # the worker first (its candidates die with it), then its launcher
            try:
                os.kill(self.worker_pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.kill()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for c in (getattr(self, "tx", None), getattr(self, "rx", None)):
            if c is not None:
                try:
                    c.close()
                except OSError:
                    pass
        if getattr(self, "box", None):
            shutil.rmtree(self.box, ignore_errors=True)
        if getattr(self, "cgroup_dirs", None):
            cgroups.remove(self.cgroup_dirs)


def sweep_stale_boxes(parent: str) -> int:
    """Remove the empty ``vevo-box-<pid>-*`` mountpoints that workers of a killed orchestrator left in ``parent``
    (a worker's box lives in its own mount namespace; on the host its directory is empty). Only directories whose
    launcher pid is gone, and as root only with rmdir: nothing with contents is deleted. Without root a worker with
    no mount namespace (Landlock, none) keeps its box as a plain directory of the user's: one of a dead worker,
    owned by this uid, is removed whole (symlinks are removed, never followed)."""
    n = 0
    try:
        names = [e for e in os.listdir(parent) if e.startswith("vevo-box-")]
    except OSError:
        return 0
    for name in names:
        pid = name.split("-")[2]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        path = os.path.join(parent, name)
        try:
            os.rmdir(path)
            n += 1
        except OSError:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if os.geteuid() != 0 and st.st_uid == os.geteuid() and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
                n += not os.path.lexists(path)
    return n


def _missing_layers(mode: str, iso: dict, disabled: set[str]) -> str:
    """What a worker's hello lacks of what its mode promises ('' when nothing; layers left off on purpose, for
    measuring them, are not asked for): a half-built sandbox is refused, never silently run."""
    if mode == "userns" and not (iso.get("userns") and (iso.get("pid") or "pidns" in disabled) and
                                 ("chroot" in str(iso.get("filesystem")) or "jail" in disabled)):
        return "its user-namespace jail"
    if mode == "landlock" and not iso.get("landlock"):
        return "Landlock"
    return ""


class _Dispatch:
    """One call's jobs driven through the workers it holds, from one thread, by poll(). Each worker has up to
    PIPELINE jobs in flight, so it starts the next as soon as it reports one, without a round trip through this
    process (which shares the cores with the workers). Jobs run in submission order on each worker, so a head
    job's clock starts when the previous result arrived. A worker that dies or stops answering is replaced: the
    job it was running is reported ``killed``; the ones queued behind it (never started) go to another worker."""

    def __init__(self, pool: "SandboxPool", jobs: list[dict], held: list[_WorkerHandle]):
        self.pool, self.jobs = pool, jobs
        self.res: list[dict | None] = [None] * len(jobs)
        self.todo = deque(range(len(jobs)))         # not yet sent to any worker
        self.flight: dict[_WorkerHandle, deque[int]] = {h: deque() for h in held}  # sent, not answered
        self.since: dict[_WorkerHandle, float] = {}  # when each worker's head job started
        self.poller = select.poll()
        self.by_fd: dict[int, _WorkerHandle] = {}

    def run(self) -> list[dict]:
        try:
            for h in list(self.flight):
                self.attach(h)
            for limit in (1, PIPELINE):  # one job per worker first: k jobs on k workers run side by side
                for h in list(self.flight):
                    if h in self.flight:
                        self.feed(h, limit)
            while any(self.flight.values()) or self.todo:
                if not self.flight:  # every worker failed to restart
                    for i in self.todo:
                        self.res[i] = {"killed": "no sandbox worker could be started"}
                    break
                busy = [h for h, q in self.flight.items() if q]
                if not busy:
                    for h in list(self.flight):
                        self.feed(h)
                    continue
                wait = max(0.0, min(self.deadline(h) for h in busy) - time.monotonic())
                for fd, _ in self.poller.poll(wait * 1000):
                    h = self.by_fd.get(fd)
                    if h is not None and h in self.flight:
                        self.drain(h)
                self.expire()
        finally:
            self.release()
        return self.res  # type: ignore[return-value]

    def deadline(self, h: _WorkerHandle) -> float:
        return self.since[h] + float(self.jobs[self.flight[h][0]]["time_limit"]) + GRACE

    def attach(self, h: _WorkerHandle) -> None:
        fd = h.rx.fileno()
        self.by_fd[fd] = h
        self.poller.register(fd, select.POLLIN)

    def feed(self, h: _WorkerHandle, limit: int = PIPELINE) -> None:
        """Send queued jobs to h until it has `limit` in flight."""
        q = self.flight[h]
        while self.todo and len(q) < limit:
            i = self.todo.popleft()
            q.append(i)
            if len(q) == 1:
                self.since[h] = time.monotonic()
            if not h.send(self.jobs[i]):  # the worker is gone: job i never reached it, so it goes elsewhere
                self.todo.appendleft(q.pop())
                self.fail(h, "worker died")
                return

    def drain(self, h: _WorkerHandle) -> None:
        """Take every answer h has ready, then top it up."""
        while self.flight[h]:
            msg = h.recv()
            if msg is None:
                self.fail(h, "worker died or stopped answering")
                break
            self.res[self.flight[h].popleft()] = msg
            self.since[h] = time.monotonic()
            if msg.get("retire"):  # its box could not be cleaned, or its own limits changed: it exits now
                if msg.get("retire_reason"):
                    self.pool.note(f"sandbox worker replaced: {msg['retire_reason']}")
                self.fail(h, "worker retired", started=False)
                break
            if not h.rx.poll(0):
                break
        if h in self.flight:
            self.feed(h)

    def expire(self) -> None:
        now = time.monotonic()
        for h in [h for h, q in self.flight.items() if q]:
            if now > self.deadline(h):
                self.fail(h, "worker stopped answering")

    def fail(self, h: _WorkerHandle, why: str, started: bool = True) -> None:
        """Replace h. started: its head job was running (it is reported killed); else every queued job goes
        back to the queue (a worker that retired itself after its last answer)."""
        queued = self.flight.pop(h)
        if queued and started:
            self.res[queued.popleft()] = {"killed": why}
        self.todo.extendleft(reversed(queued))
        fd = next(f for f, x in self.by_fd.items() if x is h)
        self.poller.unregister(fd)
        del self.by_fd[fd]
        self.since.pop(h, None)
        try:
            new = self.pool._replace(h)
        except Exception:  # could not start a worker: go on with the others (or fail the rest in run)
            return
        self.flight[new] = deque()
        self.attach(new)
        self.feed(new)

    def release(self) -> None:
        """Workers back to the pool; one interrupted with jobs in flight is in an unknown state: replaced."""
        for h in list(self.flight):
            if self.flight[h]:
                try:
                    h = self.pool._replace(h)
                except Exception:
                    continue
            self.pool._idle.put(h)


class SandboxPool:
    """workers: parallel candidates. hide: paths made invisible to candidates (run dirs, problem data)."""

    def __init__(self, workers: int = 2, hide: Iterable[str] = (), preload: Iterable[str] = DEFAULT_PRELOAD,
                 disable: Iterable[str] = (), unsafe_no_sandbox: bool = False):
        """disable: isolation layers to leave off (of ``isolation.LAYERS``), for measuring what each costs.
        unsafe_no_sandbox: run candidates even where no layer can confine them (``evaluators/sandbox.py``)."""
        bad = set(disable) - set(isolation.LAYERS)
        if bad:
            raise ValueError(f"unknown sandbox layer(s) {sorted(bad)}; known: {', '.join(isolation.LAYERS)}")
        self.plan = sandbox.plan(frozenset(disable), unsafe_no_sandbox)  # once per pool; raises without a sandbox
        self.opts = {"mode": self.plan["mode"], "hide": [str(Path(p).resolve()) for p in hide], "preload": list(preload),
                     "disable": sorted(disable), "box_parent": tempfile.gettempdir(),
                     # computed here: the worker runs with -S, so it does not know a virtual environment's prefix
                     "python_paths": jail.python_paths()}
        cgroups.sweep_stale()
        sweep_stale_boxes(self.opts["box_parent"])
        self.n = max(1, int(workers))
        self._idle: queue.Queue[_WorkerHandle] = queue.Queue()
        self._all: list[_WorkerHandle] = []
        self._lock = threading.Lock()
        self.replaced = 0
        self.notes: list[str] = []  # what the pool had to do about its workers, each also said on stderr
        self.bests = BestTracker()  # a new best of an OpenEvolve problem is re-run in a fresh worker (recheck.py)
        for _ in range(self.n):
            self._add()

    def note(self, line: str) -> None:
        """A health line about the sandbox itself (a worker replaced, and why): kept, and said once on stderr."""
        if line not in self.notes:
            print(f"vevo: warning: {line}", file=sys.stderr, flush=True)
        self.notes.append(line)

    def _add(self) -> None:
        h = _WorkerHandle(self.opts)
        with self._lock:
            self._all.append(h)
        self._idle.put(h)

    @property
    def uids(self) -> list[int | None]:
        return [h.isolation.get("uid") for h in list(self._all)]

    @property
    def isolation(self) -> dict:
        return self._all[0].isolation if self._all else {}

    @property
    def layers(self) -> dict:
        """Every layer's probe (yes/no and why), as `vevo doctor` prints it."""
        return self.plan["layers"]

    def run_raw(self, job: dict) -> dict:
        return self._dispatch([job])[0]

    def run_problem_raw(self, problem: Problem, code: str, time_limit: float | None = None) -> dict:
        """The candidate's raw report on ``problem``'s inputs, unscored: how importers compute expected outputs
        from a reference solution (the problem's expected values are ignored)."""
        return self.run_raw(build_job(problem, code, time_limit))

    def evaluate(self, problem: Problem, code: str, time_limit: float | None = None) -> Evaluation:
        return self.evaluate_many([(problem, code)], time_limit)[0]

    def evaluate_many(self, items: list[tuple[Problem, str]], time_limit: float | None = None) -> list[Evaluation]:
        out: list[Evaluation | None] = [None] * len(items)
        jobs, where = [], []
        for i, (problem, code) in enumerate(items):
            try:
                jobs.append(build_job(problem, code, time_limit))
                where.append(i)
            except Exception as e:
                out[i] = Evaluation.failed("format_error", problem.n_tests, error=f"cannot build job: {e}")
        for i, raw in zip(where, self._dispatch(jobs)):
            problem = items[i][0]
            try:
                ev = score(problem, raw)
            except Exception as e:
                ev = Evaluation.failed("crash", problem.n_tests, error=f"unscorable result: {type(e).__name__}: {e}")
            ev.artifacts.setdefault("wall", raw.get("wall"))
            out[i] = ev
        fresh = lambda p, c: self.evaluate_fresh(p, c, time_limit)  # noqa: E731
        return self.bests.recheck(items, out, fresh)  # type: ignore[arg-type]

    def evaluate_fresh(self, problem: Problem, code: str, time_limit: float | None = None) -> Evaluation:
        """One evaluation in a worker started for it and discarded after: nothing an earlier candidate did to a
        warm worker reaches it."""
        job = build_job(problem, code, time_limit)
        h = _WorkerHandle(self.opts)
        try:
            raw = h._recv(float(job["time_limit"]) + GRACE) if h.send(job) else None
        finally:
            h.kill()
        ev = score(problem, raw if raw is not None else {"killed": "the fresh worker stopped answering"})
        ev.artifacts.setdefault("wall", (raw or {}).get("wall"))
        return ev

    # -- dispatch
    def _take(self, k: int) -> list[_WorkerHandle]:
        """At least one idle worker (waiting if another caller holds them all), at most k; none only when
        the pool has lost every worker and cannot start one."""
        with self._lock:
            empty = not self._all
        if empty:
            try:
                self._add()
            except Exception:
                return []
        got = [self._idle.get()]
        while len(got) < k:
            try:
                got.append(self._idle.get_nowait())
            except queue.Empty:
                break
        return got

    def _replace(self, h: _WorkerHandle) -> _WorkerHandle:
        h.kill()
        with self._lock:
            if h in self._all:
                self._all.remove(h)
            self.replaced += 1
        new = _WorkerHandle(self.opts)
        with self._lock:
            self._all.append(new)
        return new

    def _dispatch(self, jobs: list[dict]) -> list[dict]:
        """Raw results of jobs, in order (see `_Dispatch`)."""
        if not jobs:
            return []
        held = self._take(min(self.n, len(jobs)))
        if not held:
            return [{"killed": "no sandbox worker could be started"} for _ in jobs]
        return _Dispatch(self, jobs, held).run()

    def close(self) -> None:
        with self._lock:
            handles, self._all = list(self._all), []
        for h in handles:
            try:
                h.tx.send_bytes(b'{"op":"stop"}')
            except (OSError, ValueError):
                pass
            h.kill()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
