"""Studies outside evolution: RL on problems (`vevo train`) and proposer evaluation (`vevo eval`).

`train` samples G completions of m answers for a prompt built from each problem's seed program, scores
every answer in the sandbox, turns the score matrices into advantages (VPO or a baseline) and takes one
PolicyTrainer step per batch of problems (``--algo covrl``: ``train_covrl``, verifier-free, from the problems'
reference solutions). `eval` gives every proposer the same candidate budget k per
problem (an m-answer completion spends m candidates) and reports best@k, pass@k and reward diversity.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from problems.model import Problem
from proposer.backends.base import TRAINABLE, SamplingParams, has, optional
from proposer.errors import TrainingError
from proposer.answers import naming
from proposer.backends import PRETRAIN_RECORD
from proposer.files import honour_umask
from proposer.training.rewards import reward_diversity
from proposer.answers.scoring import score_completions, seed_prompt
from proposer.training.algorithms import step_algorithm
from proposer.training.trainer import PolicyTrainer

from ..config.schema import CampaignConfig
from ..progress import as_reporter, training_fields
from .setup import build_trainer, movement_due
from .step import step_inputs

__all__ = ["train", "train_covrl", "evaluate_proposer", "pass_at_k"]


def _style(backend) -> str:
    """The chat prompt style for a backend that uses a chat template, as in campaigns."""
    return "chat" if optional(backend, "chat") is True else "compact"


def train(backend, problems: list[Problem], pool, cfg: CampaignConfig | None = None, *, steps: int = 10,
          out: str | Path | None = None, log=print, reporter=None) -> list[dict[str, Any]]:
    """RL on the problems' seed prompts, set up from a run config as a campaign sets it up
    (evolve/training/setup.py): ``train.algo``, ``train.batch`` problems per step, ``train.group`` (else
    ``search.group``) completions of ``search.answers`` answers each, every other ``train`` key, the sampling section and the seed (None: the defaults
    with VPO). `log` gets one JSON line per step (the stable interface: at least ``step`` and
    ``mean_set_reward``); `reporter` (evolve/progress.py) tells a person what happens meanwhile. Every
    ``train.probe_every`` steps (and before the first) the fixed probe sets' rewards (evolve/training/probe.py: some of
    these problems, and held-out ones) go into that step's record."""
    cfg = cfg if cfg is not None else CampaignConfig(train={"algo": "vpo"})
    rep = as_reporter(reporter)
    t, algo, m, batch, seed = cfg.train, cfg.train.algo, cfg.search.answers, cfg.train.batch, cfg.seed
    group = cfg.trained_group
    temperature, max_tokens = cfg.sampling.temperature, cfg.sampling.max_tokens
    if algo == "none":
        raise TrainingError("vevo train needs a training algorithm (train.algo is 'none')")
    if not has(backend, TRAINABLE):
        raise TrainingError(f"--algo {algo} needs a trainable backend (tiny or hf:PATH)")
    spec = step_algorithm(algo)
    if spec is not None and not spec.standalone:
        raise TrainingError(f"vevo train --algo {algo}: runs only inside a campaign (vevo run --train {algo})")
    trainer = build_trainer(backend, cfg)
    model = backend.model
    if spec is not None:  # a step algorithm with no estimator step (CoVRL)
        from evolve.training.covrl import covrl_config

        history = train_covrl(backend, trainer, problems, pool, steps=steps, m=m, group=group, batch=batch,
                              seed=seed, temperature=temperature, covrl=covrl_config(cfg), log=log, reporter=rep)
        _save(backend, model, t.lora, out, history)
        return history
    probe_every = t.probe_every
    rep.phase(f"evaluating {len(problems)} seed programs")
    seeds = pool.evaluate_many([(p, p.seed_code) for p in problems])
    rng = np.random.default_rng(seed)
    seen = Seen(problems, seeds) if t.reward == "novel" else None
    prober = None
    if probe_every:
        from .probe import Prober

        prober = Prober(problems, seed=seed, k=t.probe_problems, group=t.probe_group, m=m, temperature=temperature,
                        max_tokens=max_tokens, style=_style(backend))
    history = []
    rep.begin(steps, 0, unit="step")
    for step in range(steps):
        chosen = rng.choice(len(problems), size=min(batch, len(problems)), replace=False)
        prompts = [seed_prompt(problems[i], seeds[i], m, _style(backend), naming.entry_name(backend)) for i in chosen]
        rep.phase(f"step {step + 1}: generating {len(prompts) * group} completions", log=False)
        groups = backend.generate(prompts, group, SamplingParams(temperature=temperature, top_p=cfg.sampling.top_p,
                                                                 max_tokens=max_tokens, seed=seed * 100_003 + step))
        rep.phase(f"step {step + 1}: scoring answers in the sandbox", log=False)
        mats, gids, comps, novel = [], [], [], []
        for gi, (i, comps_i) in enumerate(zip(chosen, groups)):
            d = max(1, len(seeds[i].vector))
            sc = score_completions(problems[i], [c.text for c in comps_i], m, pool, d=d,
                                   alias=naming.entry_name(backend), **(seen.of(i) if seen else {}))
            mats += sc.matrices
            gids += [gi] * len(sc.matrices)
            comps += comps_i
            if seen:
                novel += seen.add(i, sc, m)
        # the prompt's parent is the problem's seed program (improvement); novel: a program no step made before
        parents = [np.asarray(seeds[chosen[g]].vector, dtype=float) for g in gids] if t.reward == "improvement" else None
        prepared = step_inputs(algo, mats, gids, comps, reward=t.reward, novel=novel if seen else None,
                               parents=parents, rng=rng)
        samples = prepared.samples
        stats: dict[str, Any] = {"step": step, **prepared.stats}
        if prober is not None and step == 0:
            stats.update(prober.run(backend, pool, "_before"))
        if samples:
            rep.phase(f"step {step + 1}: updating the policy on {len(samples)} completions", log=False)
            trainer.cfg.movement = movement_due(cfg, step)
            stats.update(trainer.step(samples))
        backend.set_policy_version(step + 1)
        if prober is not None and (step + 1) % probe_every == 0:
            stats.update(prober.run(backend, pool))
        history.append(stats)
        log(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in stats.items()}))
        rep.update(step + 1, **training_fields(stats))
    rep.end()
    if out is not None:
        rep.phase(f"saving the model to {out}")
    _save(backend, model, t.lora, out, history)
    return history


class Seen:
    """`vevo train --train-reward novel`: the programs each problem's earlier steps (and its seed) made, so an
    answer counts as novel when it makes a program no earlier step made, as a campaign counts the answers that
    became new programs of its archive. Known programs are not run again: their vectors are reused."""

    def __init__(self, problems: list[Problem], seeds: list) -> None:
        from proposer.answers.mutate import normalized_hash

        self.known = [{normalized_hash(p.seed_code): -1 - i} for i, p in enumerate(problems)]
        self.evals: dict[int, Any] = {-1 - i: ev for i, ev in enumerate(seeds)}

    def of(self, i: int) -> dict[str, Any]:
        """score_completions' arguments for problem i."""
        return {"known": self.known[i], "known_evaluation": self.evals.__getitem__}

    def add(self, i: int, scores, m: int) -> list[np.ndarray]:
        """Record the call's fresh programs; per completion, which of its m answers made one."""
        masks = [np.zeros(m, dtype=bool) for _ in scores.triage.slots]
        for cand, ev in zip(scores.triage.fresh, scores.evaluations):
            masks[cand.completion][cand.answer] = True
            pid = len(self.evals)
            self.known[i][cand.ast_hash] = pid
            self.evals[pid] = ev
        return masks


def trend(values: list[float], name: str = "mean set reward") -> str:
    """Whether a per-step number moved, said with its noise: the least-squares slope per step with its 95% t
    interval (the verdict: rose / fell only when the interval excludes 0), beside the first and last quarter's
    means and standard deviations. One step's number comes from a few problems and is noisy; first -> last alone
    reads that noise as a trend."""
    from ..stats import t95

    y = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = y.size
    if n < 4:
        return f"{name}: {', '.join(f'{v:.3f}' for v in y)} ({n} steps: too few to tell a trend from noise)"
    w = max(2, n // 4)
    x = np.arange(n, dtype=float)
    slope, icpt = np.polyfit(x, y, 1)
    resid = y - (slope * x + icpt)
    half = t95(n - 2) * float(np.sqrt(resid @ resid / (n - 2) / ((x - x.mean()) @ (x - x.mean()))))
    lo, hi = slope - half, slope + half
    verdict = "within the step-to-step noise" if lo <= 0 <= hi else "rose" if lo > 0 else "fell"
    return (f"{name} over {n} steps: first {w} steps {y[:w].mean():.3f} (sd {y[:w].std(ddof=1):.3f}), last {w} "
            f"{y[-w:].mean():.3f} (sd {y[-w:].std(ddof=1):.3f}); trend {slope:+.4f}/step, 95% CI [{lo:+.4f}, "
            f"{hi:+.4f}]: {verdict}")


def _save(backend, model, lora: bool, out: str | Path | None, history: list[dict[str, Any]]) -> None:
    if out is None:
        return
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    merged = model.merge_and_unload() if lora else model
    merged.save_pretrained(str(out))
    backend.tokenizer.save_pretrained(str(out))
    (out / "train_log.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    base = optional(backend, "path")  # the base's pretraining record: tells loaders which names it knows
    if base is not None and (Path(base) / PRETRAIN_RECORD).is_file():
        shutil.copyfile(Path(base) / PRETRAIN_RECORD, out / PRETRAIN_RECORD)
    honour_umask(out)
    if lora:
        backend.model = merged


def train_covrl(backend, trainer: PolicyTrainer, problems: list[Problem], pool, *, steps: int, m: int, group: int,
                batch: int, seed: int, temperature: float = 1.0, covrl=None, log=print,
                reporter=None) -> list[dict[str, Any]]:
    """CoVRL on problems with reference solutions (``reference_code``: built-in PBE, MBPP/HumanEval imports):
    each step, ``batch`` problems' seed prompts, ``group`` hybrid trajectories each, one CoVRLUpdater step.
    Problems without a reference are skipped, and their count is logged; none at all is a one-line error.
    The reference is scored as the answer that rewrites the seed's editable region. ``comparable`` rewards
    are not computed here (CoVRL never runs the sandbox; evaluate with ``vevo eval``)."""
    from proposer.training.covrl import CoVRLConfig, CoVRLError
    from proposer.training.covrl_step import CoVRLUpdater, check_trainable, sample_trajectories
    from proposer.training.references import answer_text

    check_trainable(backend)
    with_ref = [p for p in problems if p.reference_code]
    missing = len(problems) - len(with_ref)
    if not with_ref:
        raise CoVRLError(f"--algo covrl needs problems with reference solutions; none of the {len(problems)} "
                         "selected has one")
    if missing:
        log(json.dumps({"covrl_references_missing": missing, "problems": len(problems)}))
    rep = as_reporter(reporter)
    rep.phase(f"evaluating {len(with_ref)} seed programs")
    seeds = pool.evaluate_many([(p, p.seed_code) for p in with_ref])
    updater = CoVRLUpdater(trainer, covrl or CoVRLConfig())
    rng = np.random.default_rng(seed)
    history = []
    rep.begin(steps, 0, unit="step")
    for step in range(steps):
        rep.phase(f"step {step + 1}: sampling and updating", log=False)
        chosen = rng.choice(len(with_ref), size=min(batch, len(with_ref)), replace=False)
        items = [(seed_prompt(with_ref[i], seeds[i], m, _style(backend)), answer_text(with_ref[i].reference_code), k)
                 for k, i in enumerate(chosen)]
        trajs = sample_trajectories(backend, items, group, updater.cfg, rng, seed=seed * 100_003 + step,
                                    temperature=temperature)
        stats: dict[str, Any] = {"step": step, "algo": "covrl", "references_missing": missing}
        stats.update(updater.step(trajs))
        backend.set_policy_version(step + 1)
        history.append(stats)
        log(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in stats.items()}))
        rep.update(step + 1, **training_fields(stats))
    rep.end()
    return history


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate_proposer(backend, problems: list[Problem], pool, *, k: int = 30, m: int = 4, n: int | None = None,
                      max_tokens: int = 384, temperature: float = 1.0, seed: int = 0, reporter=None
                      ) -> dict[str, Any]:
    """Budget n ≥ k candidates per problem (n defaults to 2k): ceil(n / m) completions of m answers.
    Missing or unparseable answers still spend their budget slot (they score 0)."""
    rep = as_reporter(reporter)
    n = n or 2 * k
    rep.phase(f"evaluating {len(problems)} seed programs")
    seeds = pool.evaluate_many([(p, p.seed_code) for p in problems])
    per: list[dict[str, Any]] = []
    prompts = [seed_prompt(p, s, m, _style(backend), naming.entry_name(backend)) for p, s in zip(problems, seeds)]
    n_comp = math.ceil(n / m)
    rep.phase(f"generating {n_comp} completions for each of {len(problems)} problems")
    groups = backend.generate(prompts, n_comp, SamplingParams(temperature=temperature, max_tokens=max_tokens,
                                                              seed=seed))
    parsed = total = 0
    rep.begin(len(problems), 0, unit="problem")
    rep.phase("scoring answers in the sandbox")
    for p, s, comps in zip(problems, seeds, groups):
        d = max(1, len(s.vector))
        texts = [c.text for c in comps]
        sc = score_completions(p, texts, m, pool, d=d, alias=naming.entry_name(backend))
        kinds = [k for row in sc.triage.kinds or [] for k in row]
        total += len(kinds)
        parsed += sum(k in ("code", "diff") for k in kinds)
        rows = np.concatenate(sc.matrices)[:n] if sc.matrices else np.zeros((0, d))
        slots = [ev for row in sc.slot_evaluations() for ev in row][:n]  # the budget: every answer slot
        c = sum(ev is not None and ev.solved for ev in slots)
        scal = [ev.scalar if ev is not None else 0.0 for ev in slots]
        full = scal + [0.0] * (n - len(scal))
        per.append({"problem": p.id, "n": n, "solved": c, f"pass@{k}": pass_at_k(n, c, k),
                    "pass@1": pass_at_k(n, c, 1), f"best@{k}": _best_at_k(full, k),
                    "diversity": reward_diversity([rows]),
                    "pass_curve": [pass_at_k(n, c, j) for j in range(1, k + 1)],
                    "best_curve": [_best_at_k(full, j) for j in range(1, k + 1)]})
        rep.update(len(per), solved=f"{sum(r['solved'] > 0 for r in per)}/{len(per)}")
    rep.end()
    return {"problems": per, f"pass@{k}": float(np.mean([r[f"pass@{k}"] for r in per])),
            "pass@1": float(np.mean([r["pass@1"] for r in per])),
            f"best@{k}": float(np.mean([r[f"best@{k}"] for r in per])),
            "diversity": float(np.mean([r["diversity"] for r in per])), "parse_rate": parsed / max(total, 1),
            # the same samples read at every budget j = 1..k (unbiased estimators, not resampled)
            "pass_curve": np.mean([r["pass_curve"] for r in per], axis=0).tolist() if per else [],
            "best_curve": np.mean([r["best_curve"] for r in per], axis=0).tolist() if per else [],
            "k": k, "n": n, "m": m}


def _best_at_k(scores: list[float], k: int) -> float:
    """Expected max of k draws without replacement from the n scores (rank-weighted, unbiased)."""
    x = np.sort(np.asarray(scores, dtype=float))
    n = x.size
    if n == 0 or k <= 0:
        return 0.0
    k = min(k, n)
    w = np.array([math.comb(i, k - 1) for i in range(n)], dtype=float) / math.comb(n, k)
    return float((w * x).sum())
