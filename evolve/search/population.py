"""A campaign's population: what it knows about the programs it archived, and how it picks the next parent.

Per (problem, island) key: an `Island` of archive program ids and its own RNG stream (spawned from the run's
seed, so adding a problem does not move the others' draws). Shared: the facts selection and prompts need about
each program (`ProgramFacts`, cached by id), the dedupe map (normalised AST hash → first program id, per problem),
which problems are solved and at which iteration, each problem's best and seed scores, the round-robin cursor
over islands, and the number of archived programs (program ids are 1..n_programs, predicted before a commit).

Memory is sized by the population, not the archive (evolve/search/program_cache.py): the member cache holds island
members and the batches in flight (``in_flight``, kept current by the campaign) and reads any other program back
from the archive; the dedupe map keeps 32-byte keys.

The checkpoint keeps only what cannot be rebuilt from the archive's programs: each island's members and RNG
state (`state_entries`: the islands that moved since the last commit, usually one, so its cost does not grow
with the number of problems) and the cursor. On resume `program_cache.replay` rebuilds the dedupe map and
scores from the archive in one paged pass and `restore` puts the islands back.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from evaluators.types import Evaluation
from problems import metrics as metric_columns
from problems.errors import VevoError
from proposer.answers.mutate import normalized_hash

from ..archive import Archive, ProgramRecord
from ..config.schema import SearchSection
from ..policies import selection, strategies
from .islands import Island, ProgramFacts
from .program_cache import HashIndex, FactsCache, live_ids, load_facts, facts_of

Key = tuple[str, int]  # (problem id, island index)


class ResumeError(VevoError, ValueError):
    """A run whose checkpoint cannot be continued here (one line for the CLI)."""


def state_key(key: Key) -> str:
    """The checkpoint entry of one island."""
    return f"island/{key[1]}/{key[0]}"


class Population:
    def __init__(self, order: list[str], search: SearchSection, seed: int, archive: Archive | None = None):
        """``order``: the problem ids, in the order islands take turns; ``search``: the config's search section
        (islands, capacity, selection, migration, retire_solved); ``archive``: where programs the cache no longer
        holds are read back from (None: nothing is read back)."""
        islands = search.islands
        self.order, self.n_islands, self.search, self.retire_solved = order, islands, search, search.retire_solved
        self.keys: list[Key] = [(pid, k) for pid in order for k in range(islands)]
        seqs = np.random.SeedSequence(seed).spawn(len(self.keys))
        self.rngs = {key: np.random.default_rng(s) for key, s in zip(self.keys, seqs)}
        self.islands = {key: Island(key[0], key[1]) for key in self.keys}
        self.in_flight: list[Any] = []  # batches prepared and not yet committed: their parents stay cached
        self.cache: dict[int, ProgramFacts] = FactsCache(
            (lambda pid: load_facts(archive, pid)) if archive is not None else (lambda pid: None),
            lambda: live_ids(self.islands.values(), self.in_flight))
        self.known: dict[str, HashIndex] = {pid: HashIndex() for pid in order}  # ast hash → program id
        self.solved: dict[str, int] = {}  # problem → the iteration that first solved it
        self.best: dict[str, float] = {}  # problem → best scalar so far, for progress
        self.baseline: dict[str, float] = {}  # problem → its seed program's scalar (the bandit's reward baseline)
        self.seeds: dict[str, int] = {}  # problem → its seed program's id (strategy iid proposes from it)
        self.next_key = 0  # the island after the last one picked
        self.n_programs = 0  # archived programs: ids 1..n_programs
        self.dirty: set[Key] = set(self.keys)  # islands whose state the next checkpoint must write

    # ------------------------------------------------------------------ programs
    def remember(self, pid: int, problem: str, code: str, ev: Evaluation, ast_hash: str | None) -> None:
        """Cache what selection and prompts need of an archived program, and add its hash to the dedupe map."""
        if ev.status == "format_error":
            return
        self.cache[pid] = facts_of(code, ev)
        self.known[problem].setdefault(ast_hash or normalized_hash(code), pid)
        self.best[problem] = max(self.best.get(problem, -math.inf), float(ev.scalar))

    def add_seed(self, pid: int, problem: str, code: str, ev: Evaluation, ast_hash: str) -> None:
        """Iteration 0: a problem's seed program, a member of each of its islands."""
        self.remember(pid, problem, code, ev, ast_hash)
        self.baseline.setdefault(problem, float(ev.scalar))
        self.seeds.setdefault(problem, pid)
        for k in range(self.n_islands):
            self.islands[(problem, k)].members.append(pid)
        if ev.solved:
            self.solved.setdefault(problem, 0)

    def add(self, key: Key, first: int, programs: list[ProgramRecord], iteration: int) -> None:
        """One committed batch of island ``key``: ``programs`` get ids first, first+1, ...; those with an
        ``ast_hash`` (not format errors) join the island."""
        added = []
        for i, p in enumerate(programs):
            if p.ast_hash is None:
                continue
            self.remember(first + i, key[0], p.code, p.evaluation, p.ast_hash)
            added.append(first + i)
            if p.evaluation.solved:
                self.solved.setdefault(key[0], iteration)
        self.islands[key].add_many(added, self.cache, self.search.island_capacity)
        self.dirty.add(key)

    # ------------------------------------------------------------------ islands
    def active(self, problem: str) -> bool:
        return not (self.retire_solved and problem in self.solved)

    def pick_island(self) -> Key | None:
        """The next island, round-robin, of a problem still active; None when every problem is retired."""
        n = len(self.keys)
        for step in range(n):
            key = self.keys[(self.next_key + step) % n]
            if self.active(key[0]):
                self.next_key = (self.next_key + step + 1) % n
                return key
        return None

    def select(self, key: Key) -> tuple[int, list[int]]:
        """A parent and its inspirations from island ``key`` by the run's search strategy
        (evolve/policies/strategies.py), drawn from the island's own RNG stream."""
        island, rng = self.islands[key], self.rngs[key]
        self.dirty.add(key)
        members = list(island.members)
        pool = selection.Pool(_stack([self.cache[p] for p in members]),
                              np.array([self.cache[p].scalar for p in members]),
                              np.array([self.cache[p].code_len for p in members]))
        parents = strategies.Parents(members, pool, self.seeds.get(key[0]))
        return strategies.STRATEGIES[self.search.strategy](parents, rng, self.search)

    def migrate(self, t: int) -> int:
        """Ring migration after iteration ``t`` when it is due; returns the number of programs moved."""
        every = self.search.migration.every
        if not every or t % every or self.n_islands < 2:
            return 0
        n = 0
        for pid in self.order:
            isl = [self.islands[(pid, k)] for k in range(self.n_islands)]
            for src, dst, prog in selection.ring_migration([i.ranked(self.cache) for i in isl],
                                                           self.search.migration.count):
                isl[dst].add(prog, self.cache, self.search.island_capacity)
                self.dirty.add((pid, dst))
                n += 1
        return n

    def best_of(self, key: Key) -> float:
        return max((self.cache[p].scalar for p in self.islands[key].members), default=0.0)

    # ------------------------------------------------------------------ checkpoint
    def state_entries(self) -> dict[str, Any]:
        """The checkpoint entries of the islands whose members or RNG moved since `saved`."""
        return {state_key(k): {"members": self.islands[k].members, "rng": self.rngs[k].bit_generator.state}
                for k in self.dirty}

    def saved(self) -> None:
        """The entries of `state_entries` are in a committed checkpoint."""
        self.dirty.clear()

    def restore(self, st: dict[str, Any], next_key: int) -> None:
        """Each island's members and RNG state from a checkpoint's entries, and the cursor."""
        for key in self.keys:
            entry = st.get(state_key(key))
            if entry is None:
                raise ResumeError(f"the run's checkpoint has no state for island {key[1]} of {key[0]!r}")
            self.islands[key].members = [int(x) for x in entry["members"]]
            self.rngs[key].bit_generator.state = entry["rng"]
        self.next_key = next_key


def _stack(members: list[ProgramFacts]) -> np.ndarray:
    """The members' vectors as one matrix: named metrics on the union of their columns (by name), else padded."""
    if members and any(m.names is not None for m in members):
        _, rows = metric_columns.stack_named([(m.names or [], [float(x) for x in m.vector]) for m in members])
        return np.asarray(rows, dtype=float).reshape(len(members), -1)
    vectors = [m.vector for m in members]
    return _stack_vectors(vectors)


def _stack_vectors(vectors: list[np.ndarray]) -> np.ndarray:
    """Members of one problem share d; failed OpenEvolve runs may have fewer metrics: pad with 0."""
    if not vectors:
        return np.zeros((0, 0))
    d = max(v.size for v in vectors)
    out = np.zeros((len(vectors), d))
    for i, v in enumerate(vectors):
        out[i, : v.size] = v
    return out
