"""`vevo train` / `vevo eval` end to end with the bundled tiny proposer, and their estimators."""
from __future__ import annotations

import json
import math

import pytest

from evolve.training.study import _best_at_k, pass_at_k
from proposer.backends import TINY_CHECKPOINT
from tests.campaign_helpers import vevo


def test_pass_at_k_unbiased_estimator():
    assert pass_at_k(10, 0, 3) == 0.0 and pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))
    assert pass_at_k(4, 1, 4) == 1.0  # n - c < k


def test_best_at_k_is_expected_max_of_k_draws():
    import itertools

    xs = [0.1, 0.5, 0.2, 0.9]
    for k in (1, 2, 3, 4):
        brute = sum(max(c) for c in itertools.combinations(xs, k)) / math.comb(4, k)
        assert _best_at_k(xs, k) == pytest.approx(brute)


@pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled tiny checkpoint")
def test_train_then_eval_cli(tmp_path):
    out = tmp_path / "vpo"
    r = vevo("train", "--proposer", "tiny", "--problem", "pbe/int-0", "--problem", "pbe/list-1", "--algo", "vpo",
             "--steps", "2", "--group", "2", "--batch", "2", "--max-tokens", "160", "--out", str(out), timeout=600)
    logs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [x["step"] for x in logs] == [0, 1] and all("mean_set_reward" in x for x in logs)
    assert "step 1/2" in r.stderr and "step 2/2" in r.stderr and "loading proposer tiny" in r.stderr  # progress
    assert "{" not in r.stderr and "too few to tell a trend" in r.stdout  # 2 steps: no trend claimed
    assert (out / "config.json").is_file() and (out / "train_log.jsonl").is_file()
    r = vevo("eval", "--proposer", f"hf:{out}", "--problem", "pbe/int-0", "--k", "2", "--n", "4", "--json",
             "--max-tokens", "160", timeout=600)
    res = json.loads(r.stdout)
    assert "problem 1/1" in r.stderr  # progress on stderr, stdout is the JSON alone
    assert {"pass@2", "pass@1", "best@2", "diversity", "parse_rate"} <= set(res)
    assert 0 <= res["pass@1"] <= res["pass@2"] <= 1 and res["problems"][0]["n"] == 4


@pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled tiny checkpoint")
def test_train_reward_is_applied_by_vevo_train(tmp_path):
    """`--train-reward improvement` rewards what beats each problem's seed (the prompt's parent) and `novel` only
    answers that make a program no earlier step (nor the seed, nor an earlier answer of the call) made, so the same
    seeded first step of 8 completions a problem sees a lower estimator reward than `vector` from the same samples
    (the tiny proposer repeats itself: part of its answers are not novel, `novel_share`)."""
    def step(reward: str):
        return vevo("train", "--proposer", "tiny", "--problem", "pbe/int-0", "--problem", "pbe/list-1", "--steps", "1",
                    "--group", "8", "--batch", "2", "--max-tokens", "160", "--probe-every", "0",
                    "--train-reward", reward, "--out", str(tmp_path / reward), timeout=600, check=False)
    logs = {}
    for reward in ("vector", "improvement", "novel"):
        r = step(reward)
        assert r.returncode == 0, r.stderr[-1500:]
        logs[reward] = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")][0]
        assert logs[reward]["train_reward"] == reward
    assert logs["vector"]["mean_set_reward"] == logs["improvement"]["mean_set_reward"] == \
        logs["novel"]["mean_set_reward"]  # the same samples
    assert logs["improvement"]["algo_reward"] < logs["vector"]["algo_reward"]  # the seed's tests are not rewarded
    assert 0 < logs["novel"]["novel_share"] < 1 and "novel_share" not in logs["vector"]
    assert logs["novel"]["algo_reward"] < logs["vector"]["algo_reward"]  # repeats of known programs are not


def test_novel_answers_are_programs_no_earlier_step_made(pool):
    """`Seen` (vevo train's memory for train.reward novel): the seed, a repeat within the call and a program an
    earlier step made are not novel; known programs are scored from their earlier evaluation, not run again."""
    from problems.suites import SUITES
    from proposer.answers.parsing import format_answers
    from proposer.answers.scoring import score_completions

    from evolve.training.study import Seen

    p = next(q for q in SUITES["pbe-train"]() if q.entry_point == "f")
    seed_ev = pool.evaluate_many([(p, p.seed_code)])[0]
    seen = Seen([p], [seed_ev])
    a, b = "def f(x):\n    return 7\n", "def f(x):\n    return 8\n"
    texts = [format_answers([a, a]), format_answers([p.seed_code, b])]
    first = score_completions(p, texts, 2, pool, **seen.of(0))
    assert [m.tolist() for m in seen.add(0, first, 2)] == [[True, False], [False, True]]
    again = score_completions(p, [format_answers([b, "def f(x):\n    return 9\n"])], 2, pool, **seen.of(0))
    assert [m.tolist() for m in seen.add(0, again, 2)] == [[False, True]]
    assert len(again.evaluations) == 1  # b was not run again
