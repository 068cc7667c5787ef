"""One training step's inputs, built the same way for a campaign (`campaign.CampaignTrainer`) and for
`vevo train` (`study.train`): score matrices → reward shaping (``train.reward``) → the estimator's advantages →
`TrainSample`s, with the stats every step records. The callers differ only in where the matrices, the novelty
masks and the parents' vectors come from (a campaign's archive; `vevo train`'s own scoring of seed prompts).
CoVRL's step is not an advantage estimate and does not come through here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from proposer.training.estimators import ESTIMATORS
from proposer.training.rewards import comparable_reward, reward_diversity, shape_rewards
from proposer.training.trainer import TrainSample


@dataclass
class StepInputs:
    samples: list[TrainSample]  # one per completion that can be trained on (zero advantages too: KL, the mean)
    stats: dict[str, Any]       # what the step's training row records before the update's own numbers


def shaped(mats: Sequence[np.ndarray], mode: str, novel: Sequence[np.ndarray] | None = None,
           parents: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
    """``train.reward`` applied to each completion's (m × d) matrix (proposer/training/rewards.py): ``novel``,
    per completion, which answers became new programs; ``parents``, per completion, its parent's test vector."""
    if mode == "vector":
        return list(mats)
    n = len(mats)
    novel = list(novel) if novel is not None else [None] * n
    parents = list(parents) if parents is not None else [None] * n
    return [shape_rewards(m, mode, novel=k, parent=p) for m, k, p in zip(mats, novel, parents)]


def reward_stats(mats: Sequence[np.ndarray]) -> dict[str, float]:
    """What every step records of its raw score matrices, whatever the algorithm (CoVRL's steps too): the
    comparable set reward under fixed weights, the best answer's mean and the reward diversity."""
    out = dict(comparable_reward(list(mats)))  # mean_set_reward (fixed weights), mean_best_answer
    out["reward_diversity"] = reward_diversity(list(mats))
    return out


def step_inputs(algo: str, mats: Sequence[np.ndarray], group_ids: Sequence[int], completions: Sequence[Any], *,
                reward: str = "vector", novel: Sequence[np.ndarray] | None = None,
                parents: Sequence[np.ndarray | None] | None = None, rng: np.random.Generator | None = None
                ) -> StepInputs:
    """The samples and stats of one advantage-estimator step. ``mats``: the raw score matrices (the comparable
    reward and the diversity are taken on them, the same for every algorithm and reward mode); the estimator sees
    them shaped. A completion without token ids (a backend that cannot train on it) gets no sample. Raises the
    estimator's ValueError on bad input (a campaign skips the step; `vevo train` stops)."""
    adv, diag = ESTIMATORS[algo](shaped(mats, reward, novel, parents), list(group_ids), rng=rng)
    samples = [TrainSample.from_completion(c, float(a)) for c, a in zip(completions, adv)
               if c.prompt_token_ids and c.token_ids]
    raw = diag.get("raw_scores") if isinstance(diag, dict) else None
    stats: dict[str, Any] = {"algo": algo, "train_reward": reward, "samples": len(samples),
                             "algo_reward": float(np.mean(raw)) if raw is not None and len(raw) else 0.0}
    stats.update(reward_stats(mats))
    if reward == "novel" and novel is not None and len(novel):
        stats["novel_share"] = float(np.mean(np.concatenate([np.asarray(k, dtype=float) for k in novel])))
    for k, v in (diag or {}).items():
        if isinstance(v, (int, float, np.floating, np.integer)):
            stats[f"diag_{k}"] = float(v)
    return StepInputs(samples, stats)
