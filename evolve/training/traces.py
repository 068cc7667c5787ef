"""Offline RL on recorded groups (`vevo train --traces DIR`): the traces of past campaigns (evolve/analysis/traces.py) in
place of fresh samples, through the same step function as a campaign and `vevo train` (evolve/training/step.py:
the estimators, the ``train.reward`` shaping, the samples) and the same PolicyTrainer (set up by evolve/training/setup.py, as a campaign and `vevo train`).

Off-policy correction: importance weighting, not re-sampling. Each recorded completion keeps the behaviour
log-probs of the policy version that sampled it, and the trainer's decoupled-PPO path weighs every token by
min(pi_old / b, is_cap) (proposer/training/trainer.py): tokens the current policy finds likelier than the sampler
did count at most is_cap times, unlikelier ones count less. Re-sampling the prompts when the policy has moved too far
would need the sandbox and the problems' evaluators, which a dataset alone does not have; how far the policy has
moved is reported instead (``behaviour_gap``, ``is_truncated_frac`` per step), and ``--min-version`` /
``--max-version`` drop groups of policies one does not want to correct for.

What is measured: ``recorded_set_reward``, the recorded groups' mean set reward as the policy would weight their
completions: per group, self-normalised importance weights pi(y) / b(y) over its G completions (sequence
log-probs), times each completion's set reward (the fixed weights of ``comparable_reward``), averaged over groups.
Under the behaviour policy it is the plain recorded mean; it rises when the policy moves its mass to the recorded
completions that scored well, and stays exactly where it was when nothing is learnt (lr 0).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from proposer.answers.scoring import score_matrices
from proposer.backends.base import TRAINABLE, Completion, has
from proposer.errors import TrainingError
from proposer.training.estimators import ESTIMATORS
from proposer.training.rewards import comparable_reward

from ..config.schema import CampaignConfig
from ..progress import as_reporter, training_fields
from .setup import build_trainer, movement_due
from .step import step_inputs

EVAL_GROUPS = 64  # groups the recorded_set_reward is measured on (a fixed, seeded subset of larger datasets)


def raw_matrices(record: dict[str, Any]) -> list[np.ndarray]:
    """One record's per-completion (m × d) score matrices, padded as the scoring path pads them. Pure."""
    return score_matrices([[a["vector"] for a in c["answers"]] for c in record["completions"]])


def step_parts(record: dict[str, Any]) -> tuple[list[np.ndarray], list[np.ndarray], list[Completion]]:
    """What `step.step_inputs` takes from one record, per completion: its raw matrix, which answers became new
    programs (the novel reward's mask) and the completion with its tokens and recorded behaviour log-probs."""
    comps = record["completions"]
    novel = [np.array([a["outcome"] == "new" for a in c["answers"]], dtype=bool) for c in comps]
    return raw_matrices(record), novel, [
        Completion(text=c.get("text", ""), policy_version=int(record["policy_version"]), token_ids=list(c["token_ids"]),
                   logprobs=[float(x) for x in c["logprobs"]], prompt_token_ids=list(c["prompt_token_ids"]))
        for c in comps]


def set_rewards(record: dict[str, Any]) -> np.ndarray:
    """Each completion's set reward (fixed evaluation weights: the same number whatever the algorithm)."""
    return np.array([comparable_reward([m])["mean_set_reward"] for m in raw_matrices(record)])


def recorded_set_reward(trainer, records: list[dict[str, Any]]) -> float:
    """The records' mean set reward under the trainer's current policy, by self-normalised importance weights per
    group (see the module docstring). One forward per group, no gradients."""
    import torch

    from proposer.backends.logprobs import completion_logprobs

    cfg, values = trainer.cfg, []
    with torch.no_grad():
        for r in records:
            comps = r["completions"]
            lp, mask = completion_logprobs(trainer.model, [c["prompt_token_ids"] for c in comps],
                                           [c["token_ids"] for c in comps], temperature=cfg.temperature,
                                           top_p=cfg.top_p, bf16_autocast=cfg.bf16_autocast_on_gpu,
                                           shared_prompt=cfg.shared_prompt and not cfg.gradient_checkpointing)[:2]
            pi = (lp.double() * mask).sum(dim=1).cpu().numpy()
            b = np.array([sum(c["logprobs"]) for c in comps], dtype=float)
            logw = pi - b
            w = np.exp(logw - logw.max())
            values.append(float((w / w.sum()) @ set_rewards(r)))
    return float(np.mean(values)) if values else 0.0


def train_on_traces(backend, records: list[dict[str, Any]], cfg: CampaignConfig, *, steps: int = 10,
                    out=None, log=print, reporter=None, prober=None, pool=None) -> list[dict[str, Any]]:
    """``steps`` updates, each on ``train.batch`` recorded groups drawn without replacement (seeded by the run
    config's seed), advantages by ``train.algo``'s estimator. ``recorded_set_reward`` is measured before the first
    step (``recorded_set_reward_before`` in step 0's record), every ``train.probe_every`` steps and after the last;
    a ``prober`` (evolve/training/probe.py, needs ``pool``) adds the sandboxed own / held-out probes at the same steps.
    `log` gets one JSON line per step, as `vevo train`."""
    from .study import _save

    algo, t = cfg.train.algo, cfg.train
    if algo not in ESTIMATORS:
        raise TrainingError(f"vevo train --traces: offline training takes an advantage estimator "
                            f"({', '.join(ESTIMATORS)}), not {algo!r}")
    if not has(backend, TRAINABLE):
        raise TrainingError("vevo train --traces needs a trainable backend (tiny or hf:PATH)")
    if not records:
        raise TrainingError("vevo train --traces: no recorded group passed the filters (problem, split, status, "
                            "policy version) with token ids and behaviour log-probs")
    rep = as_reporter(reporter)
    trainer = build_trainer(backend, cfg)
    rng = np.random.default_rng(cfg.seed)
    eval_idx = sorted(rng.choice(len(records), size=min(EVAL_GROUPS, len(records)), replace=False).tolist())
    held = [records[i] for i in eval_idx]
    every = t.probe_every
    history: list[dict[str, Any]] = []
    rep.begin(steps, 0, unit="step")
    for step in range(steps):
        chosen = rng.choice(len(records), size=min(t.batch, len(records)), replace=False)
        raw_mats, novel, parents, comps, gids = [], [], [], [], []
        for gi, i in enumerate(chosen):
            raw, new, cs = step_parts(records[i])
            raw_mats += raw
            novel += new
            parents += [records[i].get("parent_vector")] * len(raw)
            comps += cs
            gids += [gi] * len(raw)
        try:
            prepared = step_inputs(algo, raw_mats, gids, comps, reward=t.reward, novel=novel, parents=parents, rng=rng)
        except ValueError as e:  # recorded data the estimator cannot take: name the groups, no traceback
            raise TrainingError(f"vevo train --traces, step {step}: groups "
                                f"{[records[i]['group_id'] for i in chosen]}: {e}") from None
        samples = prepared.samples
        stats: dict[str, Any] = {"step": step, **prepared.stats, "groups": len(chosen),
                                 "policy_versions": sorted({int(records[i]["policy_version"]) for i in chosen})}
        if step == 0:
            stats["recorded_set_reward_before"] = recorded_set_reward(trainer, held)
            if prober is not None:
                stats.update(prober.run(backend, pool, "_before"))
        rep.phase(f"step {step + 1}: updating the policy on {len(samples)} recorded completions", log=False)
        trainer.cfg.movement = movement_due(cfg, step)
        stats.update(trainer.step(samples))
        backend.set_policy_version(step + 1)
        if (every and (step + 1) % every == 0) or step == steps - 1:
            stats["recorded_set_reward"] = recorded_set_reward(trainer, held)
            if prober is not None:
                stats.update(prober.run(backend, pool))
        history.append(stats)
        log(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in stats.items()}))
        rep.update(step + 1, **training_fields(stats))
    rep.end()
    _save(backend, backend.model, t.lora, out, history)
    return history
