import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from evolve.archive import Archive, ArchiveError, CompletionRecord, GroupRecord, ProgramRecord, code_hash
from proposer.backends.base import Completion, SamplingParams
from tests.archive_helpers import ev, group, seed_program

REPO = Path(__file__).resolve().parents[2]


def test_pragmas_and_schema(tmp_path):
    with Archive(tmp_path / "durable.db", durable=True) as a:
        assert a._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: survives power loss
    with Archive(tmp_path / "a.db") as a:
        c = a._conn
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert c.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL: survives kill -9 with WAL
        assert c.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"programs", "groups", "completions", "metrics", "state", "training", "meta"} <= tables
        assert a.get_meta("archive_version") == a.version == "2"
        plan = " ".join(str(r) for r in c.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM programs WHERE problem = 'x' AND island = 1 ORDER BY id"))
        assert "programs_problem_island" in plan
        plan = " ".join(str(r) for r in c.execute("EXPLAIN QUERY PLAN SELECT * FROM programs WHERE problem = 'x' "
                                                  "AND solved = 1 ORDER BY iteration LIMIT 1"))
        assert "programs_solved" in plan
        # every index is one more WAL page per commit: only those a query here uses
        indexes = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL")}
        assert indexes == {"programs_problem_island", "programs_solved", "groups_problem"}


def test_record_iteration_round_trip(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        [seed] = a.record_iteration(0, [], [seed_program()], {"note": "seeds"}, {"rng": [1, 2]})
        g0, g1 = group(parent_id=seed, version=3), group(parent_id=seed, island=1)
        progs = [
            ProgramRecord("p", 0, "code A", ev([1, 0, 0]), parent_ids=[seed], completion=(0, 1), answer_index=0),
            ProgramRecord("p", 1, "code B", ev([1, 1, 1]), parent_ids=[seed], completion=(1, 0), answer_index=1,
                          policy_version=9, staleness=2),
            ProgramRecord("p", 0, "code C", ev([0, 0, 0], status="timeout")),
        ]
        ids = a.record_iteration(1, [g0, g1], progs, {"solved": 1}, {"islands": [[1], [2]]})
        assert ids == [seed + 1, seed + 2, seed + 3]
        rows = a.programs()
        assert [r.id for r in rows] == [seed] + ids
        assert [r.eval_index for r in rows] == [1, 2, 3, 4]
        assert a.count_programs() == 4 and a.n_evaluations() == 4
        ra, rb, rc = rows[1:]
        assert (ra.iteration, ra.parent_ids, ra.code_hash) == (1, [seed], code_hash("code A"))
        assert ra.vector == [1.0, 0.0, 0.0] and ra.scalar == pytest.approx(1 / 3) and not ra.solved
        assert ra.policy_version == 3  # inherited from its completion
        assert (rb.policy_version, rb.staleness, rb.solved, rb.status) == (9, 2, True, "ok")
        assert (rc.completion_id, rc.answer_index, rc.policy_version) == (None, None, 0)
        assert ra.evaluation == ev([1, 0, 0])

        groups = a.recent_groups(10)
        assert [g.parent_id for g in groups] == [seed, seed]
        assert [(g.island, g.iteration, g.n, g.m) for g in groups] == [(0, 1, 2, 2), (1, 1, 2, 2)]
        comps = {c.id: c for g in groups for c in g.completions}
        assert comps[ra.completion_id].idx == 1 and comps[ra.completion_id].group_id == groups[0].id
        assert comps[rb.completion_id].group_id == groups[1].id
        c = groups[0].completions[0]
        assert (c.text, c.answers, c.token_ids, c.logprobs, c.prompt_token_ids) == \
            ("text 0", ["a00", "a01"], [1, 2, 3], [-0.1, -0.2, -0.3], [7, 8])
        assert c.sampling == {"temperature": 1.0} and c.policy_version == 3
        assert np.array_equal(c.score_matrix(), [[1, 1, 1], [0, 0, 0]])

        assert a.checkpoint() == (1, {"rng": [1, 2], "islands": [[1], [2]]})  # entries merge, latest wins
        assert a.last_iteration() == 1
        assert a.metrics_rows() == [(0, {"note": "seeds"}), (1, {"solved": 1})]
        assert a.status_counts() == {"ok": 1, "timeout": 1, "wrong": 2}
        assert a.status_counts("nope") == {}
        assert a.solved_problems() == {"p": 1}
        assert a.program(ids[1]).code == "code B" and a.program(999) is None


def test_completion_record_from_completion():
    comp = Completion(text="t", policy_version=4, token_ids=[5], logprobs=[-1.0], prompt_token_ids=[1, 2],
                      finish_reason="length")
    rec = CompletionRecord.from_completion(2, comp, ["x", ""], [np.array([1.0, 0.0]), [0, 0]],
                                           SamplingParams(temperature=0.7, max_tokens=64))
    assert (rec.idx, rec.policy_version, rec.finish_reason, rec.token_ids) == (2, 4, "length", [5])
    assert rec.answer_vectors == [[1.0, 0.0], [0.0, 0.0]]
    assert rec.sampling["temperature"] == 0.7 and rec.sampling["max_tokens"] == 64
    with pytest.raises(ValueError):
        CompletionRecord(idx=0, text="", answers=["a", "b"], answer_vectors=[[1.0]])
    with pytest.raises(ValueError):
        GroupRecord("p", 0, None, "", 1, [CompletionRecord(0, "", [], []), CompletionRecord(0, "", [], [])])


def test_failed_iteration_writes_nothing(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        a.record_iteration(0, [], [seed_program()], {}, {"k": 0})
        before = (a.count_programs(), len(a.recent_groups(100)), len(a.metrics_rows()))
        bad_ref = ProgramRecord("p", 0, "x", ev([1, 1, 1]), completion=(0, 5))  # no completion idx 5
        with pytest.raises(ValueError, match="completion"):
            a.record_iteration(1, [group()], [seed_program(code="ok"), bad_ref], {}, {"k": 1})
        with pytest.raises(sqlite3.IntegrityError):  # parent must already be in the archive
            a.record_iteration(1, [group(parent_id=12345)], [], {}, {"k": 1})
        with pytest.raises(ValueError, match="already recorded"):
            a.record_iteration(0, [], [seed_program(code="again")], {}, None)
        assert (a.count_programs(), len(a.recent_groups(100)), len(a.metrics_rows())) == before
        assert a._conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0] == 0
        assert a.checkpoint() == (0, {"k": 0})
        # the archive is still usable and eval_index has no gap
        a.record_iteration(1, [group()], [seed_program(code="ok")], {}, None)
        assert a.n_evaluations() == 2 and a.checkpoint() == (0, {"k": 0}) and a.last_iteration() == 1
        a.record_iteration(2, [], [], {}, {"k": 2, "other": [1]})
        a.record_iteration(3, [], [], {}, {"other": [3]})
        assert a.checkpoint() == (3, {"k": 2, "other": [3]})


def test_reopen_continues(tmp_path):
    path = tmp_path / "a.db"
    with Archive(path) as a:
        a.set_meta("seed", "3")
        a.record_iteration(0, [], [seed_program(), seed_program("q")], {}, {"i": 0})
    with Archive(path) as a:
        assert a.get_meta("seed") == "3" and a.get_meta("missing", "d") == "d"
        ids = a.record_iteration(1, [group()], [seed_program(code="new")], {}, {"i": 1})
        assert ids == [3]
        assert a.n_evaluations() == 3 and a.checkpoint() == (1, {"i": 1})
        a.set_meta("seed", "4")
        assert a.get_meta("seed") == "4"


def test_filters_and_recent_groups(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        a.record_iteration(0, [], [seed_program(p, isl, code=f"{p}{isl}") for p in "pq" for isl in (0, 1)], {}, {})
        for it in range(1, 4):
            a.record_iteration(it, [group("p", n=1), group("q", n=3)],
                               [seed_program("p", it % 2, code=f"p{it}"), seed_program("q", 0, code=f"q{it}")],
                               {}, None)
        assert [r.code for r in a.programs(problem="p", island=1)] == ["p1", "p1", "p3"]
        assert [r.code for r in a.programs(problem="q")] == ["q0", "q1", "q1", "q2", "q3"]
        assert [r.id for r in a.programs(since_id=8)] == [9, 10]
        assert a.programs(problem="p", since_id=100) == []
        recent = a.recent_groups(3)
        assert [(g.problem, g.iteration) for g in recent] == [("q", 2), ("p", 3), ("q", 3)]
        assert [len(g.completions) for g in recent] == [3, 1, 3]
        assert [c.idx for c in recent[0].completions] == [0, 1, 2]
        assert [g.iteration for g in a.recent_groups(2, problem="p")] == [2, 3]
        assert a.recent_groups(0) == []


def test_training_and_meta(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        a.record_training(1, 1, {"loss": 0.5, "kl": np.float32(0.25)})
        a.record_training(2, 2, {"loss": 0.4})
        assert a.training_rows() == [(1, 1, {"kl": 0.25, "loss": 0.5}), (2, 2, {"loss": 0.4})]
        assert a.training_rows()[1].policy_version == 2
        with pytest.raises(sqlite3.IntegrityError):  # append-only
            a.record_training(2, 3, {})
        # the one later change: a probe's values merged into its step's row, which the UI's poll sees
        head = a.head()
        a.add_training_data(1, {"probe_own": 0.5, "loss": 0.6})
        assert a.training_rows()[0] == (1, 1, {"kl": 0.25, "loss": 0.6, "probe_own": 0.5})
        assert a.head()[:2] == head[:2] and a.head()[2] == head[2] + 1 == 1
        a.add_training_data(2, {"probe_own": 0.1})
        assert a.head()[2] == 2
        with pytest.raises(ArchiveError, match="no training row at step 3"):
            a.add_training_data(3, {"probe_own": 0.1})
        assert a.head()[2] == 2 and [r.step for r in a.training_rows()] == [1, 2]


def test_export_rows_deterministic(tmp_path):
    def build(path):
        with Archive(path) as a:
            [s] = a.record_iteration(0, [], [seed_program()], {}, {})
            a.record_iteration(1, [group(parent_id=s)],
                               [ProgramRecord("p", 0, "c", ev([1, 1, 0]), [s], (0, 0), 1,
                                              staleness=1)], {"t": 1.5}, {"x": {"b": 1, "a": 2}})
            return a.export_rows()

    rows = build(tmp_path / "a.db")
    assert rows == build(tmp_path / "b.db")
    assert rows[1] == {"problem": "p", "island": 0, "iteration": 1, "status": "wrong", "scalar": pytest.approx(2 / 3),
                       "solved": False, "vector": [1.0, 1.0, 0.0], "code_hash": code_hash("c"), "proposer": ""}
    dump = [list(sqlite3.connect(tmp_path / n).iterdump()) for n in ("a.db", "b.db")]
    assert dump[0] == dump[1]  # byte-identical content, not just equal exports


def test_readonly(tmp_path):
    path = tmp_path / "a.db"
    with pytest.raises(FileNotFoundError):
        Archive(path, readonly=True)
    assert not path.exists()
    writer = Archive(path)
    writer.record_iteration(0, [], [seed_program()], {}, {})
    with Archive(path, readonly=True) as r:  # reads while the writer is open
        assert r.count_programs() == 1
        writer.record_iteration(1, [], [seed_program(code="2")], {}, {})
        assert r.count_programs() == 2
        with pytest.raises(sqlite3.OperationalError):
            r.set_meta("x", "y")
    writer.close()
    (tmp_path / "junk.db").write_bytes(b"")
    with pytest.raises(ValueError, match="not a vevo archive"):
        Archive(tmp_path / "junk.db", readonly=True)


def test_many_programs_read_back(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        progs = [seed_program(f"p{i % 7}", i % 3, vector=[i % 2] * 5, code=f"c{i}") for i in range(12_000)]
        a.record_iteration(0, [], progs, {}, None)
        t = time.perf_counter()
        rows = a.programs(problem="p3", island=1)
        assert len(rows) == len([i for i in range(12_000) if i % 7 == 3 and i % 3 == 1])
        assert a.count_programs() == 12_000 and a.n_evaluations() == 12_000
        assert len(a.programs(since_id=11_990)) == 10
        assert time.perf_counter() - t < 2.0


# ------------------------------------------------------------------------------------------ crash safety

CHILD = textwrap.dedent("""
    import os, signal, sys
    from evaluators.types import Evaluation
    from evolve.archive import Archive, CompletionRecord, GroupRecord, ProgramRecord

    G, N, M = 3, 2, 3   # groups per iteration, completions per group, answers per completion

    class Bomb:
        def __str__(self):  # called while serialising artifacts, i.e. inside the open transaction
            os.kill(os.getpid(), signal.SIGKILL)

    path, mode = sys.argv[1], sys.argv[2]
    a = Archive(path)
    it = (a.last_iteration() or 0) + 1
    total = a.count_programs()
    for _ in range(3000):  # bounded: a stray child must not fill the disk
        groups, progs = [], []
        for g in range(G):
            comps = [CompletionRecord(i, "x" * 2000, ["a"] * M, [[1.0, 0.0]] * M) for i in range(N)]
            groups.append(GroupRecord("p%d" % g, g % 2, None, "prompt " * 200, M, comps))
            for i in range(N):
                for j in range(M):
                    arts = {"it": it}
                    if mode == "bomb" and it == 4 and g == 2:
                        arts["bomb"] = Bomb()
                    progs.append(ProgramRecord("p%d" % g, g % 2, "code %d %d %d %d\\n" % (it, g, i, j) * 50,
                                               Evaluation([1.0, 0.0], 0.5, False, "wrong", arts),
                                               completion=(g, i), answer_index=j))
        total += len(progs)
        a.record_iteration(it, groups, progs, {"it": it}, {"it": it, "total": total})
        print(it, flush=True)
        it += 1
""")

PER_ITERATION = (3, 3 * 2, 3 * 2 * 3)  # groups, completions, programs


def run_child(path, mode):
    return subprocess.Popen([sys.executable, "-c", CHILD, str(path), mode], cwd=REPO, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})


def check_consistent(path) -> int:
    """Every iteration in the archive is complete, nothing of an unfinished iteration is there."""
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert c.execute("PRAGMA foreign_key_check").fetchall() == []
    its = [r[0] for r in c.execute("SELECT iteration FROM metrics ORDER BY iteration")]
    assert its == list(range(1, len(its) + 1))
    assert c.execute("SELECT iteration FROM state WHERE key = 'it'").fetchone()[0] == its[-1]
    g, n, p = PER_ITERATION
    for table, per in (('"groups"', g), ("programs", p)):
        counts = dict(c.execute(f"SELECT iteration, COUNT(*) FROM {table} GROUP BY iteration"))
        assert counts == {it: per for it in its}, table
    assert c.execute("SELECT COUNT(*) FROM completions").fetchone()[0] == n * len(its)
    ev = [r[0] for r in c.execute("SELECT eval_index FROM programs ORDER BY id")]
    assert ev == list(range(1, len(ev) + 1))
    it, value = c.execute("SELECT iteration, value FROM state WHERE key = 'total'").fetchone()
    assert it == its[-1] and json.loads(value) == p * it
    c.close()
    return len(its)


def test_sigkill_inside_transaction_leaves_only_whole_iterations(tmp_path):
    path = tmp_path / "a.db"
    proc = run_child(path, "bomb")
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert out.split() == ["1", "2", "3"]
    assert check_consistent(path) == 3
    with Archive(path) as a:  # and the run continues from there
        assert a.checkpoint()[0] == 3 and a.n_evaluations() == 3 * PER_ITERATION[2]


def test_sigkill_at_random_moments(tmp_path):
    path = tmp_path / "a.db"
    rnd = random.Random(1)
    done = 0
    for _ in range(3):
        proc = run_child(path, "loop")
        try:
            assert proc.stdout is not None
            first = int(proc.stdout.readline())  # it is writing now (almost all its time is inside a transaction)
            assert first == done + 1
            time.sleep(rnd.uniform(0.05, 0.4))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        n = check_consistent(path)
        assert n >= done + 1
        done = n
    with Archive(path, readonly=True) as a:
        assert a.last_iteration() == done


def test_older_archive_format_is_readable_but_not_resumable(tmp_path):
    path = tmp_path / "a.db"
    with Archive(path) as a:
        a.record_iteration(0, [], [seed_program()], {}, {"k": 0})
        a.set_meta("archive_version", "1")
    with Archive(path, readonly=True) as r:
        assert r.count_programs() == 1 and r.version == "1"
    with Archive(path) as a:
        with pytest.raises(ValueError, match="archive format 1 was written by an older vevo"):
            a.checkpoint()


def test_number_lists_encode_exactly_as_the_json_encoder():
    from evolve.archive import encode_json, encode_numbers

    g = np.random.default_rng(0)
    cases = [[], [0.0], [-0.0, 1.0, 1e-300, 1e300, 5e-324], [float(x) for x in g.normal(size=50) * 1e5],
             [float("nan"), 1.0], [float("inf"), -float("inf")], [1, -2, 10**30]]
    for values in cases:
        assert encode_numbers(values) == encode_json(values), values
