"""Inputs the orchestrator must survive: hostile candidate values and text, damaged archives, unwritable or full
disks, configs and test files nested past the recursion limit. Each bad input is one line on stderr, exit code 2,
and leaves the files it was given as they were. Real `vevo` subprocesses, real SQLite files, the real sandbox."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from evaluators.judge import score
from evolve.archive import Archive, CompletionRecord, GroupRecord, ProgramRecord
from evolve.cli import printable
from evolve.config.schema import ConfigError, load_config
from evaluators.types import Evaluation
from problems import values
from problems.model import ProblemError, load_native

ROOT = Path(__file__).resolve().parents[2]
VEVO = Path(sys.executable).parent / "vevo"
DEEP = 100_000

# a completion continues a prompt that ends in "<answer_1>"
ANSWER = "\n```python\ndef solve(xs):\n    return sum(x * x for x in xs)\n```\n</answer_1>\n"


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [str(VEVO)] if VEVO.exists() else [sys.executable, "-m", "evolve.cli"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The contract for bad input: exit 2, exactly one stderr line, no traceback."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("vevo: error: "), r.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def problem_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("problems")
    r = cli("problems", "new", "sq", "--kind", "io", "--dir", str(base))
    assert r.returncode == 0, r.stderr
    return base / "sq"


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, problem_dir) -> Path:
    """A finished three-iteration run; tests damage copies of it."""
    base = tmp_path_factory.mktemp("run")
    replay = base / "replay.jsonl"
    replay.write_text(json.dumps({"text": ANSWER}) + "\n")
    run = base / "run"
    r = cli("run", "--problems-dir", str(problem_dir.parent), "--problem", "sq", "--proposer", f"replay:{replay}",
            "--iterations", "3", "--answers", "1", "--group", "2", "--out", str(run), "--quiet")
    assert r.returncode == 0, r.stderr
    return run


def copy_run(good_run: Path, dest: Path) -> Path:
    shutil.copytree(good_run, dest)
    return dest


# ------------------------------------------------------------------------------ values and scoring

def test_safe_repr_is_bounded_and_never_raises():
    class Liar:
        def __repr__(self):
            raise RuntimeError("no")

    deep: list = []
    cur = deep
    for _ in range(DEEP):
        cur.append([])
        cur = cur[0]
    cases = {2**20000: "<int of 20001 bits>", -(2**20000): "<negative int of 20001 bits>", Liar(): "<Liar object>",
             (1,): "(1,)", frozenset(): "frozenset()", 12345: "12345", "a\x1bb": "'a\\x1bb'"}
    for value, want in cases.items():
        assert values.safe_repr(value) == want
    for value in (deep, [Liar()] * 1000, "x" * 10**6, b"y" * 10**6, {i: [i] * 100 for i in range(100)},
                  list(range(10**5)), [2**20000] * 50):
        text = values.safe_repr(value, 60)
        assert len(text) <= 60 and text.endswith(("...", "]", "}"))
    assert values.safe_repr([[[[[[[[[1]]]]]]]]]) == "[[[[[[[...]]]]]]]"


def test_decode_is_bounded():
    assert values.decode(values.encode(2**20000)) == 2**20000  # big ints travel as hex: no digit limit
    nested: object = 0
    for _ in range(values.MAX_DEPTH + 5):
        nested = [nested]
    with pytest.raises(values.ValueCodecError, match="nested too deeply"):
        values.decode(nested)
    with pytest.raises(values.ValueCodecError, match="too large"):
        values.decode({"__int__": "0x" + "f" * (values.MAX_INT_HEX_DIGITS + 1)})
    with pytest.raises(values.ValueCodecError):
        values.decode({"__int__": 5})


def test_unscorable_results_fail_only_their_test(problem_dir):
    """Forged records straight into score(): a huge int, a structure past the decode bound, a non-record."""
    p = load_native(problem_dir)
    nested: object = 1
    for _ in range(values.MAX_DEPTH + 5):
        nested = [nested]
    raw = {"records": [{"t": "start"}, {"t": "case", "i": 0, "v": 14},
                       {"t": "case", "i": 1, "v": {"__int__": hex(2**20000)}},
                       {"t": "case", "i": 2, "v": nested}, "not a record", 7, {"t": "done", "n": 3}]}
    ev = score(p, raw)
    assert ev.status == "wrong" and ev.vector == [1.0, 0.0, 0.0]
    assert ev.artifacts["failing_tests"] == [1, 2]
    assert "got <int of 20001 bits>" in ev.artifacts["first_error"]


def test_big_int_result_from_a_real_candidate_is_wrong_not_crash(problem_dir, pool):
    """2**20000 used to raise in the parent's repr (int max-str-digits) and zero the whole vector as crash."""
    p = load_native(problem_dir)
    ev = pool.evaluate(p, "def solve(xs):\n    return 2**20000 if xs == [] else sum(x * x for x in xs)\n")
    assert ev.status == "wrong" and ev.vector == [1.0, 0.0, 1.0]
    assert ev.artifacts["first_error"].endswith("got <int of 20001 bits>")


# ------------------------------------------------------------------------------ text output

def test_printable_escapes_terminal_controls():
    assert printable("a\x1b[31mb\rc\x07\x9b\u202e\ud800\tx\ny") == "a\\x1b[31mb\\rc\\x07\\x9b\\u202e\\ud800\tx\ny"
    assert printable("l1\nl2\x1b", newlines=False) == "l1\\nl2\\x1b"
    assert printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"


def test_eval_program_escapes_a_candidates_control_characters(problem_dir, tmp_path):
    prog = tmp_path / "ansi.py"
    prog.write_text('def solve(xs):\n    raise ValueError("\\x1b[2J\\x1b[31mRED\\r\\x9bX\\u202eY")\n')
    r = cli("eval-program", str(problem_dir), str(prog))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\r" not in r.stdout and "\x9b" not in r.stdout and "\u202e" not in r.stdout
    assert "ValueError: \\x1b[2J\\x1b[31mRED\\r\\x9bX\\u202eY" in r.stdout


# ------------------------------------------------------------------------------ archive text

def test_archive_stores_lone_surrogates_escaped(tmp_path):
    ev = Evaluation(vector=[0.0], scalar=0.0, solved=False, status="wrong", artifacts={"error": "bad \udc80"})
    comp = CompletionRecord(idx=0, text="ok \ud800 tail", answers=["x\udfff"], answer_vectors=[[0.0]])
    group = GroupRecord(problem="p", island=0, parent_id=None, prompt="prompt \ud83d", m=1, completions=[comp])
    prog = ProgramRecord(problem="p", island=0, code="x = 1  # \ud800", evaluation=ev, completion=(0, 0))
    plain = ProgramRecord(problem="p", island=0, code="y = 'ünï'", evaluation=ev)
    with Archive(tmp_path / "a.db") as a:
        a.record_iteration(0, [group], [prog], {}, {"loop": {}})
        a.record_iteration(1, [], [plain], {}, {})
        rows = a.programs()
        comps = a.recent_groups(1)[0]
    assert rows[0].code == "x = 1  # \\ud800" and rows[0].artifacts["error"] == "bad \udc80"
    assert rows[1].code == "y = 'ünï'"  # ordinary text is stored as is
    assert comps.prompt == "prompt \\ud83d" and comps.completions[0].text == "ok \\ud800 tail"
    assert comps.completions[0].answers == ["x\udfff"]  # JSON columns were always ASCII-escaped
    assert [r.iteration for r in Archive(tmp_path / "a.db", readonly=True).metrics_rows()] == [0, 1]


def test_campaign_survives_a_completion_with_lone_surrogates(problem_dir, tmp_path):
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": ANSWER.replace("x * x", "x * x  # \ud800") + "\udfff\x1b[31m"}) + "\n")
    run = tmp_path / "run"
    r = cli("run", "--problems-dir", str(problem_dir.parent), "--problem", "sq", "--proposer", f"replay:{replay}",
            "--iterations", "2", "--answers", "1", "--group", "2", "--out", str(run), "--quiet")
    assert r.returncode == 0, r.stderr
    with Archive(run / "archive.db", readonly=True) as a:
        texts = [c.text for g in a.recent_groups(10) for c in g.completions]
        assert texts and all(t.endswith("\\udfff\x1b[31m") for t in texts)
        assert any("\\ud800" in p.code for p in a.programs())


# ------------------------------------------------------------------------------ damaged archives

def _truncate(db: Path) -> None:
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])


def _garbage(db: Path) -> None:
    db.write_bytes(bytes(range(256)) * 40)


@pytest.mark.parametrize("damage", [_truncate, _garbage], ids=["truncated", "garbage"])
def test_damaged_archive_is_a_one_line_error_for_every_reader(good_run, tmp_path, damage):
    run = copy_run(good_run, tmp_path / "run")
    for extra in ("archive.db-wal", "archive.db-shm"):
        (run / extra).unlink(missing_ok=True)
    db = run / "archive.db"
    damage(db)
    before = digest(db)
    for args in (["runs", "show", str(run)], ["export", str(run), "--out", str(tmp_path / "x.csv")],
                 ["curves", str(run), "--out", str(tmp_path / "c.png")], ["resume", str(run), "--quiet"]):
        one_line_error(cli(*args), str(db))
        assert digest(db) == before, args  # nothing written into the damaged file
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "c.png").exists()


def test_resume_refuses_an_empty_archive(good_run, tmp_path):
    run = copy_run(good_run, tmp_path / "run")
    for name in ("archive.db", "archive.db-wal", "archive.db-shm"):
        (run / name).unlink(missing_ok=True)
    (run / "archive.db").write_bytes(b"")
    one_line_error(cli("resume", str(run), "--quiet"), str(run / "archive.db"), "empty")
    assert (run / "archive.db").stat().st_size == 0 and not (run / "archive.db-wal").exists()


def test_resume_refuses_a_foreign_sqlite_file(good_run, tmp_path):
    run = copy_run(good_run, tmp_path / "run")
    for name in ("archive.db", "archive.db-wal", "archive.db-shm"):
        (run / name).unlink(missing_ok=True)
    with sqlite3.connect(run / "archive.db") as c:
        c.execute("CREATE TABLE notes(x TEXT)")
        c.execute("INSERT INTO notes VALUES ('mine')")
    c.close()
    before = digest(run / "archive.db")
    one_line_error(cli("resume", str(run), "--quiet"), str(run / "archive.db"), "not a vevo archive")
    one_line_error(cli("runs", "show", str(run)), "not a vevo archive")
    assert digest(run / "archive.db") == before and not (run / "archive.db-wal").exists()


def test_resume_after_a_kill_before_the_archive_existed_starts_it(good_run, tmp_path):
    """Only config.yaml: the run died before its archive was created (archives appear whole), so resume runs."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(good_run / "config.yaml", run / "config.yaml")
    r = cli("resume", str(run), "--quiet")
    assert r.returncode == 0, r.stderr
    assert not list(run.glob("archive.db.new*"))


# ------------------------------------------------------------------------------ unwritable and full disks

def _replay(tmp_path: Path, padding: int = 0) -> Path:
    """Wrong answers (so the campaign never retires the problem), each completion padded with prose."""
    path = tmp_path / "r.jsonl"
    wrong = ANSWER.replace("x * x", "x")
    path.write_text("".join(json.dumps({"text": wrong + f"# pad {i} " * padding}) + "\n" for i in range(3)))
    return path


def _run_args(problem_dir: Path, replay: Path, out: Path, iterations: int = 2) -> list[str]:
    return ["run", "--problems-dir", str(problem_dir.parent), "--problem", "sq", "--proposer", f"replay:{replay}",
            "--iterations", str(iterations), "--answers", "1", "--group", "2", "--out", str(out), "--quiet"]


def test_run_dir_under_a_regular_file_is_a_one_line_error(problem_dir, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("mine\n")
    one_line_error(cli(*_run_args(problem_dir, _replay(tmp_path), blocker / "run")), str(blocker / "run"))
    assert blocker.read_text() == "mine\n"


def test_run_dir_in_an_immutable_directory_is_a_one_line_error(problem_dir, tmp_path):
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    locked = tmp_path / "locked"
    locked.mkdir()
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i not permitted here")
    try:
        one_line_error(cli(*_run_args(problem_dir, _replay(tmp_path), locked / "run")), str(locked / "run"))
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)


def test_disk_full_stops_the_run_with_one_line_and_the_archive_resumes(problem_dir, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        run = mnt / "run"
        replay = _replay(tmp_path, padding=8000)  # ~100 KB completions: 1 MB is full within a few iterations
        one_line_error(cli(*_run_args(problem_dir, replay, run, iterations=500)), str(run / "archive.db"),
                       "disk is full")
        with Archive(run / "archive.db", readonly=True) as a:
            done = a.last_iteration()
            ids = [p.id for p in a.programs()]
        assert done is not None and done < 499 and ids == list(range(1, len(ids) + 1))
        subprocess.run(["mount", "-o", "remount,size=32m", str(mnt)], check=True)
        r = cli("resume", str(run), "--iterations", str(done + 3), "--quiet")
        assert r.returncode == 0, r.stderr
        with Archive(run / "archive.db", readonly=True) as a:
            assert [m.iteration for m in a.metrics_rows()] == list(range(done + 4))  # 0 is the seeds
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


# ------------------------------------------------------------------------------ nesting and numbers

def test_yaml_config_nested_100k_deep_is_a_one_line_error(tmp_path):
    cfg = tmp_path / "deep.yaml"
    cfg.write_text("suite: pbe\nproblems: " + "[" * DEEP + "]" * DEEP + "\n")
    one_line_error(cli("run", str(cfg), "--out", str(tmp_path / "run")), str(cfg), "nested too deeply")
    assert not (tmp_path / "run").exists()


def test_tests_jsonl_nested_100k_deep_is_a_one_line_error(problem_dir, tmp_path):
    folder = shutil.copytree(problem_dir, tmp_path / "deep")
    toml = folder / "problem.toml"
    toml.write_text('tests_file = "tests.jsonl"\n' + toml.read_text())
    tests = folder / "tests.jsonl"
    tests.write_text('{"kind":"call","args":[1],"expected":1}\n'
                     '{"kind":"call","args":' + "[" * DEEP + "]" * DEEP + ',"expected":1}\n')
    prog = tmp_path / "p.py"
    prog.write_text("def solve(xs):\n    return 0\n")
    one_line_error(cli("eval-program", str(folder), str(prog)), f"{tests}: line 2", "nested too deeply")
    one_line_error(cli("problems", "check", str(folder)), f"{tests}: line 2", "nested too deeply")
    tests.write_text('{"kind":"call","args":[' + "[" * 300 + "]" * 300 + '],"expected":1}\n')
    one_line_error(cli("eval-program", str(folder), str(prog)), f"{tests}: line 1", "nested too deeply")


def test_problem_toml_nested_deep_or_with_infinite_limits_is_refused(problem_dir, tmp_path):
    folder = shutil.copytree(problem_dir, tmp_path / "p")
    toml = folder / "problem.toml"
    original = toml.read_text()
    toml.write_text("meta = " + "[" * DEEP + "]" * DEEP + "\n" + original)
    with pytest.raises(ProblemError, match="nested too deeply"):
        load_native(folder)
    for bad in ("inf", "nan", "-1.0", "1e300"):
        toml.write_text(original.replace("time_limit = 5.0", f"time_limit = {bad}"))
        with pytest.raises(ProblemError, match="time_limit"):
            load_native(folder)


@pytest.mark.parametrize("text", ["1e400", ".inf", "-.inf", ".nan", "-1", "0", "1e300"])
def test_eval_timeout_must_be_finite_and_positive(tmp_path, text):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"suite: pbe\nexecutor: {{eval_timeout: {text}}}\n")
    with pytest.raises(ConfigError, match="eval_timeout"):
        load_config(cfg)


def test_eval_timeout_1e400_is_a_one_line_cli_error(problem_dir, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("suite: pbe\nexecutor: {eval_timeout: 1e400}\n")
    one_line_error(cli("run", str(cfg), "--out", str(tmp_path / "run")), str(cfg), "eval_timeout")
    prog = tmp_path / "p.py"
    prog.write_text("def solve(xs):\n    return 0\n")
    one_line_error(cli("eval-program", str(problem_dir), str(prog), "--timeout", "inf"), "--timeout")


def test_forged_openevolve_and_load_error_records_are_bounded(tmp_path):
    from problems.openevolve import load_openevolve

    folder = tmp_path / "oe"
    folder.mkdir()
    (folder / "initial_program.py").write_text("def value():\n    return 0.1\n")
    (folder / "evaluator.py").write_text("def evaluate(path):\n    return {'combined_score': 0.0}\n")
    p = load_openevolve(folder)
    oe = {"t": "oe", "metrics": {"combined_score": 0.5, "huge": 2**20000, "nan": float("nan"), "s": "1"},
          "artifacts": {"deep": [[[[[[[[[[1]]]]]]]]]], "big": 2**20000, "long": "x" * 10**6}}
    ev = score(p, {"records": [oe]})
    assert ev.status == "ok" and ev.artifacts["metrics"] == {"combined_score": 0.5}
    assert ev.artifacts["big"] == "<int of 20001 bits>" and len(ev.artifacts["long"]) == 4000
    ev = score(p, {"records": [{"t": "load_error", "exc": {"forged": [2**20000]}, "tb": "t" * 10**6}]})
    assert ev.status == "crash" and ev.artifacts["error"] == "{'forged': [<int of 20001 bits>]}"
    assert len(ev.artifacts["traceback"]) == 1500
