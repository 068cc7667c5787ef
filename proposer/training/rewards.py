"""What the trainer rewards, and one number every algorithm's training log can be compared on.

Reward shaping (``train_reward``), applied to each completion's (m × d) answer matrix before any estimator:

* ``vector``      — the answers' test vectors as evaluated (the paper's setting).
* ``novel``       — rows of answers that reproduce a program the archive already knew (the parent, an earlier
  program, or an earlier answer of the same group) are zeroed. In evolution an echo of the parent costs an
  evaluation slot and adds nothing; under ``vector`` it scores the parent's full vector, so copying is never
  below a group's baseline and the policy learns to copy.
* ``improvement`` — each test scores max(0, answer − parent): credit only for what the answer adds to the
  program it mutates (an answer equal to the parent scores 0, one that fixes two tests scores 1 on those two).

``comparable_reward`` is the VPO set reward under *fixed* evaluation weights (K draws of Dirichlet(1) from a
fixed seed, per test count d) plus the best answer's mean test score: the same number whatever algorithm
trained, so logs of VPO, GRPO and the rest can be put side by side; ``reward_diversity`` is how far apart one
completion's answers score. Pure numpy, no state.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

REWARDS = ("vector", "novel", "improvement")
EVAL_WEIGHTS = 64  # K fixed evaluation weights
EVAL_SEED = 20260  # fixed: the comparison must not depend on a run's seed


def shape_rewards(mat: np.ndarray, mode: str, novel: np.ndarray | None = None,
                  parent: np.ndarray | None = None) -> np.ndarray:
    """One completion's (m × d) matrix under ``mode``. novel: bool (m,), True where the answer produced a program
    the archive did not know. parent: the parent's test vector (d,), or None (no parent: treated as all zeros)."""
    mat = np.asarray(mat, dtype=float)
    if mode == "vector":
        return mat
    if mode == "novel":
        if novel is None:
            raise ValueError("train_reward 'novel' needs which answers were new programs")
        keep = np.asarray(novel, dtype=bool).reshape(-1)
        if keep.shape[0] != mat.shape[0]:
            raise ValueError(f"novel mask has {keep.shape[0]} entries for {mat.shape[0]} answers")
        return mat * keep[:, None]
    if mode == "improvement":
        if parent is None or len(parent) == 0:
            return mat
        p = np.zeros(mat.shape[1])
        pv = np.asarray(parent, dtype=float)[: mat.shape[1]]
        p[: len(pv)] = np.nan_to_num(pv)
        return np.maximum(mat - p[None, :], 0.0)
    raise ValueError(f"unknown train_reward {mode!r}; known: {', '.join(REWARDS)}")


@lru_cache(maxsize=64)
def eval_weights(d: int, k: int = EVAL_WEIGHTS) -> np.ndarray:
    """(k × d) Dirichlet(1) weights, the same for every run and algorithm."""
    return np.random.default_rng([EVAL_SEED, d]).dirichlet(np.ones(d), size=k)


def comparable_reward(mats: list[np.ndarray]) -> dict[str, float]:
    """mean over completions of mean_k max_i w_k · r_i (fixed w), and of max_i mean(r_i). Completions without
    answers count as 0."""
    sets, best = [], []
    for m in mats:
        m = np.asarray(m, dtype=float)
        if m.size == 0 or m.shape[1] == 0:
            sets.append(0.0)
            best.append(0.0)
            continue
        w = eval_weights(m.shape[1])
        sets.append(float((m @ w.T).max(axis=0).mean()))
        best.append(float(m.mean(axis=1).max()))
    return {"mean_set_reward": float(np.mean(sets)) if sets else 0.0,
            "mean_best_answer": float(np.mean(best)) if best else 0.0}


def reward_diversity(mats: list[np.ndarray]) -> float:
    """Mean pairwise L1 distance between the answer vectors of one completion, averaged over completions."""
    vals = []
    for m in mats:
        if m.shape[0] >= 2 and m.shape[1]:
            diffs = np.abs(m[:, None, :] - m[None, :, :]).sum(-1)
            vals.append(diffs[np.triu_indices(m.shape[0], 1)].mean())
    return float(np.mean(vals)) if vals else 0.0
