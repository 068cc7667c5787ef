"""Policy update for Hugging Face causal LMs (full fine-tuning or PEFT LoRA): decoupled PPO-clip + k3 KL,
token-mean over the minibatch, AdamW on fp32 parameters.

One readable file, CleanRL style; every hyperparameter is a field of ``TrainConfig``. Three policies meet here
(decoupled PPO, Hilton et al. 2021, arXiv:2110.00641; the truncated IS weight as veRL's TIS, Yao et al. 2025):

* the *behaviour* policy b that sampled the tokens (vLLM's kernels, or the KV-cached hf decode, maybe a few
  versions old): its log-probs come with the sample;
* the *proximal* policy pi_old = the learner at the start of ``step()``: its log-probs are recomputed here, under
  the same autocast, temperature, padding layout and micro-batches as the training forwards, so the first ratio
  on fresh samples is exactly 1;
* the policy pi_theta being trained.

For a minibatch and one scalar advantage A per completion (``proposer.training.estimators``; zero advantages are kept:
they count in the token-mean denominator and carry their KL term, as in veRL)::

    w_t    = min(exp(log pi_old(y_t) - log b(y_t)), is_cap)     truncated IS weight, detached; 1 without b
    r_t    = exp(log pi_theta(y_t) - log pi_old(y_t))
    pg_t   = w_t * max(-A r_t, -A clip(r_t, 1 - clip_eps, 1 + clip_eps))
    d_t    = log pi_ref(y_t) - log pi_theta(y_t);   kl_t = exp(d_t) - d_t - 1         k3 (Schulman 2020)
    loss   = sum_t (pg_t + kl_beta * kl_t) / (completion tokens in the minibatch)     token-mean

All log-probs are of the distribution sampled from: log_softmax(logits / T), renormalised over the top-p
nucleus when top_p < 1 (``tempered_logprobs``). Missing behaviour log-probs are not taken as on-policy silently:
their weight is 1 and ``n_missing_behaviour`` counts them. ``behaviour_gap`` (mean log pi_old - log b over the
tokens that have b) is the sampler-learner mismatch, ~0 on fresh samples.

Memory: a minibatch is run as micro-batches of ``micro_batch`` completions, gradients accumulated, each
micro-batch's loss divided by the *minibatch's* token count, so the update does not depend on the split.
Only the completion positions reach the LM head (``logits_to_keep``, prompts left-padded so all completions end
the sequence). Gradient checkpointing runs in train mode (HF skips it in eval mode); dropout is switched off
in the model's config and modules instead of by ``eval()``.

Precision: AdamW never steps bf16/fp16 parameters (a bf16 weight ignores an update below 2^-8 of itself: one
lr-1e-5 step moved 15% of a bf16 model's weights, 99% in fp32). Trainable low-precision parameters are made
fp32 in place (the fp32 learner); on CUDA the forwards run under bf16 autocast; frozen weights (LoRA base,
KL reference) stay as loaded. ``upcast_trainable=False`` with such parameters is an error.

Forwards per step: the general step runs pi_old (no gradients), the reference, the training forward and the
movement probe. The *lean* step (``lean``, whenever ``epochs == 1`` and the samples are one minibatch, as in a
campaign) takes pi_old from the training forward itself, detached: it is the same policy on the same tokens, so
the loss and gradients are the general step's (tests/proposer/test_training.py) for one forward less. With
``shared_prompt`` the rows of a micro-batch that share one prompt (a group) run it once (``completion_logprobs``).
``movement=False`` skips the movement forward (its keys are then absent from the stats). The reference forward
can be taken ahead by another trainer of the same model (``reference``, then ``step(samples, refs=...)``). With
``fast_forward`` a group on CPU runs the forwards in plain torch (``proposer/backends/fast_logprobs.py``: the same
function as transformers', its padding never computed, ~1/5 less time per step) where the model's layout allows;
with ``frozen_bf16`` that forward multiplies a LoRA's frozen base weights in bf16 (the same for the reference).

Policy movement, logged by ``step()`` when ``movement`` (one extra forward without gradients): ``policy_kl`` (mean over the
step's completion tokens of r log r - r + 1, r = pi_new / pi_old: a non-negative importance estimate of
KL(new || old) from tokens sampled by ~pi_old), ``mean_abs_dlogp`` and ``greedy_changed`` (fraction of those positions whose most likely
token changed): an update that moves nothing shows up as zeros, whatever the loss says.

Reference policy: for a ``peft.PeftModel`` the base model with the adapter disabled; for full fine-tuning an
explicit frozen copy (``PolicyTrainer.frozen_copy``), or None to skip the KL term (also when kl_beta == 0).
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from proposer.backends import fast_logprobs
from proposer.backends.base import Completion
from proposer.backends.logprobs import base_model as _base, completion_logprobs, model_device as _device
from proposer.files import honour_umask

LOG_RATIO_CLAMP = 20.0  # as veRL: exp of at most e^20


def ppo_loss(cur: torch.Tensor, old: torch.Tensor, ref: torch.Tensor | None, adv: torch.Tensor, w: torch.Tensor,
             mask: torch.Tensor, n_tok: float, clip_eps: float, kl_beta: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Pure: the module docstring's loss for one micro-batch (token log-probs ``cur`` under pi_theta, ``old``
    under pi_old, ``ref`` under the reference or None; ``adv`` one per row; ``w`` the truncated IS weights),
    divided by the *minibatch's* token count ``n_tok``; and its token sums for the step's statistics."""
    ratio = torch.exp((cur - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    pg = w * torch.maximum(pg1, pg2)
    if ref is not None:
        d = (ref - cur).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        kl = torch.exp(d) - d - 1.0
    else:
        kl = torch.zeros_like(cur)
    loss = ((pg + kl_beta * kl) * mask).sum() / n_tok
    with torch.no_grad():
        sums = {"loss": float(loss) * n_tok, "pg_loss": float((pg * mask).sum()), "kl": float((kl * mask).sum()),
                "clip_frac": float(((pg2 > pg1).float() * mask).sum()), "mean_ratio": float((ratio * mask).sum()),
                "is_weight": float((w * mask).sum())}
    return loss, sums


def movement_sums(new_lp: torch.Tensor, old_lp: torch.Tensor, mask: torch.Tensor,
                  new_greedy: torch.Tensor | None = None, old_greedy: torch.Tensor | None = None) -> dict[str, float]:
    """Pure: the token sums of how far a policy moved on tokens sampled by ~pi_old (the module docstring's
    policy movement): ``policy_kl`` (r log r - r + 1, r = pi_new / pi_old), ``mean_abs_dlogp``, ``tokens`` and,
    given both argmax tensors, ``greedy_changed``. Divide by ``tokens`` for the per-token means; the one formula
    the trainer logs and the benches measure held-out prompts with."""
    d = (new_lp - old_lp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    sums = {"policy_kl": float(((torch.exp(d) * d - torch.exp(d) + 1.0) * mask).sum()),
            "mean_abs_dlogp": float((d.abs() * mask).sum()), "tokens": float(mask.sum())}
    if new_greedy is not None and old_greedy is not None:
        sums["greedy_changed"] = float(((new_greedy != old_greedy).float() * mask).sum())
    return sums


@dataclass
class TrainConfig:
    lr: float = 1e-5  # AdamW learning rate
    clip_eps: float = 0.2  # PPO clip range: ratio kept in [1 - clip_eps, 1 + clip_eps]
    kl_beta: float = 1e-3  # weight of the k3 KL to the reference policy (0 disables the reference forward)
    max_grad_norm: float = 1.0  # global grad-norm clip (<= 0: no clipping, the norm is still reported)
    epochs: int = 1  # passes over the samples per step()
    minibatch: int = 8  # completions per optimizer update
    micro_batch: int = 0  # completions per forward/backward inside a minibatch (0: the whole minibatch)
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    temperature: float = 1.0  # sampling temperature: log-probs are of softmax(logits / T) (<= 0: T = 1)
    top_p: float = 1.0  # sampling nucleus: log-probs renormalised over it when < 1
    is_cap: float = 2.0  # truncation of the behaviour importance weight pi_old / b
    gradient_checkpointing: bool = False  # recompute activations in backward (HF, non-reentrant)
    max_seq_len: int = 0  # prompt + completion tokens per row (0: no limit); longer: prompt cut on the left
    bf16_autocast_on_gpu: bool = True  # forward in bf16 autocast on CUDA; log-softmax always in fp32
    upcast_trainable: bool = True  # make bf16/fp16 trainable parameters fp32 (False: error if there are any)
    lean: bool = True  # on-policy step (1 epoch, 1 minibatch): pi_old is the training forward's own, detached
    shared_prompt: bool = True  # a group's shared prompt runs once per forward (not with gradient checkpointing)
    movement: bool = True  # log policy_kl / mean_abs_dlogp / greedy_changed (one more forward, no gradients)
    fast_forward: bool = True  # a group on CPU (Llama family): the plain-torch forward (backends/fast_logprobs.py)
    frozen_bf16: bool = False  # in that forward, the LoRA's frozen base weights multiplied in bf16 (fp32 otherwise)

    def __post_init__(self) -> None:
        checks = [("lr", self.lr >= 0), ("clip_eps", self.clip_eps > 0), ("kl_beta", self.kl_beta >= 0),
                  ("epochs", self.epochs >= 1), ("minibatch", self.minibatch >= 1),
                  ("micro_batch", self.micro_batch >= 0), ("top_p", 0 < self.top_p <= 1),
                  ("is_cap", self.is_cap >= 1), ("max_seq_len", self.max_seq_len == 0 or self.max_seq_len >= 2)]
        bad = [k for k, ok in checks if not ok]
        if bad:
            raise ValueError(f"TrainConfig: bad {bad[0]} = {getattr(self, bad[0])!r}")


@dataclass
class TrainSample:
    """One completion to learn from. behaviour_logprobs: per completion token, from the sampling policy
    (None: unknown; the sample gets IS weight 1 and is counted in ``n_missing_behaviour``)."""

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


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout off without ``eval()`` (which would also switch HF gradient checkpointing off): every float
    ``*dropout*`` / ``*pdrop*`` field of the config, every ``nn.Dropout``, and the float dropout attributes that
    attention modules copy from the config at construction."""
    cfgs = {id(c): c for c in (getattr(model, "config", None), getattr(_base(model), "config", None)) if c}
    for cfg in cfgs.values():
        for k, v in list(vars(cfg).items()):
            if ("dropout" in k or "pdrop" in k) and isinstance(v, float):
                setattr(cfg, k, 0.0)
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        for k, v in list(vars(mod).items()):
            if ("dropout" in k or "pdrop" in k) and isinstance(v, float):
                setattr(mod, k, 0.0)


def _adamw(params: list[torch.Tensor], lr: float, weight_decay: float) -> torch.optim.AdamW:
    """torch's fused AdamW where this torch has one for the parameters' device (CPU from torch 2.4): the same
    update in one kernel over every tensor, where the default loops over them in Python (the tiny model's 84
    LoRA tensors: 0.44 ms a step against 2.3 ms). A saved state says which it ran, and a resume keeps that."""
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def train_mode(model: torch.nn.Module) -> bool:
    """``model.train()``, skipped where every module is in train mode already (it sets the flag on each of the tiny
    model's ~500 modules: 1.1 ms, twice a campaign step); returns ``model.training`` as it was. Leaving train mode
    after, where it was off, is ``model.train(False)``."""
    was = model.training
    if not all(m.training for m in model.modules()):
        model.train()
    return was


def enable_checkpointing(model: torch.nn.Module) -> None:
    """HF activation checkpointing of every decoder layer, non-reentrant (works when the inputs need no grad,
    as with LoRA). Active only in train mode, which is why the trainer never uses eval() for dropout."""
    base = _base(model)
    if getattr(base, "activation_checkpointing_enable", None) is not None:  # transformers >= 5.x
        base.activation_checkpointing_enable({"use_reentrant": False})
    elif getattr(base, "gradient_checkpointing_enable", None) is not None:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        raise ValueError(f"gradient_checkpointing: {type(base).__name__} does not support it")


def truncate_sample(s: TrainSample, max_len: int) -> tuple[TrainSample, bool]:
    """Fit prompt + completion into max_len tokens: the prompt loses its start (its end leads into the
    completion); a completion of max_len tokens or more keeps its first max_len - 1 (one prompt token stays)."""
    if not max_len or len(s.prompt_ids) + len(s.completion_ids) <= max_len:
        return s, False
    n_c = min(len(s.completion_ids), max_len - 1)
    beh = None if s.behaviour_logprobs is None else list(s.behaviour_logprobs[:n_c])
    return TrainSample(list(s.prompt_ids[-(max_len - n_c):]), list(s.completion_ids[:n_c]), beh, s.advantage), True


class PolicyTrainer:
    """Decoupled PPO-clip update with a k3 KL penalty; see the module docstring for the loss.

    ``step(samples)`` runs ``cfg.epochs`` passes over the samples in order (callers shuffle), one AdamW update per
    ``cfg.minibatch`` completions, and returns token-weighted mean statistics.
    """

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig | None = None, ref_model: torch.nn.Module | None = None):
        self.model = model
        self.cfg = cfg or TrainConfig()
        self.is_peft = _is_peft(model)
        self.ref_model = ref_model
        if ref_model is not None:
            ref_model.eval()
            ref_model.requires_grad_(False)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("the model has no trainable parameters")
        low = [n for n, p in named if p.dtype in (torch.bfloat16, torch.float16)]
        if low and not self.cfg.upcast_trainable:
            raise ValueError(f"{len(low)} trainable parameters are {named[0][1].dtype}: AdamW on them loses most "
                             f"updates to rounding; keep upcast_trainable=True (fp32 learner) or load in float32")
        for _, p in named:
            if p.dtype != torch.float32:
                p.data = p.data.float()
        disable_dropout(model)
        if self.cfg.gradient_checkpointing:
            enable_checkpointing(model)
        self.params = [p for _, p in named]
        self.opt = _adamw(self.params, self.cfg.lr, self.cfg.weight_decay)
        self.version = 0  # optimizer steps taken (callers publish it as the policy version)

    @staticmethod
    def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
        """A frozen deep copy (same dtype as ``model`` now) to serve as the KL reference for full fine-tuning."""
        ref = copy.deepcopy(model)
        ref.eval()
        ref.requires_grad_(False)
        return ref

    @property
    def uses_kl(self) -> bool:
        return self.cfg.kl_beta > 0 and (self.ref_model is not None or self.is_peft)

    def _fast(self, samples: Sequence[TrainSample], model: torch.nn.Module) -> bool:
        """Whether ``fast_logprobs.group_logprobs`` computes ``samples`` on ``model``: one shared prompt, CPU."""
        prompts, comps = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
        return (self.cfg.shared_prompt and not self.cfg.gradient_checkpointing and self.cfg.fast_forward
                and all(p == prompts[0] for p in prompts) and all(comps) and _device(model).type == "cpu"
                and fast_logprobs.supports(model))

    def _group(self, samples: Sequence[TrainSample], model: torch.nn.Module, with_argmax: bool = False,
               adapters: bool = True):
        """``_logprobs`` where ``_fast``; ``adapters=False``: the LoRA adapters left out."""
        return fast_logprobs.group_logprobs(model, samples[0].prompt_ids, [s.completion_ids for s in samples],
                                            self.cfg.temperature, self.cfg.top_p, with_argmax=with_argmax,
                                            frozen_bf16=self.cfg.frozen_bf16, adapters=adapters)

    def _logprobs(self, samples: Sequence[TrainSample], model: torch.nn.Module | None = None,
                  with_argmax: bool = False):
        model = self.model if model is None else model
        if self._fast(samples, model):
            return self._group(samples, model, with_argmax)
        prompts, comps = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
        shared = self.cfg.shared_prompt and not self.cfg.gradient_checkpointing
        return completion_logprobs(model, prompts, comps, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                                   bf16_autocast=self.cfg.bf16_autocast_on_gpu, with_argmax=with_argmax,
                                   shared_prompt=shared)

    @torch.no_grad()
    def _movement(self, plan, old, old_greedy) -> dict[str, float]:
        """How far this step moved the policy, on the step's own completion tokens (sampled from ~pi_old), as
        `movement_sums` measures it: policy_kl = mean_t (r log r - r + 1) with r = pi_new / pi_old, an importance
        estimate of KL(new || old) per token that is never negative (E_old[r - 1] = 0 makes the control variate
        free), mean_abs_dlogp = mean_t |log pi_new - log pi_old|, greedy_changed = fraction of positions whose
        argmax token changed. One forward without gradients."""
        total = dict.fromkeys(("policy_kl", "mean_abs_dlogp", "greedy_changed", "tokens"), 0.0)
        for mb, olds, greedy in zip(plan, old, old_greedy):
            for chunk, old_lp, g_old in zip(mb, olds, greedy):
                new_lp, mask, g_new = self._logprobs(chunk, with_argmax=True)
                for k, v in movement_sums(new_lp, old_lp, mask, g_new, g_old).items():
                    total[k] += v
        tok = total.pop("tokens")
        return {k: v / tok for k, v in total.items()} if tok else {}

    @torch.no_grad()
    def _ref_logprobs(self, samples: Sequence[TrainSample]) -> torch.Tensor:
        if self.ref_model is not None:
            return self._logprobs(samples, self.ref_model)[0]
        if self._fast(samples, self.model) and fast_logprobs.adapters_separable(self.model):
            return self._group(samples, self.model, adapters=False)[0]  # the same bits, without peft's context
        with self.model.disable_adapter():  # PEFT: the base model is the reference
            return self._logprobs(samples)[0]

    def _split(self, samples: list[TrainSample]) -> list[list[list[TrainSample]]]:
        """Minibatches of ``minibatch`` completions, each cut into micro-batches of ``micro_batch``."""
        mbs = [samples[i: i + self.cfg.minibatch] for i in range(0, len(samples), self.cfg.minibatch)]
        k = self.cfg.micro_batch or self.cfg.minibatch
        return [[mb[i: i + k] for i in range(0, len(mb), k)] for mb in mbs]

    def _is_weights(self, chunk: list[TrainSample], old: torch.Tensor, sums: dict[str, float]) -> torch.Tensor:
        """Truncated importance weights min(pi_old / b, is_cap) per token (1 where b is unknown)."""
        w = torch.ones_like(old)
        for i, s in enumerate(chunk):
            n = len(s.completion_ids)
            if s.behaviour_logprobs is None:
                sums["n_missing_behaviour"] += 1
                continue
            beh = torch.tensor(s.behaviour_logprobs, device=old.device, dtype=old.dtype)
            gap = old[i, :n] - beh
            raw = torch.exp(gap.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
            w[i, :n] = raw.clamp(max=self.cfg.is_cap)
            sums["gap"] += float(gap.sum())
            sums["gap_abs"] += float(gap.abs().sum())
            sums["is_truncated"] += float((raw > self.cfg.is_cap).sum())
            sums["beh_tokens"] += n
        return w

    def _fitted(self, samples: Sequence[TrainSample]) -> list[tuple[TrainSample, bool]]:
        """The samples a step learns from (each with whether it was truncated), after checking them."""
        for i, s in enumerate(samples):
            if s.behaviour_logprobs is not None and len(s.behaviour_logprobs) != len(s.completion_ids):
                raise ValueError(f"sample {i}: {len(s.behaviour_logprobs)} behaviour log-probs for "
                                 f"{len(s.completion_ids)} completion tokens")
            if not math.isfinite(s.advantage):
                raise ValueError(f"sample {i}: advantage is {s.advantage}")
        # nothing to learn from an empty completion
        return [truncate_sample(s, self.cfg.max_seq_len) for s in samples if len(s.completion_ids) > 0]

    def reference(self, samples: Sequence[TrainSample]) -> list[list[torch.Tensor]] | None:
        """The reference log-probs ``step(samples)`` would compute, per micro-batch of its plan (None without a
        KL term). The reference never changes, so a caller with a core to spare takes them ahead of the step and
        passes them as ``step(samples, refs=...)``: the campaign's loop, while its learner process is busy
        (evolve/training/campaign.py). Same function, same inputs: the same bits as the step's own."""
        if not self.uses_kl:
            return None
        plan = self._split([s for s, _ in self._fitted(samples)])
        if not plan:
            return None
        was_training = train_mode(self.model)  # as in step()
        try:
            return self._refs(plan)
        finally:
            if not was_training:
                self.model.train(False)

    @torch.no_grad()
    def _refs(self, plan: list[list[list[TrainSample]]]) -> list[list[torch.Tensor | None]]:
        """The reference log-probs of each micro-batch of ``plan`` (None each without a KL term)."""
        return [[self._ref_logprobs(mc) if self.uses_kl else None for mc in mb] for mb in plan]

    @staticmethod
    def _check_refs(plan: list[list[list[TrainSample]]], refs: Any) -> None:
        shapes = [[(len(mc), max(len(s.completion_ids) for s in mc)) for mc in mb] for mb in plan]
        try:
            got = [[tuple(r.shape) for r in mb] for mb in refs]
        except (TypeError, AttributeError):
            got = None
        if got != shapes:
            raise ValueError(f"reference log-probs of shapes {got} for a step of {shapes}: taken for other samples")

    def step(self, samples: Sequence[TrainSample], refs: list[list[torch.Tensor]] | None = None) -> dict[str, float]:
        """One update on ``samples``; ``refs``: ``reference(samples)``, taken ahead (default: computed here)."""
        cfg = self.cfg
        refs = refs if self.uses_kl else None  # without a KL term there is no reference to use
        fitted = self._fitted(samples)
        samples = [s for s, _ in fitted]
        n_tokens = sum(len(s.completion_ids) for s in samples)
        stats = dict(loss=0.0, pg_loss=0.0, kl=0.0, clip_frac=0.0, mean_ratio=0.0, grad_norm=0.0, policy_kl=0.0,
                     mean_abs_dlogp=0.0, greedy_changed=0.0,
                     n_tokens=float(n_tokens), n_samples=float(len(samples)), n_updates=0.0,
                     n_truncated=float(sum(t for _, t in fitted)), n_missing_behaviour=0.0, behaviour_gap=0.0,
                     behaviour_gap_abs=0.0, is_weight=0.0, is_truncated_frac=0.0)
        if not samples:
            return stats
        device = _device(self.model)
        was_training = train_mode(self.model)  # dropout is off (disable_dropout); keeps gradient checkpointing on
        try:
            plan = self._split(samples)
            if refs is not None:
                self._check_refs(plan, refs)
            lean = cfg.lean and cfg.epochs == 1 and len(plan) == 1
            beh = dict(gap=0.0, gap_abs=0.0, is_truncated=0.0, beh_tokens=0.0, n_missing_behaviour=0.0)
            with torch.no_grad():
                if lean:  # pi_old comes from the training forward below
                    old = [[None] * len(mb) for mb in plan]
                    old_greedy = [[None] * len(mb) for mb in plan]
                    weights = [[None] * len(mb) for mb in plan]
                else:  # pi_old: the learner now, same layout as the training forwards below
                    probes = [[self._logprobs(mc, with_argmax=True) for mc in mb] for mb in plan]
                    old = [[p[0] for p in mb] for mb in probes]
                    old_greedy = [[p[2] for p in mb] for mb in probes]
                    del probes
                    weights = [[self._is_weights(mc, o, beh) for mc, o in zip(mb, olds)]
                               for mb, olds in zip(plan, old)]
                if refs is None:
                    refs = self._refs(plan)
            n_toks = [float(sum(len(s.completion_ids) for chunk in mb for s in chunk)) for mb in plan]

            def chunk_loss(k: int, j: int, chunk: list[TrainSample]) -> tuple[torch.Tensor, dict[str, float]]:
                if lean:  # the greedy tokens only where the movement diagnostic reads them
                    cur, mask, *greedy = self._logprobs(chunk, with_argmax=cfg.movement)
                    old[k][j], old_greedy[k][j] = cur.detach(), greedy[0] if greedy else None
                    with torch.no_grad():
                        weights[k][j] = self._is_weights(chunk, old[k][j], beh)
                else:
                    cur, mask = self._logprobs(chunk)
                adv = torch.tensor([s.advantage for s in chunk], device=device, dtype=cur.dtype)[:, None]
                return ppo_loss(cur, old[k][j], refs[k][j], adv, weights[k][j], mask, n_toks[k], cfg.clip_eps,
                                cfg.kl_beta)

            sums, norms = self.optimize(plan, chunk_loss)
            tok_seen = cfg.epochs * sum(n_toks)
            stats.update({k: v / tok_seen for k, v in sums.items()})
            stats["grad_norm"] = sum(norms) / len(norms)
            stats["n_updates"] = float(len(norms))
            stats["n_missing_behaviour"] = beh["n_missing_behaviour"]
            if beh["beh_tokens"]:
                stats["behaviour_gap"] = beh["gap"] / beh["beh_tokens"]
                stats["behaviour_gap_abs"] = beh["gap_abs"] / beh["beh_tokens"]
                stats["is_truncated_frac"] = beh["is_truncated"] / beh["beh_tokens"]
            if cfg.movement:
                stats.update(self._movement(plan, old, old_greedy))
            else:
                for key in ("policy_kl", "mean_abs_dlogp", "greedy_changed"):
                    stats.pop(key, None)
        finally:
            if not was_training:
                self.model.train(False)
        return stats

    def optimize(self, plan: list[list[Any]], chunk_loss) -> tuple[dict[str, float], list[float]]:
        """The one optimizer loop (PPO here, CoVRL in proposer/training/covrl_step.py): ``epochs`` passes over the
        minibatches of ``plan``; a minibatch's chunks (micro-batches) accumulate gradients of
        ``chunk_loss(minibatch index, chunk index, chunk) -> (loss, sums)``, then one clipped AdamW step.
        Returns the summed ``sums`` and the gradient norms before clipping, one per update."""
        sums: dict[str, float] = {}
        norms: list[float] = []
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm and self.cfg.max_grad_norm > 0 else float("inf")
        for _ in range(self.cfg.epochs):
            for k, mb in enumerate(plan):
                self.opt.zero_grad(set_to_none=True)
                for j, chunk in enumerate(mb):
                    loss, s = chunk_loss(k, j, chunk)
                    loss.backward()
                    for key, v in s.items():
                        sums[key] = sums.get(key, 0.0) + v
                norms.append(float(torch.nn.utils.clip_grad_norm_(self.params, max_norm)))
                self.opt.step()
                self.version += 1
        return sums, norms

    # --------------------------------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """Optimizer state (+ update counter) for resume; the model weights are saved separately."""
        return {"optimizer": self.opt.state_dict(), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.opt.load_state_dict(state["optimizer"])
        self.version = int(state.get("version", 0))

    def save_adapter(self, directory: str | Path) -> Path:
        """``save_pretrained``: adapter weights + config for a PEFT model (a LoRA by `save_lora`, without peft's
        model card), the full model otherwise."""
        from proposer.training.lora import save_lora

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        if not save_lora(self.model, str(path)):
            self.model.save_pretrained(str(path))
        honour_umask(path)
        return path
