"""Problem formats, registry, scaffolds, OpenEvolve folders and the problems CLI."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evaluators.pool import SandboxPool
from problems.model import CallCase, Problem, load_native, write_native
from problems.openevolve import load_openevolve
from problems.registry import discover
from tests.campaign_helpers import ROOT, vevo


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for k, v in files.items():
        (folder / k).write_text(textwrap.dedent(v))
    return folder


GOOD_TOML = '''
id = "sq"
description = "square"
entry_point = "f"
[[tests]]
args = [3]
expected = 9
[[tests]]
args_py = "(None,)"
expected_py = "None"
'''
SEED = "# EVOLVE-BLOCK-START\ndef f(x):\n    return x\n# EVOLVE-BLOCK-END\n"


@pytest.mark.parametrize("kind", ["io", "asserts", "stdio", "openevolve"])
def test_scaffolds_pass_check(tmp_path, kind):
    vevo("problems", "new", f"p_{kind}", "--kind", kind, "--dir", str(tmp_path))
    r = vevo("problems", "check", str(tmp_path / f"p_{kind}"), "--json")
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 1 and set(rows[0]) == {"id", "seed", "reference", "tiny_out_of_reach"}
    seed = rows[0]["seed"]
    assert set(seed) >= {"status", "vector", "scalar", "solved", "artifacts"}
    if kind != "openevolve":
        assert rows[0]["reference"]["solved"] and not seed["solved"]
    else:
        assert seed["status"] == "ok" and seed["vector"]


@pytest.mark.parametrize("files,needle", [
    ({"problem.toml": "id = 'x'\nentry_point = 3\n", "seed.py": SEED}, "problem.toml: entry_point: expected str"),
    ({"problem.toml": "id = 'x'\n[[tests]\n", "seed.py": SEED}, "problem.toml: invalid TOML"),
    ({"problem.toml": GOOD_TOML}, "problem.toml: seed: seed program 'seed.py' not found"),
    ({"problem.toml": "bogus = 1\n" + GOOD_TOML, "seed.py": SEED}, "problem.toml: bogus: unknown key"),
    ({"problem.toml": GOOD_TOML + "bogus = 1\n", "seed.py": SEED}, "problem.toml: tests[1].bogus: unknown key"),
    ({"problem.toml": "entry_point='f'\n[[tests]]\nargs=[1]\n", "seed.py": SEED}, "tests[0].expected: missing"),
    ({"problem.toml": "entry_point='f'\n[[tests]]\nargs_py='(1,'\nexpected=1\n", "seed.py": SEED},
     "tests[0].args_py: not a Python literal"),
    ({"problem.toml": "entry_point='f'\ntests_file='t.jsonl'\n", "seed.py": SEED, "t.jsonl": "{oops\n"},
     "t.jsonl: line 1: invalid JSON"),
    ({"problem.toml": "entry_point='f'\nweights=[1,2]\n[[tests]]\nargs=[1]\nexpected=1\n", "seed.py": SEED},
     "weights: has 2 entries for 1 tests"),
    ({"initial_program.py": "x = 1\n", "evaluator.py": "def nope(p):\n    pass\n"}, "evaluator.py: evaluate:"),
])
def test_malformed_problem_is_one_line_exit_2(tmp_path, files, needle):
    folder = write(tmp_path / "bad", files)
    r = vevo("problems", "check", str(folder), check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in r.stderr, r.stderr


def test_check_folder_of_many_reports_bad_one_and_checks_the_rest(tmp_path):
    write(tmp_path / "all" / "good", {"problem.toml": GOOD_TOML, "seed.py": SEED,
                                      "reference.py": "def f(x):\n    return None if x is None else x * x\n"})
    write(tmp_path / "all" / "bad", {"problem.toml": "id = [", "seed.py": SEED})
    r = vevo("problems", "check", str(tmp_path / "all"), check=False)
    assert r.returncode == 2
    assert "sq: seed wrong" in r.stdout and "reference ok 1.000 [11] solved" in r.stdout
    assert "bad/problem.toml" in r.stderr


def test_native_round_trip_keeps_python_values(tmp_path):
    p = Problem(id="rt/x", seed_code=SEED, entry_point="f", tests=[
        CallCase(((1, 2), None, {3}, b"x", 2**70, float("inf")), expected=[(1,), {"a": None}, {1: 2}])])
    q = load_native(write_native(p, tmp_path / "x"))
    assert q.tests == p.tests and q.seed_code == SEED


OE_EVALUATOR = '''
import importlib.util
from openevolve.evaluation_result import EvaluationResult

def _run(path):
    spec = importlib.util.spec_from_file_location("prog", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.value()

def evaluate_stage1(path):
    v = _run(path)
    return EvaluationResult(metrics={"runs": 1.0, "combined_score": min(v, 1.0) * 0.6},
                            artifacts={"stage1": f"value={v}"})

def evaluate_stage2(path):
    v = _run(path)
    return {"precision": v / 2, "combined_score": v / 2}

def evaluate_stage3(path):
    return EvaluationResult(metrics={"stage3": 1.0}, artifacts={"stage3": "ran"})

def evaluate(path):
    return {"combined_score": _run(path)}
'''


def openevolve_contract(mod, path, thresholds):
    """OpenEvolve's cascade as its Evaluator._cascade_evaluate defines it, computed directly."""
    def proc(r):
        return (dict(r.metrics), dict(r.artifacts)) if hasattr(r, "metrics") else (dict(r), {})

    def passes(m, th):
        if "combined_score" in m:
            return m["combined_score"] >= th
        vals = [v for k, v in m.items() if k != "error"]
        return bool(vals) and sum(vals) / len(vals) >= th
    m, a = proc(mod.evaluate_stage1(path))
    if not passes(m, thresholds[0]):
        return m, a
    m2, a2 = proc(mod.evaluate_stage2(path))
    m, a = {**m, **m2}, {**a, **a2}
    if len(thresholds) < 2 or not passes(m, thresholds[1]):
        return m, a
    m3, a3 = proc(mod.evaluate_stage3(path))
    return {**m, **m3}, {**a, **a3}


@pytest.mark.parametrize("value", [0.2, 0.9, 1.6])
def test_openevolve_cascade_matches_contract(tmp_path, value):
    folder = write(tmp_path / "oe", {"initial_program.py": "# EVOLVE-BLOCK-START\ndef value():\n    return 0.1\n"
                                                           "# EVOLVE-BLOCK-END\n",
                                     "evaluator.py": OE_EVALUATOR,
                                     "config.yaml": "evaluator:\n  cascade_evaluation: true\n"
                                                    "  cascade_thresholds: [0.5, 0.75]\n"})
    prob = load_openevolve(folder)
    code = f"def value():\n    return {value}\n"
    prog = tmp_path / "cand.py"
    prog.write_text(code)
    # the contract, run here with the same shim the sandbox uses when openevolve is not installed
    sys.path.insert(0, str(ROOT / "evaluators" / "shims"))
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location("oe_eval_direct", folder / "evaluator.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        want_m, want_a = openevolve_contract(mod, str(prog), [0.5, 0.75])
    finally:
        sys.path.remove(str(ROOT / "evaluators" / "shims"))
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(prob, code)
    assert ev.status == "ok", ev.artifacts
    assert ev.artifacts["metrics"] == pytest.approx(want_m)
    assert ev.scalar == pytest.approx(want_m["combined_score"])
    # score columns are keyed by name (sorted), so two programs' columns line up whatever order they came in
    names = sorted(k for k in want_m if k != "combined_score")
    assert ev.artifacts["metric_names"] == names
    assert ev.vector == pytest.approx([want_m[k] for k in names])
    for k, v in want_a.items():
        assert ev.artifacts[k] == v


def test_openevolve_crashing_program_and_syntax(tmp_path):
    folder = write(tmp_path / "oe", {"initial_program.py": "def value():\n    return 0.1\n", "evaluator.py": OE_EVALUATOR})
    prob = load_openevolve(folder)
    with SandboxPool(workers=1) as pool:
        assert pool.evaluate(prob, "import os\nos._exit(1)\n").status == "crash"
        assert pool.evaluate(prob, "while True:\n    pass\n", time_limit=1).status == "timeout"


def test_registry_dirs_env_and_entry_points(tmp_path, monkeypatch):
    write(tmp_path / "mine" / "sq", {"problem.toml": GOOD_TOML, "seed.py": SEED})
    write(tmp_path / "env" / "sq2", {"problem.toml": GOOD_TOML.replace('id = "sq"', 'id = "sq2"'), "seed.py": SEED})
    # a real installed distribution advertising problems through the entry point group
    site = tmp_path / "site"
    write(site / "vevo_plugin_demo", {"__init__.py": f"def problems():\n    return {str(tmp_path / 'plug')!r}\n"})
    write(tmp_path / "plug" / "sq3", {"problem.toml": GOOD_TOML.replace('id = "sq"', 'id = "sq3"'), "seed.py": SEED})
    write(site / "vevo_plugin_demo-0.1.dist-info", {
        "METADATA": "Metadata-Version: 2.1\nName: vevo-plugin-demo\nVersion: 0.1\n",
        "entry_points.txt": "[vevo.problems]\ndemo = vevo_plugin_demo:problems\n"})
    code = ("import json; from problems.registry import discover; r = discover([%r]);"
            "print(json.dumps(sorted(k for k in r.problems if k.startswith('sq'))))") % str(tmp_path / "mine")
    env = {"PYTHONPATH": f"{site}:{ROOT}", "VEVO_PROBLEMS_PATH": str(tmp_path / "env"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT))
    assert json.loads(out.stdout) == ["sq", "sq2", "sq3"], out.stderr


def test_problems_list_and_show_and_eval_program(tmp_path):
    r = vevo("problems", "list", "--suite", "pbe-heldout", "--json")
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(rows) == 8 and all(x["split"] == "heldout" for x in rows)
    pid = rows[0]["id"]
    assert pid in vevo("problems", "show", pid).stdout
    prob = discover([]).get(pid)
    f = tmp_path / "p.py"
    f.write_text(prob.reference_code)
    ev = json.loads(vevo("eval-program", pid, str(f), "--json").stdout)
    assert set(ev) == {"status", "vector", "scalar", "solved", "artifacts"} and ev["solved"]
    r = vevo("eval-program", "no/such", str(f), check=False)
    assert r.returncode == 2 and "unknown problem" in r.stderr


def test_every_listed_id_resolves_everywhere():
    """A newcomer's path: any id `problems list --suite X --json` prints, for every built-in suite, is known to
    `problems show`, to a registry without the suite (campaigns, `eval-program`, `train --problem`), and
    `problems list` with no suite lists them all; `--suite S --problem ID` is the union of both."""
    from problems.suites import SUITES

    listed: dict[str, list[str]] = {}
    for suite in SUITES:
        listed[suite] = [json.loads(x)["id"] for x in vevo("problems", "list", "--suite", suite, "--json").stdout.splitlines()]
        assert listed[suite], suite
    reg = discover([])
    for suite, ids in listed.items():
        for pid in ids:
            assert reg.resolve(pid).id == pid, (suite, pid)
    all_ids = {json.loads(x)["id"] for x in vevo("problems", "list", "--json").stdout.splitlines()}
    assert all_ids == {pid for ids in listed.values() for pid in ids}
    for suite in ("pbe-hard-train", "sr-classic"):  # ids outside the default suites, through the CLI itself
        pid = listed[suite][-1]
        assert f"id:          {pid}" in vevo("problems", "show", pid).stdout
    chosen = discover([]).select(suite="pbe-heldout", ids=[listed["pbe-hard-train"][0], listed["pbe-heldout"][0]])
    assert [p.id for p in chosen] == listed["pbe-heldout"] + [listed["pbe-hard-train"][0]]
