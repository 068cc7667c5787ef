"""Island membership: bounded size, per-test elites survive eviction."""
import numpy as np

from evolve.search.islands import Island, ProgramFacts, evict


def cache_of(rows: dict[int, tuple[list[float], int]]) -> dict[int, ProgramFacts]:
    return {pid: ProgramFacts(vector=np.array(v, dtype=float), scalar=float(np.nan_to_num(v).mean()), code_len=n,
                        solved=False, code="x" * n, status="wrong") for pid, (v, n) in rows.items()}


def test_evict_keeps_the_best_on_each_test_and_drops_the_weakest():
    cache = cache_of({1: ([1, 0, 0], 10), 2: ([0, 1, 0], 10), 3: ([0.5, 0.5, 0.9], 10), 4: ([0.2, 0.2, 0.2], 10),
                      5: ([0.2, 0.2, 0.2], 30), 6: ([0.4, 0.4, 0.4], 10)})
    members = [1, 2, 3, 4, 5, 6]
    # elites: 1 (test 0), 2 (test 1), 3 (test 2); of the rest the lowest scalar goes, longer code first
    assert evict(members, cache, 1) == [5]
    assert evict(members, cache, 3) == [5, 4, 6]
    # only elites left: the weakest elite goes next (1 and 2 tie on scalar and length: the older first)
    assert evict(members, cache, 5) == [5, 4, 6, 1, 2]


def test_evict_ties_keep_the_earliest_and_nan_counts_as_zero():
    cache = cache_of({7: ([1, 0], 5), 8: ([1, 0], 5), 9: ([0, 1], 5)})
    assert evict([7, 8, 9], cache, 1) == [8]  # 7 and 8 tie on test 0: the earlier one is the elite
    assert evict([8, 7, 9], cache, 1) == [7]
    cache = cache_of({10: ([np.nan, 0.5], 5), 11: ([0.2, 0.4], 5), 12: ([0.1, 0.1], 5)})
    assert evict([10, 11, 12], cache, 1) == [12]  # NaN is 0: 11 is best on test 0, 10 on test 1


def test_add_many_equals_adding_one_at_a_time():
    rng = np.random.default_rng(0)
    rows = {i: (list(np.round(rng.random(4), 1)), int(rng.integers(5, 50))) for i in range(1, 200)}
    cache = cache_of(rows)
    a, b = Island("p", 0), Island("p", 0)
    ids = list(rows)
    for start in range(0, len(ids), 8):
        batch = ids[start:start + 8] + ids[max(0, start - 3):start]  # some already members or evicted
        a.add_many(batch, cache, capacity=12)
        for pid in batch:
            b.add(pid, cache, capacity=12)
        assert a.members == b.members and len(a.members) <= 12
    vecs = np.stack([cache[p].vector for p in a.members])
    assert (vecs.max(axis=0) == np.stack([cache[p].vector for p in ids]).max(axis=0)).all(), \
        "the best score on every test is still on the island"
