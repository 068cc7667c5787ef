"""The first hour, second pass (issue 36): every command takes a seeds folder, nothing dropped silently, the
cause of a failure said where it is seen, and machine output without float noise. One test per item."""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from evolve import liveness
from proposer.answers.parsing import format_answers
from tests.campaign_helpers import ROOT, interruptible, last_iteration, tail, vevo

SQUARES = "def solve(xs):\n    return sum(x * x for x in xs)\n"
DIVIDES = "def solve(xs):\n    return 1 // 0\n"
CLOSE = "def solve(xs):\n    return sum(xs)\n"


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """Two seeds of a replay campaign on a scaffolded problem: D/seed-0 and D/seed-1."""
    d = tmp_path_factory.mktemp("fh2")
    vevo("problems", "new", "mine", "--kind", "io", "--dir", str(d / "probs"))
    (d / "r.jsonl").write_text(json.dumps({"text": tail(format_answers([DIVIDES, CLOSE, SQUARES]))}) + "\n")
    r = vevo("run", "--problems-dir", str(d / "probs"), "--proposer", f"replay:{d / 'r.jsonl'}", "--answers", "3",
             "--group", "1", "--iterations", "2", "--seeds", "0-1", "--out", str(d / "runs"), "--quiet")
    (d / "run.out").write_text(r.stdout)
    return d


def test_seeds_summary_names_the_report_command_as_the_readme_gives_it(seeds):
    """The last line of a seeds run points at `vevo report FOLDER` and where it writes (no --out needed)."""
    last = (seeds / "run.out").read_text().strip().splitlines()[-1]
    assert last.endswith(f"`vevo report {seeds / 'runs'}` (writes {seeds / 'runs' / 'report' / 'index.html'})")


def test_1_export_and_runs_show_take_a_seeds_folder(seeds):
    out = vevo("export", str(seeds / "runs"), "--out", str(seeds / "all.csv")).stdout
    with open(seeds / "all.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert out.strip() == f"exported {len(rows)} programs to {seeds / 'all.csv'}"
    assert {r["seed"] for r in rows} == {"0", "1"} and len(rows) == 8  # 4 programs per seed, each seed's own
    one = vevo("runs", "show", str(seeds / "runs")).stdout
    assert one.count("== seed ") == 2 and "== seed 0\nrun " in one and "== seed 1\nrun " in one
    assert one.count("status: finished") == 2
    assert "2 seeds in " in one and "(2 finished): solved 1 ± 0 (mean, 95% CI half-width) of 1 problems" in one
    shown = json.loads(vevo("runs", "show", str(seeds / "runs"), "--json").stdout)
    assert [s["seed"] for s in shown["seeds"]] == [0, 1] and shown["solved_mean"] == 1.0
    r = vevo("runs", "show", str(seeds / "runs"), "--program", "1", check=False)
    assert r.returncode == 2 and "a seeds folder; --program needs one seed's run" in r.stderr
    r = vevo("export", str(seeds / "probs"), "--out", str(seeds / "x.csv"), check=False)
    assert r.returncode == 2 and "not a run directory" in r.stderr and not (seeds / "x.csv").exists()


def test_9_runs_show_says_a_killed_run_crashed(seeds, tmp_path):
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "evolve.cli", "run", "--problems-dir", str(seeds / "probs"),
                          "--proposer", f"replay:{seeds / 'r.jsonl'}", "--answers", "1", "--group", "1",
                          "--iterations", "100000", "--out", str(run), "--quiet"], cwd=str(ROOT),
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=interruptible)
    deadline = time.time() + 180
    while not (last_iteration(run) > 0 and (liveness.read(run) or {}).get("pid") == p.pid):
        assert p.poll() is None, p.stderr.read()[-2000:]
        assert time.time() < deadline, "the campaign never started its loop"
        time.sleep(0.05)
    assert "status: running" in vevo("runs", "show", str(run)).stdout
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    out = vevo("runs", "show", str(run)).stdout
    assert "status: crashed: interrupted without a clean stop (kill -9" in out and f"vevo resume {run}" in out
    assert json.loads(vevo("runs", "show", str(run), "--json").stdout)["status"] == "crashed"
    os.remove(run / liveness.NAME)  # as a clean stop leaves it: short of its budget
    assert "status: stopped at iteration" in vevo("runs", "show", str(run)).stdout


def test_10_machine_output_has_no_float_noise(tmp_path):
    """Weights 0.1/0.2/0.7 and a seed passing the first two cases: its scalar is 0.1 + 0.2 =
    0.30000000000000004 in floats; `problems check --json` and the CSV export write 0.3."""
    vevo("problems", "new", "w", "--kind", "io", "--dir", str(tmp_path / "probs"))
    folder = tmp_path / "probs" / "w"
    toml = (folder / "problem.toml").read_text()
    (folder / "problem.toml").write_text(toml.replace("memory_limit_mb = 512", "memory_limit_mb = 512\n"
                                                      "weights = [0.1, 0.2, 0.7]"))
    (folder / "seed.py").write_text((folder / "seed.py").read_text().replace("return 0", "return 14 if xs else 0"))
    assert 0.1 + 0.2 == 0.30000000000000004
    raw = vevo("problems", "check", str(folder), "--json").stdout
    assert json.loads(raw)["seed"]["scalar"] == 0.3 and '"scalar": 0.3,' in raw
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": tail(format_answers([CLOSE]))}) + "\n")
    vevo("run", "--problems-dir", str(tmp_path / "probs"), "--proposer", f"replay:{tmp_path / 'r.jsonl'}",
         "--answers", "1", "--group", "1", "--iterations", "1", "--out", str(tmp_path / "run"), "--quiet")
    vevo("export", str(tmp_path / "run"), "--out", str(tmp_path / "e.csv"))
    text = (tmp_path / "e.csv").read_text()
    with open(tmp_path / "e.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["scalar"] == "0.3" and "0000000000" not in text


def test_2_duplicate_problem_ids_fail_naming_both_folders(tmp_path):
    """Two folders with one `id`: `problems check` and `run` stop with one line naming both, nothing dropped."""
    probs = tmp_path / "probs"
    vevo("problems", "new", "a", "--kind", "io", "--dir", str(probs))
    vevo("problems", "new", "b", "--kind", "io", "--dir", str(probs))
    toml = probs / "b" / "problem.toml"
    toml.write_text(toml.read_text().replace('id = "b"', 'id = "a"'))
    r = vevo("problems", "check", str(probs), check=False)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "checked" not in r.stdout, (r.stdout, r.stderr)
    assert str(probs / "a") in err[0] and str(probs / "b") in err[0] and "'a'" in err[0] and "unique" in err[0]
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": tail(format_answers([SQUARES]))}) + "\n")
    r = vevo("run", "--problems-dir", str(probs), "--proposer", f"replay:{tmp_path / 'r.jsonl'}", "--answers", "1",
             "--group", "1", "--iterations", "1", "--out", str(tmp_path / "run"), "--quiet", check=False)
    assert r.returncode == 2 and str(probs / "a") in r.stderr and str(probs / "b") in r.stderr, r.stderr
    assert not (tmp_path / "run" / "archive.db").exists()
    toml.write_text(toml.read_text().replace('id = "a"', 'id = "b"'))  # renamed: both load
    assert "2 problems checked" in vevo("problems", "check", str(probs)).stdout


def test_2_a_folder_with_a_built_in_id_fails_naming_both(tmp_path):
    """A folder whose id is a built-in problem's (a default suite's, or one generated on demand) is refused by
    `problems check` and `run` with one line naming the folder and the built-in; it no longer runs the built-in."""
    probs = tmp_path / "probs"
    vevo("problems", "new", "a", "--kind", "io", "--dir", str(probs))
    toml = probs / "a" / "problem.toml"
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": tail(format_answers([SQUARES]))}) + "\n")
    for pid, suite in (("pbe/int-0", "pbe"), ("pbe/hard-int-0", "pbe-hard")):
        toml.write_text(re.sub(r'(?m)^id = ".*"$', f'id = "{pid}"', toml.read_text()))
        want = f"{probs / 'a'}: id: '{pid}' is also the id of built-in problem {pid} (suite {suite}); ids must be"
        r = vevo("problems", "check", str(probs), check=False)
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [f"vevo: error: {want} unique (rename one)"]
        assert "checked" not in r.stdout, r.stdout
        r = vevo("run", "--problems-dir", str(probs), "--proposer", f"replay:{tmp_path / 'r.jsonl'}", "--answers",
                 "1", "--group", "1", "--iterations", "1", "--out", str(tmp_path / "run"), "--quiet", check=False)
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [f"vevo: error: {want} unique (rename one)"]
        assert not (tmp_path / "run" / "archive.db").exists()
    toml.write_text(re.sub(r'(?m)^id = ".*"$', 'id = "pbe/mine"', toml.read_text()))  # a new id: it loads
    assert "1 problem checked" in vevo("problems", "check", str(probs)).stdout


def test_2_built_in_ids_are_in_the_built_in_namespaces(tmp_path):
    """A folder id outside builtin_prefixes() is never checked against the on-demand suites: every built-in id
    must be inside them; a built-in added after a folder with its id fails too, and overlapping suites do not."""
    from problems.registry import DuplicateProblem, Registry, builtin_prefixes, load_folder
    from problems.scaffold import new_problem
    from problems.suites import SUITES

    assert builtin_prefixes() == ("pbe/", "sr/")
    for make in SUITES.values():
        assert all(p.id.startswith(builtin_prefixes()) for p in make())
    reg = Registry()
    builtin = SUITES["pbe"]()[0]
    reg.add(builtin)
    reg.add(SUITES["pbe-train"]()[0])  # the same problem from an overlapping suite: not a clash
    assert reg.problems[builtin.id] is builtin
    folder = new_problem("a", "io", tmp_path)
    toml = folder / "problem.toml"
    toml.write_text(re.sub(r'(?m)^id = ".*"$', 'id = "pbe/hard-int-0"', toml.read_text()))
    reg = Registry(builtins_loaded=True)  # the folder first, the on-demand suites after it
    reg.add(load_folder(folder))
    with pytest.raises(DuplicateProblem, match=r"built-in problem pbe/hard-int-0 \(suite pbe-hard\): id: "
                                               r"'pbe/hard-int-0' is also the id of " + re.escape(str(folder))):
        reg.load_builtins()


def test_3_problems_check_text_says_why_a_seed_fails_and_prints_the_vector(tmp_path):
    """The text line carries what `--json` has: the per-test vector and the failing program's cause."""
    from problems.check import vector_text

    assert vector_text([1.0, 1.0, 0.0, 1.0]) == "[1101]" and vector_text([1.0, 0.5, 0.0]) == "[1,0.5,0]"
    assert vector_text([1.0] * 100, width=10) == "[1111111111…+90]"
    vevo("problems", "new", "nm", "--kind", "io", "--dir", str(tmp_path))
    seed = tmp_path / "nm" / "seed.py"
    seed.write_text(seed.read_text().replace("def solve(xs):", "def other(xs):"))
    out = vevo("problems", "check", str(tmp_path / "nm")).stdout.splitlines()
    assert out[0] == ("nm: seed wrong 0.000 [000] (solve([1, 2, 3]) == 14: NameError: entry point 'solve' is not "
                      "defined) | reference ok 1.000 [111] solved"), out
    seed.write_text(seed.read_text().replace("def other(xs):", "def solve(xs):").replace("return 0",
                                                                                       "return 14 if xs else 0"))
    out = vevo("problems", "check", str(tmp_path / "nm")).stdout
    assert "nm: seed wrong 0.667 [110] (solve([-2, 5]) == 29: got 14) | reference ok" in out, out


def test_8_memory_limit_has_one_key(tmp_path):
    """`memory_limit_mb` (what the scaffold writes, OpenEvolve's name) is the key; `[resources] memory_mb` is a
    one-line error naming it, in problem.toml and in an OpenEvolve folder's vevo.toml."""
    vevo("problems", "new", "m", "--kind", "io", "--dir", str(tmp_path))
    toml = tmp_path / "m" / "problem.toml"
    assert "memory_limit_mb = 512\n" in toml.read_text()
    assert "512 MB" in vevo("problems", "show", str(tmp_path / "m")).stdout
    toml.write_text(toml.read_text().replace("memory_limit_mb = 512\n", "memory_limit_mb = 512\n[resources]\n"
                                             "memory_mb = 2048\nnproc = 32\n", 1))
    r = vevo("problems", "show", str(tmp_path / "m"), check=False)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"vevo: error: {toml}: resources.memory_mb: the memory limit's key is memory_limit_mb, at the top level "
        "(write memory_limit_mb = 2048 above [resources])"), r.stderr
    vevo("problems", "new", "oe", "--kind", "openevolve", "--dir", str(tmp_path))
    vt = tmp_path / "oe" / "vevo.toml"
    vt.write_text("[resources]\nmemory_mb = 300\n")
    r = vevo("problems", "show", str(tmp_path / "oe"), check=False)
    assert r.returncode == 2 and "vevo.toml: resources.memory_mb: the memory limit's key is memory_limit_mb" in r.stderr
    vt.write_text("memory_limit_mb = 300\n")
    assert "300 MB" in vevo("problems", "show", str(tmp_path / "oe")).stdout


def test_7_make_demo_keeps_an_earlier_demo(tmp_path):
    """With runs/demo and runs/demo-2 there, `make demo` writes runs/demo-3 and says so; nothing is removed,
    and an explicit DEMO_OUT that exists is refused (make -n prints the recipe; its guard lines run here)."""
    base = tmp_path / "demo"
    (base / "none").mkdir(parents=True)
    (tmp_path / "demo-2").mkdir()

    def recipe(*extra: str) -> list[str]:
        r = subprocess.run(["make", "-n", "demo", f"DEMO_BASE={base}", *extra], cwd=str(ROOT), capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()

    lines = recipe()
    assert not any("rm -rf" in ln for ln in lines), lines
    assert any(f"--out {tmp_path / 'demo-3'}/none" in ln for ln in lines) and not any(f"--out {base}/" in ln
                                                                                      for ln in lines)
    def guards(lines: list[str]) -> str:  # the recipe's shell before its first vevo command
        start = next(i for i, ln in enumerate(lines) if ln.startswith("if [ -e "))
        return "\n".join(lines[start:next(i for i, ln in enumerate(lines) if "vevo problems list" in ln)])

    said = subprocess.run(["bash", "-c", guards(lines)], capture_output=True, text=True)
    assert said.returncode == 0 and said.stdout == (f"make demo: writing to {tmp_path / 'demo-3'} ({base} holds an "
                                                    "earlier demo, kept)\n"), said
    refused = subprocess.run(["bash", "-c", guards(recipe(f"DEMO_OUT={base}"))], capture_output=True, text=True)
    assert refused.returncode == 2 and "already exists" in refused.stderr and (base / "none").is_dir()


def test_12_defaults_table_is_generated_and_the_readme_example_shows_defaults():
    """docs/DEFAULTS.md is `vevo defaults --markdown` exactly (regenerate it with that command when a config
    default changes); the README's example config validates and its train/search values are the defaults."""
    import re

    import yaml

    from evolve.config.schema import CampaignConfig, load_config
    from evolve.config.defaults_table import DOC, markdown

    out = vevo("defaults", "--markdown").stdout
    assert out == markdown() == (ROOT / DOC).read_text(encoding="utf-8"), \
        f"{DOC} is stale: run `vevo defaults --markdown > {DOC}`"
    assert "| `train.every` | `1` | `--train-every` |" in out and "| `search.group` | `8` | `--group` |" in out
    plain = vevo("defaults").stdout.splitlines()
    assert re.match(r"train\.lr +0\.001 +--train-lr +AdamW learning rate$", next(ln for ln in plain
                                                                                if ln.startswith("train.lr "))), plain
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    cfg, default = load_config(None, {f"train.{k}": v for k, v in example["train"].items() if k != "covrl"}), \
        CampaignConfig()
    assert example["train"]["every"] == cfg.train.every == default.train.every == 1
    assert example["search"]["group"] == default.search.group


STRING_TESTS = '''
[[tests]]
args = ["abc"]
expected = "cba"

[[tests]]
args = ["xy"]
expected = "yx"
'''


def test_5_a_problem_out_of_the_tiny_proposers_reach_is_said(tmp_path):
    """The tiny proposer knows int / int-list functions: a string problem is named at `problems check`, at `run`
    start, and as the stall warning's likely cause; pbe and the scaffold's own problem are within reach."""
    from problems.model import CallCase, Problem, load_native
    from problems.suites import SUITES
    from proposer.tiny.reach import out_of_reach, reach_note

    assert {out_of_reach(p) for s in ("pbe", "pbe-hard", "pbe-heldout") for p in SUITES[s]()} == {None}
    assert {out_of_reach(p) for p in SUITES["sr"]()} == {"float data points (symbolic regression)"}
    assert out_of_reach(Problem(id="x", seed_code="", tests=[CallCase(args=([1.5], 2), expected=True)])) == \
        "float inputs, bool outputs, 2 arguments"
    vevo("problems", "new", "ok", "--kind", "io", "--dir", str(tmp_path / "probs"))
    vevo("problems", "new", "rev", "--kind", "io", "--dir", str(tmp_path / "probs"))
    folder = tmp_path / "probs" / "rev"
    toml = (folder / "problem.toml").read_text()
    (folder / "problem.toml").write_text(toml[:toml.index("[[tests]]")].replace(
        toml.split("\n")[3], 'description = "Return the string s reversed."') + STRING_TESTS)
    (folder / "reference.py").write_text("def solve(xs):\n    return xs[::-1]\n")
    rev, ok = load_native(folder), load_native(tmp_path / "probs" / "ok")
    assert out_of_reach(rev) == "str inputs, str outputs" and out_of_reach(ok) is None
    assert reach_note(["replay:x"], [rev]) is None and reach_note(["tiny"], [ok]) is None
    assert reach_note(["tiny"], [ok, rev]).startswith("1 of 2 problems are out of the bundled tiny proposer's "
                                                      "reach (rev: str inputs, str outputs); it was pretrained on")
    out = vevo("problems", "check", str(tmp_path / "probs")).stdout
    rev_line = next(ln for ln in out.splitlines() if ln.startswith("rev: "))
    assert rev_line.endswith("| out of the tiny proposer's reach: str inputs, str outputs"), rev_line
    assert out.splitlines()[-1] == ("1 of 2 out of the bundled tiny proposer's reach: it was pretrained on integer "
                                    "and integer-list functions only (proposer/tiny/corpus.py); for these use a "
                                    "larger proposer (hf:, vllm:, openai:)"), out
    assert "reach" not in next(ln for ln in out.splitlines() if ln.startswith("ok: "))
    # 20 iterations of 8 tokens each: the stall warning (after max(20, iterations / 4)) comes quickly
    r = vevo("run", "--problems-dir", str(folder), "--proposer", "tiny", "--iterations", "20", "--group", "1",
             "--answers", "1", "--islands", "1", "--max-tokens", "8", "--out", str(tmp_path / "run"), "--quiet")
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    assert warnings[0].startswith("warning: 1 of 1 problems are out of the bundled tiny proposer's reach (rev: str "
                                  "inputs, str outputs)"), r.stderr
    stall = next(w for w in warnings if "no improvement for 20 iterations" in w)
    assert "; likely cause: 1 of 1 problems are out of the bundled tiny proposer's reach" in stall


def test_11_an_imported_evalplus_problem_is_fitted_so_its_reference_passes(pool, tmp_path, monkeypatch):
    """humanevalplus/15 with its twelve 6.9 MB expected strings: computed a few at a time they fit, returned all
    at once (as `problems check` and every candidate run) they pass the sandbox's output limit. The importer
    drops the largest until its reference passes and says so in one line; `problems check` then passes."""
    import gzip

    from problems.importers import evalplus
    from problems.model import write_native
    from tests.conftest import DATA

    src = DATA / "evalplus" / "HumanEvalPlus.jsonl.gz"
    if not src.is_file():
        pytest.skip(f"{src} is absent")
    with gzip.open(src, "rt", encoding="utf-8") as f:
        row = next(r for r in map(json.loads, f) if r["task_id"] == "HumanEval/15")
    row["plus_input"] = [[1_000_000 + i] for i in range(12)]  # the largest of its plus inputs
    with gzip.open(tmp_path / "HumanEvalPlus.jsonl.gz", "wt", encoding="utf-8") as g:
        g.write(json.dumps(row) + "\n")
    monkeypatch.setattr(evalplus, "SLOW_BUDGET", 1e9)  # keep every input however fast this machine is
    report: dict = {}
    (p,) = evalplus.import_evalplus(tmp_path / "HumanEvalPlus.jsonl.gz", pool=pool, report=report)
    info = report["humanevalplus/15"]
    assert info["fitted"].startswith("dropped ") and "past the sandbox's output limit together" in info["fitted"]
    assert info["fitted"].endswith(f"; {p.n_tests} kept") and p.meta["base_inputs"] == 3, info
    assert 3 < p.n_tests < 14 and p.meta["plus_inputs"] == p.n_tests - 3
    assert pool.evaluate(p, p.reference_code).solved
    write_native(p, tmp_path / "out" / "humanevalplus__15")
    assert "references solved 1/1" in vevo("problems", "check", str(tmp_path / "out")).stdout
