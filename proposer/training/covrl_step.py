"""CoVRL data and update: hybrid sampling of reasoning trajectories from a trainable backend, then one optimizer
step of the CoVRL loss (``proposer/training/covrl.py``) on the trainer's model and AdamW (``PolicyTrainer``: the same
fp32 learner, micro-batches, persistence and policy versions as VPO/GRPO).

Per trajectory, three forwards of the learner at the start of the step give the "old" log-probs: z under the
prior template, z under the posterior template (the two forward passes of hybrid sampling) and the reference y
under the likelihood template; the training forwards recompute the same three with gradients (the likelihood
one only for micro-batches with a selected NLL sample). Trajectories are sampled by the learner itself at the
start of the step, so the behaviour is p_hybrid_old exactly and no sampler importance weight is needed.

Log-probs of z use the sampling temperature / top-p (the distribution z was drawn from); the reference's
likelihood is scored at T = 1, top-p = 1 (the model's own probability of y, not a sampler's).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from proposer.backends.base import SamplingParams, optional
from proposer.training.covrl import (CoVRLConfig, CoVRLError, covrl_loss, group_advantages, likelihood_suffix,
                                     likelihood_target, posterior_prompt, prior_prompt, reasoning_end)
from proposer.backends.logprobs import completion_logprobs
from proposer.training.trainer import PolicyTrainer, train_mode


@dataclass
class Trajectory:
    """One sampled reasoning z for prompt x with reference y (token ids), and how it was drawn."""

    group: int
    prior_ids: list[int]  # prior template prompt
    post_ids: list[int]  # posterior template prompt
    z_ids: list[int]
    lik_ids: list[int]  # prior prompt + z + what closes the reasoning
    y_ids: list[int]  # the reference as answer 1
    from_prior: bool
    end: str  # closed | answer | eos | truncated

    @property
    def truncated(self) -> bool:
        return self.end == "truncated"

    @property
    def well_formed(self) -> bool:
        return self.end in ("closed", "answer")


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _cut(tokenizer, ids: list[int], eos_ids: set[int], budget: int) -> tuple[int, str]:
    eos_at = next((k for k, t in enumerate(ids) if t in eos_ids), None)
    body = ids if eos_at is None else ids[:eos_at]
    full = tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if "</reasoning>" in full or "<answer_1>" in full:  # find the token that completes the marker
        texts = [tokenizer.decode(body[: k + 1], skip_special_tokens=False, clean_up_tokenization_spaces=False)
                 for k in range(len(body))]
    else:
        texts = [""] * len(body)  # no marker: only the EOS / budget matter
    return reasoning_end(texts, eos_at, budget)


def sample_trajectories(backend, items: Sequence[tuple[str, str, int]], group: int, cfg: CoVRLConfig,
                        rng: np.random.Generator, *, seed: int, temperature: float = 1.0,
                        top_p: float = 1.0) -> list[Trajectory]:
    """Hybrid sampling: for each (prompt, reference, group id), ``group`` trajectories, each from the prior
    template with probability alpha, else from the posterior. ``backend``: a trainable one (tiny / hf)."""
    tok = backend.tokenizer
    eos = set(optional(backend, "eos_ids") or ())
    max_ctx = int(optional(backend, "max_context") or 0)
    out: list[Trajectory] = []
    for k, (prompt, ref, gid) in enumerate(items):
        draws = rng.random(group) < cfg.alpha
        pri, post = prior_prompt(prompt), posterior_prompt(prompt, ref)
        y_ids = _encode(tok, likelihood_target(ref))
        sp = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=cfg.reason_tokens,
                            seed=(seed * 1_000_003 + 2 * k) % (2**31))
        n_pri = int(draws.sum())
        made = {True: backend.generate([pri], n_pri, sp)[0] if n_pri else [],
                False: backend.generate([post], group - n_pri,
                                        SamplingParams(temperature, top_p, cfg.reason_tokens,
                                                       (sp.seed + 1) % (2**31)))[0] if group - n_pri else []}
        pri_ids = post_ids = None
        taken = {True: 0, False: 0}
        for d in draws.tolist():
            c = made[d][taken[d]]
            taken[d] += 1
            if d:
                pri_ids = list(c.prompt_token_ids)
            else:
                post_ids = list(c.prompt_token_ids)
            n_z, end = _cut(tok, list(c.token_ids), eos, cfg.reason_tokens)
            out.append(Trajectory(gid, [], [], list(c.token_ids[:n_z]), [], y_ids, bool(d), end))
        # both templates' prompt ids for every trajectory of the item (one of them may not have been sampled)
        if pri_ids is None:
            pri_ids = backend.encode_prompt(pri, cfg.reason_tokens)[0]
        if post_ids is None:
            post_ids = backend.encode_prompt(post, cfg.reason_tokens)[0]
        for t in out[len(out) - group:]:
            t.prior_ids, t.post_ids = pri_ids, post_ids
            lik = pri_ids + t.z_ids + _encode(tok, likelihood_suffix(t.end))
            if max_ctx and len(lik) + len(y_ids) > max_ctx:  # the prompt loses its start, as everywhere
                lik = lik[len(lik) + len(y_ids) - max_ctx:]
            t.lik_ids = lik
    return out


class CoVRLUpdater:
    """One CoVRL step on a PolicyTrainer's model and optimizer (its cfg gives lr, minibatch, micro-batch,
    epochs, grad clip, temperature, top-p; its KL-to-reference term is not used: the Bregman KL regularises)."""

    def __init__(self, trainer: PolicyTrainer, cfg: CoVRLConfig | None = None):
        self.trainer = trainer
        self.cfg = cfg or CoVRLConfig()

    def _lp(self, prompts, completions, scored: bool = False):
        tc = self.trainer.cfg
        return completion_logprobs(self.trainer.model, prompts, completions,
                                   temperature=1.0 if scored else tc.temperature, top_p=1.0 if scored else tc.top_p,
                                   bf16_autocast=tc.bf16_autocast_on_gpu)

    def _split(self, trajs: list[Trajectory]) -> list[list[list[int]]]:
        tc = self.trainer.cfg
        idx = list(range(len(trajs)))
        mbs = [idx[i: i + tc.minibatch] for i in range(0, len(idx), tc.minibatch)]
        k = tc.micro_batch or tc.minibatch
        return [[mb[i: i + k] for i in range(0, len(mb), k)] for mb in mbs]

    def step(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        cfg, tr = self.cfg, self.trainer
        kept = [t for t in trajs if t.z_ids and t.y_ids]  # an immediate EOS leaves nothing to learn from
        stats: dict[str, float] = {"n_trajectories": float(len(kept)), "n_empty_z": float(len(trajs) - len(kept))}
        trajs = kept
        if not trajs:
            return stats
        model = tr.model
        device = next(model.parameters()).device
        was_training = train_mode(model)  # dropout is off (PolicyTrainer); train mode keeps gradient checkpointing on
        try:
            plan = self._split(trajs)
            old: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
            rewards = np.zeros(len(trajs))
            with torch.no_grad():
                for mb in plan:
                    for chunk in mb:
                        ts = [trajs[i] for i in chunk]
                        lp_pri, _ = self._lp([t.prior_ids for t in ts], [t.z_ids for t in ts])
                        lp_post, _ = self._lp([t.post_ids for t in ts], [t.z_ids for t in ts])
                        lp_y, m_y = self._lp([t.lik_ids for t in ts], [t.y_ids for t in ts], scored=True)
                        for j, i in enumerate(chunk):
                            old[i] = (lp_pri[j], lp_post[j], lp_y[j])
                            rewards[i] = float(lp_y[j].sum() / m_y[j].sum())
            adv = group_advantages(rewards, [t.group for t in trajs], cfg.std_norm)
            select = [t.from_prior and t.well_formed and a > 0 for t, a in zip(trajs, adv)]
            n_z = [float(sum(len(trajs[i].z_ids) for c in mb for i in c)) for mb in plan]
            n_kl = [float(sum(len(trajs[i].z_ids) for c in mb for i in c if not trajs[i].truncated)) for mb in plan]
            n_y = [float(sum(len(trajs[i].y_ids) for c in mb for i in c if select[i])) for mb in plan]

            def chunk_loss(k: int, j: int, chunk: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
                ts = [trajs[i] for i in chunk]
                new_pri, z_mask = self._lp([t.prior_ids for t in ts], [t.z_ids for t in ts])
                new_post, _ = self._lp([t.post_ids for t in ts], [t.z_ids for t in ts])
                width = new_pri.shape[1]
                old_pri = torch.stack([_pad(old[i][0], width) for i in chunk]).to(device)
                old_post = torch.stack([_pad(old[i][1], width) for i in chunk]).to(device)
                sel = torch.tensor([select[i] for i in chunk], device=device)
                if bool(sel.any()):
                    new_lik, y_mask = self._lp([t.lik_ids for t in ts], [t.y_ids for t in ts], scored=True)
                else:
                    new_lik = y_mask = torch.zeros((len(ts), 1), device=device)
                loss, s = covrl_loss(
                    new_pri, new_post, old_pri, old_post, z_mask,
                    torch.tensor([t.from_prior for t in ts], device=device),
                    torch.tensor([t.truncated for t in ts], device=device),
                    torch.tensor([adv[i] for i in chunk], device=device, dtype=new_pri.dtype),
                    new_lik, y_mask, sel, n_z[k], n_y[k], n_kl[k], cfg)
                return loss, {"loss": float(loss.detach()) * n_z[k], **s}

            sums, norms = tr.optimize(plan, chunk_loss)  # the trainer's own optimizer loop (proposer/training/trainer.py)
            tok_z, tok_kl, tok_y = (tr.cfg.epochs * sum(n) for n in (n_z, n_kl, n_y))
            sums = {k: sums.get(k, 0.0) for k in ("loss", "pg_loss", "kl", "nll", "clip_frac", "mean_ratio")}
        finally:
            if not was_training:
                model.train(False)
        fp = np.array([t.from_prior for t in trajs])
        stats.update({
            "loss": sums["loss"] / tok_z, "pg_loss": sums["pg_loss"] / tok_z, "clip_frac": sums["clip_frac"] / tok_z,
            "mean_ratio": sums["mean_ratio"] / tok_z, "kl": sums["kl"] / tok_kl if tok_kl else 0.0,
            "nll": sums["nll"] / tok_y if tok_y else 0.0, "grad_norm": float(np.mean(norms)),
            "n_updates": float(len(norms)), "reward": float(rewards.mean()),
            "reward_prior": float(rewards[fp].mean()) if fp.any() else math.nan,
            "reward_posterior": float(rewards[~fp].mean()) if (~fp).any() else math.nan,
            "adv_abs": float(np.abs(adv).mean()), "n_prior": float(fp.sum()), "n_posterior": float((~fp).sum()),
            "n_truncated": float(sum(t.truncated for t in trajs)),
            "n_well_formed": float(sum(t.well_formed for t in trajs)), "n_nll": float(sum(select)),
            "z_tokens": float(sum(len(t.z_ids) for t in trajs))})
        return {k: v for k, v in stats.items() if not (isinstance(v, float) and math.isnan(v))}


def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
    return x[:width] if x.shape[0] >= width else torch.cat([x, x.new_zeros(width - x.shape[0])])


@torch.no_grad()
def reference_loglik(backend, items: Sequence[tuple[str, str]], *, z_tokens: int = 0, samples: int = 1,
                     seed: int = 0, temperature: float = 1.0) -> float:
    """Mean per-token log p(y | x, z) of references y under the prior template (the one used at inference).
    z_tokens = 0: an empty reasoning (prompt, ``<reasoning></reasoning>``, then y); otherwise z is sampled from
    the prior (``samples`` per item, seeded) with that budget. (prompt, reference) pairs."""
    cfg = CoVRLConfig(alpha=1.0, reason_tokens=max(z_tokens, 1))
    model = backend.model
    vals = []
    if z_tokens <= 0:
        tok = backend.tokenizer
        for prompt, ref in items:
            pri = backend.encode_prompt(prior_prompt(prompt), 1)[0]
            lik = pri + _encode(tok, likelihood_suffix("eos"))
            y = _encode(tok, likelihood_target(ref))
            lp = completion_logprobs(model, [lik], [y])[0]
            vals.append(float(lp.sum() / len(y)))
        return float(np.mean(vals))
    trajs = sample_trajectories(backend, [(p, r, i) for i, (p, r) in enumerate(items)], samples, cfg,
                                np.random.default_rng(seed), seed=seed, temperature=temperature)
    for t in trajs:
        lp = completion_logprobs(model, [t.lik_ids], [t.y_ids])[0]
        vals.append(float(lp.sum() / len(t.y_ids)))
    return float(np.mean(vals))


def check_trainable(backend) -> None:
    for attr in ("model", "tokenizer", "encode_prompt", "generate"):
        if not hasattr(backend, attr):
            raise CoVRLError(f"CoVRL needs a local trainable backend (tiny or hf:PATH): "
                             f"{getattr(backend, 'name', type(backend).__name__)} has no {attr}")
