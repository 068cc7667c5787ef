"""A pool of warm sandbox workers. ``evaluate_many`` keeps input order, so results are deterministic
whatever the number of workers; a worker that dies or wedges is replaced and its candidate is
reported as ``killed``."""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterable

from multiprocess.connection import Connection

from problems.model import Problem

from .scoring import build_job, score
from .types import Evaluation

DEFAULT_PRELOAD = ("math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string", "random",
                   "statistics", "fractions", "decimal", "operator", "typing", "copy", "json", "cmath")
GRACE = 5.0  # seconds past a candidate's deadline before the worker itself is presumed wedged


class _WorkerHandle:
    def __init__(self, opts: dict):
        r1, w1 = os.pipe()  # orchestrator → worker
        r2, w2 = os.pipe()  # worker → orchestrator
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
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

    def _recv(self, timeout: float) -> dict | None:
        if not self.rx.poll(timeout):
            return None
        try:
            return json.loads(self.rx.recv_bytes())
        except (EOFError, OSError, ValueError):
            return None

    def run(self, job: dict) -> dict:
        try:
            self.tx.send_bytes(json.dumps(job).encode())
        except (OSError, ValueError) as e:
            return {"killed": f"worker unreachable: {e}"}
        res = self._recv(float(job["time_limit"]) + GRACE)
        if res is None:
            return {"killed": "worker died or stopped answering"}
        return res

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
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


class SandboxPool:
    """workers: parallel candidates. hide: paths made invisible to candidates (run dirs, problem data)."""

    def __init__(self, workers: int = 2, hide: Iterable[str] = (), preload: Iterable[str] = DEFAULT_PRELOAD):
        self.opts = {"hide": [str(Path(p).resolve()) for p in hide], "preload": list(preload)}
        self.n = max(1, int(workers))
        self._idle: queue.Queue[_WorkerHandle] = queue.Queue()
        self._all: list[_WorkerHandle] = []
        self._lock = threading.Lock()
        self.replaced = 0
        for _ in range(self.n):
            self._add()

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

    def run_raw(self, job: dict) -> dict:
        h = self._idle.get()
        try:
            res = h.run(job)
        except Exception as e:  # never raise into the caller
            res = {"killed": f"{type(e).__name__}: {e}"}
        if "killed" in res or not h.alive():
            h.kill()
            with self._lock:
                self._all.remove(h)
                self.replaced += 1
            self._add()
        else:
            self._idle.put(h)
        return res

    def evaluate(self, problem: Problem, code: str, time_limit: float | None = None) -> Evaluation:
        try:
            job = build_job(problem, code, time_limit)
        except Exception as e:
            return Evaluation.failed("format_error", problem.n_tests, error=f"cannot build job: {e}")
        raw = self.run_raw(job)
        try:
            ev = score(problem, raw)
        except Exception as e:
            return Evaluation.failed("crash", problem.n_tests, error=f"unscorable result: {type(e).__name__}: {e}")
        ev.artifacts.setdefault("wall", raw.get("wall"))
        return ev

    def evaluate_many(self, items: list[tuple[Problem, str]], time_limit: float | None = None) -> list[Evaluation]:
        out: list[Evaluation | None] = [None] * len(items)
        if not items:
            return []
        q: queue.Queue[int] = queue.Queue()
        for i in range(len(items)):
            q.put(i)

        def drain() -> None:
            while True:
                try:
                    i = q.get_nowait()
                except queue.Empty:
                    return
                out[i] = self.evaluate(items[i][0], items[i][1], time_limit)

        threads = [threading.Thread(target=drain, daemon=True) for _ in range(min(self.n, len(items)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [e for e in out]  # type: ignore[misc]

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
