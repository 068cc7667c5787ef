"""`vevo train` / `vevo eval` end to end with the bundled tiny proposer, and their estimators."""
from __future__ import annotations

import json
import math

import pytest

from evolve.study import _best_at_k, pass_at_k
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
def test_train_reward_is_applied_by_vevo_train_or_refused(tmp_path):
    """`--train-reward improvement` rewards what beats each problem's seed (the prompt's parent), so the same
    seeded step sees a different estimator reward than `vector`; `novel` needs an archive and says so."""
    def step(reward: str):
        return vevo("train", "--proposer", "tiny", "--problem", "pbe/int-0", "--problem", "pbe/list-1", "--steps", "1",
                    "--group", "2", "--batch", "2", "--max-tokens", "160", "--probe-every", "0",
                    "--train-reward", reward, "--out", str(tmp_path / reward), timeout=600, check=False)
    logs = {}
    for reward in ("vector", "improvement"):
        r = step(reward)
        assert r.returncode == 0, r.stderr[-1500:]
        logs[reward] = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")][0]
    assert logs["vector"]["train_reward"] == "vector" and logs["improvement"]["train_reward"] == "improvement"
    assert logs["vector"]["mean_set_reward"] == logs["improvement"]["mean_set_reward"]  # the same samples
    assert logs["improvement"]["algo_reward"] < logs["vector"]["algo_reward"]  # the seed's tests are not rewarded
    r = step("novel")
    errors = [x for x in r.stderr.splitlines() if "error" in x]
    assert r.returncode == 2 and len(errors) == 1 and "needs a campaign's archive" in errors[0]
