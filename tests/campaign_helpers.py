"""Shared builders for campaign tests: replay files made from real problems, CLI runner, and the small
instruments the concurrency tests put around real parts (calls in flight, an executor that breaks, waiting for
a run's progress)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from evolve.archive import Archive
from proposer.answers.parsing import format_answers

ROOT = Path(__file__).resolve().parent.parent


def tail(text: str) -> str:
    """A completion continues a prompt that ends in `<answer_1>`."""
    return text[len("<answer_1>"):]


def pbe_replay(path: Path, problems, extra: list[str] = ()) -> Path:
    """Completions mixing wrong variants, near misses, the reference (late), and malformed text."""
    lines = []
    wrong = ["def f(xs):\n    return xs\n", "def f(x):\n    return x + 1\n", "def f(x):\n    return 0\n",
             "def f(xs):\n    return sorted(xs)\n", "def f(xs):\n    return [x * 2 for x in xs]\n"]
    for i, w in enumerate(wrong):
        lines.append(tail(format_answers([w, wrong[(i + 1) % len(wrong)], "def f(x):\n    return -x\n"])))
    lines.append("no tags here, just prose")
    lines.append("\n```python\ndef f(xs):\n    return [\n```\n</answer_1>")
    lines.append("\n<<<<<<< SEARCH\nnot in the parent\n=======\nx = 1\n>>>>>>> REPLACE\n</answer_1>")
    lines.append("\n<<<<<<< SEARCH\n# EVOLVE-BLOCK-START\n=======\n>>>>>>> REPLACE\n</answer_1>")
    lines.append("x" * 200_000)
    lines += list(extra)
    for p in problems:
        lines.append(tail(format_answers([wrong[0], p.reference_code, wrong[1]])))
    path.write_text("\n".join(json.dumps({"text": t}) for t in lines) + "\n")
    return path


def vevo(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "evolve.cli", *args], capture_output=True, text=True,
                       timeout=timeout, env=env, cwd=str(ROOT))
    if check and r.returncode != 0:
        raise AssertionError(f"vevo {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


class InFlight:
    """Counts calls in progress at once: ``with counter:`` around each call; ``calls``, ``now``, ``peak``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = self.now = self.peak = 0

    def __enter__(self) -> "InFlight":
        with self.lock:
            self.calls += 1
            self.now += 1
            self.peak = max(self.peak, self.now)
        return self

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.now -= 1


class BreaksAtCall:
    """An evaluator (around a real one) that raises at its n-th call: an executor breaking mid-run, with other
    batches in flight."""

    def __init__(self, inner, n: int):
        self.inner, self.n, self.calls, self.lock = inner, n, 0, threading.Lock()

    def evaluate_many(self, items, time_limit=None):
        with self.lock:
            self.calls += 1
            if self.calls == self.n:
                raise RuntimeError("executor broke")
        return self.inner.evaluate_many(items, time_limit)

    def close(self):
        self.inner.close()


def last_iteration(run: Path) -> int:
    """The run's last committed iteration; -1 while it has none or its archive is still being created."""
    if not (run / "archive.db").exists():
        return -1
    try:
        with Archive(run / "archive.db", readonly=True) as a:
            it = a.last_iteration()
    except Exception:  # the file is being created
        return -1
    return -1 if it is None else it


def wait_for_iteration(run: Path, k: int, timeout: float, poll: float = 0.02) -> bool:
    """Whether the run committed iteration k within timeout seconds."""
    end = time.time() + timeout
    while time.time() < end:
        if last_iteration(run) >= k:
            return True
        time.sleep(poll)
    return False


def interruptible() -> None:
    """``preexec_fn`` for a process a test will interrupt with SIGINT (Ctrl-C): SIGINT back to its default. A
    shell starts background jobs (``make test &``) with SIGINT ignored, the ignore is inherited, and Python then
    installs no KeyboardInterrupt handler, so the child would never see the test's Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def length_problem_toml(pid: str, title: str) -> str:
    """problem.toml of a one-function problem (`solve(s)` returns len(s), two tests, one of them HTML-like), for
    the report and UI tests that put hostile text in its id, title and seed."""
    return (f'id = "{pid}"\ntitle = "{title}"\ndescription = "Return the length of the string s."\n'
            'entry_point = "solve"\nseed = "seed.py"\n\n[[tests]]\nargs = ["<i>x</i>"]\nexpected = 8\n\n'
            '[[tests]]\nargs = [""]\nexpected = 0\n')
