"""What a newcomer meets in the first hour: export of what people read, one program with its diff, skipped
problems named, no half-made run folders, and the small items of issue 22 (grammar, None, titles, ticks, modes)."""
from __future__ import annotations

import csv
import json
import os
import re
import stat

import pytest

from evolve.analysis import curves
from problems.model import short_title
from proposer.answers.parsing import format_answers
from tests.campaign_helpers import tail, vevo

SQUARES = "def solve(xs):\n    return sum(x * x for x in xs)\n"
DIVIDES = "def solve(xs):\n    return 1 // 0\n"
CLOSE = "def solve(xs):\n    return sum(xs)\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A scaffolded problem (entry point solve) and a replay run: a crash, a wrong answer, the solution."""
    d = tmp_path_factory.mktemp("fh")
    vevo("problems", "new", "mine", "--kind", "io", "--dir", str(d / "probs"))
    (d / "r.jsonl").write_text(json.dumps({"text": tail(format_answers([DIVIDES, CLOSE, SQUARES]))}) + "\n")
    vevo("run", "--problems-dir", str(d / "probs"), "--proposer", f"replay:{d / 'r.jsonl'}", "--answers", "3",
         "--group", "1", "--iterations", "2", "--out", str(d / "run"), "--quiet")
    return d


def _check_rows(rows: list[dict]) -> None:
    seed, crash, close, solved = rows
    assert seed["parent_id"] in (None, "") and "def solve(xs):\n    return 0" in seed["code"]
    assert seed["error"] == "solve([1, 2, 3]) == 14: got 0" and seed["status"] == "wrong"
    assert str(crash["parent_id"]) == str(seed["id"]) and crash["code"].count("1 // 0") == 1
    assert crash["error"] == "solve([1, 2, 3]) == 14: ZeroDivisionError: integer division or modulo by zero"
    assert json.loads(crash["vector"]) == [0.0, 0.0, 0.0]
    assert close["error"] == "solve([1, 2, 3]) == 14: got 6" and json.loads(close["vector"]) == [0.0, 1.0, 0.0]
    assert solved["status"] == "ok" and solved["error"] == "" and json.loads(solved["vector"]) == [1.0] * 3
    assert "x * x" in solved["code"]


def test_export_csv_and_parquet_carry_code_parent_status_error_vector(run):
    vevo("export", str(run / "run"), "--out", str(run / "e.csv"))
    with open(run / "e.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {"code", "error", "parent_id", "status", "vector", "id", "code_hash"} <= set(rows[0])
    _check_rows(rows)
    pq = pytest.importorskip("pyarrow.parquet")
    vevo("export", str(run / "run"), "--format", "parquet", "--out", str(run / "e.parquet"))
    table = pq.read_table(run / "e.parquet").to_pylist()
    assert [r["code"] for r in table] == [r["code"] for r in rows]
    _check_rows(table)


def test_runs_show_program_prints_code_error_and_diff_against_parent(run):
    out = vevo("runs", "show", str(run / "run"), "--program", "2").stdout
    assert "program 2 of mine (iteration 1" in out and "status: crash" not in out
    assert "error: solve([1, 2, 3]) == 14: ZeroDivisionError" in out and "parent: 1" in out
    assert "--- program 1 (parent)\n+++ program 2\n" in out
    assert "-    return 0\n+    return 1 // 0\n" in out
    seed = vevo("runs", "show", str(run / "run"), "--program", "1").stdout
    assert "parent: none (a seed program)" in seed and "diff against" not in seed
    view = json.loads(vevo("runs", "show", str(run / "run"), "--program", "4", "--json").stdout)
    assert view["solved"] and view["parent_id"] == 1 and view["diff"].startswith("--- program 1 (parent)")
    r = vevo("runs", "show", str(run / "run"), "--program", "99", check=False)
    assert r.returncode == 2 and r.stderr.startswith("vevo: error:") and "no program 99" in r.stderr


def test_skipped_problem_is_named_at_start_and_counted_in_the_summary(tmp_path):
    vevo("problems", "new", "good", "--dir", str(tmp_path / "probs"))
    (tmp_path / "probs" / "bad").mkdir()
    (tmp_path / "probs" / "bad" / "problem.toml").write_text('id = "bad"\nentry_point = "solve"\n')
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": tail(format_answers([CLOSE]))}) + "\n")
    r = vevo("run", "--problems-dir", str(tmp_path / "probs"), "--proposer", f"replay:{tmp_path / 'r.jsonl'}",
             "--answers", "1", "--group", "2", "--iterations", "1", "--out", str(tmp_path / "run"), "--quiet")
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: skipped problem")]
    assert len(warned) == 1 and "bad" in warned[0] and "seed" in warned[0]
    assert "solved 0/1 problems (1 skipped)" in r.stdout
    shown = json.loads(vevo("runs", "show", str(tmp_path / "run"), "--json").stdout)
    assert len(shown["skipped_problems"]) == 1 and "bad" in shown["skipped_problems"][0]


def test_failed_start_leaves_no_run_folder(tmp_path):
    out = tmp_path / "runs" / "x"
    r = vevo("run", "--problem", "pbe/nosuch", "--proposer", "tiny", "--out", str(out), check=False)
    assert r.returncode == 2 and "unknown problem 'pbe/nosuch'" in r.stderr
    assert list(tmp_path.iterdir()) == []  # neither the run folder nor the runs/ folder made for it
    out.mkdir(parents=True)  # a folder the user made stays, empty as it was
    vevo("run", "--problem", "pbe/nosuch", "--out", str(out), check=False)
    assert out.is_dir() and list(out.iterdir()) == []


def test_problems_check_grammar_and_show_without_none(tmp_path):
    vevo("problems", "new", "one", "--dir", str(tmp_path))
    assert "1 problem checked;" in vevo("problems", "check", str(tmp_path / "one")).stdout
    shown = vevo("problems", "show", "pbe/int-0").stdout
    assert "None" not in shown and "source:      built-in" in shown and "split: train" in shown


def test_short_titles_cut_between_steps_not_inside_them():
    t = "[b - a for a, b in zip(xs, xs[1:])] -> filter(x < 0) -> sum(xs)"
    assert short_title(t, 50) == "[b - a for a, b in zip(xs, xs[1:])] ..."
    assert short_title("x * 3 -> x + 1", 50) == "x * 3 -> x + 1"
    cut = short_title("Write a function that returns the sum, the product and the mean of a list", 40)
    assert len(cut) <= 40 and cut.endswith(" ...") and not re.search(r"\w\.\.\.$", cut)


def test_flat_zero_curve_gets_integer_ticks(run, tmp_path):
    vevo("run", "--problems-dir", str(run / "probs"), "--proposer", f"replay:{run / 'r.jsonl'}", "--answers", "1",
         "--group", "1", "--iterations", "3", "--out", str(tmp_path / "zero"), "--quiet")  # DIVIDES only
    out = tmp_path / "c.svg"
    curves.plot({"zero": [str(tmp_path / "zero" / "archive.db")]}, "iterations", out)
    svg = out.read_text()
    solved_panel = svg[svg.index('id="axes_1"'):svg.index('id="axes_2"')]
    labels = re.findall(r"<!-- (.*?) -->", solved_panel)
    ticks = [x for x in labels if re.fullmatch(r"[−\-]?[\d.]+", x)]
    assert ticks and all(re.fullmatch(r"[−\-]?\d+", x) for x in ticks), ticks


def test_saved_model_files_honour_the_umask(tmp_path):
    from evolve.training.study import _save
    from proposer.backends import make_backend

    backend = make_backend("tiny")
    old = os.umask(0o022)
    try:
        _save(backend, backend.model, False, tmp_path / "m", [])
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "m").iterdir()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes
    # a model trained from the tiny one keeps its record, so it is still shown problems under its name
    assert make_backend(f"hf:{tmp_path / 'm'}").entry_name == "f"
