"""Parent selection, inspirations and migration as pure functions over numpy arrays.

Every random choice goes through the `rng` passed in, so the same seed gives the same choices (contract 3).
Scores are "higher is better"; a NaN score counts as 0 (a failed test).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


def _scores(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=float)
    if v.ndim == 1 and v.size == 0:
        v = v.reshape(0, 0)
    if v.ndim != 2:
        raise ValueError(f"vectors must be n×d, got shape {v.shape}")
    return np.nan_to_num(v, nan=0.0) if np.isnan(v).any() else v


def _check_nonempty(n: int) -> None:
    if n == 0:
        raise ValueError("cannot select from an empty population")


def _column_median(v: np.ndarray) -> np.ndarray:
    """np.median(v, axis=0) on NaN-free data with one partition call: np.median's generic machinery was
    most of a lexicase selection's time (bench/perf/loop_overhead.py)."""
    n, k = v.shape[0], v.shape[0] // 2
    if n % 2:
        return np.partition(v, k, axis=0)[k]
    p = np.partition(v, (k - 1, k), axis=0)
    return (p[k - 1] + p[k]) * 0.5


def median_absolute_deviation(vectors: np.ndarray) -> np.ndarray:
    """Per test case: median(|v - median(v)|) over the population (the automatic ε of La Cava et al. 2016)."""
    v = _scores(vectors)
    if v.shape[0] == 0:
        return np.zeros(v.shape[1])
    return _column_median(np.abs(v - _column_median(v)))


def epsilon_lexicase(vectors: np.ndarray, rng: np.random.Generator, epsilon: float | None = None) -> int:
    """ε-lexicase: test cases in a random order; on each keep the candidates within ε of the best survivor;
    stop when one is left or the cases run out, then pick uniformly among the survivors.

    Keeps specialists that are best on some tests even when their mean is poor. epsilon None gives each case
    its own ε = median absolute deviation of the population on that case (La Cava, Spector & Danai 2016),
    which is 0 on binary pass/fail tests where most candidates agree, i.e. plain lexicase.
    """
    v = _scores(vectors)
    n, d = v.shape
    _check_nonempty(n)
    if n == 1:
        return 0
    eps = median_absolute_deviation(v) if epsilon is None else np.full(d, float(epsilon))
    alive = np.arange(n)
    for t in rng.permutation(d):
        col = v[alive, t]
        alive = alive[col >= col.max() - eps[t]]
        if alive.size == 1:
            return int(alive[0])
    return int(rng.choice(alive))


def tournament(scalars: np.ndarray, rng: np.random.Generator, k: int) -> int:
    """Draw k distinct candidates (all of them if k >= n) and return the one with the highest scalar;
    a tie goes to the one drawn first, i.e. at random."""
    s = np.nan_to_num(np.asarray(scalars, dtype=float).ravel(), nan=-np.inf)
    _check_nonempty(s.size)
    if k < 1:
        raise ValueError(f"tournament size must be >= 1, got {k}")
    drawn = rng.choice(s.size, size=min(k, s.size), replace=False)
    return int(drawn[int(np.argmax(s[drawn]))])


def _softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = np.asarray(logits, dtype=float) / temperature
    z = np.exp(z - z.max())
    return z / z.sum()


def niche_select(vectors: np.ndarray, scalars: np.ndarray, code_lengths: np.ndarray, rng: np.random.Generator,
                 temperature: float = 0.1, length_temperature: float = 1.0) -> int:
    """FunSearch-style selection: cluster candidates by exact test signature (vector rounded to 1e-6), pick a
    cluster by softmax(mean scalar / temperature), then a member by softmax(-normalised length), so that
    good behaviours are sampled often and, within one behaviour, short programs are preferred.

    Normalised length is (len - min) / (max + 1e-6) within the cluster, as in FunSearch's programs database.
    """
    if temperature <= 0 or length_temperature <= 0:
        raise ValueError("temperatures must be > 0")
    v = _scores(vectors)
    s = np.nan_to_num(np.asarray(scalars, dtype=float).ravel(), nan=0.0)
    lengths = np.asarray(code_lengths, dtype=float).ravel()
    n = v.shape[0]
    _check_nonempty(n)
    if not (s.size == lengths.size == n):
        raise ValueError("vectors, scalars and code_lengths must have the same length")
    if v.shape[1] == 0:
        cluster_of = np.zeros(n, dtype=int)
    else:
        # np.unique sorts signatures, so cluster numbering does not depend on the order of candidates
        _, cluster_of = np.unique(np.round(v, 6), axis=0, return_inverse=True)
        cluster_of = cluster_of.ravel()
    n_clusters = int(cluster_of.max()) + 1
    cluster_score = np.bincount(cluster_of, weights=s, minlength=n_clusters) / np.bincount(cluster_of)
    c = rng.choice(n_clusters, p=_softmax(cluster_score, temperature))
    members = np.flatnonzero(cluster_of == c)
    ml = lengths[members]
    norm = (ml - ml.min()) / (ml.max() + 1e-6)
    return int(members[rng.choice(members.size, p=_softmax(-norm, length_temperature))])


def inspirations(parent_vector: np.ndarray, vectors: np.ndarray, scalars: np.ndarray, k: int,
                 rng: np.random.Generator, exclude: int | None = None) -> list[int]:
    """Up to k distinct candidates to show next to the parent, best first: those that do better on the most
    tests where the parent does worse (for pass/fail tests: pass tests the parent fails), ties broken by
    scalar, then at random. Candidates that beat the parent nowhere only fill the remaining places."""
    v = _scores(vectors)
    n, d = v.shape
    s = np.nan_to_num(np.asarray(scalars, dtype=float).ravel(), nan=-np.inf)
    p = np.nan_to_num(np.asarray(parent_vector, dtype=float).ravel(), nan=0.0)
    if s.size != n:
        raise ValueError("vectors and scalars must have the same length")
    if n and p.size != d:
        raise ValueError(f"parent vector has {p.size} entries, candidates have {d}")
    if k <= 0 or n == 0:
        return []
    better = (v > p + 1e-9).sum(axis=1) if d else np.zeros(n, dtype=int)
    noise = rng.random(n)
    order = np.lexsort((noise, -s, -better))  # last key is primary
    return [int(i) for i in order if i != exclude][:k]


def ring_migration(island_best: list[list[int]], count: int) -> list[tuple[int, int, int]]:
    """Moves (from_island, to_island, program_id): the top `count` of island i go to island (i+1) % K.

    `island_best[i]` lists island i's member ids best first. A program already on the destination island is
    not sent again. One island (or count 0) means no migration."""
    k = len(island_best)
    if k <= 1 or count <= 0:
        return []
    moves = []
    for i, members in enumerate(island_best):
        dest = (i + 1) % k
        there = set(island_best[dest])
        moves += [(i, dest, int(pid)) for pid in members[:count] if pid not in there]
    return moves


# ------------------------------------------------------------------------------------------ the registry
@dataclass(frozen=True)
class Pool:
    """What a selection method sees of an island: one row per member."""
    vectors: np.ndarray       # (n, d) per-test scores
    scalars: np.ndarray       # (n,) the problem's scalar score
    code_lengths: np.ndarray  # (n,) characters of program text


# name -> select(pool, rng, params) -> the chosen member's row; params is the run config's `selection` section
SelectFn = Callable[[Pool, np.random.Generator, Any], int]


def _lexicase(pool: Pool, rng: np.random.Generator, params: Any) -> int:
    if not pool.vectors.size:  # no per-test vector (e.g. no tests): fall back to the scalar
        return tournament(pool.scalars, rng, params.tournament_size)
    return epsilon_lexicase(pool.vectors, rng, params.lexicase_epsilon)


def _tournament(pool: Pool, rng: np.random.Generator, params: Any) -> int:
    return tournament(pool.scalars, rng, params.tournament_size)


def _niches(pool: Pool, rng: np.random.Generator, params: Any) -> int:
    if not pool.vectors.size:
        return tournament(pool.scalars, rng, params.tournament_size)
    return niche_select(pool.vectors, pool.scalars, pool.code_lengths, rng)


# To add a method: write a pure function above and a wrapper with this signature, then add it here (or call
# ``register_selection``); the config's `search.selection.method`, the CLI's --selection choices and the docs read it.
SELECTIONS: dict[str, SelectFn] = {"lexicase": _lexicase, "tournament": _tournament, "niches": _niches}


def register_selection(name: str, fn: SelectFn) -> None:
    SELECTIONS[name] = fn
