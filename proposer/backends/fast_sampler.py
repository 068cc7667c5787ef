"""A KV-cached sampler for Llama-family causal LMs in plain torch: the ``hf``/``tiny`` decode loop's fast path.

Why not the transformers forward per token: at the tiny model's size the per-step cost is framework overhead,
not arithmetic. Measured on the landed loop (bench/perf/learner_speed.py): 37% of CPU time in ``aten::cat`` (the
dynamic cache and the attention mask re-concatenated every step), the LoRA adapter adding a third more ops per
token, and G copies of the same prompt prefilled. Here:

* **One prefill per distinct prompt**, its keys and values copied into the rows that share it (a group's G rows
  share one prompt; a probe's rows a few).
* **A preallocated KV cache** (layers × rows × kv-heads × (prompt + budget) × head_dim), written in place; no
  per-step concatenation. Rows of prompts of different lengths are left-aligned to one width and masked.
* **The LoRA merged for sampling**: every linear layer's effective weight W + scaling·B·A (peft's own
  ``get_delta_weight``) is computed once per call from the live model, so a trainer's in-place update is seen at
  the next call, the base weights are never touched, and a disabled adapter (``FrozenAdapterView``) samples the
  base. A caller may also build the snapshot once (``Weights(model)``) and pass it to several calls: the
  campaign's overlapped learner (evolve/training/campaign.py) updates the live adapter on another thread while
  the pinned snapshot samples the published policy.
* **A 2-D decode step** (``_step``: rows × features, one kernel per op) on **pre-transposed weights** (``x @ W^T``
  read row-major: at 8 rows ~1.5x faster than ``F.linear``, whose small-M path also rounds differently from the
  same product on many rows). At these shapes the products are bound by memory (all 23 MB of the bundled
  model's weights read per token: ~39% of a step of 8 rows), and attention and the other operators, a few
  microseconds of framework cost each, take the rest (docs/TRAINING.md). Where MKL does not take its fast
  kernels (a CPU not Intel's) the products run in oneDNN on weights packed once per snapshot instead
  (``choose_products``: 1.18x the sampler's tokens/s on the AMD EPYC here), or, with AVX-512, in native_step.cpp's
  own kernel for a few rows (2x oneDNN's products at 8 rows there), which then also runs the group's shared-prompt
  attention (``Weights.own_attention``).
* **The step in C++** where it can be built (``choose_step``; native_step.cpp): the same ATen operators in the same
  order, so the same bits, without the interpreter's few microseconds around each of the step's ~870 operators.
* **Finished rows leave the batch** once a quarter of it is done (the cache rows are compacted).
* **The draw**: the inverse CDF of softmax(logits / T) cut to the top-p nucleus, one uniform per row from the
  caller's ``torch.Generator`` (``draw``).
* **Few dispatches per step**: at 8 rows most operators take a few microseconds, their cost the framework's (each
  Python call, each scalar made a tensor, each permuted copy), and beside the learner thread every one of them
  also takes the interpreter lock. So the sampler runs under ``torch.inference_mode``, the RMSNorm uses tensor
  constants in place (``_norm``), rotate_half is a roll (``_rope``), the shared-prefix attention's layout needs no
  permuted copies but its input and output, and each token's bookkeeping is one write per buffer: ~930 dispatches
  per generated token where there were ~1,400 (torch.profiler's count, 8 rows), the same tokens and log-probs.

The behaviour log-prob recorded per token is ``logprobs.tempered_logprobs`` of the step's logits, as in the
general loop; the trainer's full-sequence recompute of it agrees bit for bit in float64 and to fp32's noise in fp32
(~1e-5, as the general loop's: bench/perf/sampler_agreement.py). ``supports(model)`` says
whether a model is one this path computes exactly (Llama, Mistral and Qwen2 layouts with default RoPE and no
sliding window); the backend keeps its general loop for everything else.
"""
from __future__ import annotations

from dataclasses import dataclass
import functools
import torch
import torch.nn.functional as F

from proposer.backends.logprobs import base_model, nucleus, tempered_logprobs

_ARCHS = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}
COMPACT_AT = 0.75  # compact the batch when at most this share of its rows is still running
PRODUCTS = ("auto", "blas", "onednn", "native")  # the linear products' library (``choose_products``)
STEPS = ("auto", "python", "native")  # the decode step's language (``choose_step``)


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor id (GenuineIntel, AuthenticAMD, ...) from /proc/cpuinfo; "" where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def choose_products(choice: str, device: torch.device | str, dtype: torch.dtype) -> str:
    """The library the sampler's linear products run in: ``blas`` (``torch.mm``: MKL in the x86 wheels), ``onednn``
    (oneDNN on weights packed once per snapshot) or ``native`` (native_step.cpp's AVX-512 kernel on weights packed
    once per snapshot; a matrix whose width is not a multiple of 16 keeps ``blas``). ``auto`` on a CPU that is not
    Intel's, fp32 weights: native where it runs, else onednn; blas elsewhere. MKL takes its fast kernels on Intel
    CPUs only: on the AMD EPYC here the decode step's products (8 rows, the bundled model's 23 MB of weights) took
    ~3.0 ms in MKL, ~2.2 ms in oneDNN and ~1.1 ms in the native kernel (bench/perf/small_products.py). Intel CPUs
    keep the path measured there."""
    if choice not in PRODUCTS:
        raise ValueError(f"fast sampler: products must be one of {', '.join(PRODUCTS)}, got {choice!r}")
    from proposer.backends import native_step

    here = f"here {dtype} on {torch.device(device).type}"
    cpu32 = torch.device(device).type == "cpu" and dtype == torch.float32
    onednn = cpu32 and torch.backends.mkldnn.is_available()
    if choice == "onednn" and not onednn:
        raise ValueError(f"fast sampler: products onednn needs fp32 weights on a CPU with oneDNN ({here})")
    if choice == "native" and not cpu32:
        raise ValueError(f"fast sampler: products native needs fp32 weights on a CPU ({here})")
    if choice == "native" and not native_step.avx512():
        raise ValueError("fast sampler: products native: " + (native_step.reason() or "this CPU has no AVX-512"))
    if choice != "auto":
        return choice
    if not cpu32 or cpu_vendor() in ("GenuineIntel", ""):
        return "blas"
    return "native" if native_step.avx512() else "onednn" if onednn else "blas"


def choose_step(choice: str, device: torch.device | str, dtype: torch.dtype) -> str:
    """The decode step the sampler runs: ``python`` (``_step``) or ``native`` (the same operators in C++,
    native_step.cpp: the same bits). ``auto``: native for fp32 weights on a CPU where the C++ step builds (1.1-1.2x
    the sampler's tokens/s at 8 rows on the 2-core machines here), else python. The C++ step covers the fp32
    layout (RMSNorm gains folded) on a CPU only; CUDA keeps the Python step."""
    if choice not in STEPS:
        raise ValueError(f"fast sampler: step must be one of {', '.join(STEPS)}, got {choice!r}")
    if choice == "python":
        return choice
    ok = torch.device(device).type == "cpu" and dtype == torch.float32
    if choice == "native" and not ok:
        raise ValueError(f"fast sampler: step native needs fp32 weights on a CPU (here {dtype} on "
                         f"{torch.device(device).type})")
    if not ok:
        return "python"
    from proposer.backends import native_step

    if native_step.load() is None:
        if choice == "native":
            raise ValueError(f"fast sampler: step native: {native_step.reason()}")
        return "python"
    return "native"


def supports(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a layout this sampler computes exactly (else the backend's general loop runs)."""
    base = base_model(model)
    cfg = getattr(base, "config", None)
    if type(base).__name__ not in _ARCHS or cfg is None:
        return False
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if (rope.get("rope_type") or rope.get("type") or "default") != "default":
        return False
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True) \
            and type(base).__name__ != "LlamaForCausalLM":
        return False
    return getattr(cfg, "hidden_act", "silu") == "silu"


def active_adapters(linear: torch.nn.Module) -> list[str]:
    """The LoRA adapters a peft layer applies now (none when disabled or already merged into its base)."""
    if getattr(linear, "disable_adapters", False) or getattr(linear, "merged", False):
        return []
    names = linear.active_adapters if hasattr(linear, "active_adapters") else [linear.active_adapter]
    return [n for n in names if n in getattr(linear, "lora_A", {})]


def _effective(linear: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) a linear layer applies now: a peft LoRA layer's active adapters merged in, unless they are
    disabled or already merged; a plain ``nn.Linear`` as it is."""
    base = getattr(linear, "base_layer", None)
    if base is None:
        return linear.weight.detach(), None if linear.bias is None else linear.bias.detach()
    w = base.weight.detach()
    for name in active_adapters(linear):
        w = w + linear.get_delta_weight(name).detach().to(w.dtype)
    return w, None if base.bias is None else base.bias.detach()


@dataclass
class _Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    qkv: tuple[torch.Tensor, torch.Tensor | None]
    o: tuple[torch.Tensor, torch.Tensor | None]
    gate_up: tuple[torch.Tensor, torch.Tensor | None]
    down: tuple[torch.Tensor, torch.Tensor | None]


class Weights:
    """The model's effective weights for one sampling call (q/k/v and gate/up concatenated: one matmul each)."""

    def __init__(self, model: torch.nn.Module, products: str = "auto", step: str = "auto") -> None:
        base = base_model(model)
        cfg = base.config
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(getattr(cfg, "num_key_value_heads", None) or self.n_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads)
        self.eps = float(cfg.rms_norm_eps)
        rope = getattr(cfg, "rope_parameters", None) or {}
        theta = float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
        inner = base.model
        self.embed = inner.embed_tokens.weight.detach()
        self.dtype = self.embed.dtype
        # fp32: each RMSNorm's weight is folded into the linear layers it feeds (W diag(g)), two ops less per norm
        self.fold = self.dtype == torch.float32
        self.eps_t = torch.tensor(self.eps, dtype=self.dtype, device=self.embed.device)  # _norm's constants
        self.n_t = torch.tensor(float(cfg.hidden_size), dtype=self.dtype, device=self.embed.device)
        self.norm = inner.norm.weight.detach()
        self.device = self.embed.device
        self.products = choose_products(products, self.device, self.dtype)
        lib = self.products
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float,
                                                      device=self.device) / self.head_dim))
        self._table: tuple[torch.Tensor, torch.Tensor] | None = None
        self.layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            ln1, ln2 = layer.input_layernorm.weight.detach(), layer.post_attention_layernorm.weight.detach()
            qkv = _cat([_effective(getattr(att, n)) for n in ("q_proj", "k_proj", "v_proj")])
            gate_up = _cat([_effective(mlp.gate_proj), _effective(mlp.up_proj)])
            if self.fold:
                qkv, gate_up = _fold(qkv, ln1), _fold(gate_up, ln2)
            self.layers.append(_Layer(ln1, ln2, _t(qkv, lib), _t(_effective(att.o_proj), lib), _t(gate_up, lib),
                                      _t(_effective(mlp.down_proj), lib)))
        head = _fold(_effective(base.lm_head), self.norm if self.fold else None)[0]
        self.vocab = head.shape[0]
        self.head = _t((head, None), lib)
        self.step = choose_step(step, self.device, self.dtype)
        # products native: the group's shared-prompt attention in native_step.cpp's loops too, by either step
        self.own_attention = lib == "native" and self.head_dim % 16 == 0 and self.head_dim <= 128
        mats = [m for layer in self.layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [self.head]
        self.flat = ([m[0] for m in mats], [m[1] for m in mats])  # native_step.cpp's weights and biases

    def table(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``rope_tables`` of positions 0..n-1 at least (rows, head_dim), grown on demand (computed as
        LlamaRotaryEmbedding does: fp32 angles, then the model's dtype)."""
        if self._table is None or self._table[0].shape[0] < n:
            n = max(n, 2 * (0 if self._table is None else self._table[0].shape[0]), 512)
            self._table = rope_tables(torch.arange(n, device=self.device, dtype=torch.float)[:, None] * self.inv_freq,
                                      self.dtype)
        return self._table


def _t(linear: tuple[torch.Tensor, torch.Tensor | None], products: str = "blas"
       ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(W^T contiguous, bias): ``x @ W^T`` reads it row-major. At a decode step's few rows this runs ~1.5x faster
    than ``F.linear`` (MKL's small-M path for a transposed operand) and gives the bits ``F.linear`` gives on many
    rows (the trainer's recompute), where ``F.linear`` on <= 8 rows does not. ``onednn``: (W packed in oneDNN's
    blocked layout, bias) instead; ``native``: (W^T in native_step.cpp's panels, 3-D, bias) where W's rows are a
    multiple of 16 (``choose_products``)."""
    if products == "onednn":
        return torch.ops.mkldnn._reorder_linear_weight(linear[0].contiguous()), linear[1]
    if products == "native" and linear[0].shape[0] % 16 == 0:
        from proposer.backends import native_step

        return native_step.load().pack(linear[0].t()), linear[1]
    return linear[0].t().contiguous(), linear[1]


def _lin(x: torch.Tensor, wb: tuple[torch.Tensor, torch.Tensor | None]) -> torch.Tensor:
    wt, b = wb
    if x.dim() != 2:
        return _lin(x.reshape(-1, x.shape[-1]), wb).view(*x.shape[:-1], -1)
    if wt.dim() == 3:  # native_step.cpp's panels
        return torch.ops.vevo_sampler.linear(x, wt, b)
    if wt.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x, wt, b, "none", [], "")
    return torch.mm(x, wt) if b is None else torch.addmm(b, x, wt)


def _fold(linear: tuple[torch.Tensor, torch.Tensor | None], gain: torch.Tensor | None):
    return linear if gain is None else (linear[0] * gain, linear[1])


def _cat(parts: list[tuple[torch.Tensor, torch.Tensor | None]]) -> tuple[torch.Tensor, torch.Tensor | None]:
    w = torch.cat([p[0] for p in parts], dim=0)
    if all(p[1] is None for p in parts):
        return w, None
    return w, torch.cat([p[1] if p[1] is not None else torch.zeros(p[0].shape[0], dtype=w.dtype, device=w.device)
                         for p in parts])


def _rms(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LlamaRMSNorm; ``w`` None when its gain is folded into the next linear layer."""
    if w is None:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _norm(w: "Weights", x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """``_rms`` in the sampler: with the gain folded, the same operations bit for bit (mean = sum, then divided
    by n) in four kernels on the temporaries, n and eps as tensors, where Python scalars cost eleven dispatches."""
    if not w.fold:
        return _rms(x, gain, w.eps)
    return x * (x * x).sum(-1, keepdim=True).div_(w.n_t).add_(w.eps_t).rsqrt_()


def rope_tables(ang: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of LlamaRotaryEmbedding's [ang ; ang] in ``dtype``, the sin's first half negated (``_rope``)."""
    c, s = ang.cos(), ang.sin()
    return torch.cat((c, c), dim=-1).to(dtype), torch.cat((-s, s), dim=-1).to(dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' apply_rotary_pos_emb (x cos + rotate_half(x) sin) on one tensor, ``sin`` from
    ``rope_tables``: rotate_half's negation is in the table, so the rotation is one roll, not a negation and a
    concatenation (the same products, bit for bit, forward and backward)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin


class _Cache:
    """Per layer, keys and values of every row: (rows, kv_heads, length, head_dim), written in place. With a
    ``prefix`` (every row's one shared prompt: per layer (k, v) of (kv_heads, P, head_dim)) the rows hold only
    the generated tokens, heads-major (kv_heads, rows, length, head_dim), and attention reads the prompt's keys
    once for all rows.

    Columns are written before attention reads them (the prompts' at prefill, their left padding zeroed, a
    token's at its step), so the cache is allocated empty and a compaction copies only the columns written: the
    pages of a full-length zeroed cache (~38 MB for 8 rows of 384 tokens) cost more than the columns read."""

    def __init__(self, w: Weights, rows: int, length: int, prefix: list | None = None) -> None:
        self.row_dim = 0 if prefix is None else 1
        shape = [w.n_kv, length, w.head_dim]
        shape.insert(self.row_dim, rows)
        self.k = [torch.empty(shape, dtype=w.dtype, device=w.device) for _ in w.layers]
        self.v = [torch.empty(shape, dtype=w.dtype, device=w.device) for _ in w.layers]
        self.prefix = prefix

    def keep(self, idx: torch.Tensor, written: int) -> None:
        """Keep the rows ``idx``, their first ``written`` columns."""
        self.k = [_rows(k, idx, written, self.row_dim) for k in self.k]
        self.v = [_rows(v, idx, written, self.row_dim) for v in self.v]


def _rows(cache: torch.Tensor, idx: torch.Tensor, written: int, dim: int) -> torch.Tensor:
    shape = list(cache.shape)
    shape[dim] = idx.shape[0]
    out = torch.empty(shape, dtype=cache.dtype, device=cache.device)
    out[:, :, :written] = cache[:, :, :written].index_select(dim, idx)
    return out


def _prefill(w: Weights, prompt: list[int]) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The causal forward of one prompt: its last position's logits (1, V) and, per layer, its keys and values
    (1, kv_heads, P, head_dim)."""
    ids = torch.tensor([prompt], dtype=torch.long, device=w.device)
    t = ids.shape[1]
    x = F.embedding(ids, w.embed)
    cos, sin = (c[:t, None] for c in w.table(t))  # positions 0..t-1: (t, 1, head_dim)
    nq, nkv, hd = w.n_heads * w.head_dim, w.n_kv * w.head_dim, w.head_dim
    nqk = w.n_heads + w.n_kv
    kv = []
    for layer in w.layers:
        qkv = _lin(_norm(w, x, layer.ln1), layer.qkv)
        qk = _rope(qkv[..., :nq + nkv].view(1, t, nqk, hd), cos, sin).transpose(1, 2)  # q and k at once
        q, k = qk[:, :w.n_heads], qk[:, w.n_heads:]
        v = qkv[..., nq + nkv:].view(1, t, w.n_kv, hd).transpose(1, 2)
        kv.append((k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=w.n_kv != w.n_heads)
        x = x + _lin(a.transpose(1, 2).reshape(1, t, nq), layer.o)
        gu = _lin(_norm(w, x, layer.ln2), layer.gate_up)
        half = gu.shape[-1] // 2
        x = x + _lin(F.silu(gu[..., :half]) * gu[..., half:], layer.down)
    return _lin(_norm(w, x[:, -1], w.norm), w.head), kv


def _step(w: Weights, tok: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: _Cache, at: int,
          mask: torch.Tensor | None) -> torch.Tensor:
    """One decode step, rows as the only batch dimension (2-D activations: each op one kernel, no views around
    the matmuls): ``tok`` (rows,) at the positions whose rope ``cos``/``sin`` (rows, 1, head_dim) are; its key
    and value go to cache column ``at``. Returns the logits (rows, V)."""
    rows = tok.shape[0]
    x = w.embed.index_select(0, tok)
    nq, nkv, hd, nh = w.n_heads * w.head_dim, w.n_kv * w.head_dim, w.head_dim, w.n_heads
    nqk = w.n_heads + w.n_kv
    gqa = w.n_kv != w.n_heads
    for li, layer in enumerate(w.layers):
        qkv = _lin(_norm(w, x, layer.ln1), layer.qkv)
        qk = _rope(qkv[:, :nq + nkv].view(rows, nqk, hd), cos, sin)
        kc, vc = cache.k[li], cache.v[li]
        k, v = qk[:, nh:], qkv[:, nq + nkv:].view(rows, w.n_kv, hd)
        if cache.prefix is not None:
            kc[:, :, at], vc[:, :, at] = k.transpose(0, 1), v.transpose(0, 1)
            if w.own_attention:
                a = torch.ops.vevo_sampler.prefix_attention(qk[:, :nh], *cache.prefix[li], kc, vc, at + 1)
            else:
                a = _shared_prefix_attention(qk[:, :nh], *cache.prefix[li], kc[:, :, : at + 1], vc[:, :, : at + 1])
        else:
            kc[:, :, at], vc[:, :, at] = k, v
            a = F.scaled_dot_product_attention(qk[:, :nh, None], kc[:, :, : at + 1], vc[:, :, : at + 1],
                                               attn_mask=mask, enable_gqa=gqa).view(rows, nq)
        x = x + _lin(a, layer.o)
        gu = _lin(_norm(w, x, layer.ln2), layer.gate_up)
        half = gu.shape[-1] // 2
        x = x + _lin(F.silu(gu[:, :half]) * gu[:, half:], layer.down)
    return _lin(_norm(w, x, w.norm), w.head)


def _native_step(w: Weights, tok: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: _Cache, at: int,
                 mask: torch.Tensor | None) -> torch.Tensor:
    """``_step`` in C++ (native_step.cpp): the same operators, one call."""
    from proposer.backends import native_step

    pk, pv = ([p[0] for p in cache.prefix], [p[1] for p in cache.prefix]) if cache.prefix is not None else ([], [])
    return native_step.load().step(tok, cos, sin, w.embed, *w.flat, cache.k, cache.v, pk, pv, at, mask, w.n_heads,
                              w.n_kv, w.head_dim, w.n_t, w.eps_t, w.own_attention)


def _shared_prefix_attention(q: torch.Tensor, pk: torch.Tensor, pv: torch.Tensor, keys: torch.Tensor,
                             vals: torch.Tensor) -> torch.Tensor:
    """Softmax attention of one query per row over [the shared prompt ; the row's own tokens] -> (rows, H * D).

    q (rows, H, D); pk, pv (H_kv, P, D) shared by every row; keys, vals (H_kv, rows, T, D). The prompt part is
    one matmul with the heads as the batch, so its keys are read once, not once per row (the general path's
    copy). The cache and the scaled query are heads-major, (H_kv, rows, g, ...) with g = H / H_kv query heads per
    key head, so both parts' batched products, the scores and the probabilities are views of one layout: one
    permuted copy in (the scaled query) and one out, where a rows-major cache needed four."""
    rows, h, d = q.shape
    hkv, n_p = pk.shape[0], pk.shape[1]
    g, t = h // hkv, keys.shape[2]
    qh = torch.empty((hkv, rows, g, d), dtype=q.dtype, device=q.device)
    torch.mul(q.view(rows, hkv, g, d), d ** -0.5, out=qh.permute(1, 0, 2, 3))
    s_p = torch.bmm(qh.view(hkv, rows * g, d), pk.transpose(1, 2))
    s_g = torch.bmm(qh.view(hkv * rows, g, d), keys.reshape(hkv * rows, t, d).transpose(1, 2))
    att = torch.cat((s_p.view(hkv, rows, g, n_p), s_g.view(hkv, rows, g, t)), dim=-1)
    att = att.softmax(-1, dtype=torch.promote_types(q.dtype, torch.float32)).to(q.dtype)
    out = (torch.bmm(att[..., :n_p].reshape(hkv, rows * g, n_p), pv).view(hkv, rows, g, d)
           + torch.bmm(att[..., n_p:].reshape(hkv * rows, g, t), vals.reshape(hkv * rows, t, d)).view(hkv, rows, g, d))
    return out.permute(1, 0, 2, 3).reshape(rows, h * d)


def draw(logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator | None) -> torch.Tensor:
    """One token per row: greedy at T <= 0, else a sample of softmax(logits / T) cut to the top-p nucleus, by the
    inverse CDF (one uniform per row: ~10x cheaper here than ``multinomial`` or an exponential race over V)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = F.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        probs = torch.where(nucleus(probs, top_p), probs, 0.0)
    cdf = probs.double().cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=gen, dtype=torch.float64, device=probs.device) * cdf[:, -1:]
    tok = torch.searchsorted(cdf, u, right=True).clamp_(max=probs.shape[-1] - 1)
    # u * total rounding up to the total could land past the last token of non-zero mass: take that token
    zero = probs.gather(-1, tok) <= 0
    if bool(zero.any()):
        last = (probs > 0).float().cumsum(-1).argmax(-1, keepdim=True)
        tok = torch.where(zero, last, tok)
    return tok.squeeze(-1)


@torch.inference_mode()
def sample(model: torch.nn.Module, prompts: list[list[int]], budget: int, temperature: float, top_p: float,
           eos_ids: set[int], gen: torch.Generator | None, weights: "Weights | None" = None,
           products: str = "auto", step: str = "auto") -> list[tuple[list[int], list[float], bool]]:
    """One continuation per row of ``prompts`` (rows sharing a prompt share its prefill): per row (token ids,
    behaviour log-probs, finished by EOS). At most ``budget`` tokens per row. ``weights``: a snapshot taken
    earlier (default: the live model's, now, its products in ``products`` and its step in ``step``:
    ``choose_products``, ``choose_step``)."""
    w = weights if weights is not None else Weights(model, products, step)
    step_fn = _native_step if w.step == "native" else _step
    dev = w.device
    b = len(prompts)
    if b == 0 or budget <= 0:
        return [([], [], False) for _ in prompts]
    distinct: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        distinct.setdefault(tuple(p), []).append(i)
    ldt = torch.promote_types(w.dtype, torch.float32)  # fp32 logits, or the model's float64
    logits = torch.empty((b, w.vocab), dtype=ldt, device=dev)
    start = torch.zeros(b, dtype=torch.long)
    if len(distinct) == 1:  # a group: the prompt's keys are kept once, the rows hold their own tokens only
        last, kv = _prefill(w, prompts[0])
        cache = _Cache(w, b, budget, prefix=[(k[0], v[0]) for k, v in kv])
        logits[:] = last.to(ldt)
        width = 0
    else:
        width = max(len(p) for p in prompts)
        cache = _Cache(w, b, width + budget)
        for c in cache.k + cache.v:  # a shorter prompt's left padding: masked, but read (it must not be NaN)
            c[:, :, :width].zero_()
    for p, rows in (distinct.items() if cache.prefix is None else ()):
        last, kv = _prefill(w, list(p))
        idx = torch.tensor(rows, device=dev)
        for li, (k, v) in enumerate(kv):
            cache.k[li][idx, :, width - len(p): width] = k.expand(len(rows), -1, -1, -1)
            cache.v[li][idx, :, width - len(p): width] = v.expand(len(rows), -1, -1, -1)
        logits[idx] = last.to(ldt).expand(len(rows), -1)
        start[rows] = width - len(p)
    eos = torch.tensor(sorted(eos_ids), device=dev)
    # per original row; a finished row writes past its end until a compaction drops it (its length: its first EOS)
    toks = torch.zeros((b, budget), dtype=torch.long)
    lps = torch.zeros((b, budget), dtype=ldt)
    live = torch.arange(b)  # original row of each batch row
    alive = torch.ones(b, dtype=torch.bool)  # batch rows still generating (finished ones leave at compaction)
    pos = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=dev)  # position of the next token
    cos_t, sin_t = w.table(int(pos.max()) + budget)
    col_start = start.to(dev)
    same = len({len(p) for p in prompts}) == 1
    p_nuc = top_p if temperature > 0 else 1.0
    ran = 0
    for step in range(budget):
        nxt = draw(logits, temperature, top_p, gen)
        lp = tempered_logprobs(logits, nxt, temperature, p_nuc)
        toks[live, step], lps[live, step] = nxt.cpu(), lp.cpu()
        ran = step + 1
        alive &= ~torch.isin(nxt, eos).cpu()
        n_run = int(alive.sum())
        if n_run == 0 or step == budget - 1:
            break
        if n_run <= COMPACT_AT * len(live):
            keep = alive.nonzero().squeeze(-1)
            keep_d = keep.to(dev)
            cache.keep(keep_d, width + step)
            live, alive, nxt, pos, col_start = live[keep], alive[keep], nxt[keep_d], pos[keep_d], col_start[keep_d]
        at = width + step
        mask = None
        if not same:
            mask = (torch.arange(at + 1, device=dev)[None] >= col_start[:, None])[:, None, None]
        logits = step_fn(w, nxt, cos_t.index_select(0, pos)[:, None], sin_t.index_select(0, pos)[:, None], cache,
                         at, mask).to(ldt)
        pos = pos + 1
    out = []
    for t, lp_row in zip(toks[:, :ran].tolist(), lps[:, :ran].tolist()):
        n = next((j + 1 for j, tok in enumerate(t) if tok in eos_ids), 0)
        out.append((t[:n], lp_row[:n], True) if n else (t, lp_row, False))
    return out


def flops_per_token(model: torch.nn.Module, context: int) -> float:
    """Forward FLOPs of one decoded token at ``context`` tokens of attention (2 per multiply-add)."""
    w = Weights(model, "blas", "python")
    mats = sum(layer.qkv[0].numel() + layer.o[0].numel() + layer.gate_up[0].numel() + layer.down[0].numel()
               for layer in w.layers)
    attn = 2 * 2 * len(w.layers) * w.n_heads * w.head_dim * context
    return 2.0 * (mats + w.head[0].numel()) + attn


def bytes_per_step(model: torch.nn.Module, rows: int, prompt: int, own: int) -> float:
    """Bytes one decode step of ``rows`` rows sharing a ``prompt``-token prompt reads at least, each row ``own``
    tokens in: every weight matrix once, the prompt's keys and values once, each row's own. At a few rows the
    step streams the weights, so this, not ``flops_per_token``, bounds it."""
    w = Weights(model, "blas", "python")
    mats = sum(m[0].numel() for layer in w.layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down))
    kv = 2 * len(w.layers) * w.n_kv * w.head_dim * (prompt + rows * own)
    return float((mats + w.head[0].numel() + kv) * w.embed.element_size())
