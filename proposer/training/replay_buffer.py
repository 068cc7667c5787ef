"""Which archive groups a training step learns from: the replay buffer is the archive itself.

A step takes ``batch`` complete groups: the most recent ``batch - n_old`` (on-policy or nearly), plus ``n_old =
round(batch * older_frac)`` drawn uniformly without replacement from all older groups. Old groups keep search
knowledge the recent window has lost (a problem solved long ago, an island that stalled); their completions carry
the behaviour log-probs and the policy version they were sampled with, so the PPO ratio (and the decoupled
importance weight of the trainer) keeps them honest, and each sample's staleness (current version − its
version) is logged. Groups are whole: the estimators normalise within a group, so a group is never split.
"""
from __future__ import annotations

import numpy as np


def choose_groups(group_ids: list[int], batch: int, older_frac: float, rng: np.random.Generator) -> list[int]:
    """Ids to train on, oldest first. group_ids: every group id, ascending."""
    if batch <= 0 or not group_ids:
        return []
    if not 0.0 <= older_frac <= 1.0:
        raise ValueError(f"replay older fraction must be in [0, 1], got {older_frac}")
    n_old = int(round(batch * older_frac))
    recent = group_ids[-(batch - n_old):] if batch - n_old > 0 else []
    older = group_ids[: len(group_ids) - len(recent)]
    k = min(n_old + max(0, batch - n_old - len(recent)), len(older))
    picked = rng.choice(len(older), size=k, replace=False) if k else np.array([], dtype=int)
    return sorted([older[i] for i in picked.tolist()] + list(recent))


def staleness(current_version: int, sample_versions: list[int]) -> dict[str, float]:
    """Policy versions between each sample's sampler and the learner now."""
    if not sample_versions:
        return {"staleness_mean": 0.0, "staleness_max": 0.0}
    s = np.maximum(0, current_version - np.asarray(sample_versions))
    return {"staleness_mean": float(s.mean()), "staleness_max": float(s.max())}
