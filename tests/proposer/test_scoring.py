"""proposer/answers/scoring.py, the one path from a parent to prompts and score matrices: its pure parts on hand-made
answers, and the agreement of its users on the same completions (a campaign's archive, `score_completions` of
`vevo train` / `eval`, the veRL reward and export) with real sandboxes and a real campaign."""
from __future__ import annotations

import json

import numpy as np
import pytest

from evaluators.types import Evaluation
from evolve.archive import Archive
from evolve.config.schema import load_config
from evolve.launch.runner import start
from problems.model import load_native
from problems.scaffold import new_problem
from problems.suites import SUITES
from proposer.answers.mutate import normalized_hash
from proposer.answers.parsing import format_answers
from proposer.answers.scoring import (Parent, Slot, answer_vectors, parent_prompt, score_completions, score_matrices,
                              seed_prompt, triage)
from proposer.integrations.verl_plugin import AnswerScorer, export_rows

PARENT = "# EVOLVE-BLOCK-START\ndef f(x):\n    return x\n# EVOLVE-BLOCK-END\n"


def body(text: str) -> str:
    return text[len("<answer_1>"):]  # a completion continues the prompt, which ends with <answer_1>


def test_triage_sorts_answers_as_a_campaign_does():
    double, triple = "def f(x):\n    return 2 * x\n", "def f(x):\n    return 3 * x\n"
    texts = [body(format_answers([double, double])) + "\n<answer_3>\nSorry, I cannot help\n</answer_3>",
             "no answers at all",
             body(format_answers([triple, "def f(x):\n    return x\n", ""]))]
    known = {normalized_hash(PARENT): 1}
    tri = triage(texts, PARENT, 3, known)
    assert [c.code.count("2 * x") + 2 * c.code.count("3 * x") for c in tri.fresh] == [1, 2]
    assert tri.slots[0][:2] == [Slot("fresh", 0), Slot("fresh", 0)]  # in-call duplicate: one run
    assert tri.slots[1] == [Slot("zero")] * 3
    assert tri.slots[2] == [Slot("fresh", 1), Slot("known", 1), Slot("zero")]  # the parent again: known
    assert tri.n_dup == 2
    assert [(f.completion, f.answer) for f in tri.format_errors] == [(0, 2), (1, 0)]
    assert tri.format_errors[1].error == "no answers in the expected format"
    assert tri.kinds[0] == ["code", "code", "invalid"] and tri.kinds[2][2] == "empty"


def test_answer_vectors_and_matrices_pad_missing_answers():
    ev = Evaluation(vector=[1.0, 0.0, 1.0], scalar=0.67, solved=False, status="wrong")
    slots = [[Slot("fresh", 0), Slot("known", 7)], [Slot("zero"), Slot("zero")]]
    vecs = answer_vectors(slots, [ev], lambda pid: [0.5, 0.5], 3)
    assert vecs == [[[1.0, 0.0, 1.0], [0.5, 0.5]], [[0.0] * 3, [0.0] * 3]]
    mats = score_matrices(vecs, 2)
    assert [m.shape for m in mats] == [(2, 3), (2, 3)]
    assert mats[0][1].tolist() == [0.5, 0.5, 0.0]  # a short vector padded with zeros
    assert score_matrices([[[1.0]]], 4)[0].tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_parent_prompt_shows_what_the_evaluation_says():
    p = SUITES["pbe"]()[0]
    failed = Evaluation(vector=[0.0] * p.n_tests, scalar=0.0, solved=False, status="crash",
                        artifacts={"stderr": "Traceback: boom"})
    assert "boom" in seed_prompt(p, failed, 2)
    wrong = Evaluation(vector=[1.0] + [0.0] * (p.n_tests - 1), scalar=0.1, solved=False, status="wrong",
                       artifacts={"stderr": "noise"})
    prompt = seed_prompt(p, wrong, 2)
    assert "noise" not in prompt and prompt == parent_prompt(p, Parent.of(p.seed_code, wrong), 2)
    assert prompt != seed_prompt(p, Evaluation.failed("wrong", p.n_tests), 2)  # the per-test results show


def test_known_programs_need_their_evaluations(pool):
    p = SUITES["pbe"]()[0]
    with pytest.raises(ValueError, match="known_evaluation"):
        score_completions(p, ["x"], 2, pool, known={"h": 1})


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """A two-iteration campaign of the bundled tiny proposer on a problem whose entry point is `solve` (the
    model writes f: prompts and answers are renamed), plus a replay file of hand-made completions."""
    tmp = tmp_path_factory.mktemp("scoring")
    problem = load_native(new_problem("sq", "io", tmp))
    cfg = load_config(None, {"problems_dir": [str(tmp)], "proposer.spec": "tiny", "search.iterations": 2, "seed": 0,
                             "search.islands": 1, "search.group": 2, "out": str(tmp / "run")})
    start(cfg, progress=False)
    with Archive(tmp / "run" / "archive.db", readonly=True) as a:
        groups = a.recent_groups(10)
        seed_row = a.programs(island=-1)[0]
    return problem, cfg, groups, seed_row


def test_verl_export_shows_the_campaigns_first_prompt(campaign, pool):
    problem, cfg, groups, seed_row = campaign
    assert any(seed_row.vector) and not all(seed_row.vector)  # zeros would be a different prompt
    row = export_rows([problem], pool, m=cfg.search.answers, alias="f")[0]
    assert row["prompt"][0]["content"] == groups[0].prompt
    assert row["extra_info"]["alias"] == "f" and row["extra_info"]["parent_code"] == problem.seed_code
    plain = export_rows([problem], pool, m=cfg.search.answers)[0]["prompt"][0]["content"]  # a model writing solve
    assert "def solve(" in plain and "def f(" not in plain


def test_every_user_scores_a_campaigns_completions_as_it_did(campaign, pool):
    """The answer vectors a campaign archived for its first group (parent = the seed) equal what
    `score_completions` (vevo train / eval, probes) and the veRL reward compute for the same completions."""
    problem, cfg, groups, seed_row = campaign
    g = groups[0]
    texts = [c.text for c in g.completions]
    archived = [c.answer_vectors for c in g.completions]
    known = {seed_row.ast_hash: seed_row.id}
    sc = score_completions(problem, texts, g.m, pool, alias="f", known=known,
                           known_evaluation=lambda pid: seed_row.evaluation)
    assert sc.vectors == archived
    fresh = score_completions(problem, texts, g.m, pool, alias="f")  # the seed run again instead of known
    assert fresh.vectors == archived
    scorer = AnswerScorer(cfg.problems_dir, evaluator=pool)
    for text, vecs, mat in zip(texts, archived, sc.matrices):
        got = scorer.matrix(problem.id, problem.seed_code, text, g.m, alias="f")
        assert got.tolist() == np.asarray(vecs).tolist() == mat.tolist()


def test_hand_made_completions_score_alike_everywhere(tmp_path, pool):
    """Every kind of answer (right, wrong, the seed again, an in-call duplicate, empty, invalid, a completion
    without answers) through a real campaign (replay proposer) and through score_completions and the veRL
    reward: the same vectors."""
    problem = load_native(new_problem("sq", "io", tmp_path / "problems"))
    right, wrong = "def solve(xs):\n    return sum(x * x for x in xs)\n", "def solve(xs):\n    return len(xs)\n"
    seed_body = "def solve(xs):\n    return 0\n"
    texts = [body(format_answers([right, seed_body, right])),
             body(format_answers([wrong, ""])) + "\n<answer_3>\nSorry, I cannot help\n</answer_3>",
             "no answers at all"]
    replay = tmp_path / "r.jsonl"
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = load_config(None, {"problems_dir": [str(tmp_path / "problems")], "proposer.spec": f"replay:{replay}",
                             "search.iterations": 1, "seed": 0, "search.islands": 1, "search.answers": 3,
                             "search.group": 3, "out": str(tmp_path / "run")})
    start(cfg, progress=False)
    with Archive(tmp_path / "run" / "archive.db", readonly=True) as a:
        archived = [c.answer_vectors for c in a.recent_groups(1)[0].completions]
        seed_row = a.programs(island=-1)[0]
    assert archived[0][0] == [1.0] * 3 and archived[0][1] == seed_row.vector and archived[2] == [[0.0] * 3] * 3
    sc = score_completions(problem, texts, 3, pool, known={seed_row.ast_hash: seed_row.id},
                           known_evaluation=lambda pid: seed_row.evaluation)
    assert sc.vectors == archived and sc.triage.n_dup == 2
    assert score_completions(problem, texts, 3, pool).vectors == archived
    scorer = AnswerScorer([str(tmp_path / "problems")], evaluator=pool)
    assert [scorer.matrix(problem.id, problem.seed_code, t, 3).tolist() for t in texts] == archived


def test_archive_keeps_the_dedupe_hash_in_its_own_column(campaign):
    problem, _, _, seed_row = campaign
    assert seed_row.ast_hash == normalized_hash(problem.seed_code)
    assert "ast_hash" not in seed_row.artifacts


def test_an_archive_from_before_the_column_gains_it(tmp_path):
    """Archives written before the ast_hash column: read-only they read None; opened to write they gain it."""
    import sqlite3

    from evolve.archive import ProgramRecord

    path = tmp_path / "archive.db"
    with Archive(path) as a:
        a.record_iteration(0, [], [ProgramRecord("p", -1, "x = 1\n", Evaluation.failed("wrong", 1),
                                                 ast_hash="h")])
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE programs DROP COLUMN ast_hash")
    conn.commit()
    conn.close()
    with Archive(path, readonly=True) as a:
        assert a.programs()[0].ast_hash is None and a.program(1).code == "x = 1\n"
    with Archive(path) as a:
        assert a.programs()[0].ast_hash is None
        a.record_iteration(1, [], [ProgramRecord("p", 0, "x = 2\n", Evaluation.failed("wrong", 1), ast_hash="k")])
        assert [r.ast_hash for r in a.programs()] == [None, "k"]


def test_export_rows_carry_real_seed_results(pool):
    probs = SUITES["pbe"]()[:2]
    seeds = pool.evaluate_many([(p, p.seed_code) for p in probs])
    rows = export_rows(probs, pool, m=3)
    for p, ev, r in zip(probs, seeds, rows):
        assert r["prompt"][0]["content"] == seed_prompt(p, ev, 3)
        assert json.loads(r["extra_info"]["tests"]) == [p.test_label(i) for i in range(p.n_tests)]
