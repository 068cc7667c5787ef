"""OpenEvolve folders in a campaign: open-ended problems run their whole budget, prompts carry the metric names
and the evaluator's artifacts (read back from the archive), `runs show` gives each problem's best; importing
folders gives unique ids and a reason for every folder skipped."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from evolve.config.schema import CampaignConfig
from evolve.launch.runner import start
from tests.campaign_helpers import vevo

SEED = "# EVOLVE-BLOCK-START\ndef value():\n    return 1.5\n# EVOLVE-BLOCK-END\n"
EVALUATOR = '''
import subprocess
import sys
from openevolve.evaluation_result import EvaluationResult


def evaluate(program_path):
    out = subprocess.run([sys.executable, "-c",
                          "import importlib.util as u; s = u.spec_from_file_location('p', %r); m = u.module_from_spec(s);"
                          " s.loader.exec_module(m); print(m.value())" % program_path],
                         capture_output=True, text=True, timeout=30)
    try:
        v = float(out.stdout.strip())
    except ValueError:
        v = 0.0
    print("evaluated", v, file=sys.stderr)
    return EvaluationResult(metrics={"combined_score": v, "value": v, "eval_time": 0.01, "is_valid": True},
                            artifacts={"stage1_result": f"VALUE-WAS-{v}", "hint": "try larger values"})
'''


def _folder(root: Path, name: str = "above_one") -> Path:
    f = root / name
    f.mkdir(parents=True)
    (f / "initial_program.py").write_text(SEED)
    (f / "evaluator.py").write_text(EVALUATOR)
    root.chmod(0o755)
    return f


def test_open_ended_campaign_runs_its_budget_and_prompts_carry_metrics_and_artifacts(tmp_path):
    folder = _folder(tmp_path / "probs")
    cfg = CampaignConfig(problems_dir=[str(folder)], problems=["above_one"], seed=0, out=str(tmp_path / "run"),
                         search={"iterations": 4, "islands": 1, "answers": 2, "group": 1}, executor={"workers": 1})
    run_dir, summary = start(cfg, progress=False)
    # the seed scores 1.5 (>= 1.0, the old "solved" rule): an OpenEvolve folder has no target, so nothing retires
    assert summary["iterations"] == 4 and summary["solved"] == 0, summary
    assert summary["best"]["above_one"]["scalar"] >= 1.5
    with sqlite3.connect(run_dir / "archive.db") as db:
        prompts = [r[0] for r in db.execute('SELECT prompt FROM "groups" ORDER BY id')]
    assert len(prompts) == 4
    for p in prompts:
        assert "### Metrics:" in p and "value: " in p and "is_valid: True" in p and "eval_time" in p, p
        assert "### Evaluator feedback:" in p and "stage1_result: VALUE-WAS-" in p and "hint: try larger" in p, p
        assert "stderr: evaluated" in p, p
    r = vevo("runs", "show", str(run_dir), "--code")
    assert "best above_one: 1.5" in r.stdout and "def value():" in r.stdout, r.stdout
    j = json.loads(vevo("runs", "show", str(run_dir), "--json").stdout)
    assert j["best"]["above_one"]["program_id"] >= 1


def test_target_from_vevo_toml_or_config_makes_it_solvable(tmp_path):
    from problems.registry import load_folder

    f = _folder(tmp_path / "a")
    assert load_folder(f).open_ended
    (f / "vevo.toml").write_text('solved = "scalar >= 1.2"\n[metrics]\nvalue = "lower"\n')
    p = load_folder(f)
    assert not p.open_ended and p.is_solved([], 1.5) and p.metric_directions == {"value": "lower"}
    g = _folder(tmp_path / "b")
    (g / "config.yaml").write_text("early_stopping_patience: -1\nconvergence_threshold: 2.5\n"
                                   "evaluator:\n  timeout: 42\n  memory_limit_mb: 3000\n")
    q = load_folder(g)
    assert q.solved_rule == "scalar >= 2.5" and q.time_limit == 42 and q.memory_limit_mb == 3000


def test_import_gives_unique_ids_from_relative_paths_and_says_why_folders_are_skipped(tmp_path):
    src = tmp_path / "examples"
    for rel in ("hexagon_packing/11", "hexagon_packing/12", "other/11"):
        _folder(src, rel)
    rs = src / "r_robust"
    rs.mkdir()
    (rs / "initial_program.r").write_text("f <- function() 1\n")
    (rs / "evaluator.py").write_text("def evaluate(p):\n    return {}\n")
    out = tmp_path / "out"
    r = vevo("problems", "import", "openevolve", str(src), "--out", str(out))
    assert "imported 3 openevolve problems" in r.stdout, r.stdout
    assert "problem 3/3" in r.stderr, r.stderr  # progress (plain: stderr is no terminal here)
    assert "skipped" in r.stdout + r.stderr and "initial_program.r" in r.stdout + r.stderr, (r.stdout, r.stderr)
    ids = [json.loads(x)["id"] for x in vevo("problems", "list", "--problems-dir", str(out), "--suite", "openevolve",
                                             "--json").stdout.splitlines()]
    assert sorted(ids) == ["hexagon_packing/11", "hexagon_packing/12", "other/11"], ids
    r = vevo("problems", "import", "openevolve", str(rs), "--out", str(tmp_path / "o2"), check=False)
    assert r.returncode == 2 and "initial_program.r" in r.stderr and "Python" in r.stderr, r.stderr
    r = vevo("problems", "import", "openevolve", str(src), "--out", str(out), check=False)
    assert r.returncode == 2 and "already exists" in r.stderr, r.stderr
