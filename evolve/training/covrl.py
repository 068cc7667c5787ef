"""CoVRL inside a campaign: which training steps are CoVRL steps, and one step's data from the archive.

A CoVRL step takes the replay buffer's groups (``CampaignTrainer._groups``), finds each group's reference in the
archive (``proposer/training/references.py``: the best later descendant of the group's parent, or the problem's best
solved program), skips groups without one (counted in ``references_missing``), samples ``trained_group`` trajectories
per remaining prompt by hybrid sampling from the learner (seeded by (seed, iteration), so a resumed run draws
the same ones), and takes one ``CoVRLUpdater`` step. The references used are recorded in the step's training
row (group, parent, reference program id, kind).

``train: vpo+covrl`` mixes the two: training step k (k = iteration / ``train.every``, from 1) is a CoVRL step when
floor(k * share) > floor((k - 1) * share), share = ``train.covrl.share`` (0.5: VPO, CoVRL, VPO, ...).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from proposer.training.covrl import CoVRLConfig
from proposer.training.covrl_step import CoVRLUpdater, sample_trajectories
from proposer.training.references import reference_for


def covrl_config(cfg) -> CoVRLConfig:
    """The ``train.covrl`` section of a run config as the trainer's own CoVRLConfig."""
    c = cfg.train.covrl
    return CoVRLConfig(alpha=c.alpha, clip_eps=c.clip_eps, nll_coef=c.nll_coef, kl_coef=c.kl_coef,
                       std_norm=c.std_norm, reason_tokens=c.reason_tokens)


def find_references(archive, groups, iteration: int) -> tuple[list[tuple[Any, Any]], int]:
    """[(group, Reference)] for the groups that have one, and how many had none."""
    programs: dict[str, list] = {}
    found, missing = [], 0
    for g in groups:
        if g.problem not in programs:
            programs[g.problem] = archive.programs(problem=g.problem)
        ref = reference_for(g.parent_id, programs[g.problem], up_to_iteration=iteration)
        if ref is None:
            missing += 1
        else:
            found.append((g, ref))
    return found, missing


def covrl_step(archive, groups, learner, updater: CoVRLUpdater, cfg, iteration: int) -> dict[str, Any]:
    """References → hybrid trajectories → one update. Returns the step's stats (no update when nothing has a
    reference: ``skipped`` says so)."""
    found, missing = find_references(archive, groups, iteration)
    stats: dict[str, Any] = {"references_missing": missing, "references_found": len(found),
                             "references": [{"group": g.id, "parent": g.parent_id, "reference": r.program_id,
                                             "kind": r.kind} for g, r in found]}
    if not found:
        stats["skipped"] = "no group has a reference yet"
        return stats
    rng = np.random.default_rng([cfg.seed, iteration, 3])
    trajs = sample_trajectories(learner, [(g.prompt, r.text, g.id) for g, r in found], cfg.trained_group, updater.cfg, rng,
                                seed=(cfg.seed * 7919 + iteration) % (2**31), temperature=cfg.sampling.temperature,
                                top_p=cfg.sampling.top_p)
    stats.update(updater.step(trajs))
    return stats
