"""What a new user trips over walking the README on a fresh clone (issue 36, second pass), one test each."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.campaign_helpers import ROOT


def test_output_piped_into_head_ends_quietly():
    """`vevo defaults | head -2` and the like: a reader that goes away is not an error; no `vevo: error:
    [Errno 32] Broken pipe` line, exit status 128 + SIGPIPE as a shell tool killed by it."""
    for args in (["defaults"], ["problems", "list", "--json"]):
        p = subprocess.Popen([sys.executable, "-m", "evolve.cli", *args], cwd=str(ROOT), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        p.stdout.close()  # before the interpreter has started: its first write finds no reader
        err = p.stderr.read().decode()
        assert p.wait(timeout=120) == 128 + signal.SIGPIPE and err == "", (args, err)


def test_reach_note_for_a_large_imported_suite_stays_readable():
    """`vevo run --problems-dir problems_mbpp --proposer tiny` (974 problems, ~100 distinct reasons) printed a
    5,700-character warning line; it names the commonest reasons and counts the rest."""
    from problems.model import CallCase, Problem
    from proposer.tiny.reach import reach_note

    def prob(i: int, n_args: int) -> Problem:
        return Problem(id=f"p{i}", seed_code="", tests=[CallCase(args=tuple([1] * n_args), expected=1)])

    probs = [prob(i, 2) for i in range(5)] + [prob(10 + n, n) for n in range(3, 12)] + [prob(99, 1)]
    note = reach_note(["tiny"], probs, reasons=2)
    assert note.startswith("14 of 15 problems are out of the bundled tiny proposer's reach (p0, p1 +3 more: 2 "
                           "arguments; p13: 3 arguments; 8 other reasons, 8 problems); it was pretrained on"), note
    assert len(reach_note(["tiny"], probs)) < 400
    assert "; 1 other reason, 1 problem)" in reach_note(["tiny"], probs[:6], reasons=1)


def test_a_run_over_many_problems_ends_in_a_short_summary(tmp_path):
    """`vevo run --problems-dir problems_mbpp` ended in one `best` line per problem (974); the end of a run shows
    the 20 best (solved first) and says how many more and where; `vevo runs show` still lists every one."""
    import json
    import re
    import shutil

    from problems.scaffold import new_problem
    from proposer.answers.parsing import format_answers
    from tests.campaign_helpers import tail, vevo

    first = new_problem("p00", "io", tmp_path / "probs")
    for i in range(1, 22):
        shutil.copytree(first, tmp_path / "probs" / f"p{i:02d}")
        toml = tmp_path / "probs" / f"p{i:02d}" / "problem.toml"
        toml.write_text(re.sub(r'(?m)^id = ".*"$', f'id = "p{i:02d}"', toml.read_text()))
    shutil.copy(first / "reference.py", tmp_path / "probs" / "p17" / "seed.py")  # solved by its seed
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": tail(format_answers(["def solve(xs):\n    return 1\n"]))})
                                      + "\n")
    run = tmp_path / "run"
    out = vevo("run", "--problems-dir", str(tmp_path / "probs"), "--proposer", f"replay:{tmp_path / 'r.jsonl'}",
               "--answers", "1", "--group", "1", "--iterations", "1", "--out", str(run), "--quiet").stdout
    assert out.startswith(f"run {run}: 1 iteration, ")  # not "1 iterations"
    best = [ln for ln in out.splitlines() if ln.startswith("  best ")]
    assert len(best) == 20 and best[0].startswith("  best p17: 1 (") and best[0].endswith(", solved)"), out
    assert out.strip().splitlines()[-1] == f"  ... and 2 more problems (the 20 best shown): `vevo runs show {run}` " \
                                           "lists all", out
    shown = vevo("runs", "show", str(run)).stdout
    assert len([ln for ln in shown.splitlines() if ln.startswith("  best ")]) == 22 and "more problems" not in shown


def test_resuming_a_finished_run_says_so_at_once(tmp_path):
    """`vevo resume RUN` on a finished run started the proposer and sandbox, printed `done` and the summary; it
    now says in one line that the run is finished, why, and how to take it further, and changes nothing."""
    import json

    from problems.scaffold import new_problem
    from proposer.answers.parsing import format_answers
    from tests.campaign_helpers import tail, vevo

    new_problem("p", "io", tmp_path / "probs")
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": tail(format_answers(["def solve(xs):\n    return 1\n"]))})
                                      + "\n")
    run = tmp_path / "run"
    vevo("run", "--problems-dir", str(tmp_path / "probs"), "--proposer", f"replay:{tmp_path / 'r.jsonl'}",
         "--answers", "1", "--group", "1", "--iterations", "2", "--out", str(run), "--quiet")
    before = (run / "archive.db").read_bytes()
    r = vevo("resume", str(run))
    assert r.stderr.strip().splitlines() == [
        f"vevo: {run} is already finished: its 2 iterations are spent; nothing to continue (`vevo resume {run} "
        "--iterations N` runs it on to iteration N)"], r.stderr
    assert r.stdout.startswith(f"run {run}: 2 iterations, ") and (run / "archive.db").read_bytes() == before
    r = vevo("resume", str(run), "--iterations", "3", "--quiet")  # taken further: no such line, one more iteration
    assert "already finished" not in r.stderr and r.stdout.startswith(f"run {run}: 3 iterations, "), r.stdout


def test_an_openevolve_stage_that_raises_says_why(tmp_path):
    """The tiny proposer on the OpenEvolve scaffold writes `def f(x)` and drops `make_list`: every candidate
    crashed, and `eval-program`, the `warning:` line, `runs show --program` and the export said only `crash`; the
    exception OpenEvolve records (error_type, error_message, failure_stage) is now the error line everywhere."""
    import csv
    import json

    from evaluators.types import error_text
    from proposer.answers.parsing import format_answers
    from tests.campaign_helpers import tail, vevo

    assert error_text({"failure_stage": "stage1", "error_type": "NameError", "error_message": "name 'g'"}) == \
        "stage1: NameError: name 'g'"
    assert error_text({"error_type": "KeyError", "error_message": ""}) == "KeyError"
    assert error_text({"failure_stage": 2, "error_type": "E", "error_message": ["x"]}) == "2: E: ['x']"  # decoded, not trusted
    vevo("problems", "new", "oe", "--kind", "openevolve", "--dir", str(tmp_path / "probs"))
    broken = "def f(x):\n    return x\n"
    (tmp_path / "prog.py").write_text((tmp_path / "probs" / "oe" / "initial_program.py").read_text()
                                      .replace("def make_list():\n    return [0.5] * 5\n", broken))
    why = "stage1: NameError: name 'make_list' is not defined"
    out = vevo("eval-program", str(tmp_path / "probs" / "oe"), str(tmp_path / "prog.py")).stdout
    assert f"error: {why}\n" in out and out.startswith("oe: crash "), out
    lines = [tail(format_answers([f"def f(x):\n    return x + {4 * i + j}\n" for j in range(4)])) for i in range(6)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))  # 24 programs
    run = tmp_path / "run"
    r = vevo("run", "--problems-dir", str(tmp_path / "probs"), "--proposer", f"replay:{tmp_path / 'r.jsonl'}",
             "--answers", "4", "--group", "1", "--iterations", "6", "--out", str(run), "--quiet")
    assert any(ln.startswith("warning: ") and ln.endswith("failed the same way: NameError: name 'make_list' is "
                                                          "not defined (crash, e.g. at stage1)")
               for ln in r.stderr.splitlines()), r.stderr
    shown = vevo("runs", "show", str(run), "--program", "2").stdout
    assert f"error: {why}\n" in shown and "\nvector: 0.00 0.00\n" in shown, shown  # not -0.00 (error, negated)
    vevo("export", str(run), "--out", str(tmp_path / "e.csv"))
    with open(tmp_path / "e.csv", newline="", encoding="utf-8") as f:
        crashed = [row for row in csv.DictReader(f) if row["status"] == "crash"]
    assert crashed and {row["error"] for row in crashed} == {why} and {row["vector"] for row in crashed} == \
        {"[0.0, 0.0]"}


def test_make_clean_keeps_the_campaigns():
    """`make clean` removed runs/, where the README's `vevo run ... --out runs/mine` writes: a newcomer cleaning
    build litter lost every campaign without a word. It removes caches only and says runs/ is kept."""
    r = subprocess.run(["make", "-n", "clean"], cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "rm -rf .pytest_cache" in r.stdout and "runs" not in r.stdout.replace("runs/ (your campaigns) is kept", "")
