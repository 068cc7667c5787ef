"""End-to-end campaigns: replay proposer, real sandbox, real SQLite file."""
from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evolve.archive import Archive
from problems.suites import SUITES
from tests.campaign_helpers import ROOT, last_iteration, pbe_replay, tail, vevo
from tests.sandbox_helpers import HOSTILE

PBE = SUITES["pbe"]()
PROBS = [p for p in PBE if p.split == "heldout"][:3] + [p for p in PBE if p.split == "train"][:2]
IDS = [a for p in PROBS for a in ("--problem", p.id)]


def export(run: Path, tmp: Path) -> list[dict]:
    out = tmp / f"{run.name}.csv"
    vevo("export", str(run), "--format", "csv", "--out", str(out))
    with open(out) as f:
        return list(csv.DictReader(f))


def test_campaign_end_to_end_builtin(tmp_path):
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    run = tmp_path / "run"
    r = vevo("run", *IDS, "--proposer", f"replay:{replay}", "--iterations", "30", "--islands", "2",
             "--answers", "3", "--group", "2", "--workers", "2", "--seed", "1", "--out", str(run), "--quiet")
    assert "solved" in r.stdout
    show = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert set(show) >= {"problems", "solved", "iterations", "evaluations", "status_counts"}
    assert show["problems"] == len(PROBS) and show["solved"] >= 1
    with Archive(run / "archive.db", readonly=True) as a:
        progs = a.programs()
        assert len(progs) == show["evaluations"]
        fe = [p for p in progs if p.status == "format_error"]
        assert fe, "malformed completions must be archived as format_error"
        assert any(p.code == "no tags here, just prose" for p in fe)  # raw text kept
        assert any(len(p.code) >= 100_000 for p in fe)  # huge output kept (capped)
        groups = a.recent_groups(100)
        assert groups and all(len(g.completions) == 2 for g in groups)
        # every answer has a vector of the problem's dimension
        for g in groups:
            d = len(next(p for p in PROBS if p.id == g.problem).tests)
            for c in g.completions:
                assert len(c.answer_vectors) == 3 and all(len(v) == d for v in c.answer_vectors)
        # a solved problem stops being worked on (retire_solved default)
        solved_at = a.solved_problems()
        for pid, it in solved_at.items():
            assert all(g.iteration <= it + 1 for g in groups if g.problem == pid)
    # an archive from an older format: readable, but resume is one clear line, not a traceback
    with Archive(run / "archive.db") as a:
        a.set_meta("archive_version", "1")
    r = vevo("resume", str(run), "--quiet", check=False)
    assert r.returncode == 2 and "older vevo" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_same_seed_same_export_with_two_workers(tmp_path):
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    outs = []
    for name in ("a", "b"):
        run = tmp_path / name
        vevo("run", *IDS, "--proposer", f"replay:{replay}", "--iterations", "25", "--workers", "2",
             "--answers", "3", "--group", "2", "--seed", "7", "--out", str(run), "--quiet")
        outs.append(export(run, tmp_path))
    assert outs[0] == outs[1] and len(outs[0]) > 20


def test_campaign_with_hostile_candidates_finishes(tmp_path):
    from proposer.answers.parsing import format_answers

    hostile = [tail(format_answers([HOSTILE[n][0], HOSTILE[m][0]])) for n, m in
               [("fork_bomb", "os_exit_top"), ("stdout_flood", "kill_parent"), ("sleep", "memory_bomb"),
                ("kill_own_group", "segfault_ctypes"), ("close_result_pipe", "forge_records")]]
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS[:2], extra=hostile)
    run = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("executor: {eval_timeout: 1.5}\nsearch: {retire_solved: false}\n")
    vevo("run", str(cfg), *IDS[:4], "--proposer", f"replay:{replay}", "--iterations", "16", "--answers", "2",
         "--group", "2", "--out", str(run), "--quiet", timeout=600)
    show = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert show["iterations"] == 16
    counts = show["status_counts"]
    assert counts.get("timeout", 0) >= 1 and counts.get("crash", 0) >= 1


@pytest.mark.parametrize("depth,n_kills", [(1, 20), (3, 10)])
def test_kill_nine_and_resume_loses_and_duplicates_nothing(tmp_path, depth, n_kills):
    """kill -9 `vevo run` at random moments (some during start-up, most after a random number of new
    iterations, so the kills spread over the run whatever the machine's speed); resume each time; the
    finished archive equals an uninterrupted run with the same seed and pipeline depth (at depth 3 the
    checkpoint carries three generated batches, evaluated again after the resume)."""
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    cfg = tmp_path / "c.yaml"
    # at depth 3, 2 islands in all: batches of the same island are in flight together (staleness, and programs
    # committed by an earlier batch while a later one was evaluated)
    islands = ", islands: 1" if depth > 1 else ""
    cfg.write_text(f"search: {{retire_solved: false, pipeline_depth: {depth}{islands}}}\n")
    ids = IDS if depth == 1 else IDS[:4]
    args = [str(cfg), *ids, "--proposer", f"replay:{replay}", "--iterations", "2000", "--answers", "3",
            "--group", "2", "--workers", "2", "--seed", "3", "--quiet"]
    ref = tmp_path / "ref"
    vevo("run", *args, "--out", str(ref))
    run = tmp_path / "killed"
    rng = random.Random(0)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    kills = 0
    last_iter = -1
    while kills < n_kills:
        started = (run / "config.yaml").exists()
        cmd = ["run", *args, "--out", str(run)] if not started else ["resume", str(run), "--quiet"]
        p = subprocess.Popen([sys.executable, "-m", "evolve.cli", *cmd], cwd=str(ROOT), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        if kills % 5 == 0:  # during start-up or the first iterations
            time.sleep(rng.uniform(0.05, 0.8))
        else:  # after a random number of newly committed iterations, at a random moment inside the next
            target = max(last_iter, 0) + rng.randint(1, 30)
            end = time.time() + 60
            while p.poll() is None and last_iteration(run) < target and time.time() < end:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.02))
        if p.poll() is not None:  # finished before the kill: nothing left to interrupt
            assert p.returncode == 0, p.stderr.read().decode()[-3000:]
            break
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
        if (run / "archive.db").exists():
            with Archive(run / "archive.db", readonly=True) as a:
                it = a.last_iteration()
                ids = [r.id for r in a.programs()]
                assert ids == list(range(1, len(ids) + 1))  # nothing half-written
                assert it is None or it >= last_iter  # never goes back
                last_iter = it if it is not None else last_iter
    if (run / "config.yaml").exists():
        vevo("resume", str(run), "--quiet")
    else:
        vevo("run", *args, "--out", str(run))
    assert kills == n_kills
    from tests.sandbox_helpers import sandbox_processes

    deadline = time.time() + 10  # kill -9 of the orchestrator (process group) left no candidate running
    while sandbox_processes() and time.time() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []
    a, b = export(ref, tmp_path), export(run, tmp_path)
    assert a == b
    rows = []
    for r in (ref, run):
        with Archive(r / "archive.db", readonly=True) as arc:  # per iteration: parents, staleness, dedupe counts
            rows.append([(m.iteration, {k: v for k, v in m.data.items() if not k.endswith("_seconds")})
                         for m in arc.metrics_rows()])
    assert rows[0] == rows[1]
    with Archive(run / "archive.db", readonly=True) as arc:  # the wall clock runs on across the resumes
        walls = [m.data["wall_seconds"] for m in arc.metrics_rows()]
    assert walls == sorted(walls)
    if depth > 1:
        assert max(m["staleness"] for _, m in rows[0][1:]) == 1 and sum(m["in_flight_dups"] for _, m in rows[0][1:])
    assert [it for it, _ in rows[1]] == list(range(0, len(rows[1])))  # iteration numbering continues, no gaps


def test_curves_png_and_csv_match_archive(tmp_path):
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    run = tmp_path / "run"
    vevo("run", *IDS, "--proposer", f"replay:{replay}", "--iterations", "20", "--group", "2", "--out", str(run),
         "--quiet")
    out = tmp_path / "c.png"
    vevo("curves", str(run), "--out", str(out), "--csv")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert rows
    # recompute pass@t from the archive alone
    with Archive(run / "archive.db", readonly=True) as a:
        first = a.solved_problems()
        n_iter = a.last_iteration()
    col_x = next(k for k in rows[0] if k in ("x", "iteration", "iterations"))
    col_s = next(k for k in rows[0] if "solved" in k and "std" not in k and "min" not in k and "max" not in k)
    for r in rows:
        t = float(r[col_x])
        expect = sum(1 for it in first.values() if it <= t)
        assert float(r[col_s]) == pytest.approx(expect), (r, first)
    assert max(float(r[col_x]) for r in rows) == n_iter


def test_bad_config_and_run_dir_errors(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("iteratons: 3\n")
    r = vevo("run", str(cfg), "--suite", "pbe", "--out", str(tmp_path / "x"), check=False)
    assert r.returncode == 2 and "iteratons" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = vevo("resume", str(tmp_path / "nope"), check=False)
    assert r.returncode == 2 and "not a run directory" in r.stderr
    r = vevo("run", "--suite", "pbe", "--proposer", "bogus:thing", "--out", str(tmp_path / "y"), check=False)
    assert r.returncode == 2 and "unknown proposer spec" in r.stderr


def test_campaign_on_imported_problems(tmp_path):
    """MBPP problems imported from ../shared/data, run through `vevo run --problems-dir` with the replay
    proposer: the real sandbox scores them, and the one whose reference is replayed gets solved."""
    from problems.importers import import_problems
    from problems.model import write_native
    from proposer.answers.parsing import format_answers
    from tests.conftest import DATA

    src = DATA / "mbpp" / "mbpp.jsonl"
    if not src.is_file():
        pytest.skip(f"{src} not present")
    probs = import_problems("mbpp", src)[:3]
    pdir = tmp_path / "imported"
    for p in probs:
        write_native(p, pdir / p.id.replace("/", "__"))
    wrong = "def nothing(*a):\n    return None\n"
    lines = [tail(format_answers([wrong, p.reference_code])) for p in probs]
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in lines) + "\n")
    run = tmp_path / "run"
    ids = [a for p in probs for a in ("--problem", p.id)]
    vevo("run", "--problems-dir", str(pdir), *ids, "--proposer", f"replay:{tmp_path / 'r.jsonl'}",
         "--iterations", "6", "--islands", "1", "--answers", "2", "--group", "1", "--out", str(run), "--quiet")
    show = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert show["problems"] == 3 and show["solved"] >= 1
    assert show["status_counts"].get("ok", 0) >= 1
