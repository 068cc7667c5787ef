"""Search strategies (evolve/policies/strategies.py): pure choices over an island, and `vevo run --strategy` end to end
(replay proposer, real sandbox, real SQLite)."""
from __future__ import annotations

import numpy as np
import pytest

from evolve.policies import selection, strategies
from evolve.archive import Archive
from evolve.config.schema import ConfigError, SearchSection, load_config
from problems.suites import SUITES
from tests.campaign_helpers import pbe_replay, vevo

PBE = SUITES["pbe"]()
PROBS = [p for p in PBE if p.split == "heldout"][:2] + [p for p in PBE if p.split == "train"][:1]
IDS = [a for p in PROBS for a in ("--problem", p.id)]


def _parents(scalars, seed=100) -> strategies.Parents:
    s = np.asarray(scalars, dtype=float)
    vecs = np.stack([s, 1 - s], axis=1)
    members = [10 + i for i in range(s.size)]
    return strategies.Parents(members, selection.Pool(vecs, s, np.full(s.size, 20)), seed)


def test_evolve_is_the_selection_method_and_its_inspirations():
    search = SearchSection(selection={"method": "tournament", "tournament_size": 2, "inspirations": 2})
    p = _parents([0.1, 0.9, 0.5, 0.3])
    got = strategies.evolve(p, np.random.default_rng(3), search)
    rng = np.random.default_rng(3)  # the same draws by hand: tournament, then inspirations
    i = selection.tournament(p.pool.scalars, rng, 2)
    insp = selection.inspirations(p.pool.vectors[i], p.pool.vectors, p.pool.scalars, 2, rng, exclude=i)
    assert got == (p.members[i], [p.members[j] for j in insp]) and len(got[1]) == 2


def test_iid_is_always_the_seed_alone_and_draws_nothing():
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert strategies.iid(_parents([0.2, 0.8], seed=7), rng, SearchSection()) == (7, [])
    assert rng.bit_generator.state == before
    with pytest.raises(ValueError, match="seed"):
        strategies.iid(_parents([0.2], seed=None), rng, SearchSection())


def test_topk_draws_only_among_the_k_best_and_each_of_them():
    p = _parents([0.1, 0.9, 0.5, 0.3, 0.7])  # the top 3: members 11 (0.9), 14 (0.7), 12 (0.5)
    rng = np.random.default_rng(1)
    drawn = [strategies.topk(p, rng, SearchSection(top_k=3)) for _ in range(200)]
    assert {d[0] for d in drawn} == {11, 14, 12} and all(d[1] == [] for d in drawn)
    assert strategies.topk(p, rng, SearchSection(top_k=1)) == (11, [])  # k = 1: greedy hill climbing
    assert {strategies.topk(p, rng, SearchSection(top_k=50))[0] for _ in range(200)} == set(p.members)


def test_unknown_strategy_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match="unknown search strategy 'beam' .known: evolve, iid, topk"):
        load_config(None, {"search.strategy": "beam"})


def _groups(run):
    with Archive(run / "archive.db", readonly=True) as a:
        seeds = {p.problem: p.id for p in a.programs(island=-1)}
        return seeds, a.recent_groups(1000)


def test_iid_run_proposes_every_time_from_the_seed_with_the_same_prompt(tmp_path):
    """`vevo run --strategy iid`: every group's parent is its problem's seed and nothing of the archive reaches
    the prompt (each problem's prompt is the same at every iteration), across a resume; `evolve`, on the same
    completions, moves off the seed."""
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    common = [*IDS, "--proposer", f"replay:{replay}", "--answers", "3", "--group", "2", "--islands", "1",
              "--set", "search.retire_solved=false", "--quiet"]
    run = tmp_path / "iid"
    vevo("run", *common, "--iterations", "6", "--strategy", "iid", "--out", str(run))
    vevo("resume", str(run), "--iterations", "12", "--quiet")  # the seeds come back from the archive
    seeds, groups = _groups(run)
    assert len(groups) == 12 and {g.parent_id for g in groups} <= set(seeds.values())
    assert all(g.parent_id == seeds[g.problem] for g in groups)
    prompts = {}
    for g in groups:
        prompts.setdefault(g.problem, set()).add(g.prompt)
    assert all(len(v) == 1 for v in prompts.values()), "an archive program reached an iid prompt"
    evo = tmp_path / "evolve"
    vevo("run", *common, "--iterations", "12", "--out", str(evo))
    seeds, groups = _groups(evo)
    assert any(g.parent_id != seeds[g.problem] for g in groups)


def test_topk_run_starts_from_island_members(tmp_path):
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    run = tmp_path / "topk"
    vevo("run", *IDS, "--proposer", f"replay:{replay}", "--answers", "3", "--group", "2", "--islands", "1",
         "--iterations", "9", "--strategy", "topk", "--top-k", "2", "--out", str(run), "--quiet")
    with Archive(run / "archive.db", readonly=True) as a:
        shown = {}
        for g in a.recent_groups(1000):
            shown[g.parent_id] = g.problem
        assert all(a.program(pid).problem == prob for pid, prob in shown.items())
    assert load_config(run / "config.yaml").search.strategy == "topk"
