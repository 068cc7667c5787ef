"""vevo's estimators and multi-answer reward as veRL plugins: the packing of answer matrices into reward rows, the
estimator wrappers against proposer.training.estimators on the same inputs, the sandboxed reward; and, where `verl`
imports, the same through veRL's own registry, reward-manager hook and compute_advantage."""
from __future__ import annotations

import importlib
import os

import numpy as np
import pytest
import torch

from problems.suites import SUITES
from proposer.training.estimators import ESTIMATORS
from proposer.answers.parsing import format_answers
from proposer.integrations.verl_plugin import (ESTIMATOR_FNS, MAGIC, AnswerScorer, comparable_score, export_rows,
                                               pack_row, seed, unpack_row)

# two prompts (uids), three responses each; m answers x d tests; quarters are exact in float32
MATS = [np.array([[1, 0, .25], [0, 1, .5]]), np.array([[.5, .5, .5]]), np.zeros((0, 3)),
        np.array([[1, 1], [0, .75], [.25, 0]]), np.array([[0, 0]]), np.array([[1, .5], [.5, 1]])]
UIDS = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
LEN = 24


def packed(mats=MATS, length=LEN, pad=4):
    """(bs, length + pad) float32 rewards as the vevo reward manager writes them, and the response mask."""
    rows = torch.zeros(len(mats), length + pad)
    for i, m in enumerate(mats):
        rows[i, :length] = torch.as_tensor(pack_row(m, comparable_score(m), length), dtype=torch.float32)
    mask = torch.zeros_like(rows)
    mask[:, :length] = 1
    return rows, mask


def test_pack_row_round_trips_and_keeps_the_score():
    m = np.array([[1.0, 0.0, 0.5], [0.25, 1.0, 0.0]])
    row = pack_row(m, 0.7, 16)
    assert row[0] == MAGIC and row.sum() == pytest.approx(0.7)
    np.testing.assert_array_equal(unpack_row(row), m)
    assert unpack_row(pack_row(np.zeros((0, 0)), 0.0, 5)).shape == (0, 0)
    assert unpack_row(np.array([0, 0, 0.5])).tolist() == [[0.5]]  # a scalar reward is a 1 x 1 matrix
    with pytest.raises(ValueError, match="cannot carry a 2x3"):
        pack_row(m, 0.7, 9)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_plugin_estimators_equal_proposer_estimators(name):
    rows, mask = packed()
    seed(11)
    adv, ret = ESTIMATOR_FNS[f"vevo_{name}"](rows, mask, index=UIDS, epsilon=1e-6)
    kw = {"rng": np.random.default_rng(11)} if name == "vpo" else {}
    ref, _ = ESTIMATORS[name](MATS, list(UIDS), eps=1e-6, **kw)
    assert adv.shape == rows.shape and torch.equal(adv, ret)
    np.testing.assert_allclose(adv[:, 0].numpy(), ref, rtol=1e-5, atol=1e-6)
    assert torch.all(adv[:, LEN:] == 0)  # padding gets nothing
    assert torch.all(adv[:, :LEN] == adv[:, :1])  # every token of a response gets its advantage


def test_kl_in_reward_is_refused():
    rows, mask = packed()
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        ESTIMATOR_FNS["vevo_grpo"](rows, mask, index=UIDS, config={"use_kl_in_reward": True})


def test_answer_scorer_runs_answers_in_the_sandbox(pool):
    p = next(q for q in SUITES["pbe"]() if q.split == "train")
    text = format_answers([p.reference_code, "def f(x):\n    return None\n", "def f(:\n"])[len("<answer_1>"):]
    mat = AnswerScorer(evaluator=pool).matrix(p.id, p.seed_code, text, 3)
    assert mat.shape == (3, p.n_tests)
    assert mat[0].tolist() == [1.0] * p.n_tests and mat[1].sum() < p.n_tests and mat[2].sum() == 0
    assert comparable_score(mat) == pytest.approx(1.0)


def test_export_rows_are_verl_dataset_rows(pool):
    probs = SUITES["pbe"]()[:2]
    rows = export_rows(probs, pool, m=3)
    assert [r["reward_model"]["ground_truth"] for r in rows] == [p.id for p in probs]
    assert rows[0]["prompt"][0]["role"] == "user" and rows[0]["extra_info"]["m"] == 3
    assert rows[0]["extra_info"]["parent_code"] == probs[0].seed_code


# ---------------------------------------------------------------------------------------- where verl imports
REQUIRE_VERL = os.environ.get("VEVO_REQUIRE_VERL") == "1"  # scripts/verl_ci.sh: a missing import is a failure


def need(module: str):
    """The module, or a skip (a failure under scripts/verl_ci.sh, where veRL is installed on purpose)."""
    if REQUIRE_VERL:
        return importlib.import_module(module)
    return pytest.importorskip(module)


def test_verl_registry_and_compute_advantage():
    core_algos = need("verl.trainer.ppo.core_algos")
    from proposer.integrations.verl_plugin import register_estimators

    register_estimators()
    register_estimators()  # idempotent
    rows, mask = packed()
    for name in ESTIMATORS:
        fn = core_algos.get_adv_estimator_fn(f"vevo_{name}")
        assert fn is ESTIMATOR_FNS[f"vevo_{name}"]
        seed(5)
        adv, _ = fn(token_level_rewards=rows, response_mask=mask, index=UIDS, config=None)
        kw = {"rng": np.random.default_rng(5)} if name == "vpo" else {}
        np.testing.assert_allclose(adv[:, 0].numpy(), ESTIMATORS[name](MATS, list(UIDS), **kw)[0], rtol=1e-5,
                                   atol=1e-6)
    try:
        from verl import DataProto
        from verl.trainer.ppo.ray_trainer import compute_advantage
    except ImportError as e:  # the trainer module needs more of veRL's stack than the registry does
        if REQUIRE_VERL:
            raise
        pytest.skip(f"verl's ray_trainer does not import here: {e}")
    data = DataProto.from_dict(tensors={"token_level_rewards": rows, "response_mask": mask},
                               non_tensors={"uid": UIDS})
    seed(5)
    out = compute_advantage(data, adv_estimator="vevo_vpo", config=None)
    ref, _ = ESTIMATORS["vpo"](MATS, list(UIDS), rng=np.random.default_rng(5))
    np.testing.assert_allclose(out.batch["advantages"][:, 0].numpy(), ref, rtol=1e-5, atol=1e-6)


def test_verl_reward_manager_packs_matrices():
    need("verl.experimental.reward_loop.reward_manager.base")
    from verl import DataProto

    from proposer.integrations.verl_reward import VevoRewardManager

    plen, rlen = 5, LEN + 4
    valid = [LEN, LEN, LEN, LEN, LEN, LEN]
    attn = torch.zeros(len(MATS), plen + rlen, dtype=torch.long)
    attn[:, :plen] = 1
    for i, n in enumerate(valid):
        attn[i, plen:plen + n] = 1
    data = DataProto.from_dict(tensors={"prompts": torch.zeros(len(MATS), plen, dtype=torch.long),
                                        "responses": torch.zeros(len(MATS), rlen, dtype=torch.long),
                                        "attention_mask": attn})
    scores = [{"matrix": m.tolist(), "score": comparable_score(m)} for m in MATS]
    rm = VevoRewardManager.assemble_rm_scores(data, scores)
    for i, m in enumerate(MATS):
        got = unpack_row(rm[i, :LEN].double().numpy())
        if m.size == 0:  # an empty matrix travels as [] (JSON-like): no answers, whatever d was
            assert got.size == 0
        else:
            np.testing.assert_allclose(got, m, atol=1e-7)
        assert float(rm[i].sum()) == pytest.approx(comparable_score(m), abs=1e-3)


def test_example_config_composes_against_verl_and_names_the_plugins():
    """examples/verl/vevo_vpo.yaml composed with veRL's own ppo_trainer defaults (hydra, as main_ppo does): the
    estimator it names is registered by the plugin, the reward manager it names loads from its path."""
    need("verl.trainer.ppo.core_algos")
    hydra = need("hydra")
    import importlib.util
    from pathlib import Path

    from verl.trainer.ppo import core_algos

    from proposer.integrations.verl_plugin import register_estimators

    root = Path(__file__).resolve().parents[2]
    with hydra.initialize_config_dir(config_dir=str(root / "examples" / "verl"), version_base=None):
        cfg = hydra.compose(config_name="vevo_vpo")
    register_estimators()
    assert core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator) is ESTIMATOR_FNS["vevo_vpo"]
    assert cfg.algorithm.use_kl_in_reward is False and cfg.actor_rollout_ref.rollout.n >= 2
    rm = cfg.reward.reward_manager
    spec = importlib.util.spec_from_file_location("vevo_rm", root / rm.module.path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert getattr(mod, rm.name).__name__ == "VevoRewardManager"
