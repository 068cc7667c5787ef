"""CoVRL: verifier-free variational updates of the proposer (Wen et al. 2025, "Coupled Variational Reinforcement
Learning for Language Model General Reasoning", arXiv:2512.12576). Pure functions: templates, the estimators
and the loss; sampling and the optimizer step are in ``proposer/training/covrl_step.py``.

One model plays three roles, told apart only by the prompt (templates below):

* prior       p(z | x)     the mutation prompt x, then a short reasoning z (the template used at inference);
* posterior   q(z | x, y)  the same prompt with the reference answer y placed before the reasoning;
* likelihood  p(y | x, z)  the prior prompt, the reasoning z, then y as the first answer.

Hybrid sampling: each trajectory z comes from the prior with probability alpha, else from the posterior. The
paper's composite distribution and the behaviour it is importance-weighted against are token-level mixtures::

    p'(z_t)        = 1/2 p(z_t | x, z_<t) + 1/2 q(z_t | x, y, z_<t)                        composite
    p_hybrid(z_t)  = alpha p(z_t | x, z_<t) + (1 - alpha) q(z_t | x, y, z_<t)             behaviour

Objective per trajectory i of a group (same x, same y), all terms token-mean::

    R_i      = mean_t log p_old(y_t | x, z_i, y_<t)            reward: the reference's likelihood (no verifier)
    A_i      = R_i - mean_group(R)       (/ std_group(R) when std_norm; default off, as in Dr. GRPO)
    rho_t    = p'_new(z_t) / p_hybrid_old(z_t)
    L_pg     = mean_t max(-A_i rho_t, -A_i clip(rho_t, 1 - eps, 1 + eps))                 eps = 0.3
    L_nll    = -mean_t log p_new(y_t | x, z_i, y_<t)   over prior-sampled, well-formed z_i with A_i > 0
    L_kl     = mean_t bregman_kl(...)                   over z tokens of trajectories not truncated
    loss     = L_pg + nll_coef * L_nll + kl_coef * L_kl

Choices the issue's formulas did not fix (the paper's templates and any soft clipping were not available here):

* Templates: the reasoning sits between ``<reasoning>`` and ``</reasoning>`` right before ``<answer_1>``; the
  posterior template shows the reference as a fenced block headed ``### Reference answer:`` after the task
  and before ``<reasoning>``. The likelihood target y is the reference rendered as answer 1 (fence and closing
  tag), exactly what the proposer would have to write.
* A trajectory ends at ``</reasoning>`` (closed), at an ``<answer_1>`` the model wrote itself (it started
  answering: also closed), at EOS (``eos``: ended, not well-formed) or at the reasoning budget (``truncated``).
  Well-formed = closed. The likelihood template closes whatever is left open (``likelihood_suffix``).
* Clipping: hard PPO clip of rho at eps = 0.3 (no soft clipping); log-ratios clamped at +-20 before exp (as the
  trainer does); the KL estimator is evaluated on these clamped log-ratios in the loss only.
* The NLL term is the ELBO's reconstruction term -log p(y | x, z) (teacher-forced reference after z), restricted
  as the issue says; nll_coef = 1, kl_coef = 0.1 are our defaults, not the paper's.
* std-normalisation of the advantage is a switch, default off (the reward is a log-likelihood whose scale is
  meaningful; dividing by a tiny within-group std blows up near-identical groups).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from problems.errors import VevoError

REASON_OPEN = "<reasoning>"
REASON_CLOSE = "</reasoning>"
ANSWER_OPEN = "<answer_1>"
REFERENCE_HEAD = "### Reference answer:\n"
LOG_RATIO_CLAMP = 20.0


class CoVRLError(VevoError, ValueError):
    """One-line error: a CoVRL input that cannot be used."""


# ------------------------------------------------------------------------------------------------ templates


def prompt_head(prompt: str) -> str:
    """The mutation prompt without its opening tag (``<answer_1>`` or ``<reasoning>``)."""
    for tag in (ANSWER_OPEN, REASON_OPEN):
        if prompt.endswith(tag):
            return prompt[: len(prompt) - len(tag)]
    raise CoVRLError(f"prompt does not end with {ANSWER_OPEN} or {REASON_OPEN}: cannot place the reasoning")


def prior_prompt(prompt: str) -> str:
    """p(z | x): the prompt, opening the reasoning section."""
    return prompt_head(prompt) + REASON_OPEN


def posterior_prompt(prompt: str, reference: str) -> str:
    """q(z | x, y): the reference answer placed before the reasoning."""
    from proposer.answers.parsing import fence_code

    return prompt_head(prompt) + REFERENCE_HEAD + fence_code(reference) + "\n" + REASON_OPEN


def likelihood_target(reference: str) -> str:
    """y as the text after ``<answer_1>``: the reference as answer 1, fence and closing tag included."""
    from proposer.answers.parsing import fence_code

    return "\n" + fence_code(reference) + "\n</answer_1>"


def likelihood_suffix(end: str) -> str:
    """What goes between z and y in the likelihood template, by how z ended (see ``reasoning_end``)."""
    if end == "answer":  # z already ends with <answer_1>
        return ""
    if end == "closed":
        return "\n" + ANSWER_OPEN
    return REASON_CLOSE + "\n" + ANSWER_OPEN  # eos / truncated: close it for the model


def reasoning_end(texts: list[str], eos_at: int | None, budget: int) -> tuple[int, str]:
    """Where a sampled reasoning ends. texts[k] = decoded text of the first k+1 tokens; eos_at = index of the
    first EOS token or None. Returns (number of tokens kept in z, how it ended): 'closed' (``</reasoning>``
    inside the kept tokens), 'answer' (``<answer_1>``), 'eos' (EOS; the EOS token is not kept), 'truncated'."""
    limit = len(texts) if eos_at is None else min(eos_at, len(texts))
    for k in range(limit):
        t = texts[k]
        if REASON_CLOSE in t:
            return k + 1, "closed"
        if ANSWER_OPEN in t:
            return k + 1, "answer"
    if eos_at is not None and eos_at < budget:
        return eos_at, "eos"
    return limit, "truncated"


# ---------------------------------------------------------------------------------------------- estimators


def _lib(x: Any):
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return torch
    except ImportError:  # numpy-only callers
        pass
    return np


def composite_logprob(logp_prior, logp_post):
    """log p' with p' = 1/2 p_prior + 1/2 q_post, per token (arXiv:2512.12576, composite distribution)."""
    lib = _lib(logp_prior)
    return lib.logaddexp(logp_prior, logp_post) - math.log(2.0)


def hybrid_logprob(logp_prior, logp_post, alpha: float):
    """log p_hybrid with p_hybrid = alpha p_prior + (1 - alpha) q_post, per token: the behaviour of hybrid
    sampling at token level (arXiv:2512.12576). alpha in [0, 1]; numpy arrays or torch tensors."""
    if not 0.0 <= alpha <= 1.0:
        raise CoVRLError(f"alpha must be in [0, 1], got {alpha}")
    lib = _lib(logp_prior)
    if alpha == 1.0:
        return logp_prior + 0.0
    if alpha == 0.0:
        return logp_post + 0.0
    return lib.logaddexp(logp_prior + math.log(alpha), logp_post + math.log(1.0 - alpha))


def bregman_kl(logp_prior, logp_post, from_prior):
    """Per-token estimates of KL(p' || p_prior), p' = 1/2 p_prior + 1/2 q_post computed inside, with the Bregman
    control-variate estimator (arXiv:2512.12576; the form of Schulman's k3 for an importance-weighted sample):

        token sampled from the prior      w = p'/p_prior:  w log w - w + 1
        token sampled from the posterior  u = p'/q_post:   u log(p'/p_prior) + u - 1

    Both are unbiased for KL(p' || p_prior) under their sampler (E_prior[w] = E_post[u] = 1, so the control
    variates -w + 1 and u - 1 add nothing on average) and never negative: the first because x log x - x + 1 >= 0;
    the second because log(p'/p) >= 1 - p/p' and 2u = (p + q)/q give u log(p'/p) + u - 1 >= 2u - p/q - 1 = 0.
    from_prior: boolean mask of the same shape (True where the token was sampled from the prior)."""
    lc = composite_logprob(logp_prior, logp_post)
    return _bregman_terms(lc - logp_prior, lc - logp_post, from_prior)


def _bregman_terms(log_w, log_u, from_prior):
    """The two estimators from log w = log p'/p_prior and log u = log p'/q_post, picked per token."""
    lib = _lib(log_w)
    w, u = lib.exp(log_w), lib.exp(log_u)
    return lib.where(from_prior, w * log_w - w + 1.0, u * log_w + u - 1.0)


def group_advantages(rewards, group_ids, std_norm: bool = False, eps: float = 1e-6) -> np.ndarray:
    """A_i = R_i - mean of R over i's group (and / population std of the group when std_norm; 0 when std < eps)."""
    r = np.asarray(rewards, dtype=float)
    g = np.asarray(group_ids)
    if r.shape != g.shape:
        raise CoVRLError(f"{r.size} rewards for {g.size} group ids")
    if not np.all(np.isfinite(r)):
        raise CoVRLError("a reward is not finite")
    out = np.zeros_like(r)
    for gid in dict.fromkeys(g.tolist()):
        idx = g == gid
        a = r[idx] - r[idx].mean()
        if std_norm:
            sd = r[idx].std()
            a = a / sd if sd >= eps else np.zeros_like(a)
        out[idx] = a
    return out


# ---------------------------------------------------------------------------------------------------- loss


@dataclass
class CoVRLConfig:
    alpha: float = 0.5  # probability a trajectory is sampled from the prior template
    clip_eps: float = 0.3  # PPO clip of p'_new / p_hybrid_old
    nll_coef: float = 1.0  # weight of the selective NLL (reconstruction) term
    kl_coef: float = 0.1  # weight of KL(p' || p_prior)
    std_norm: bool = False  # divide advantages by the group's std
    reason_tokens: int = 32  # reasoning budget; a trajectory that reaches it is truncated

    def __post_init__(self) -> None:
        checks = [("alpha", 0.0 <= self.alpha <= 1.0), ("clip_eps", self.clip_eps > 0),
                  ("nll_coef", self.nll_coef >= 0), ("kl_coef", self.kl_coef >= 0),
                  ("reason_tokens", self.reason_tokens >= 1)]
        bad = [k for k, ok in checks if not ok]
        if bad:
            raise CoVRLError(f"CoVRLConfig: bad {bad[0]} = {getattr(self, bad[0])!r}")


def covrl_loss(new_prior, new_post, old_prior, old_post, z_mask, from_prior, truncated, advantages,
               new_lik, y_mask, nll_select, n_z_tokens: float, n_y_tokens: float, n_kl_tokens: float,
               cfg: CoVRLConfig) -> tuple[Any, dict[str, Any]]:
    """The loss of one micro-batch (torch). Shapes: *_prior/*_post/z_mask (B, Tz) log-probs of z under the
    prior and posterior templates (new: with gradient, old: the learner at the start of the step); from_prior,
    truncated, nll_select (B,) bool; advantages (B,); new_lik / y_mask (B, Ty): log p_new(y | x, z). Token-means
    use the minibatch's token counts (n_*), so splitting a minibatch into micro-batches leaves the sum unchanged.
    Returns (loss, sums of the per-token terms for logging)."""
    import torch

    c = LOG_RATIO_CLAMP
    new_c = composite_logprob(new_prior, new_post)
    old_h = hybrid_logprob(old_prior, old_post, cfg.alpha)
    ratio = torch.exp((new_c - old_h).clamp(-c, c))
    adv = advantages[:, None]
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps)
    pg = torch.maximum(pg1, pg2) * z_mask
    # KL(p' || prior) on clamped log-ratios: an inf in the branch torch.where does not pick still makes NaN grads
    kl = _bregman_terms((new_c - new_prior).clamp(max=c), (new_c - new_post).clamp(max=c),
                        from_prior[:, None].expand_as(new_c)) * z_mask * (~truncated)[:, None]
    nll = -(new_lik * y_mask) * nll_select[:, None]
    loss = pg.sum() / max(n_z_tokens, 1.0)
    if n_kl_tokens > 0 and cfg.kl_coef > 0:
        loss = loss + cfg.kl_coef * kl.sum() / n_kl_tokens
    if n_y_tokens > 0 and cfg.nll_coef > 0:
        loss = loss + cfg.nll_coef * nll.sum() / n_y_tokens
    with torch.no_grad():
        sums = {"pg_loss": float(pg.sum()), "kl": float(kl.sum()), "nll": float(nll.sum()),
                "clip_frac": float(((pg2 > pg1).float() * z_mask).sum()), "mean_ratio": float((ratio * z_mask).sum())}
    return loss, sums
