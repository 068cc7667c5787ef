"""The trainer's plain-torch group forward (proposer/backends/fast_logprobs.py) against transformers' (the shared-
prompt path of ``completion_logprobs``): the same log-probs, greedy tokens and gradients, with and without a LoRA,
with the adapter disabled (the KL reference), on Llama and on Qwen2 (biases, grouped-query heads), at a sampling
temperature and top-p; where it does not apply, ``supports`` says so."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from proposer.backends import TINY_CHECKPOINT, make_backend  # noqa: E402
from proposer.backends import fast_logprobs as fl  # noqa: E402
from proposer.backends.logprobs import completion_logprobs  # noqa: E402
from proposer.training.lora import wrap_lora  # noqa: E402


def _llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                                        tie_word_embeddings=False))


def _qwen2(seed: int = 1):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128))


def _lora(model, seed: int = 0):
    torch.manual_seed(seed)
    m = wrap_lora(model, rank=4)
    for n, p in m.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0.0, 0.1)
    return m


def _group(vocab: int, lengths: list[int], seed: int = 0) -> tuple[list[int], list[list[int]]]:
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, vocab, (9,), generator=g).tolist()
    return prompt, [torch.randint(1, vocab, (n,), generator=g).tolist() for n in lengths]


def _both(model, prompt, comps, temperature, top_p):
    """(log-probs, mask, greedy, gradients of a weighted sum) from the fast path and from transformers'."""
    out = []
    params = [p for p in model.parameters() if p.requires_grad]
    w = torch.linspace(-1.0, 1.0, len(comps))[:, None]
    for fast in (True, False):
        for p in params:
            p.grad = None
        if fast:
            logp, mask, greedy = fl.group_logprobs(model, prompt, comps, temperature, top_p, with_argmax=True)
        else:
            logp, mask, greedy = completion_logprobs(model, [prompt] * len(comps), comps, temperature=temperature,
                                                     top_p=top_p, with_argmax=True, shared_prompt=True)
        if params:
            (logp * w).sum().backward()
        out.append((logp.detach(), mask, greedy * mask.long(), [p.grad.clone() for p in params]))
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("adapter", ["none (full fine-tuning)", "lora", "lora disabled"])
def test_group_forward_equals_transformers(arch, adapter):
    model = _llama() if arch == "llama" else _qwen2()
    if adapter != "none (full fine-tuning)":
        model = _lora(model)
    assert fl.supports(model)
    prompt, comps = _group(model.config.vocab_size, [7, 1, 12, 5, 12, 3])  # unequal rows: padding is skipped
    if adapter == "lora disabled":
        with model.disable_adapter():
            (fast, hf) = _both(model, prompt, comps, 0.7, 0.9)
    else:
        fast, hf = _both(model, prompt, comps, 0.7, 0.9)
    assert torch.equal(fast[1], hf[1])
    assert float((fast[0] - hf[0]).abs().max()) < 1e-5
    assert float(fast[0].abs().max()) > 0.1  # real log-probs, not an empty result
    assert torch.equal(fast[2], hf[2])
    if adapter == "lora disabled":  # the adapter is not used: nothing of it gets a gradient
        assert all(float(g.abs().max()) == 0.0 for g in fast[3] + hf[3])
    else:
        assert max(float((a - b).abs().max()) for a, b in zip(fast[3], hf[3])) < 1e-5
        assert max(float(g.abs().max()) for g in fast[3]) > 1e-3


@pytest.mark.parametrize("grads", ["all", "adapter only", "input only"])
def test_lora_product_backward_is_exact(grads):
    """The adapter's product in its own Function (``_LoraAdd``, its products laid out with the rank as rows): in
    float64, its gradients are the finite differences' (``gradcheck``) for every input that asks for one, and its
    output is the plain formula y + s (x A^T) B^T; only the inputs that need a gradient get one."""
    g = torch.Generator().manual_seed(0)
    y, x, a, b = (torch.randn(*shape, generator=g, dtype=torch.float64) for shape in ((7, 5), (7, 6), (3, 6), (5, 3)))
    x.requires_grad_(grads != "adapter only")
    a.requires_grad_(grads != "input only")
    b.requires_grad_(grads != "input only")

    def f(y, x, a, b):
        return fl._LoraAdd.apply(y.clone(), x, a, b, 0.5)  # in place on its first input: give it a copy

    assert torch.autograd.gradcheck(f, (y, x, a, b))
    out = f(y, x, a, b)
    assert float((out - (y + 0.5 * (x @ a.t()) @ b.t())).detach().abs().max()) < 1e-12
    out.sum().backward()
    assert [t.grad is not None for t in (x, a, b)] == [t.requires_grad for t in (x, a, b)]


@pytest.mark.parametrize("width", [256, 40])  # AVX-512 lanes (a multiple of 16), and the sums in order
def test_native_rms_norm_is_the_autograd_one(width):
    """``_norm`` in C++ (``_RmsNorm``, a frozen gain) against ``_rms`` through autograd: the same outputs and input
    gradients to fp32 rounding; a gain that is trained keeps ``_rms`` (its gradient is not computed in C++)."""
    from proposer.backends import native_step
    from proposer.backends.fast_sampler import _rms

    if native_step.load() is None:
        pytest.skip(f"the C++ operators cannot be built here: {native_step.reason()}")
    g = torch.Generator().manual_seed(width)
    x = torch.randn(37, width, generator=g) * 3.0
    w = torch.randn(width, generator=g)
    dy = torch.randn(37, width, generator=g)
    got, want = x.clone().requires_grad_(), x.clone().requires_grad_()
    y = fl._norm(got, w, 1e-5)
    assert y.grad_fn is not None and "RmsNorm" in type(y.grad_fn).__name__
    ref = _rms(want, w, 1e-5)
    assert float((y - ref).detach().abs().max()) < 1e-5 * float(ref.detach().abs().max())
    y.backward(dy)
    ref.backward(dy)
    assert float((got.grad - want.grad).abs().max()) < 1e-5 * float(want.grad.abs().max())
    trained = w.clone().requires_grad_()
    assert "RmsNorm" not in type(fl._norm(x, trained, 1e-5).grad_fn).__name__


@pytest.mark.parametrize("shape", [(465, 768), (7, 13)])  # a campaign's MLP rows; lanes left over after 16s
def test_native_swiglu_is_silu_times_up(shape):
    """``_swiglu`` in C++ (``_SwiGlu``: its own exp in 16 lanes) against ``F.silu(g) * u`` through autograd: values
    and both gradients to fp32 rounding, over gates from -100 to 100 (where e^-g overflows and underflows)."""
    from proposer.backends import native_step

    if not native_step.avx512():
        pytest.skip("no AVX-512 or no C++ operators here: the Python SwiGLU runs")
    gen = torch.Generator().manual_seed(shape[1])
    g0, u0, dy = (torch.randn(*shape, generator=gen) * 4.0 for _ in range(3))
    g0.view(-1)[:5] = torch.tensor([-100.0, 100.0, 0.0, -20.0, 30.0])
    g, u = g0.clone().requires_grad_(), u0.clone().requires_grad_()
    gr, ur = g0.clone().requires_grad_(), u0.clone().requires_grad_()
    y = fl._swiglu(g, u)
    assert "SwiGlu" in type(y.grad_fn).__name__
    ref = F.silu(gr) * ur
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, ref, rtol=2e-6, atol=1e-6)
    y.backward(dy)
    ref.backward(dy)
    torch.testing.assert_close(g.grad, gr.grad, rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(u.grad, ur.grad, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("heads,d", [(4, 64), (3, 10)])
def test_native_rope_is_the_python_one(heads, d):
    """``_rope_rows`` in C++ (``_Rope``) against ``_rope`` through autograd, with ``rope_tables``' tables: values and
    the input's gradient to fp32 rounding; a strided input keeps ``_rope``."""
    from proposer.backends import native_step
    from proposer.backends.fast_sampler import _rope, rope_tables

    if not native_step.avx512():
        pytest.skip("no AVX-512 or no C++ operators here: the Python RoPE runs")
    gen = torch.Generator().manual_seed(d)
    x0, dy = torch.randn(50, heads, d, generator=gen), torch.randn(50, heads, d, generator=gen)
    cos, sin = rope_tables(torch.arange(50.0)[:, None] * torch.rand(d // 2, generator=gen)[None], torch.float32)
    cos, sin = cos[:, None], sin[:, None]
    x, xr = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    y, ref = fl._rope_rows(x, cos, sin), _rope(xr, cos, sin)
    assert "Rope" in type(y.grad_fn).__name__
    torch.testing.assert_close(y, ref, rtol=2e-6, atol=1e-6)
    y.backward(dy)
    ref.backward(dy)
    torch.testing.assert_close(x.grad, xr.grad, rtol=2e-6, atol=1e-6)
    strided = torch.randn(50, heads, 2 * d, generator=gen)[..., ::2]
    assert "Rope" not in type(fl._rope_rows(strided.requires_grad_(), cos, sin).grad_fn).__name__


@pytest.mark.parametrize("heads,kv_heads,d,p,sizes", [
    (4, 4, 64, 75, [51, 48, 57, 49, 48, 27, 52, 58]),  # a campaign group of the bundled model
    (4, 2, 16, 9, [4, 0, 11, 1]),  # grouped-query heads; a completion of one token (no input rows)
    (2, 1, 32, 1, [3, 17]),  # a prompt of one token
    (2, 2, 128, 5, []),  # the prompt alone
])
def test_native_attention_is_the_sdpa_one(heads, kv_heads, d, p, sizes):
    """``_Attention`` (the group's attention in one C++ call) against ``_sdpa_group`` (SDPA per completion, as
    before) through autograd: outputs and the gradients of q, k and v to fp32 rounding."""
    from proposer.backends import native_step

    if not native_step.avx512():
        pytest.skip("no AVX-512 or no C++ operators here: SDPA runs")
    n = p + sum(sizes)
    gen = torch.Generator().manual_seed(d + p)
    ins = [torch.randn(n, hh, d, generator=gen) for hh in (heads, kv_heads, kv_heads)]
    dy = torch.randn(n, heads * d, generator=gen)
    got, want = [t.clone().requires_grad_() for t in ins], [t.clone().requires_grad_() for t in ins]
    y = fl._Attention.apply(*got, p, sizes).view(n, heads * d)
    ref = fl._sdpa_group(*want, p, sizes)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=3e-6)
    y.backward(dy)
    ref.backward(dy)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)


def test_one_token_completions():
    """Rows of one token: nothing of theirs is an input (every token is predicted by the prompt's last row); and
    one long row beside short ones, each row attending over its own length."""
    model = _lora(_llama(seed=3))
    for lengths in ([1, 1, 1], [1, 4, 1], [2, 40, 1, 3]):
        prompt, comps = _group(model.config.vocab_size, lengths, seed=len(lengths))
        fast, hf = _both(model, prompt, comps, 1.0, 1.0)
        assert float((fast[0] - hf[0]).abs().max()) < 1e-5
        assert max(float((a - b).abs().max()) for a, b in zip(fast[3], hf[3])) < 1e-5
    with pytest.raises(ValueError, match="at least one token"):
        fl.group_logprobs(model, prompt, [[3], []])


@pytest.mark.parametrize("frozen_bf16", [False, True])
def test_adapters_left_out_is_peft_disabling_them(frozen_bf16):
    """The trainer's KL reference without peft's ``disable_adapter()`` context: ``adapters=False`` gives its
    log-probs bit for bit, in fp32 and with the frozen products in bf16, and the trainer's reference (which takes
    this path) equals the context's. ``adapters_separable`` refuses a model where peft swaps more than LoRA
    layers (a modules_to_save copy: disabling the adapter would switch that module back too)."""
    from peft import LoraConfig, get_peft_model

    from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample

    model = _lora(_llama(seed=4))
    prompt, comps = _group(model.config.vocab_size, [5, 12, 1, 7], seed=6)
    with torch.no_grad():
        with model.disable_adapter():
            off = fl.group_logprobs(model, prompt, comps, 0.7, 0.9, frozen_bf16=frozen_bf16)[0]
        left_out = fl.group_logprobs(model, prompt, comps, 0.7, 0.9, frozen_bf16=frozen_bf16, adapters=False)[0]
        on = fl.group_logprobs(model, prompt, comps, 0.7, 0.9, frozen_bf16=frozen_bf16)[0]
    assert torch.equal(left_out, off)
    assert float((on - off).abs().max()) > 1e-3  # the adapter acts, so leaving it out is seen
    assert fl.adapters_separable(model)
    samples = [TrainSample(prompt, c, None, 1.0) for c in comps]
    tr = PolicyTrainer(model, TrainConfig(temperature=0.7, top_p=0.9, kl_beta=0.1, frozen_bf16=frozen_bf16))
    assert tr._fast(samples, model)  # so the reference below leaves the adapters out
    ref = tr.reference(samples)[0][0]
    with model.disable_adapter(), torch.no_grad():
        assert torch.equal(ref, fl.group_logprobs(model, prompt, comps, 0.7, 0.9, frozen_bf16=frozen_bf16)[0])
    saved = get_peft_model(_llama(seed=4), LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["lm_head"]))
    assert fl.supports(saved) and not fl.adapters_separable(saved)


@pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled checkpoint")
def test_bundled_model_agrees_to_fp32_rounding():
    """On the bundled proposer (fp32, one thread, the campaign's setting) with a trained-looking LoRA: log-probs
    near -30 (an fp32 ulp there is 2e-6) agree within a few ulps (measured: at most 7.6e-6; the prompt's and the
    completions' rows run as one product here, as two in transformers', so the rounding can differ), the
    bound the fast sampler's tests use for fp32 (tests/proposer/test_fast_sampler.py)."""
    be = make_backend("tiny", threads=1)
    model = _lora(copy.deepcopy(be.model), seed=0)
    prompt = be.encode_prompt("def f(xs):\n    return sorted(xs)[:3]\n<answer_1>", 200)[0]
    comps = _group(be.model.config.vocab_size, [30, 17, 41, 8], seed=5)[1]
    with torch.no_grad():
        fast = fl.group_logprobs(model, prompt, comps, 0.7, 0.9)[0]
        hf = completion_logprobs(model, [prompt] * 4, comps, temperature=0.7, top_p=0.9, shared_prompt=True)[0]
    assert float(fast.abs().max()) > 10.0
    assert float((fast - hf).abs().max()) <= 5e-5


@pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled checkpoint")
def test_frozen_bf16_is_near_fp32_and_exact_where_it_must_be():
    """``frozen_bf16`` (the LoRA's frozen base products in bf16) on the bundled proposer: a fresh adapter's log-probs
    are the reference's (the adapter off) bit for bit, so a first step's KL is exactly 0; a trained-looking adapter's
    log-probs and gradients stay near fp32's (bf16's rounding: measured here mean 5.4e-3, max 0.18, gradients'
    cosine 0.9999) but are not fp32's (the switch acts); a model without an adapter (full fine-tuning: its weights
    train) and a run with the switch off are computed in fp32 as before; the bf16 copy of a weight follows an
    in-place change of it."""
    be = make_backend("tiny", threads=1)
    model = wrap_lora(copy.deepcopy(be.model), rank=8)  # B = 0: the adapter changes nothing yet
    prompt = be.encode_prompt("def f(xs):\n    return sorted(xs)[:3]\n<answer_1>", 200)[0]
    comps = _group(be.model.config.vocab_size, [30, 17, 41, 8], seed=5)[1]
    with torch.no_grad():
        fresh = fl.group_logprobs(model, prompt, comps, frozen_bf16=True)[0]
        with model.disable_adapter():
            ref = fl.group_logprobs(model, prompt, comps, frozen_bf16=True)[0]
    assert torch.equal(fresh, ref)

    model = _lora(copy.deepcopy(be.model), seed=0)
    params = [p for p in model.parameters() if p.requires_grad]
    from proposer.backends.base import SamplingParams

    drawn = be.generate(["def f(xs):\n    return sorted(xs)[:3]\n<answer_1>"], 4,
                        SamplingParams(temperature=1.0, max_tokens=40, seed=0))[0]
    code = [list(c.token_ids) for c in drawn]  # the model's own samples, as a step trains on
    prompt = list(drawn[0].prompt_token_ids)
    out = {}
    for bf in (False, True):
        for p in params:
            p.grad = None
        logp, mask = fl.group_logprobs(model, prompt, code, frozen_bf16=bf)
        (logp * torch.linspace(-1.0, 1.0, len(code))[:, None]).sum().backward()
        out[bf] = logp.detach()[mask.bool()], torch.cat([p.grad.flatten() for p in params])
    diff = (out[True][0] - out[False][0]).abs()
    assert 0 < float(diff.mean()) < 1e-2 and float(diff.max()) < 0.3, (float(diff.mean()), float(diff.max()))
    assert float(torch.nn.functional.cosine_similarity(out[True][1], out[False][1], dim=0)) > 0.999

    full = copy.deepcopy(be.model)  # no adapter: every weight trains, none is copied to bf16
    with torch.no_grad():
        assert torch.equal(fl.group_logprobs(full, prompt, comps, frozen_bf16=True)[0],
                           fl.group_logprobs(full, prompt, comps)[0])
    base = model.base_model.model.model.layers[0].self_attn.q_proj.base_layer
    assert torch.equal(fl._bf16_copy(base), base.weight.detach().bfloat16())
    with torch.no_grad():
        base.weight.mul_(2.0)
    assert torch.equal(fl._bf16_copy(base), base.weight.detach().bfloat16())


def test_supports_only_what_it_computes():
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    assert not fl.supports(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)))
    dora = get_peft_model(_llama(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], use_dora=True))
    assert not fl.supports(dora)
    plain = get_peft_model(_llama(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert fl.supports(plain)
    dropping = get_peft_model(_llama(), LoraConfig(r=4, target_modules=["q_proj"], lora_dropout=0.1))
    assert not fl.supports(dropping.train()) and fl.supports(dropping.eval())  # dropout acts in train mode only
