"""evolve/search/program_cache.py: the bounded member cache, the compact dedupe index and the restore's replay, on real
campaigns (in-process backend and evaluator, real SQLite archive)."""
from __future__ import annotations

import numpy as np
import pytest

from bench.perf import archive_scale, instant

from evaluators.types import Evaluation
from evolve.search import program_cache
from evolve.archive import Archive, ProgramRecord
from evolve.search.campaign import Campaign
from evolve.config.schema import CampaignConfig
from evolve.search.islands import Island
from evolve.search.program_cache import HashIndex, FactsCache, load_facts, facts_of
from proposer.answers.mutate import normalized_hash



def _repeating_backend():
    """Fresh programs mixed with repeats of programs proposed long before (answer vectors of programs that have
    left every island), so the cache must read evicted programs back."""

    class Repeating(instant.ResumableFreshBackend):
        def generate(self, prompts, n, sampling):
            from proposer.backends.base import Completion
            from proposer.answers.parsing import format_answers

            groups = []
            for _ in prompts:
                group = []
                for _ in range(n):
                    ks = [self.counter + i if (self.counter + i) % 3 else (self.counter + i) // 7
                          for i in range(self.m)]
                    self.counter += self.m
                    group.append(Completion(text=format_answers([instant.PROGRAM.format(k=k) for k in ks])))
                groups.append(group)
            return groups

    return Repeating(4)


def _run(run_dir, iterations, depth, floor, loads):
    probs = archive_scale.scale_problems(3)
    cfg = CampaignConfig(problems=[p.id for p in probs], proposer={"spec": "fresh"}, seed=3,
                         search={"iterations": iterations, "islands": 2, "answers": 4, "group": 2,
                                 "pipeline_depth": depth, "island_capacity": 6, "migration": {"every": 4}})
    camp = Campaign(cfg, run_dir, probs, _repeating_backend(), instant.HashEvaluator())
    camp.population.cache = FactsCache(camp.population.cache._load, camp.population.cache._live, floor=floor)
    load = camp.population.cache._load

    def counted(pid):
        loads.append(pid)
        return load(pid)

    camp.population.cache._load = counted
    try:
        camp.run()
        return camp.archive.export_rows(detail=True), len(camp.population.cache)
    finally:
        camp.close()


@pytest.mark.parametrize("depth", [0, 2])
def test_a_pruned_cache_gives_the_same_run_as_one_that_keeps_everything(tmp_path, depth):
    kept_loads, pruned_loads = [], []
    kept, n_kept = _run(tmp_path / "kept", 60, depth, 10 ** 9, kept_loads)
    pruned, n_pruned = _run(tmp_path / "pruned", 60, depth, 1, pruned_loads)
    assert kept == pruned
    assert not kept_loads  # nothing was ever dropped, so nothing was read back
    assert pruned_loads  # evicted programs were read back (duplicates of them, parents of batches in flight)
    assert n_pruned < n_kept == sum(r["status"] != "format_error" for r in kept)
    assert len(kept) < 3 + 60 * 8  # the repeats were duplicates: fewer programs than answers


def test_member_read_back_equals_the_remembered_one(tmp_path):
    ev = Evaluation(vector=[0.25, float("nan"), 1.0], scalar=0.5, solved=False, status="wrong",
                    artifacts={"stderr": "x" * 500, "ast_hash": "ab" * 32,
                               "metrics": {"acc": 0.5, "loss": 0.25}})
    with Archive(tmp_path / "a.db") as a:
        (pid,) = a.record_iteration(0, [], [ProgramRecord(problem="p", island=0, code="def f(x):\n    return 1\n",
                                                          evaluation=ev)])
        a.record_iteration(1, [], [ProgramRecord(problem="p", island=0, code="oops",
                                                 evaluation=Evaluation.failed("format_error", 3))])
        live, back = facts_of("def f(x):\n    return 1\n", ev), load_facts(a, pid)
        assert load_facts(a, pid + 1) is None and load_facts(a, 999) is None  # a format error is no member
    np.testing.assert_array_equal(back.vector, live.vector)
    assert {k: v for k, v in vars(back).items() if k != "vector"} == \
        {k: v for k, v in vars(live).items() if k != "vector"}


def test_cache_prunes_only_what_is_neither_live_nor_new():
    loaded = []
    live = {1, 2}
    cache = FactsCache(lambda pid: loaded.append(pid) or _member(pid), lambda: live, floor=4)
    for pid in range(1, 6):  # the 5th insertion passes the floor: nothing was there at a previous prune
        cache[pid] = _member(pid)
    assert sorted(cache) == [1, 2, 3, 4, 5] and cache._limit == 10
    for pid in range(6, 12):  # the next prune drops 3, 4, 5 (there at the last prune, not live), keeps 6..11
        cache[pid] = _member(pid)
    assert sorted(cache) == [1, 2, 6, 7, 8, 9, 10, 11]
    assert cache[3].scalar == 3.0 and loaded == [3]  # read back on demand
    with pytest.raises(KeyError):
        FactsCache(lambda pid: None, lambda: set())[7]


def _member(pid):
    return facts_of("x" * pid, Evaluation(vector=[float(pid)], scalar=float(pid), solved=False, status="wrong"))


def test_hash_index_is_a_dict_of_first_ids():
    idx, ref = HashIndex(), {}
    keys = [normalized_hash(f"def f(x): return {k % 5}") for k in range(12)] + ["short", "z" * 64, "short"]
    for pid, h in enumerate(keys):
        assert idx.setdefault(h, pid) == ref.setdefault(h, pid)
    assert len(idx) == len(ref) == 7
    for h in keys + [normalized_hash("other"), "nope"]:
        assert idx.get(h) == ref.get(h) and (h in idx) == (h in ref)


def test_restore_rebuilds_the_dedupe_index_and_scores_from_the_archive(tmp_path):
    run = tmp_path / "run"
    archive_scale.build_archive(run, 500, n_problems=4)
    probs = archive_scale.scale_problems(4)
    with Archive(run / "archive.db", readonly=True) as a:
        rows, last = a.programs(), a.last_iteration()
    cfg = archive_scale.scale_config(probs, last + 5, 1)
    camp = Campaign(cfg, run, probs, instant.ResumableFreshBackend(4), instant.HashEvaluator())
    try:
        assert camp._restore() is not None  # a checkpoint was found (the batches in flight: none)
        for p in probs:
            mine = [r for r in rows if r.problem == p.id]
            assert len(camp.population.known[p.id]) == len(mine)
            assert all(camp.population.known[p.id].get(normalized_hash(r.code)) == r.id for r in mine)
            assert camp.population.best[p.id] == max(r.scalar for r in mine)
            assert camp.population.baseline[p.id] == next(r.scalar for r in mine if r.island == -1)
        live = {m for isl in camp.population.islands.values() for m in isl.members}
        assert live and set(camp.population.cache) == live  # island members only, read in bulk
        assert camp.health._last_gain > 0 and len(camp.health._answers) == camp.health.answer_window
    finally:
        camp.close()


def test_live_ids_are_island_members_and_batch_references():
    isl = [Island("p", 0, [1, 2]), Island("p", 1, [2, 3])]

    class B:
        parent_id, inspiration_ids = 9, [7, 8]

    assert program_cache.live_ids(isl, [B()]) == {1, 2, 3, 7, 8, 9}


def test_restore_rows_decode_what_the_full_rows_give(tmp_path):
    """The restore reads the ast hash and the error line from a few columns; they equal what the whole row gives,
    whatever the artifacts hold (a nested ast_hash key, error keys, none, no hash at all)."""
    from evaluators.types import error_text

    arts = [{"ast_hash": "ab" * 32}, {"ast_hash": "cd" * 32, "first_error": "  wrong\n answer "},
            {"a": {"ast_hash": "nested"}, "ast_hash": "ef" * 32, "exit": "signal 9"},
            {"a": {"ast_hash": "nested"}}, {}, {"ast_hash": "", "error": "SyntaxError: x"},
            {"stderr": 'say "error": no', "ast_hash": "01" * 32}, {"exit": 0, "ast_hash": "23" * 32},
            {"ast_hash": "45" * 32, "failure_stage": "stage2", "error_type": "ValueError", "error_message": "bad"}]
    with Archive(tmp_path / "a.db") as a:
        a.record_iteration(0, [], [ProgramRecord(problem="p", island=-1, code=f"def f(x):\n    return {i}\n",
                                                 evaluation=Evaluation([0.5], 0.5, False, "wrong", art))
                                   for i, art in enumerate(arts)])
        a.record_iteration(1, [], [ProgramRecord(problem="p", island=0, code="later",
                                                 evaluation=Evaluation([0.5], 0.5, False, "wrong", {}))])
        full = a.programs()[:len(arts)]
        light = list(a.restore_rows(0, page=3))
    assert [r[0] for r in light] == [r.id for r in full]  # pages join up; iteration 1 left out
    for r, (pid, problem, island, it, scalar, solved, status, art, h, code) in zip(full, light):
        assert (h or normalized_hash(code)) == (r.artifacts.get("ast_hash") or normalized_hash(r.code))
        assert error_text(art) == error_text(r.artifacts)
        assert (problem, island, it, scalar, bool(solved), status) == (r.problem, r.island, r.iteration, r.scalar,
                                                                       r.solved, r.status)
