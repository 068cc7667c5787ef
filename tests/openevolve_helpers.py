"""OpenEvolve's own Evaluator, run on a folder and a program, for parity tests (skipped without openevolve)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

MIRROR = Path("/work/.mirror/algorithmicsuperintelligence+openevolve/repo")
# our own OpenEvolve-format folders, one per sandbox limit (tests/data/oe_probes/), and what OpenEvolve reports
PROBES = Path(__file__).resolve().parent / "data" / "oe_probes"
PROBE_EXPECTED = {  # what OpenEvolve reports for each probe's initial program (checked against it when installed)
    "memory": {"combined_score": 1.0, "gigabytes": 1.5},
    "shm": {"combined_score": 1.0, "pool": 1.0, "executor": 1.0},
    "threads": {"combined_score": 1.0, "threads": 80.0},
    "open_files": {"combined_score": 1.0, "files": 100.0},
    "temp_file": {"combined_score": 1.0, "megabytes": 20.0},
    "stdout": {"combined_score": 1.0, "printed_mb": 2.0},
    "python_on_path": {"combined_score": 0.5},
    "stage_timeout": {"combined_score": 0.7, "stage1": 0.6, "stage2": 0.7},
    "pickled_output": {"combined_score": 0.5, "sum_radii": 1.0},
}


def openevolve_metrics(folder: Path, code: str, timeout: float | None = None) -> dict:
    """What OpenEvolve 0.4.x's Evaluator reports for code in folder (its config.yaml's evaluator section),
    run in a fresh interpreter so the example's imports and sys.path changes stay out of the test process."""
    pytest.importorskip("openevolve")
    script = (
        "import asyncio, json, sys, math\n"
        "from pathlib import Path\n"
        "from openevolve.config import Config, EvaluatorConfig\n"
        "folder, timeout = Path(sys.argv[1]), sys.argv[2]\n"
        "cfg = Config.from_yaml(folder / 'config.yaml').evaluator if (folder / 'config.yaml').is_file() "
        "else EvaluatorConfig()\n"
        "cfg.max_retries = 0\n"
        "if timeout != 'none':\n    cfg.timeout = float(timeout)\n"
        "from openevolve.evaluator import Evaluator\n"
        "ev = Evaluator(cfg, str(folder / 'evaluator.py'))\n"
        "m = asyncio.run(ev.evaluate_program(sys.stdin.read(), 'p1'))\n"
        "arts = ev.get_pending_artifacts('p1') or {}\n"
        "def j(v):\n"
        "    if isinstance(v, (bool, int, float)):\n        return v\n"
        "    return str(v)\n"
        "sys.stdout.write('\\nPARITY ' + json.dumps({'metrics': {k: j(v) for k, v in m.items()},"
        " 'artifacts': sorted(arts)}))\n")
    env = dict(os.environ, ENABLE_ARTIFACTS="true", PYTHONPATH=str(folder))
    r = subprocess.run([sys.executable, "-c", script, str(folder), "none" if timeout is None else str(timeout)],
                       input=code, capture_output=True, text=True, cwd=str(folder), env=env, timeout=900)
    line = [x for x in r.stdout.splitlines() if x.startswith("PARITY ")]
    assert line, (r.stdout[-2000:], r.stderr[-3000:])
    import json

    return json.loads(line[-1][len("PARITY "):])


def comparable(metrics: dict) -> dict:
    """Numbers and flags, as vevo's Evaluation keeps them (text-valued metrics become artifacts)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            out[k] = v
        elif isinstance(v, (int, float)) and math.isfinite(float(v)):
            out[k] = float(v)
    return out


def examples_dir(tmp_root: Path) -> Path | None:
    """OpenEvolve's examples: $VEVO_OPENEVOLVE_EXAMPLES, else exported from a fetched mirror of its repository."""
    env = os.environ.get("VEVO_OPENEVOLVE_EXAMPLES")
    if env and Path(env).is_dir():
        return Path(env)
    if not (MIRROR / "HEAD").exists():
        return None
    out = tmp_root / "oe-examples"
    if not (out / "examples").is_dir():
        out.mkdir(parents=True, exist_ok=True)
        arch = subprocess.run(["git", f"--git-dir={MIRROR}", "archive", "HEAD", "examples"], capture_output=True)
        if arch.returncode != 0:
            return None
        subprocess.run(["tar", "-x", "-C", str(out)], input=arch.stdout, check=True)
    return out / "examples"
