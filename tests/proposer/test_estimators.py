"""Estimators: hand-worked values, edge cases, validation, and permutation properties."""
from itertools import combinations
from math import comb

import numpy as np
import pytest

from proposer.training.estimators import (
    ESTIMATORS,
    dr_grpo,
    gdpo,
    grpo,
    max_at_k,
    multi_rlvr,
    set_reward,
    vpo_advantage,
)

EPS = 1e-6
S2 = np.sqrt(2.0)


def call(name, mats, gids, weights=None, **kw):
    """Run an estimator; VPO gets explicit weights when given."""
    if name == "vpo" and weights is not None:
        kw["weights"] = weights
    return ESTIMATORS[name](mats, gids, **kw)


# ------------------------------------------------------------------------------------------- VPO, by hand
def test_vpo_hand_example_specialists_duplicates_empty():
    w = {"g": np.array([[1.0, 0.0], [0.0, 1.0]])}
    mats = [
        [[1, 0], [0, 1]],  # two specialists: each wins one weight -> raw 1
        [[0.5, 0.5]],  # generalist -> 0.5
        [[1, 0], [1, 0]],  # duplicate specialist -> 0.5
        np.zeros((0, 2)),  # no answers -> 0
    ]
    adv, diag = vpo_advantage(mats, ["g"] * 4, weights=w)
    np.testing.assert_allclose(diag["raw_scores"], [1.0, 0.5, 0.5, 0.0])
    # mean 0.5, population std sqrt(0.125)
    sd = np.sqrt(0.125)
    np.testing.assert_allclose(adv, np.array([0.5, 0, 0, -0.5]) / (sd + EPS), rtol=1e-12)
    assert diag["group_std"]["g"] == pytest.approx(sd)
    assert diag["argmax_diversity_mean"] == pytest.approx(4 / 3)  # 2, 1, 1 (duplicates count once)
    assert diag["frac_zero_adv_groups"] == 0.0
    assert diag["pool_expected_best_mean"] == pytest.approx(1.0)


def test_vpo_two_completions_give_plus_minus_one():
    adv, _ = vpo_advantage([[[0.3]], [[0.7]]], [0, 0], weights={0: [[1.0]]})
    np.testing.assert_allclose(adv, [-0.2 / (0.2 + EPS), 0.2 / (0.2 + EPS)])


def test_vpo_three_completion_values():
    # d=1: raw score = best answer's score: 0.9, 0.5, 0.3 -> mean 17/30, pop std 0.2494438...
    adv, diag = vpo_advantage([[[0.2], [0.9]], [[0.5]], [[0.1], [0.3]]], ["a"] * 3, weights={"a": [[1.0]]})
    np.testing.assert_allclose(diag["raw_scores"], [0.9, 0.5, 0.3])
    np.testing.assert_allclose(adv, [1.3363062, -0.2672612, -1.0690450], rtol=1e-5)


def test_d1_raw_is_best_answer_even_with_random_weights():
    rng = np.random.default_rng(0)
    mats = [rng.random((3, 1)) for _ in range(5)]
    _, diag = vpo_advantage(mats, [0] * 5, rng=np.random.default_rng(1))  # Dirichlet on d=1 is always [1]
    np.testing.assert_allclose(diag["raw_scores"], [m.max() for m in mats])


def test_m1_with_mean_uniform_weights_is_mean_reward():
    w = np.array([[0.7, 0.3], [0.3, 0.7]])  # mean weight (0.5, 0.5)
    assert set_reward([[0.2, 0.8]], w) == pytest.approx(0.5)
    r = np.array([[0.1, 0.4, 0.9]])
    w3 = np.array([[0.6, 0.2, 0.2], [0.2, 0.6, 0.2], [0.2, 0.2, 0.6]])
    assert set_reward(r, w3) == pytest.approx(r.mean())


def test_set_reward_ties_and_empty():
    assert set_reward([[1, 0], [0, 1]], [[0.5, 0.5]]) == pytest.approx(0.5)  # tie: same max either way
    assert set_reward([], [[1.0]]) == 0.0
    assert set_reward(np.zeros((0, 3)), np.ones((4, 3)) / 3) == 0.0
    assert set_reward([[0.2, 0.4]], [0.5, 0.5]) == pytest.approx(0.3)  # (d,) = one weight


def test_vpo_constant_group_singleton_group_and_all_empty():
    mats = [[[1, 0]], [[1, 0]], [[0, 1]], [], np.zeros((0, 2))]
    gids = ["const", "const", "single", "empty", "empty"]
    rng = np.random.default_rng(0)
    adv, diag = vpo_advantage(mats, gids, rng=rng)
    np.testing.assert_array_equal(adv, 0.0)
    assert diag["frac_zero_adv_groups"] == 1.0
    assert "empty" not in diag["weights"]  # no draws for an all-empty group (reference order)
    adv, diag = vpo_advantage([[], None, np.zeros((0, 4))], [1, 1, 1])
    np.testing.assert_array_equal(adv, 0.0)
    np.testing.assert_array_equal(diag["raw_scores"], 0.0)
    adv, _ = vpo_advantage([], [])
    assert adv.shape == (0,)


def test_vpo_ties_within_group():
    # Two completions with identical raw scores plus one worse: the tied pair gets the same advantage.
    adv, _ = vpo_advantage([[[1, 0]], [[0, 1]], [[0, 0]]], [0, 0, 0], weights={0: [[0.5, 0.5]]})
    assert adv[0] == adv[1] > 0 > adv[2]


# ------------------------------------------------------------------------------------ VPO, against formula
def _vpo_by_formula(mats, gids, weights, eps=EPS):
    """Independent loop implementation of the reference formula."""
    out = np.zeros(len(mats))
    for g in dict.fromkeys(gids):
        idx = [j for j, h in enumerate(gids) if h == g]
        w = np.asarray(weights[g])
        raw = []
        for j in idx:
            r = np.asarray(mats[j], float)
            raw.append(0.0 if r.size == 0 else np.mean([max(row @ wk for row in r) for wk in w]))
        raw = np.array(raw)
        sd = np.sqrt(np.mean((raw - raw.mean()) ** 2))
        out[idx] = 0.0 if sd < eps else (raw - raw.mean()) / (sd + eps)
    return out


def _random_batch(rng, n_groups=3, g=6, d=4, m_max=4, p_empty=0.15):
    mats, gids = [], []
    for gi in range(n_groups):
        for _ in range(g):
            m = 0 if rng.random() < p_empty else int(rng.integers(1, m_max + 1))
            mats.append((rng.random((m, d)) < 0.5).astype(float) * rng.random((m, d)).round(1))
            gids.append(f"p{gi}")
    return mats, gids


def test_explicit_weights_reproduce_formula_exactly():
    rng = np.random.default_rng(3)
    mats, gids = _random_batch(rng)
    weights = {g: rng.dirichlet(np.ones(4), size=7) for g in set(gids)}
    adv, diag = vpo_advantage(mats, gids, weights=weights)
    np.testing.assert_allclose(adv, _vpo_by_formula(mats, gids, weights), rtol=1e-12, atol=1e-12)
    for j, g in enumerate(gids):
        assert diag["raw_scores"][j] == pytest.approx(set_reward(mats[j], weights[g]), abs=1e-12)


def test_seeded_draws_follow_reference_order_and_round_trip():
    rng = np.random.default_rng(11)
    mats, gids = _random_batch(rng)
    adv, diag = vpo_advantage(mats, gids, rng=np.random.default_rng(5), n_weights=100, alpha=1.0)
    expect = np.random.default_rng(5)  # one dirichlet(ones(d), size=K) per group, first-appearance order
    for g in dict.fromkeys(gids):
        np.testing.assert_array_equal(diag["weights"][g], expect.dirichlet(np.ones(4), size=100))
    adv2, _ = vpo_advantage(mats, gids, weights=diag["weights"])
    np.testing.assert_array_equal(adv, adv2)


def test_weights_shared_within_group():
    # Identical completions in the same group always get identical raw scores (shared draws).
    mats = [[[1, 0, 0], [0, 1, 0]]] * 3 + [[[0, 0, 1]]]
    _, diag = vpo_advantage(mats, [0] * 4, n_weights=5, rng=np.random.default_rng(0))
    assert len(set(diag["raw_scores"][:3])) == 1


# --------------------------------------------------------------------------------------------- baselines
def test_grpo_and_dr_grpo_best_answer_scalar():
    mats = [[[1, 0], [1, 1]], [[0, 0]]]
    adv, diag = grpo(mats, [0, 0])
    np.testing.assert_allclose(diag["raw_scores"], [1.0, 0.0])
    np.testing.assert_allclose(adv, [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)])
    adv, _ = dr_grpo(mats, [0, 0])
    np.testing.assert_allclose(adv, [0.5, -0.5])
    adv, diag = grpo([[[1, 0]], [[0, 1]]], [0, 0], w_star=[0.9, 0.1])
    np.testing.assert_allclose(diag["raw_scores"], [0.9, 0.1])
    assert adv[0] > 0 > adv[1]
    adv, _ = dr_grpo([[[1, 1]], [[1, 1]], [[0, 1]]], ["a", "a", "b"])
    np.testing.assert_array_equal(adv, 0.0)  # constant group, singleton group


def test_gdpo_hand_example():
    mats = [
        [[1, 0], [0, 1]],  # per-test max c = (1, 1)
        [[1, 0]],  # c = (1, 0)
        [[1, 1]],  # group b: constant
        [[1, 1]],
    ]
    adv, diag = gdpo(mats, ["a", "a", "b", "b"])
    # dim 0 constant in a -> 0; dim 1: (+1, -1) * 0.5/(0.5+eps); s = (1, -1, 0, 0) -> whitened by std sqrt(1/2)
    z = 0.5 / (0.5 + EPS)
    sd = np.sqrt(2 * z**2 / 4)
    np.testing.assert_allclose(adv, [z / (sd + EPS), -z / (sd + EPS), 0, 0], rtol=1e-12)
    assert diag["frac_zero_adv_groups"] == 0.5
    # answer_reduce="sum" (reference channels): column sums (1, 1) vs (1, 0): same here
    adv_sum, _ = gdpo(mats, ["a", "a", "b", "b"], answer_reduce="sum")
    np.testing.assert_allclose(adv_sum, adv)
    adv_w, _ = gdpo(mats, ["a", "a", "b", "b"], dim_weights=[1.0, 0.0])  # only the constant dim counts
    np.testing.assert_array_equal(adv_w, 0.0)


def test_gdpo_decouples_dimensions():
    # dim 0 has a huge scale, dim 1 a tiny one; after per-dim normalisation both count equally.
    mats = [[[100.0, 0.0]], [[0.0, 1.0]], [[0.0, 0.0]]]
    adv, _ = gdpo(mats, [0, 0, 0])
    # z0 = (2, -1, -1)/sqrt2, z1 = (-1, 2, -1)/sqrt2 -> s = (1, 1, -2)/sqrt2: both specialists count the same
    np.testing.assert_allclose(adv, np.array([1, 1, -2]) / S2, atol=1e-5)
    adv_g, _ = grpo(mats, [0, 0, 0])
    assert adv_g[0] > 1.4 and adv_g[1] < 0  # GRPO is dominated by the large dimension


def test_multi_rlvr_dedups_identical_answers():
    mats = [[[1, 0], [1, 0], [0, 1]], [[1, 1]], [[1, 0]]]
    adv, diag = multi_rlvr(mats, [0, 0, 0])
    np.testing.assert_allclose(diag["raw_scores"], [1.0, 1.0, 0.5])
    sd = np.sqrt((2 * (1 / 6) ** 2 + (1 / 3) ** 2) / 3)
    np.testing.assert_allclose(adv, np.array([1 / 6, 1 / 6, -1 / 3]) / (sd + EPS), rtol=1e-12)


def test_max_at_k_hand_example():
    mats = [[[0.0]], [[0.5]], [[1.0]]]
    adv, diag = max_at_k(mats, [0, 0, 0], k=2)
    # E[max of 2 of 3] = (0.5 + 1 + 1)/3; leave-one-out estimates 1, 1, 0.5
    assert diag["max_at_k"][0] == pytest.approx(2.5 / 3)
    np.testing.assert_allclose(diag["loo"], [-1 / 6, -1 / 6, 1 / 3])
    sd = np.sqrt((2 / 36 + 1 / 9) / 3)
    np.testing.assert_allclose(adv, np.array([-1 / 6, -1 / 6, 1 / 3]) / (sd + EPS), rtol=1e-12)


def _ref_max_at_k(x, k):
    """Reference (arXiv:2510.23393 / veRL) per-sample value: mean over size-k subsets containing j of their max."""
    n = len(x)
    return np.array([sum(max(x[i] for i in s) for s in combinations(range(n), k) if j in s) / comb(n, k)
                     for j in range(n)])


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_max_at_k_matches_reference_after_normalisation(k):
    rng = np.random.default_rng(k)
    x = rng.random(6).round(1)  # rounding makes ties likely
    adv, diag = max_at_k([[[v]] for v in x], [0] * 6, k=k)
    assert diag["k_used"][0] == k
    ref = _ref_max_at_k(x, k)
    ref = (ref - ref.mean()) / (ref.std() + EPS)
    np.testing.assert_allclose(adv, ref, atol=1e-4)
    # and the LOO form: rho(all) - rho(without j), rho from brute-force subset enumeration
    rho = lambda v: np.mean([max(s) for s in combinations(v, k)])  # noqa: E731
    np.testing.assert_allclose(diag["loo"], [rho(x) - rho(np.delete(x, j)) for j in range(6)], atol=1e-12)


def test_max_at_k_k1_is_grpo_and_k_clamped():
    rng = np.random.default_rng(0)
    mats, gids = _random_batch(rng)
    a1, _ = max_at_k(mats, gids, k=1)
    ag, _ = grpo(mats, gids)
    np.testing.assert_allclose(a1, ag, rtol=1e-4, atol=1e-6)  # equal up to the eps in (std + eps)
    _, diag = max_at_k([[[0.1]], [[0.2]], [[0.3]]], [0, 0, 0], k=10)
    assert diag["k_used"][0] == 2
    _, diag = max_at_k([[[0.1]]] * 8, [0] * 8)
    assert diag["k_used"][0] == 4  # default max(2, n // 2)


# ------------------------------------------------------------------------------------- every estimator
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_validation_errors(name):
    with pytest.raises(ValueError, match="len"):
        call(name, [[[1.0]], [[0.0]]], [0])
    with pytest.raises(ValueError, match="NaN or inf"):
        call(name, [[[1.0]], [[np.nan]]], [0, 0])
    with pytest.raises(ValueError, match="NaN or inf"):
        call(name, [[[1.0]], [[np.inf]]], [0, 0])
    with pytest.raises(ValueError, match="different numbers of tests"):
        call(name, [[[1.0, 0.0]], [[0.0, 1.0, 1.0]]], ["g", "g"])
    with pytest.raises(ValueError, match="2-D"):
        call(name, [[1.0, 0.0], [[0.0, 1.0]]], [0, 0])


def test_vpo_weight_validation():
    with pytest.raises(ValueError, match="no entry"):
        vpo_advantage([[[1.0]], [[0.0]]], [0, 0], weights={1: [[1.0]]})
    with pytest.raises(ValueError, match="shape"):
        vpo_advantage([[[1.0, 0.0]], [[0.0, 1.0]]], [0, 0], weights={0: [[1.0, 0.0, 0.0]]})
    with pytest.raises(ValueError, match="n_weights"):
        vpo_advantage([[[1.0]]], [0], n_weights=0)
    with pytest.raises(ValueError, match="alpha"):
        vpo_advantage([[[1.0]]], [0], alpha=0.0)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_degenerate_inputs_give_zeros(name):
    # different d in different groups is fine; singleton, constant and all-empty groups get 0
    mats = [[[1, 0, 1]], [[0.5]], [[0.5]], [], np.zeros((0, 2))]
    adv, diag = call(name, mats, ["single", "const", "const", "empty", "empty"], rng=np.random.default_rng(0)) \
        if name == "vpo" else call(name, mats, ["single", "const", "const", "empty", "empty"])
    np.testing.assert_array_equal(adv, 0.0)
    assert diag["frac_zero_adv_groups"] == 1.0
    adv, _ = call(name, [[], [], []], [0, 0, 0])
    np.testing.assert_array_equal(adv, 0.0)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_permutation_properties(name):
    rng = np.random.default_rng(7)
    mats, gids = _random_batch(rng)
    weights = {g: rng.dirichlet(np.ones(4), size=20) for g in set(gids)}
    base, _ = call(name, mats, gids, weights)
    assert np.any(base != 0)
    # permuting answers inside each completion changes nothing
    shuffled = [m[rng.permutation(len(m))] for m in mats]
    adv, _ = call(name, shuffled, gids, weights)
    np.testing.assert_allclose(adv, base, atol=1e-12)
    # permuting completions (across the whole batch, hence inside groups too) permutes the advantages
    perm = rng.permutation(len(mats))
    adv, _ = call(name, [mats[i] for i in perm], [gids[i] for i in perm], weights)
    np.testing.assert_allclose(adv, base[perm], atol=1e-9)


def test_vpo_answer_order_irrelevant_with_seeded_rng():
    rng = np.random.default_rng(1)
    mats, gids = _random_batch(rng)
    a, _ = vpo_advantage(mats, gids, rng=np.random.default_rng(2))
    b, _ = vpo_advantage([m[::-1] for m in mats], gids, rng=np.random.default_rng(2))
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_numpy_group_ids_and_float_rewards():
    adv, _ = vpo_advantage([np.array([[0.1, 0.9]]), np.array([[0.9, 0.1]]), np.array([[0.0, 0.0]])],
                           np.array(["x", "x", "x"]), weights={"x": np.array([[0.5, 0.5]])})
    assert adv[0] == adv[1] > 0 > adv[2]
