"""Islands: sub-populations of one problem with bounded size. Membership is a list of archive program ids;
the per-program facts selection needs (vector, scalar, code length) live in one shared cache."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ProgramFacts:
    vector: np.ndarray
    scalar: float
    code_len: int
    solved: bool
    code: str
    status: str
    stderr: str = ""
    names: list[str] | None = None  # score column names, when the evaluator reports metrics by name
    metrics: dict | None = None  # everything it reported, by name (for the prompt)
    feedback: dict | None = None  # its artifacts, bounded (for the prompt)


@dataclass
class Island:
    problem: str
    index: int
    members: list[int] = field(default_factory=list)

    def add(self, pid: int, cache: dict[int, ProgramFacts], capacity: int) -> None:
        self.add_many([pid], cache, capacity)

    def add_many(self, pids: list[int], cache: dict[int, ProgramFacts], capacity: int) -> None:
        """Add, then shrink back to capacity in one pass (same result as evicting after each add: removing
        a non-elite never changes which programs are elites)."""
        have = set(self.members)
        for p in pids:
            if p not in have:
                self.members.append(p)
                have.add(p)
        excess = len(self.members) - capacity
        if excess > 0:
            gone = set(evict(self.members, cache, excess))
            self.members = [p for p in self.members if p not in gone]

    def ranked(self, cache: dict[int, ProgramFacts]) -> list[int]:
        """Best first: scalar, then fewer characters, then older."""
        return sorted(self.members, key=lambda p: (-cache[p].scalar, cache[p].code_len, p))


def evict(members: list[int], cache: dict[int, ProgramFacts], k: int = 1) -> list[int]:
    """Which k members leave a full island. Elites — the best program on some test (earliest on ties) —
    stay, since lexicase needs specialists; among the rest the lowest scalar goes (longer code, then older,
    first)."""
    vecs = [cache[p].vector for p in members]
    d = max((v.size for v in vecs), default=0)
    elites: set[int] = set()
    if d and all(v.size == d for v in vecs):
        m = np.nan_to_num(np.stack(vecs), nan=0.0)  # a NaN score counts as 0, as in selection
        first_best = np.argmax(m >= m.max(axis=0) - 1e-12, axis=0)  # per test, the first row at its best
        elites = {members[i] for i in first_best.tolist()}
    pool = [p for p in members if p not in elites]
    order = sorted(pool, key=lambda p: (cache[p].scalar, -cache[p].code_len, p))
    if len(order) < k:  # only elites left to remove: the weakest of them
        rest = sorted((p for p in members if p in elites), key=lambda p: (cache[p].scalar, -cache[p].code_len, p))
        order += rest
    return order[:k]
