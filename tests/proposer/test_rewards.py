"""Reward shaping, the comparable reward, the replay buffer's choice of groups, and the archive queries that
feed them (which answers were new programs, the parents' vectors)."""
import numpy as np
import pytest

from evolve.archive import Archive, ProgramRecord
from proposer.training.estimators import set_reward
from proposer.training.replay_buffer import choose_groups, staleness
from proposer.training.rewards import comparable_reward, eval_weights, shape_rewards
from tests.archive_helpers import ev, group, seed_program

M = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])


def test_vector_is_the_identity():
    assert np.array_equal(shape_rewards(M, "vector"), M)


def test_novel_zeroes_echoes_only():
    out = shape_rewards(M, "novel", novel=np.array([True, False, True]))
    assert out.tolist() == [[1, 0, 1], [0, 0, 0], [0, 0, 0]]
    with pytest.raises(ValueError, match="3 answers"):
        shape_rewards(M, "novel", novel=np.array([True]))
    with pytest.raises(ValueError, match="needs"):
        shape_rewards(M, "novel")


def test_improvement_counts_only_what_the_answer_adds():
    parent = [1.0, 0.0, 0.0]
    out = shape_rewards(M, "improvement", parent=parent)
    assert out.tolist() == [[0, 0, 1], [0, 1, 0], [0, 0, 0]]
    assert shape_rewards(np.array([parent]), "improvement", parent=parent).sum() == 0  # an echo earns nothing
    assert np.array_equal(shape_rewards(M, "improvement", parent=None), M)  # no parent: the vector itself
    assert shape_rewards(M, "improvement", parent=[1.0]).tolist()[0] == [0, 0, 1]  # shorter parent: zeros after


def test_unknown_mode_is_one_line():
    with pytest.raises(ValueError, match="unknown train_reward 'copy'; known: vector, novel, improvement"):
        shape_rewards(M, "copy")


def test_comparable_reward_matches_set_reward_under_fixed_weights():
    w = eval_weights(3)
    assert w.shape == (64, 3) and np.allclose(w.sum(1), 1) and np.array_equal(w, eval_weights(3))
    got = comparable_reward([M, M[:1], np.zeros((0, 3))])
    want_set = (set_reward(M, w) + set_reward(M[:1], w) + 0.0) / 3
    assert got["mean_set_reward"] == pytest.approx(want_set)
    assert got["mean_best_answer"] == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    assert comparable_reward([]) == {"mean_set_reward": 0.0, "mean_best_answer": 0.0}


def test_choose_groups_recent_first_with_older_mix():
    ids = list(range(1, 101))
    rng = np.random.default_rng(0)
    assert choose_groups(ids, 8, 0.0, rng) == list(range(93, 101))
    got = choose_groups(ids, 8, 0.25, np.random.default_rng(1))
    assert got[-6:] == list(range(95, 101)) and len(got) == 8 and all(i < 95 for i in got[:2])
    assert got == sorted(set(got))
    assert choose_groups(ids, 8, 0.25, np.random.default_rng(1)) == got  # seeded
    assert choose_groups(ids[:5], 8, 0.5, rng) == ids[:5]  # fewer groups than the batch: all of them
    assert choose_groups([], 8, 0.5, rng) == [] and choose_groups(ids, 0, 0.5, rng) == []
    with pytest.raises(ValueError):
        choose_groups(ids, 8, 1.5, rng)


def test_staleness():
    assert staleness(5, [5, 3, 0]) == {"staleness_mean": pytest.approx(7 / 3), "staleness_max": 5.0}
    assert staleness(2, []) == {"staleness_mean": 0.0, "staleness_max": 0.0}


def test_archive_new_answers_and_parent_vectors(tmp_path):
    with Archive(tmp_path / "a.db") as a:
        [seed] = a.record_iteration(0, [], [seed_program("p", vector=(1, 0, 0))], {}, {})
        g = group("p", parent_id=seed, n=2, m=3)
        # completion 0: answers 0 and 2 are new programs; answer 1 echoed the seed. completion 1: answer 1 new
        progs = [ProgramRecord("p", 0, "c00", ev([1, 1, 0]), [seed], completion=(0, 0), answer_index=0),
                 ProgramRecord("p", 0, "c02", ev([0, 0, 1]), [seed], completion=(0, 0), answer_index=2),
                 ProgramRecord("p", 0, "c11", ev([1, 1, 1]), [seed], completion=(0, 1), answer_index=1)]
        a.record_iteration(1, [g], progs, {}, None)
        [grow] = a.groups_by_id(a.group_ids())
        cids = [c.id for c in grow.completions]
        assert a.new_answers(cids) == {cids[0]: {0, 2}, cids[1]: {1}}
        assert a.program_vectors([grow.parent_id]) == {seed: [1.0, 0.0, 0.0]}
        assert a.groups_by_id([999]) == [] and a.new_answers([]) == {}
