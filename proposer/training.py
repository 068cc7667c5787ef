"""Policy update for Hugging Face causal LMs (full fine-tuning or PEFT LoRA): PPO-clip + k3 KL, token-mean, AdamW.

One readable file, CleanRL style; every hyperparameter is a field of ``TrainConfig``. For a minibatch of stored
completions (token ids + the behaviour log-probs recorded at sampling time) and one scalar advantage A per
completion (from ``proposer.estimators``), the loss is::

    r_t    = exp(log pi_theta(y_t) - log pi_behaviour(y_t))                     per completion token t
    pg_t   = max(-A r_t, -A clip(r_t, 1 - clip_eps, 1 + clip_eps))             PPO-clip (Schulman et al. 2017)
    d_t    = log pi_ref(y_t) - log pi_theta(y_t)
    kl_t   = exp(d_t) - d_t - 1                                                 k3 estimator (Schulman 2020,
                                                                                 http://joschu.net/blog/kl-approx.html)
    loss   = sum_t (pg_t + kl_beta * kl_t) / (number of completion tokens in the minibatch)   token-mean

then AdamW, gradient clipping to ``max_grad_norm``. Same as veRL's ``compute_policy_loss_vanilla`` with
``loss_agg_mode="token-mean"`` and ``kl_loss_type="low_var_kl"`` (as used by the VPO reference,
github.com/ryanboldi/vpo), minus veRL's dual-clip lower bound (clip_ratio_c) and its clamp of kl_t to +-10; like
veRL, the log-ratios are clamped to +-20 before exp for numerical safety.

Reference policy: for a ``peft.PeftModel`` the base model with the adapter disabled (``model.disable_adapter()``),
so no second copy lives in memory; for full fine-tuning an explicit frozen copy (``PolicyTrainer.frozen_copy``),
or None to skip the KL term (also skipped when kl_beta == 0).
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from proposer.base import Completion

LOG_RATIO_CLAMP = 20.0  # as veRL: exp of at most e^20


@dataclass
class TrainConfig:
    lr: float = 1e-5  # AdamW learning rate
    clip_eps: float = 0.2  # PPO clip range: ratio kept in [1 - clip_eps, 1 + clip_eps]
    kl_beta: float = 1e-3  # weight of the k3 KL to the reference policy (0 disables the reference forward)
    max_grad_norm: float = 1.0  # global grad-norm clip (<= 0: no clipping, the norm is still reported)
    epochs: int = 1  # passes over the samples per step()
    minibatch: int = 8  # completions per optimizer update
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    bf16_autocast_on_gpu: bool = True  # forward in bf16 autocast on CUDA; log-softmax always in fp32


@dataclass
class TrainSample:
    """One completion to learn from. behaviour_logprobs: per completion token, from the sampling policy
    (None: treat as on-policy, i.e. use the current policy's detached log-probs at the start of step())."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float] | None
    advantage: float

    @classmethod
    def from_completion(cls, completion: Completion, advantage: float) -> TrainSample:
        if completion.token_ids is None or completion.prompt_token_ids is None:
            raise ValueError("completion has no token_ids / prompt_token_ids: the backend cannot train on it")
        return cls(list(completion.prompt_token_ids), list(completion.token_ids),
                   None if completion.logprobs is None else list(completion.logprobs), float(advantage))


def _is_peft(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # peft not installed: cannot be a PEFT model
        return False
    return isinstance(model, PeftModel)


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _autocast(device: torch.device, enabled: bool):
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def completion_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    bf16_autocast: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of each completion given its prompt, in one right-padded forward pass.

    Row b of the batch is prompt_b + completion_b + padding, attention_mask 1 on the real tokens. Completion
    token j of row b sits at position p_b + j (p_b = len(prompt_b)) and is predicted by the logits at position
    p_b + j - 1, so only those B x T_c rows of the logits go through log_softmax (in fp32).
    Returns (logp, mask), both (B, T_c) with T_c = longest completion; mask is 1.0 on real completion tokens.
    Gradients flow unless the caller wraps this in torch.no_grad().
    """
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    device = _device(model)
    lp = [len(p) for p in prompts]
    lc = [len(c) for c in completions]
    if any(n == 0 for n in lp):
        raise ValueError("every prompt needs at least one token (the first completion token is predicted from it)")
    b, length, t_c = len(prompts), max(p + c for p, c in zip(lp, lc)), max(lc)
    input_ids = torch.zeros((b, length), dtype=torch.long)
    attn = torch.zeros((b, length), dtype=torch.long)
    targets = torch.zeros((b, t_c), dtype=torch.long)
    mask = torch.zeros((b, t_c))
    for i, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[i, : lp[i] + lc[i]] = torch.tensor(list(p) + list(c), dtype=torch.long)
        attn[i, : lp[i] + lc[i]] = 1
        targets[i, : lc[i]] = torch.tensor(list(c), dtype=torch.long)
        mask[i, : lc[i]] = 1.0
    input_ids, attn, targets, mask = (x.to(device) for x in (input_ids, attn, targets, mask))
    with _autocast(device, bf16_autocast):
        logits = model(input_ids=input_ids, attention_mask=attn, use_cache=False).logits  # (B, L, V)
    pos = torch.tensor(lp, device=device)[:, None] - 1 + torch.arange(t_c, device=device)[None, :]
    pos = pos.clamp(max=length - 1)  # padded slots point at a real position; masked out anyway
    sel = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1]))  # (B, T_c, V)
    logp = F.log_softmax(sel.float(), dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    return logp * mask, mask


@torch.no_grad()
def batch_sequence_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    bf16_autocast: bool = False,
) -> list[list[float]]:
    """Per-token log-probs of several completions (eval mode: dropout off, as in PolicyTrainer.step)."""
    was_training = model.training
    model.eval()
    try:
        logp, _ = completion_logprobs(model, prompts, completions, bf16_autocast=bf16_autocast)
    finally:
        model.train(was_training)
    return [logp[i, : len(c)].tolist() for i, c in enumerate(completions)]


def sequence_logprobs(model: torch.nn.Module, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
    """Per-token log-probs log pi(y_t | prompt, y_<t) of one completion under ``model``."""
    if len(completion_ids) == 0:
        return []
    return batch_sequence_logprobs(model, [prompt_ids], [completion_ids])[0]


class PolicyTrainer:
    """PPO-clip policy update with a k3 KL penalty; see the module docstring for the loss.

    ``step(samples)`` runs ``cfg.epochs`` passes over the samples in order (callers shuffle), one AdamW update per
    ``cfg.minibatch`` completions, and returns token-weighted mean statistics. The model is put in eval mode
    (dropout off) during the update so an on-policy ratio is exactly 1, then restored.
    """

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig | None = None, ref_model: torch.nn.Module | None = None):
        self.model = model
        self.cfg = cfg or TrainConfig()
        self.is_peft = _is_peft(model)
        self.ref_model = ref_model
        if ref_model is not None:
            ref_model.eval()
            ref_model.requires_grad_(False)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.opt = torch.optim.AdamW(self.params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        self.version = 0  # optimizer steps taken (callers publish it as the policy version)

    @staticmethod
    def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
        """A frozen deep copy to serve as the KL reference for full fine-tuning."""
        ref = copy.deepcopy(model)
        ref.eval()
        ref.requires_grad_(False)
        return ref

    @property
    def uses_kl(self) -> bool:
        return self.cfg.kl_beta > 0 and (self.ref_model is not None or self.is_peft)

    def _logprobs(self, samples: Sequence[TrainSample], model: torch.nn.Module | None = None):
        return completion_logprobs(self.model if model is None else model, [s.prompt_ids for s in samples],
                                   [s.completion_ids for s in samples], bf16_autocast=self.cfg.bf16_autocast_on_gpu)

    @torch.no_grad()
    def _ref_logprobs(self, samples: Sequence[TrainSample]) -> torch.Tensor:
        if self.ref_model is not None:
            return self._logprobs(samples, self.ref_model)[0]
        with self.model.disable_adapter():  # PEFT: the base model is the reference
            return self._logprobs(samples)[0]

    def step(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        cfg = self.cfg
        for i, s in enumerate(samples):
            if s.behaviour_logprobs is not None and len(s.behaviour_logprobs) != len(s.completion_ids):
                raise ValueError(f"sample {i}: {len(s.behaviour_logprobs)} behaviour log-probs for "
                                 f"{len(s.completion_ids)} completion tokens")
            if not math.isfinite(s.advantage):
                raise ValueError(f"sample {i}: advantage is {s.advantage}")
        samples = [s for s in samples if len(s.completion_ids) > 0]  # nothing to learn from an empty completion
        n_tokens = sum(len(s.completion_ids) for s in samples)
        stats = dict(loss=0.0, pg_loss=0.0, kl=0.0, clip_frac=0.0, mean_ratio=0.0, grad_norm=0.0,
                     n_tokens=float(n_tokens), n_samples=float(len(samples)), n_updates=0.0)
        if not samples:
            return stats
        device = _device(self.model)
        was_training = self.model.training
        self.model.eval()
        try:
            minibatches = [samples[i: i + cfg.minibatch] for i in range(0, len(samples), cfg.minibatch)]
            # Behaviour log-probs, padded like the model output; missing ones = current policy, frozen now.
            old = []
            for mb in minibatches:
                t_c = max(len(s.completion_ids) for s in mb)
                o = torch.zeros((len(mb), t_c), device=device)
                if any(s.behaviour_logprobs is None for s in mb):
                    with torch.no_grad():
                        o = self._logprobs(mb)[0].detach()
                for i, s in enumerate(mb):
                    if s.behaviour_logprobs is not None:
                        o[i, : len(s.completion_ids)] = torch.tensor(s.behaviour_logprobs, device=device)
                old.append(o)
            # Reference log-probs: fixed during the step, so computed once per minibatch, not once per epoch.
            refs = [self._ref_logprobs(mb) if self.uses_kl else None for mb in minibatches]
            sums = dict(loss=0.0, pg_loss=0.0, kl=0.0, clip_frac=0.0, mean_ratio=0.0)
            tok_seen, norms = 0.0, []
            for _ in range(cfg.epochs):
                for mb, old_lp, ref_lp in zip(minibatches, old, refs):
                    cur, mask = self._logprobs(mb)
                    n_tok = mask.sum()
                    adv = torch.tensor([s.advantage for s in mb], device=device, dtype=cur.dtype)[:, None]
                    ratio = torch.exp((cur - old_lp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
                    pg1 = -adv * ratio
                    pg2 = -adv * ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps)
                    pg = torch.maximum(pg1, pg2)
                    if ref_lp is not None:
                        d = (ref_lp - cur).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
                        kl = torch.exp(d) - d - 1.0
                    else:
                        kl = torch.zeros_like(cur)
                    per_tok = pg + cfg.kl_beta * kl
                    loss = (per_tok * mask).sum() / n_tok
                    self.opt.zero_grad(set_to_none=True)
                    loss.backward()
                    max_norm = cfg.max_grad_norm if cfg.max_grad_norm and cfg.max_grad_norm > 0 else float("inf")
                    norms.append(float(torch.nn.utils.clip_grad_norm_(self.params, max_norm)))
                    self.opt.step()
                    self.version += 1
                    with torch.no_grad():
                        w = float(n_tok)
                        tok_seen += w
                        sums["loss"] += float(loss) * w
                        sums["pg_loss"] += float((pg * mask).sum())
                        sums["kl"] += float((kl * mask).sum())
                        sums["clip_frac"] += float(((pg2 > pg1).float() * mask).sum())
                        sums["mean_ratio"] += float((ratio * mask).sum())
            stats.update({k: v / tok_seen for k, v in sums.items()})
            stats["grad_norm"] = sum(norms) / len(norms)
            stats["n_updates"] = float(len(norms))
        finally:
            self.model.train(was_training)
        return stats

    # --------------------------------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """Optimizer state (+ update counter) for resume; the model weights are saved separately."""
        return {"optimizer": self.opt.state_dict(), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.opt.load_state_dict(state["optimizer"])
        self.version = int(state.get("version", 0))

    def save_adapter(self, directory: str | Path) -> Path:
        """``save_pretrained``: adapter weights + config for a PEFT model, the full model otherwise."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(path))
        return path
