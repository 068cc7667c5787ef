from collections import Counter

import numpy as np
import pytest

from evolve.policies.selection import (epsilon_lexicase, inspirations, median_absolute_deviation, niche_select,
    ring_migration, tournament)


def rng(seed=0):
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------------------------ lexicase

def test_lexicase_picks_only_specialists_never_the_dominated():
    # 0 passes test 0 only, 1 passes test 1 only, 2 passes nothing, 3 is dominated by 0
    v = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0], [0.5, 0, 0]], dtype=float)
    picks = Counter(epsilon_lexicase(v, rng(s), epsilon=0.0) for s in range(400))
    assert set(picks) == {0, 1}
    assert 120 < picks[0] < 280  # each specialist wins when its test comes first


def test_lexicase_keeps_a_specialist_that_tournament_would_not():
    # candidate 2 is the only one passing test 3, but has the lowest mean
    v = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 1]], dtype=float)
    picks = Counter(epsilon_lexicase(v, rng(s)) for s in range(300))
    assert picks[2] > 40


def test_lexicase_epsilon_tolerance():
    v = np.array([[0.90], [0.95], [0.10]])
    assert {epsilon_lexicase(v, rng(s), epsilon=0.0) for s in range(50)} == {1}
    assert {epsilon_lexicase(v, rng(s), epsilon=0.1) for s in range(200)} == {0, 1}


def test_automatic_epsilon_is_median_absolute_deviation():
    v = np.array([[0.0, 1.0], [0.5, 1.0], [1.0, 1.0], [0.9, 0.0]])
    # column 0: median 0.7, |dev| = .7 .2 .3 .2 -> median .25 ; column 1: median 1, |dev| 1 0 0 0 -> 0
    assert np.allclose(median_absolute_deviation(v), [0.25, 0.0])
    # column 0 has MAD .5, so 0.9 and 0.5 survive next to 1.0 and candidate 1 wins on column 1 either way;
    # with ε = 0, candidate 0 wins whenever column 0 comes first
    v = np.array([[1.0, 0], [0.9, 1], [0.0, 0], [0.0, 0], [0.5, 0]])
    assert np.allclose(median_absolute_deviation(v), [0.5, 0.0])
    assert {epsilon_lexicase(v, rng(s)) for s in range(100)} == {1}
    assert {epsilon_lexicase(v, rng(s), epsilon=0.0) for s in range(100)} == {0, 1}


def test_median_absolute_deviation_equals_the_numpy_formula():
    g = np.random.default_rng(3)
    for n in (1, 2, 3, 4, 7, 40, 41):
        v = g.random((n, 6))
        v[::2, :3] = np.round(v[::2, :3])  # ties, as pass/fail tests give
        v[0, 5] = np.nan  # a NaN counts as 0
        clean = np.nan_to_num(v, nan=0.0)
        expected = np.median(np.abs(clean - np.median(clean, axis=0)), axis=0)
        assert np.array_equal(median_absolute_deviation(v), expected), n
    assert median_absolute_deviation(np.zeros((0, 3))).shape == (3,)


def test_lexicase_edge_cases():
    assert epsilon_lexicase(np.zeros((1, 5)), rng()) == 0
    picks = {epsilon_lexicase(np.zeros((4, 0)), rng(s)) for s in range(100)}
    assert picks == {0, 1, 2, 3}  # no tests: uniform
    ties = Counter(epsilon_lexicase(np.ones((3, 2)), rng(s)) for s in range(300))
    assert set(ties) == {0, 1, 2}
    with pytest.raises(ValueError):
        epsilon_lexicase(np.zeros((0, 3)), rng())
    assert epsilon_lexicase(np.array([[np.nan, 0.0], [0.2, 0.0]]), rng(), epsilon=0.0) == 1


def test_lexicase_is_deterministic_given_seed():
    v = rng(7).random((30, 12)).round(1)
    a = [epsilon_lexicase(v, rng(3)) for _ in range(5)]
    r1, r2 = rng(99), rng(99)
    assert [epsilon_lexicase(v, r1) for _ in range(20)] == [epsilon_lexicase(v, r2) for _ in range(20)]
    assert len(set(a)) == 1


# ---------------------------------------------------------------------------------------------- tournament

def test_tournament():
    s = np.array([0.1, 0.9, 0.5, 0.3])
    assert {tournament(s, rng(i), k=4) for i in range(20)} == {1}  # k = n: always the best
    assert {tournament(s, rng(i), k=10) for i in range(20)} == {1}
    picks = Counter(tournament(s, rng(i), k=1) for i in range(400))
    assert set(picks) == {0, 1, 2, 3}  # k = 1: uniform
    picks2 = Counter(tournament(s, rng(i), k=2) for i in range(400))
    assert 0 not in picks2  # the worst can never win a 2-tournament without replacement
    with pytest.raises(ValueError):
        tournament(s, rng(), k=0)
    with pytest.raises(ValueError):
        tournament(np.array([]), rng(), k=2)
    r1, r2 = rng(5), rng(5)
    assert [tournament(s, r1, 2) for _ in range(30)] == [tournament(s, r2, 2) for _ in range(30)]


# ------------------------------------------------------------------------------------------------- niches

def test_niche_select_prefers_good_clusters_and_short_programs():
    v = np.array([[1, 1], [1, 1], [1, 1], [0, 0]], dtype=float)
    s = np.array([1.0, 1.0, 1.0, 0.0])
    lengths = np.array([100, 1000, 2000, 10])
    picks = Counter(niche_select(v, s, lengths, rng(i), temperature=0.1) for i in range(2000))
    # cluster (1,1): weight e^10 vs e^0 -> cluster (0,0) almost never
    assert picks[3] < 5
    # inside the cluster softmax(-[0, .45, .95]) with FunSearch normalisation (len - min) / (max + 1e-6)
    norm = (np.array([100, 1000, 2000]) - 100) / (2000 + 1e-6)
    p = np.exp(-norm) / np.exp(-norm).sum()
    assert picks[0] > picks[1] > picks[2]
    assert abs(picks[0] / 2000 - p[0]) < 0.05


def test_niche_select_cluster_probabilities_follow_softmax():
    # two singleton clusters with mean scores .6 and .5 at T = .1 -> e^1 : 1
    v = np.array([[1.0], [0.0]])
    s = np.array([0.6, 0.5])
    n = 4000
    picks = Counter(niche_select(v, s, np.array([5, 5]), rng(i), temperature=0.1) for i in range(n))
    assert abs(picks[0] / n - np.e / (1 + np.e)) < 0.03


def test_niche_select_edge_cases():
    assert niche_select(np.zeros((1, 3)), np.zeros(1), np.array([4]), rng()) == 0
    assert {niche_select(np.zeros((3, 0)), np.zeros(3), np.array([1, 1, 1]), rng(i)) for i in range(100)} \
        == {0, 1, 2}
    with pytest.raises(ValueError):
        niche_select(np.zeros((2, 1)), np.zeros(3), np.array([1, 1]), rng())
    with pytest.raises(ValueError):
        niche_select(np.zeros((2, 1)), np.zeros(2), np.array([1, 1]), rng(), temperature=0)
    v = rng(1).integers(0, 2, (20, 4)).astype(float)
    s, lengths = v.mean(axis=1), rng(2).integers(10, 100, 20)
    r1, r2 = rng(4), rng(4)
    assert [niche_select(v, s, lengths, r1) for _ in range(20)] == [niche_select(v, s, lengths, r2) for _ in range(20)]


# -------------------------------------------------------------------------------------------- inspirations

def test_inspirations_prefer_complementary_programs():
    parent = np.array([1, 1, 0, 0, 0], dtype=float)
    v = np.array([
        [1, 1, 0, 0, 0],  # 0: the parent itself
        [0, 0, 1, 1, 1],  # 1: passes 3 tests the parent fails
        [1, 1, 1, 0, 0],  # 2: passes 1 failing test, high scalar
        [0, 0, 1, 0, 0],  # 3: passes 1 failing test, low scalar
        [1, 1, 0, 0, 0],  # 4: same as parent, higher scalar than everyone
    ], dtype=float)
    s = np.array([0.4, 0.6, 0.6, 0.2, 0.9])
    assert inspirations(parent, v, s, 3, rng(), exclude=0) == [1, 2, 3]
    assert inspirations(parent, v, s, 5, rng(), exclude=0) == [1, 2, 3, 4]  # fill with the rest, distinct
    assert inspirations(parent, v, s, 0, rng()) == []
    assert 0 not in inspirations(parent, v, s, 10, rng(), exclude=0)
    assert len(set(inspirations(parent, v, s, 10, rng()))) == 5


def test_inspirations_random_tie_break_is_seeded():
    parent = np.zeros(3)
    v = np.eye(3)
    s = np.ones(3)
    firsts = {inspirations(parent, v, s, 1, rng(i))[0] for i in range(60)}
    assert firsts == {0, 1, 2}
    assert inspirations(parent, v, s, 3, rng(8)) == inspirations(parent, v, s, 3, rng(8))


def test_inspirations_fractional_scores_and_shapes():
    parent = np.array([0.5, 0.5])
    v = np.array([[0.5, 0.5], [0.6, 0.4], [0.7, 0.9]])
    assert inspirations(parent, v, v.mean(axis=1), 2, rng()) == [2, 1]
    with pytest.raises(ValueError):
        inspirations(np.zeros(3), v, v.mean(axis=1), 2, rng())
    assert inspirations(np.zeros(2), np.zeros((0, 2)), np.zeros(0), 2, rng()) == []


# ------------------------------------------------------------------------------------------------ migration

def test_ring_migration():
    islands = [[10, 11, 12], [20, 21], [30]]
    assert ring_migration(islands, 1) == [(0, 1, 10), (1, 2, 20), (2, 0, 30)]
    assert ring_migration(islands, 2) == [(0, 1, 10), (0, 1, 11), (1, 2, 20), (1, 2, 21), (2, 0, 30)]
    assert ring_migration([[1, 2, 3]], 2) == []
    assert ring_migration(islands, 0) == []
    assert ring_migration([], 1) == []
    assert ring_migration([[], [5]], 1) == [(1, 0, 5)]
    # a program already on the destination island is not sent again
    assert ring_migration([[7, 1], [7, 2]], 1) == []
