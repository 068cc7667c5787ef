"""Per-token log-probs of completions under a transformers causal LM, of the distribution a sampler draws from:
log_softmax(logits / T), renormalised over the top-p nucleus when top_p < 1 (``tempered_logprobs``). One
definition for both sides of a policy update: the hf backend records them while sampling (``HFBackend``,
``rescore``) and the trainer recomputes them for the proximal and the trained policy
(``proposer/training/trainer.py``), so a fresh sample's first importance ratio is exactly 1."""
from __future__ import annotations

import inspect
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F


def base_model(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _autocast(device: torch.device, enabled: bool):
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def nucleus(probs: torch.Tensor, top_p: float, k: int = 8) -> torch.Tensor:
    """The top-p nucleus of each row of ``probs`` (..., V) as a bool mask: the most likely tokens in order until
    the mass before the next one reaches top_p (the first token always in), and every token tied with the last
    one kept (a full sort's order among equal values is its implementation's choice; ties kept, the mask is not).

    Why not one full sort per row: on this CPU ``sort`` takes 75-110 us a row of 2,688 values, and a sampler sorts
    twice per token (its draw and its recorded log-prob). Only a row's top ``k`` values are sorted (``topk``: the
    same values in the same order as a full sort's first k, so the same prefix sums), then for the rows whose
    nucleus is longer the top 8k, then the rest in full; the bundled model's nuclei at top-p 0.95 hold 1 token
    (median) to 10 (90th percentile)."""
    flat = probs.reshape(-1, probs.shape[-1])
    v_size = flat.shape[-1]
    last = torch.empty((flat.shape[0], 1), dtype=flat.dtype, device=flat.device)  # the smallest value kept
    todo = torch.arange(flat.shape[0], device=flat.device)
    rows, kk = flat, min(k, v_size)
    while todo.numel():
        v = rows.sort(dim=-1, descending=True).values if kk >= v_size else rows.topk(kk, dim=-1).values
        reached = (v.cumsum(-1) - v) >= top_p  # mass strictly before each position
        hit = reached.any(-1)
        found = hit | (kk >= v_size)
        n = torch.where(hit, reached.to(torch.uint8).argmax(-1), kk).clamp_(min=1)  # how many are kept
        last[todo[found]] = v.gather(-1, (n - 1)[:, None])[found]
        todo = todo[~found]
        rows, kk = flat[todo], min(8 * kk, v_size)
    return (flat >= last).view(probs.shape)


def tempered_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                      top_p: float = 1.0) -> torch.Tensor:
    """log p(target) under the distribution a sampler draws from: softmax(logits / T) (T <= 0, greedy: T = 1),
    restricted to the top-p nucleus (``nucleus``) and renormalised when top_p < 1; the target is always kept in
    it, so a token the sampler drew at the nucleus edge never gets -inf from rounding here. logits (..., V) ->
    (...)."""
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp32, or float64 for a float64 model
    if temperature > 0 and temperature != 1.0:
        z = z / temperature
    logp = F.log_softmax(z, dim=-1)
    picked = logp.gather(-1, targets[..., None]).squeeze(-1)
    if top_p >= 1.0:
        return picked
    with torch.no_grad():
        keep = nucleus(logp.exp(), top_p)
        keep.scatter_(-1, targets[..., None], True)
        top = logp.amax(-1, keepdim=True)  # the most likely token is always in the nucleus
    # logsumexp over the nucleus as torch.logsumexp computes it over -inf outside (the same terms and sum), without
    # the -inf: exp of -inf takes MKL's slow path, ~17x a finite exp here
    mass = torch.where(keep, (logp - top).exp(), 0.0).sum(-1)
    return picked - (mass.log() + top.squeeze(-1))


def padded_targets(completions: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The completions right-padded to the longest (B, T_c) as token ids, and the mask of their real tokens."""
    lc = [len(c) for c in completions]
    targets = torch.zeros((len(completions), max(lc, default=0)), dtype=torch.long)
    mask = torch.zeros(targets.shape)
    for i, c in enumerate(completions):
        targets[i, : lc[i]] = torch.tensor(list(c), dtype=torch.long)
        mask[i, : lc[i]] = 1.0
    return targets, mask


def _keeps_logits(model: torch.nn.Module) -> bool:
    return "logits_to_keep" in inspect.signature(base_model(model).forward).parameters


def completion_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    bf16_autocast: bool = False,
    with_argmax: bool = False,
    shared_prompt: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Per-token log-probs of each completion given its prompt (``tempered_logprobs``), one padded forward.

    ``shared_prompt`` and every row has the same prompt (one group): the prompt runs once and its key/value
    cache is repeated for the rows (``_shared_prompt_logits``; gradients flow through it), the same numbers to
    ~1e-6 for less than half the tokens at a campaign's shapes. Not with activation checkpointing (HF turns the
    cache off in training then).

    Layout: prompts left-padded to P = longest prompt, completions right-padded after column P, position ids
    from the attention mask. Completion token j of every row is predicted by the logits at column P - 1 + j, so
    the last T_c + 1 columns are all the LM head has to produce (``logits_to_keep``; models without it: slice).
    Returns (logp, mask), both (B, T_c) with T_c = longest completion; mask is 1.0 on real completion tokens;
    with_argmax, also the greedy token at each position (B, T_c). Gradients flow unless the caller wraps this in
    torch.no_grad().
    """
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    device = model_device(model)
    lp = [len(p) for p in prompts]
    lc = [len(c) for c in completions]
    if any(n == 0 for n in lp):
        raise ValueError("every prompt needs at least one token (the first completion token is predicted from it)")
    b, width, t_c = len(prompts), max(lp), max(lc)
    if shared_prompt and b > 1 and all(tuple(p) == tuple(prompts[0]) for p in prompts[1:]):
        targets, mask = (x.to(device) for x in padded_targets(completions))
        with _autocast(device, bf16_autocast):
            logits = _shared_prompt_logits(model, list(prompts[0]), targets, mask)
        logp = tempered_logprobs(logits, targets, temperature, top_p)
        if with_argmax:
            return logp * mask, mask, logits.detach().argmax(-1)
        return logp * mask, mask
    input_ids = torch.zeros((b, width + t_c), dtype=torch.long)
    attn = torch.zeros((b, width + t_c), dtype=torch.long)
    targets = torch.zeros((b, t_c), dtype=torch.long)
    mask = torch.zeros((b, t_c))
    for i, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[i, width - lp[i]: width] = torch.tensor(list(p), dtype=torch.long)
        input_ids[i, width: width + lc[i]] = torch.tensor(list(c), dtype=torch.long)
        attn[i, width - lp[i]: width + lc[i]] = 1
        targets[i, : lc[i]] = torch.tensor(list(c), dtype=torch.long)
        mask[i, : lc[i]] = 1.0
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    input_ids, attn, pos, targets, mask = (x.to(device) for x in (input_ids, attn, pos, targets, mask))
    kw = {"logits_to_keep": t_c + 1} if _keeps_logits(model) else {}
    with _autocast(device, bf16_autocast):
        logits = model(input_ids=input_ids, attention_mask=attn, position_ids=pos, use_cache=False, **kw).logits
    logits = logits[:, -(t_c + 1): -1]  # (B, T_c, V): column P - 1 + j predicts completion token j
    logp = tempered_logprobs(logits, targets, temperature, top_p)
    if with_argmax:
        return logp * mask, mask, logits.detach().argmax(-1)
    return logp * mask, mask


def _cache_kwarg(model: torch.nn.Module) -> str:
    return "cache" if "cache" in inspect.signature(base_model(model).forward).parameters else "past_key_values"


def _shared_prompt_logits(model: torch.nn.Module, prompt: list[int], targets: torch.Tensor,
                          mask: torch.Tensor) -> torch.Tensor:
    """(B, T_c, V) logits predicting each row's completion tokens ``targets`` (right-padded, ``mask``) after one
    shared ``prompt``: the prompt's forward once (its last logits predict token 0), its cache repeated B times,
    then the completions' first T_c - 1 tokens through it."""
    device = targets.device
    b, t_c = targets.shape
    p = len(prompt)
    kw = {"logits_to_keep": 1} if _keeps_logits(model) else {}
    out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True, **kw)
    first = out.logits[:, -1:].expand(b, 1, -1)
    if t_c == 1:
        return first
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    cache.batch_repeat_interleave(b)
    ids = targets[:, :-1]
    attn = torch.cat([torch.ones((b, p), dtype=torch.long, device=device), mask[:, :-1].long()], dim=1)
    pos = (p + torch.arange(t_c - 1, device=device))[None].expand(b, -1)
    rest = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True,
                 **{_cache_kwarg(model): cache}).logits
    return torch.cat([first, rest], dim=1)


@torch.no_grad()
def batch_sequence_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    bf16_autocast: bool = False,
) -> list[list[float]]:
    """Per-token log-probs of several completions (eval mode: dropout off)."""
    was_training = model.training
    model.eval()
    try:
        logp, _ = completion_logprobs(model, prompts, completions, temperature=temperature, top_p=top_p,
                                      bf16_autocast=bf16_autocast)
    finally:
        model.train(was_training)
    return [logp[i, : len(c)].tolist() for i, c in enumerate(completions)]


def sequence_logprobs(model: torch.nn.Module, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                      *, temperature: float = 1.0) -> list[float]:
    """Per-token log-probs log pi(y_t | prompt, y_<t) of one completion under ``model``."""
    if len(completion_ids) == 0:
        return []
    return batch_sequence_logprobs(model, [prompt_ids], [completion_ids], temperature=temperature)[0]
