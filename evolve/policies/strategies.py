"""Search strategies: where each proposal starts from. ``search.strategy`` (``--strategy NAME``) names one.

A strategy gets one island's `Parents` (its members as a selection `Pool`, and the problem's seed program) and the
island's RNG stream, and returns the parent and the inspirations the prompt shows. Everything else is the same
for every strategy (the proposer, its sampling, G, m, parsing, dedupe, evaluation, the archive, training), so
two strategies at one budget differ only in what the proposer is shown:

* ``evolve`` (the default): the configured selection method picks the parent among the island's members, and
  ``search.selection.inspirations`` others are shown beside it (FunSearch / OpenEvolve style evolution).
* ``iid``: every proposal from the problem's seed, no inspirations: N independent samples of the same proposer,
  the baseline of "Simple Baselines are Competitive with Code Evolution" (arXiv 2602.16805). Its best program
  after N proposals is best-of-N.
* ``topk``: hill climbing from the island's ``search.top_k`` best programs by scalar (uniformly among them),
  no inspirations (SkyDiscover's ``topk`` baseline).

Pure: a strategy reads only what it is given and draws only from ``rng``, so a run stays reproducible (contract 3).
To add one: a function with `StrategyFn`'s signature, then an entry in `STRATEGIES` (or `register_strategy`);
the config's ``search.strategy``, the CLI's ``--strategy`` choices and the docs read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import selection


@dataclass(frozen=True)
class Parents:
    """What a strategy chooses from: one island's members (archive ids, in island order) and their facts."""
    members: list[int]
    pool: selection.Pool  # one row per member
    seed: int | None      # the problem's seed program (None: not known, e.g. a hand-built population)


# name -> choose(parents, rng, search) -> (parent id, inspiration ids); search: the run config's search section
StrategyFn = Callable[[Parents, np.random.Generator, Any], tuple[int, list[int]]]


def evolve(parents: Parents, rng: np.random.Generator, search: Any) -> tuple[int, list[int]]:
    """The selection method's parent among the members, and the inspirations that beat it where it fails."""
    sel, pool = search.selection, parents.pool
    i = selection.SELECTIONS[sel.method](pool, rng, sel)
    insp = selection.inspirations(pool.vectors[i], pool.vectors, pool.scalars, sel.inspirations, rng,
                                  exclude=i) if pool.vectors.size else []
    return parents.members[i], [parents.members[j] for j in insp]


def iid(parents: Parents, rng: np.random.Generator, search: Any) -> tuple[int, list[int]]:
    """The problem's seed, alone: no archive program ever reaches the prompt."""
    if parents.seed is None:
        raise ValueError("strategy iid needs the problem's seed program")
    return parents.seed, []


def topk(parents: Parents, rng: np.random.Generator, search: Any) -> tuple[int, list[int]]:
    """One of the ``search.top_k`` best members by scalar, uniformly (ties broken by island order), alone."""
    s = np.nan_to_num(np.asarray(parents.pool.scalars, dtype=float), nan=-np.inf)
    if not s.size:
        raise ValueError("cannot select from an empty population")
    best = np.argsort(-s, kind="stable")[: max(1, int(search.top_k))]
    return parents.members[int(best[rng.integers(best.size)])], []


STRATEGIES: dict[str, StrategyFn] = {"evolve": evolve, "iid": iid, "topk": topk}


def register_strategy(name: str, fn: StrategyFn) -> None:
    STRATEGIES[name] = fn
