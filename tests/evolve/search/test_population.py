"""evolve/search/population.py alone: islands, RNG streams, the dedupe map, what is solved, and the checkpoint entries
that bring a population back exactly (the campaign's resume tests check the same end to end)."""
from __future__ import annotations

import json

import pytest

from evaluators.types import Evaluation
from evolve.archive import ProgramRecord
from evolve.config.schema import SearchSection
from evolve.search.population import Population, ResumeError, state_key
from proposer.answers.mutate import normalized_hash


def ev(vector: list[float], solved: bool = False, status: str = "wrong") -> Evaluation:
    return Evaluation(vector=vector, scalar=sum(vector) / len(vector), solved=solved, status=status,
                      artifacts={})


def code(i: int) -> str:
    return f"def f(x):\n    return x + {i}\n"


def grown(seed: int = 0, migration_every: int = 10) -> Population:
    """Two problems, two islands each, seeds plus five programs per island, selection by tournament."""
    search = SearchSection(islands=2, retire_solved=True, selection={"method": "tournament"},
                           migration={"every": migration_every})
    pop = Population(["a", "b"], search, seed)
    for pid, problem in ((1, "a"), (2, "b")):
        pop.add_seed(pid, problem, code(-pid), ev([0.0, 0.0, 0.0]), normalized_hash(code(-pid)))
    pop.n_programs = 2
    for t, key in enumerate(pop.keys * 2, start=1):
        progs = [ProgramRecord(key[0], key[1], code(10 * t + j), ev([j / 4, (t % 3) / 2, 0.0]),
                               ast_hash=normalized_hash(code(10 * t + j)) if j < 2 else None)  # 2: a format error
                 for j in range(3)]
        pop.add(key, pop.n_programs + 1, progs, t)
        pop.n_programs += 3
    return pop


def test_each_island_draws_from_its_own_stream_and_same_seed_gives_same_draws():
    a, b = grown(), grown()
    draws_a = [a.select(k) for k in a.keys for _ in range(3)]
    assert draws_a == [b.select(k) for k in b.keys for _ in range(3)]
    c = grown()
    c.select(("b", 1))  # another island's draw does not move this one's stream
    assert [c.select(("a", 0)) for _ in range(3)] == draws_a[:3]
    assert draws_a != [grown(seed=1).select(k) for k in a.keys for _ in range(3)]


def test_format_errors_never_join_and_the_dedupe_map_keeps_the_first_id():
    pop = grown()
    members = {p for isl in pop.islands.values() for p in isl.members}
    assert members and members.isdisjoint({2 + 3 * t for t in range(1, 9)})  # ids 5, 8, ...: the format errors
    assert all(p in pop.cache for p in members)
    h = normalized_hash(code(10))
    pop.add(("a", 1), 100, [ProgramRecord("a", 1, code(10), ev([1.0, 1.0, 1.0], solved=True, status="ok"),
                                          ast_hash=h)], 9)
    assert pop.known["a"][h] == 3  # the first program with that hash, not the later copy
    assert pop.solved == {"a": 9} and pop.best["a"] == 1.0


def test_round_robin_skips_retired_problems_and_stops_when_all_are():
    pop = grown()
    assert [pop.pick_island() for _ in range(5)] == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("a", 0)]
    pop.solved["a"] = 3
    assert [pop.pick_island() for _ in range(3)] == [("b", 0), ("b", 1), ("b", 0)]
    pop.solved["b"] = 4
    assert pop.pick_island() is None
    pop.retire_solved = False
    assert pop.pick_island() == ("b", 1)  # the cursor stayed after ("b", 0)


def test_checkpoint_entries_bring_the_population_back_and_name_only_islands_that_moved():
    pop = grown(migration_every=5)
    assert set(pop.state_entries()) == {state_key(k) for k in pop.keys}
    pop.saved()
    assert pop.state_entries() == {}
    pop.select(("b", 0))
    assert set(pop.state_entries()) == {"island/0/b"}
    assert pop.migrate(4) == 0 and pop.migrate(5) > 0  # due every 5th iteration only
    saved = json.loads(json.dumps({state_key(k): {"members": pop.islands[k].members,
                                                  "rng": pop.rngs[k].bit_generator.state}
                                   for k in pop.keys}))  # through JSON, as archived
    back = grown(migration_every=5)
    back.restore(saved, pop.next_key)
    assert {k: i.members for k, i in back.islands.items()} == {k: i.members for k, i in pop.islands.items()}
    assert [back.select(k) for k in back.keys] == [pop.select(k) for k in pop.keys]
    assert back.pick_island() == pop.pick_island()
    del saved["island/1/a"]
    with pytest.raises(ResumeError, match="no state for island 1 of 'a'"):
        grown().restore(saved, 0)
