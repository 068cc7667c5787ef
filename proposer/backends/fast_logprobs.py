"""The trainer's forward in plain torch for a group (G completions of one prompt) on a Llama-family model: the
campaign step's training forward, its reference forward and its movement probe (``PolicyTrainer`` comes here
instead of ``logprobs.completion_logprobs`` when every row shares the prompt, the model is on CPU and
``supports(model)``).

Why not transformers + peft: at the tiny proposer's size their overhead is a fifth of a step (measured on a
campaign group of 8, one thread: training forward + backward 0.22 s -> 0.17 s, reference forward 0.080 s -> 0.062 s;
bench/perf/learner_speed.py). Here:

* **The prompt once**: its rows run once and every completion row attends to its keys (as
  ``logprobs._shared_prompt_logits``; gradients flow into it from all G rows).
* **Only real tokens**: the activations are one 2-D tensor (prompt rows, then each completion's input tokens
  packed), so a short row's padding never enters a linear layer, a norm, the attention or the LM head. Each
  completion attends over the prompt's keys and its own in a call of its own: padded to the longest row, a
  group with one long completion (a row cut at the token budget beside short ones) paid attention for every row
  at that length, ~1.4-1.7x the attention of the runs' groups, 4.7x for the most uneven (docs/TRAINING.md).
* **A LoRA layer is one more small product added into the base output** (``addmm`` with the scaled B), not
  peft's four ops and their backward; its backward is written out (``_LoraAdd``) so that every product of the
  adapter has the rank as its rows, the layout the BLAS runs fastest at r = 8.
* **The elementwise steps and the attention in C++** where the operators are built and the CPU has AVX-512
  (native_step.cpp): RMSNorm with a frozen gain, SwiGLU and RoPE each one pass forward and one backward, and the
  group's attention one call a layer for the prompt and every completion (``_Attention``), where SDPA took a call
  per completion; on the bundled model a campaign step with its reference forward went from 0.201 to 0.164 s
  (these three, one thread, docs/TRAINING.md).
* **The LM head only where a completion token is predicted.**
* **Optionally, the frozen base weights multiplied in bf16** (``frozen_bf16``; the campaign's ``train.frozen_dtype``,
  bf16 by default where the CPU multiplies bf16 in hardware: AMX tiles or AVX512-BF16). A LoRA layer's base
  product is most of a step's arithmetic, and the AMX units of the Intel CPU here multiply bf16 at ~1.1-1.4
  TFLOP/s against fp32's ~186 GFLOP/s (one thread; a step gains less, ~1.2x, as the rest of it is memory traffic:
  bench/perf/frozen_dtype.py; on the AMD EPYC's AVX512-BF16 a step gains 1.18-1.27x too). The base weight is
  cast once (a bf16 copy kept per layer: half the frozen weights' fp32 size more memory in each process that runs
  this), the layer's input per call, and the product (fp32 accumulation) returned in fp32; the adapter's products,
  the norms, RoPE, attention, the LM head and the log-softmax stay fp32, and gradients reach only the adapter, as
  before. Log-probs then differ from fp32's by ~1e-3 on average (docs/TRAINING.md); the
  reference (the same base, the adapter off) is taken the same way, so a fresh adapter's KL is still exactly 0.

The same function as transformers' forward, op for op (RMSNorm, RoPE from the model's own ``inv_freq``, SDPA),
so it agrees to fp32 rounding: on the bundled model, log-probs near -30 within 7.6e-6 (a few ulps: the prompt's
and the completions' rows are one product here, two there) and a step's gradients within ~2e-6
(tests/proposer/test_fast_logprobs.py). ``supports`` says where it applies: the layouts the fast sampler computes
(``fast_sampler.supports``) with plain LoRA adapters (no DoRA or other variant, no LoRA bias, one active adapter)
or none (full fine-tuning: gradients reach the weights themselves).
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from proposer.backends import fast_sampler
from proposer.backends.fast_sampler import _rms, _rope, active_adapters, rope_tables
from proposer.backends.logprobs import base_model, padded_targets, tempered_logprobs


def supports(model: torch.nn.Module) -> bool:
    """Whether ``model`` (a transformers model or a peft model around one) is computed exactly here: no dropout
    can act (none is applied here; the trainer switches it off), plain LoRA adapters, one active."""
    if not fast_sampler.supports(model):
        return False
    if model.training and float(getattr(base_model(model).config, "attention_dropout", 0.0) or 0.0) > 0:
        return False
    tuner = _peft_types()[0]
    for mod in model.modules():
        if isinstance(mod, tuner) and hasattr(mod, "lora_A") and hasattr(mod, "base_layer"):
            if any(getattr(mod, "use_dora", {}).values()) or getattr(mod, "lora_variant", None) \
                    or any(getattr(mod, "lora_bias", {}).values()) or len(active_adapters(mod)) > 1:
                return False
            if mod.training and any(getattr(d, "p", 0.0) > 0 for d in mod.lora_dropout.values()):
                return False
    return True


def _peft_types() -> tuple[type | tuple, type | tuple]:
    """peft's class of adapter layers and of its wrappers that swap a whole module (modules_to_save, trainable
    tokens), for ``isinstance`` (a test by attribute goes through ``Module.__getattr__``'s raise on each of a
    model's ~500 modules: ~1 ms a call); empty tuples without peft."""
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return (), ()
    try:
        from peft.utils.other import AuxiliaryTrainingWrapper as wrapper  # peft >= 0.15: also trainable tokens
    except ImportError:
        from peft.utils import ModulesToSaveWrapper as wrapper
    return BaseTunerLayer, wrapper


def frozen_bf16_pays() -> bool:
    """Whether this CPU multiplies bf16 in hardware, where ``frozen_bf16`` was measured to pay: AMX tiles (a lean
    step ~1.25x on the Intel CPU of docs/TRAINING.md) or AVX512-BF16's dot products (1.18-1.27x on the AMD EPYC
    there); elsewhere a bf16 product can be slower than fp32's."""
    try:
        return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


# a LoRA layer's base Linear -> ((its weight's storage and version when copied), the bf16 copy)
_BF16_COPIES: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple[int, int], torch.Tensor]]" = \
    weakref.WeakKeyDictionary()


def _bf16_copy(base: torch.nn.Module) -> torch.Tensor | None:
    """A bf16 copy of ``base``'s weight if it is frozen fp32 on the CPU (made once, again if the weight was changed
    in place), else None: a trained or low-precision weight keeps its own product."""
    w = base.weight
    if w.requires_grad or w.dtype != torch.float32 or w.device.type != "cpu":
        return None
    key = (w.data_ptr(), w._version)
    hit = _BF16_COPIES.get(base)
    if hit is None or hit[0] != key:
        hit = _BF16_COPIES[base] = (key, w.detach().to(torch.bfloat16))
    return hit[1]


def adapters_separable(model: torch.nn.Module) -> bool:
    """Whether ``group_logprobs(..., adapters=False)`` computes what ``model`` computes inside peft's
    ``disable_adapter()``: every peft layer in it is a LoRA layer around an ``nn.Linear`` (no LoRA embedding, no
    modules_to_save or trainable-tokens wrapper), none merged into its base. The trainer's reference then skips
    that context, which walks and repr()s the model's ~500 modules: 5.5 ms a call on the tiny model, against a
    reference forward of ~60 ms (docs/TRAINING.md)."""
    tuner, wrapper = _peft_types()
    for mod in model.modules():
        if isinstance(mod, wrapper):
            return False
        if isinstance(mod, tuner) and not (
                hasattr(mod, "lora_A") and isinstance(mod.get_base_layer(), torch.nn.Linear)
                and not getattr(mod, "merged", False)):
            return False
    return True


def _linear(x: torch.Tensor, lin: torch.nn.Module, frozen_bf16: bool = False, adapters: bool = True) -> torch.Tensor:
    """What ``lin`` (an ``nn.Linear`` or a peft LoRA layer around one) computes on the rows ``x`` (N, in);
    ``frozen_bf16``: a LoRA layer's frozen base product in bf16 (see the module docstring); ``adapters=False``:
    its base alone, as with its adapters disabled."""
    base = getattr(lin, "base_layer", None)
    if base is None:
        return F.linear(x, lin.weight, lin.bias)
    w16 = _bf16_copy(base) if frozen_bf16 and not getattr(lin, "merged", False) else None
    if w16 is None:
        y = F.linear(x, base.weight, base.bias)
    else:
        y = F.linear(x.to(torch.bfloat16), w16).float()
        if base.bias is not None:
            y = y + base.bias
    for name in active_adapters(lin) if adapters else ():
        a, b, s = lin.lora_A[name].weight, lin.lora_B[name].weight, float(lin.scaling[name])
        if a.dtype == y.dtype == x.dtype:
            y = _LoraAdd.apply(y, x, a, b, s)
        else:  # a low-precision base under an fp32 adapter: as peft, the adapter's product in its own dtype
            y = (y + F.linear(F.linear(x.to(a.dtype), a), b * s)).to(y.dtype)
    return y


class _LoraAdd(torch.autograd.Function):
    """y + s (x A^T) B^T, in place on y (the base product's output, which its backward does not read), with every
    product of the forward and the backward laid out with the rank r as its rows: A x^T, B^T dy^T, (A x^T) dy,
    (B^T dy^T) x. Autograd through ``F.linear(x, A)`` and ``addmm_`` computes the same sums, but two of them as tall
    products with r columns (x A^T, dy B), which MKL runs 1.6-3x slower here: over the bundled model's 42 LoRA
    layers at a campaign group's 465 rows, 36.0 ms of a step's forward and backward against 23.9 ms
    (bench/perf/lora_products.py)."""

    @staticmethod
    def forward(ctx, y, x, a, b, s):
        ut = a @ x.t()  # (r, n)
        ctx.save_for_backward(x, a, b, ut)
        ctx.s = s
        ctx.mark_dirty(y)
        return y.addmm_(ut.t(), b.t(), alpha=s)

    @staticmethod
    def backward(ctx, dy):
        x, a, b, ut = ctx.saved_tensors
        need = ctx.needs_input_grad
        dut = (b.t() @ dy.t()).mul_(ctx.s)  # (r, n): the gradient reaching u = x A^T, transposed
        dx = dut.t() @ a if need[1] else None
        da = dut @ x if need[2] else None
        db = (ut @ dy).t().mul_(ctx.s) if need[3] else None
        return dy, dx, da, db, None


class _RmsNorm(torch.autograd.Function):
    """``_rms`` (LlamaRMSNorm) with a frozen gain, forward and backward each one pass over a row in C++
    (native_step.cpp ``rms_norm``), where autograd ran ~15 ATen operators (0.93 ms a norm at a campaign group's
    465 x 256, timed alone; 13 norms a step): a lean step 1.03x (docs/TRAINING.md). The same function, its sums in
    another order (~1e-7 relative)."""

    @staticmethod
    def forward(ctx, x, w, eps):
        y, r = _native().rms_norm(x, w, eps)
        ctx.save_for_backward(x, w, r)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, r = ctx.saved_tensors
        return _native().rms_norm_backward(dy, x, w, r), None, None


class _SwiGlu(torch.autograd.Function):
    """silu(g) * u, forward and backward each one AVX-512 pass in C++ (native_step.cpp ``swiglu``), where autograd
    made 2 and 3 passes: at a campaign group's 465 x 768, 0.24 ms forward and backward against 1.02 ms (timed
    alone). Its exp is its own (~1 ulp), so not ATen's bits: the same function to fp32 rounding."""

    @staticmethod
    def forward(ctx, g, u):
        ctx.save_for_backward(g, u)
        return _native().swiglu(g, u)

    @staticmethod
    def backward(ctx, dy):
        g, u = ctx.saved_tensors
        return _native().swiglu_backward(dy.contiguous(), g, u)


class _Rope(torch.autograd.Function):
    """``_rope`` in one pass forward and one backward (native_step.cpp ``rope``), where autograd made four
    each: 0.04 ms against 0.23 ms for a campaign group's queries (465 x 4 x 64, timed alone)."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _native().rope(x, cos, sin)

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        return _native().rope_backward(dy.contiguous(), cos, sin), None, None


class _Attention(torch.autograd.Function):
    """The group's attention in one C++ call a layer, forward and backward (native_step.cpp ``attention``): the
    prompt's rows causal over the prompt, each completion's rows over the prompt's keys and then their own,
    causal, on the packed rows (N, heads, head_dim). SDPA took a call per completion, with the prompt's keys
    concatenated to each; the softmax rows are kept for the backward. The same function, its sums in another order
    (~1e-6)."""

    @staticmethod
    def forward(ctx, q, k, v, p, sizes):
        out, probs = _native().attention(q, k, v, p, sizes)
        ctx.save_for_backward(q, k, v, out, probs)
        ctx.p, ctx.sizes = p, sizes
        return out

    @staticmethod
    def backward(ctx, dy):
        q, k, v, out, probs = ctx.saved_tensors
        dq, dk, dv = _native().attention_backward(dy.contiguous(), q, k, v, out, probs, ctx.p, ctx.sizes)
        return dq, dk, dv, None, None


def _in_cpp(*ts: torch.Tensor) -> bool:
    """Whether the C++ elementwise operators take ``ts``: contiguous fp32 CPU tensors, the operators built, AVX-512
    (their exp and lanes need it)."""
    return (all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in ts)
            and _avx512())


def _swiglu(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return _SwiGlu.apply(g, u) if _in_cpp(g, u) else F.silu(g) * u


def _rope_rows(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return _Rope.apply(x, cos, sin) if _in_cpp(x, cos, sin) and cos.dim() == 3 else _rope(x, cos, sin)


def _avx512() -> bool:
    from proposer.backends import native_step

    return native_step.avx512()


def _native():
    from proposer.backends import native_step

    return native_step.load()


def _norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of the rows ``x``: in C++ (``_RmsNorm``) for fp32 on the CPU with a frozen gain where the operators
    are built, else ``_rms``."""
    if (x.dtype == w.dtype == torch.float32 and x.device.type == "cpu" and not w.requires_grad and x.dim() == 2
            and x.is_contiguous() and _native() is not None):
        return _RmsNorm.apply(x, w, eps)
    return _rms(x, w, eps)


def group_logprobs(model: torch.nn.Module, prompt: Sequence[int], completions: Sequence[Sequence[int]],
                   temperature: float = 1.0, top_p: float = 1.0, with_argmax: bool = False,
                   frozen_bf16: bool = False, adapters: bool = True) -> tuple[torch.Tensor, ...]:
    """``completion_logprobs`` of one group: per-token log-probs (B, T_c) of each completion after the shared
    ``prompt``, the mask, and with_argmax the greedy token at each position; gradients flow unless the caller
    runs it under ``torch.no_grad()``. Every completion needs at least one token. ``frozen_bf16``: the LoRA
    layers' frozen base products in bf16 (the module docstring). ``adapters=False``: the LoRA adapters left out,
    as peft's ``disable_adapter()`` leaves them where ``adapters_separable(model)``."""
    base = base_model(model)
    cfg, inner = base.config, base.model
    dev = inner.embed_tokens.weight.device
    h = int(cfg.num_attention_heads)
    hkv = int(getattr(cfg, "num_key_value_heads", None) or h)
    d = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // h)
    eps = float(cfg.rms_norm_eps)
    b, p = len(completions), len(prompt)
    lens = [len(c) for c in completions]
    t_c = max(lens)
    if p == 0 or min(lens) == 0:
        raise ValueError("group_logprobs: every prompt and completion needs at least one token")
    n_in = t_c - 1  # completion columns that are inputs (the last token of the longest row predicts nothing)
    targets, mask = padded_targets(completions)
    # packed completion inputs: row i's first lens[i] - 1 tokens, at flat padded index i * n_in + j
    idx = torch.cat([i * n_in + torch.arange(n - 1) for i, n in enumerate(lens)])
    row, col = (idx // n_in, idx % n_in) if n_in else (idx, idx)
    m = idx.numel()
    ids = torch.cat([torch.tensor(list(prompt), dtype=torch.long), targets[row, col]]).to(dev)
    pos = torch.cat([torch.arange(p), p + col]).to(dev)
    targets, mask = targets.to(dev), mask.to(dev)
    x = F.embedding(ids, inner.embed_tokens.weight)
    cos, sin = _rope_at(inner, pos, x.dtype)
    n = x.shape[0]
    bf, ad = frozen_bf16, adapters
    sizes = [k - 1 for k in lens]  # each completion's packed input rows, in order
    for layer in inner.layers:
        att, mlp = layer.self_attn, layer.mlp
        hn = _norm(x, layer.input_layernorm.weight, eps)
        q = _rope_rows(_linear(hn, att.q_proj, bf, ad).view(n, h, d), cos, sin)
        k = _rope_rows(_linear(hn, att.k_proj, bf, ad).view(n, hkv, d), cos, sin)
        v = _linear(hn, att.v_proj, bf, ad).view(n, hkv, d)
        if d in (16, 32, 64, 128) and _in_cpp(q, k, v):
            a = _Attention.apply(q, k, v, p, sizes).view(n, h * d)
        else:
            a = _sdpa_group(q, k, v, p, sizes)
        x = x + _linear(a, att.o_proj, bf, ad)
        hn = _norm(x, layer.post_attention_layernorm.weight, eps)
        x = x + _linear(_swiglu(_linear(hn, mlp.gate_proj, bf, ad), _linear(hn, mlp.up_proj, bf, ad)), mlp.down_proj,
                        bf, ad)
    # the prompt's last row predicts every completion's token 0; packed row (i, j) predicts token j + 1 of row i
    logits = _linear(_norm(x[p - 1:], inner.norm.weight, eps), base.lm_head, adapters=ad)
    tok = targets[row.to(dev), col.to(dev) + 1] if m else targets.new_zeros(0)
    flat = torch.cat([tempered_logprobs(logits[:1].expand(b, -1), targets[:, 0], temperature, top_p),
                      tempered_logprobs(logits[1:], tok, temperature, top_p)])
    dst = torch.cat([torch.arange(b) * t_c, row * t_c + col + 1]).to(dev)
    logp = flat.new_zeros(b * t_c).index_copy(0, dst, flat).view(b, t_c)
    if not with_argmax:
        return logp * mask, mask
    with torch.no_grad():
        greedy = logits.argmax(-1)
        greedy = torch.cat([greedy[:1].expand(b), greedy[1:]])
        greedy = greedy.new_zeros(b * t_c).index_copy(0, dst, greedy).view(b, t_c)
    return logp * mask, mask, greedy


def _sdpa_group(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: int, sizes: list[int]) -> torch.Tensor:
    """What ``_Attention`` computes, by SDPA (where the C++ operators do not run): (N, heads * head_dim) from the
    packed rows (N, heads, head_dim), the prompt's p rows first, then each completion's ``sizes[i]`` rows."""
    n, h, d = q.shape
    m, gqa = n - p, k.shape[1] != h
    (qp, qc), (kp, kc), (vp, vc) = q.split([p, m]), k.split([p, m]), v.split([p, m])
    qp, kp, vp = (t.transpose(0, 1)[None] for t in (qp, kp, vp))
    a = F.scaled_dot_product_attention(qp, kp, vp, is_causal=p > 1, enable_gqa=gqa)[0].transpose(0, 1)
    a = a.reshape(p, h * d)
    if not m:
        return a
    longest = max(sizes)
    see = torch.ones((longest, p + longest), dtype=torch.bool, device=q.device).tril(p)  # the prompt, then causal

    def own(t: torch.Tensor) -> list[torch.Tensor]:  # (m, heads, d) packed -> per row (1, heads, n_i, d)
        return [r.transpose(0, 1)[None] for r in t.split(sizes)]

    # each completion over [the prompt's keys ; its own], its rows packed back in order
    return torch.cat([a, *(F.scaled_dot_product_attention(
        qi, torch.cat([kp, ki], dim=2), torch.cat([vp, vi], dim=2), attn_mask=see[:r, :p + r],
        enable_gqa=gqa)[0].transpose(0, 1).reshape(r, h * d)
        for r, qi, ki, vi in zip(sizes, own(qc), own(kc), own(vc)) if r)])


def _rope_at(inner: torch.nn.Module, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (N, 1, head_dim) at positions ``pos`` as the model's own rotary embedding computes them (its
    ``inv_freq``, fp32 angles, then the activations' dtype), the sin as ``_rope`` takes it (``rope_tables``)."""
    inv = inner.rotary_emb.inv_freq.float()
    cos, sin = rope_tables(pos.float()[:, None] * inv[None], dtype)
    return cos[:, None], sin[:, None]
