"""Shared builders for campaign tests: replay files made from real problems, CLI runner."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from proposer.parsing import format_answers

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
