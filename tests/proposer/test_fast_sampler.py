"""The fast sampler (proposer/backends/fast_sampler.py) against the general transformers loop it replaces: greedy
tokens equal, behaviour log-probs equal to a full-sequence recompute, LoRA merged and disabled as peft computes,
seeded draws reproducible and of the right distribution."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from proposer.backends import TINY_CHECKPOINT, make_backend  # noqa: E402
from proposer.backends import fast_sampler as fs  # noqa: E402
from proposer.backends import native_step  # noqa: E402
from proposer.backends.base import SamplingParams  # noqa: E402
from proposer.backends.logprobs import batch_sequence_logprobs  # noqa: E402
from proposer.training.lora import wrap_lora  # noqa: E402

LONG = ("def f(xs):\n    # EVOLVE-BLOCK-START\n    xs = [x * x for x in xs]\n    return sum(xs)\n"
        "    # EVOLVE-BLOCK-END\n# square each element, then take the sum of the elements\n<answer_1>")
SHORT = "# sort the list, then keep the first three elements\n<answer_1>"

pytestmark = pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled checkpoint")


# the libraries of the linear products (fast_sampler.choose_products): each test below runs each one this machine has
PRODUCTS = ["blas", pytest.param("onednn", marks=pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                                                    reason="this torch has no oneDNN")),
            pytest.param("native", marks=pytest.mark.skipif(not native_step.avx512(),
                                                            reason="no AVX-512, or the C++ operators do not build"))]


@pytest.fixture(scope="module")
def tiny():
    be = make_backend("tiny", threads=1)
    ids = {name: be.encode_prompt(p, 200)[0] for name, p in (("long", LONG), ("short", SHORT))}
    return be, ids


@pytest.fixture(scope="module")
def lora_model(tiny):
    """The bundled model under a LoRA whose B matrices are non-zero (a trained adapter, not the identity)."""
    be, _ = tiny
    torch.manual_seed(0)
    m = wrap_lora(be.model, rank=8)
    for n, p in m.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0.0, 0.05)
    yield m
    be.model = m.unload()


def _general(be, model, rows, sp, gen=None):
    old = be.model
    be.model = model
    try:
        return be._decode(rows, sp, gen)
    finally:
        be.model = old


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("adapter", ["none", "lora", "lora disabled"])
@pytest.mark.parametrize("layout", ["one prompt", "two prompts"])
def test_greedy_tokens_equal_the_general_loop(tiny, lora_model, adapter, layout, products):
    be, ids = tiny
    rows = [ids["long"]] * 8 if layout == "one prompt" else [ids["long"]] * 5 + [ids["short"]] * 3
    model = be.model if adapter == "none" else lora_model
    sp = SamplingParams(temperature=0.0, max_tokens=160)
    if adapter == "lora disabled":
        with lora_model.disable_adapter():
            want = _general(be, model, rows, sp)
            got = fs.sample(model, rows, 160, 0.0, 1.0, be.eos_ids, None, products=products)
    else:
        want, got = _general(be, model, rows, sp), fs.sample(model, rows, 160, 0.0, 1.0, be.eos_ids, None,
                                                              products=products)
    assert [w[0] for w in want] == [g[0] for g in got]
    assert [w[2] for w in want] == [g[2] for g in got]
    assert sum(len(g[0]) for g in got) > 60
    for (_, lw, _), (_, lg, _) in zip(want, got):
        assert max(abs(a - b) for a, b in zip(lw, lg)) < 1e-5


def test_a_trained_adapter_changes_what_is_sampled(tiny, lora_model):
    """The merge is real: the LoRA's log-probs of its own greedy tokens differ from the base's (the adapter
    disabled) on the same tokens."""
    be, ids = tiny
    rows = [ids["long"]] * 2
    on = fs.sample(lora_model, rows, 80, 0.0, 1.0, be.eos_ids, None)
    with lora_model.disable_adapter():
        base = batch_sequence_logprobs(lora_model, rows, [r[0] for r in on])
    assert max(abs(a - b) for r, q in zip(on, base) for a, b in zip(r[1], q)) > 1e-3


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("layout", ["one prompt", "two prompts"])
def test_behaviour_logprobs_equal_a_full_recompute(tiny, lora_model, layout, products):
    """At T = 0.7 and top-p 0.9 the recorded log-prob of every token is the trainer's full-sequence recompute:
    in float64 to 1e-9 (the same function, term for term), and in fp32, the campaign's dtype, to fp32's noise.
    Why not 1e-5 in fp32: these log-probs are differences of logits/T near 30, where an ulp is 2e-6, and the
    recompute itself lies up to 3e-5 from its float64 value; the general transformers loop misses 1e-5 against
    it too (bench/perf/sampler_agreement.py prints all three per seed)."""
    be, ids = tiny
    rows = [ids["long"]] * 8 if layout == "one prompt" else [ids["long"]] * 4 + [ids["short"]] * 4
    m64 = copy.deepcopy(lora_model).double()
    for model, tol, lib in ((m64, 1e-9, "blas"), (lora_model, 5e-5, products)):  # oneDNN: fp32 only
        got = fs.sample(model, rows, 200, 0.7, 0.9, be.eos_ids, torch.Generator().manual_seed(11), products=lib)
        rec = batch_sequence_logprobs(model, rows, [g[0] for g in got], temperature=0.7, top_p=0.9)
        assert sum(len(g[0]) for g in got) > 80
        err = max(abs(a - b) for g, r in zip(got, rec) for a, b in zip(g[1], r))
        assert err <= tol, (tol, err)


def test_seeded_calls_reproduce_and_rows_differ(tiny):
    be, ids = tiny
    run = [fs.sample(be.model, [ids["long"]] * 6, 120, 1.0, 1.0, be.eos_ids, torch.Generator().manual_seed(4))
           for _ in range(2)]
    assert run[0] == run[1]
    assert len({tuple(r[0]) for r in run[0]}) > 1  # rows sharing a prompt draw independently
    other = fs.sample(be.model, [ids["long"]] * 6, 120, 1.0, 1.0, be.eos_ids, torch.Generator().manual_seed(5))
    assert other != run[0]


def test_backend_generate_uses_it_and_general_is_kept(tiny):
    """HFBackend.generate: the fast path for a Llama; ``sampler: general`` (fast_sampler=False) keeps the old
    loop. Greedy completions are the same text either way."""
    be, _ = tiny
    general = make_backend("tiny", threads=1, fast_sampler=False)
    sp = SamplingParams(temperature=0.0, max_tokens=100)
    a, b = be.generate([LONG, SHORT], 2, sp), general.generate([LONG, SHORT], 2, sp)
    assert [[c.text for c in g] for g in a] == [[c.text for c in g] for g in b]
    assert fs.supports(be.model)


def test_unsupported_layouts_fall_back():
    from transformers import GPT2Config, GPT2LMHeadModel

    assert not fs.supports(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)))


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("layout", ["one prompt", "two prompts"])
def test_qwen2_layout_with_biases_matches_transformers(layout, products):
    """A random Qwen2 (q/k/v biases, grouped-query heads): greedy tokens and logits as transformers computes, both
    through the shared prompt's attention (one prompt) and the masked per-row cache (two)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = Qwen2ForCausalLM(cfg).eval()
    assert fs.supports(model)
    prompts = [[5, 9, 13, 2, 7, 7, 1]] * 3 + ([[4, 4, 8]] * 2 if layout == "two prompts" else [])
    got = fs.sample(model, prompts, 20, 0.0, 1.0, {96}, None, products=products)
    with torch.no_grad():
        for p, (toks, lps, _) in zip(prompts, got):
            seq = list(p)
            for t in toks:
                logits = model(torch.tensor([seq])).logits[0, -1]
                assert int(logits.argmax()) == t
                seq.append(t)
        rec = batch_sequence_logprobs(model, prompts, [g[0] for g in got])
    assert max(abs(a - b) for g, r in zip(got, rec) for a, b in zip(g[1], r)) < 1e-5


def test_draw_samples_the_nucleus_distribution():
    """The inverse-CDF draw: frequencies match softmax(logits / T) cut to top-p, and no token outside it."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -8.0]]).repeat(20000, 1)
    gen = torch.Generator().manual_seed(0)
    toks = fs.draw(logits, 0.8, 0.9, gen)
    p = torch.softmax(logits[0] / 0.8, -1)
    before = p.cumsum(-1) - p
    keep = before < 0.9
    want = torch.where(keep, p, torch.zeros_like(p))
    want = want / want.sum()
    freq = torch.bincount(toks, minlength=6).float() / len(toks)
    assert torch.all(freq[~keep] == 0)
    assert torch.allclose(freq, want, atol=0.015), (freq, want)
    assert torch.equal(fs.draw(logits[:3], 0.0, 1.0, None), torch.zeros(3, dtype=torch.long))


def _reference_packing(model, fold: bool):
    """What `Weights` holds, the long way: per layer cat(effective weights) * RMSNorm gain, transposed."""
    inner = fs.base_model(model).model
    out = []
    for layer in inner.layers:
        att, mlp = layer.self_attn, layer.mlp
        g1, g2 = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        qkv = [fs._effective(getattr(att, n)) for n in ("q_proj", "k_proj", "v_proj")]
        gu = [fs._effective(mlp.gate_proj), fs._effective(mlp.up_proj)]
        wq, wg = torch.cat([w for w, _ in qkv]), torch.cat([w for w, _ in gu])
        if fold:
            wq, wg = wq * g1, wg * g2
        bias = None if qkv[0][1] is None else torch.cat([b for _, b in qkv])
        out.append([(wq.t().contiguous(), bias), (fs._effective(att.o_proj)[0].t().contiguous(), None),
                    (wg.t().contiguous(), None), (fs._effective(mlp.down_proj)[0].t().contiguous(), None)])
    return out


@pytest.mark.parametrize("case", ["tiny lora fp32", "tiny float64", "qwen2 biases"])
def test_sampler_weights_are_the_concatenated_folded_transposed_ones_bit_for_bit(tiny, lora_model, case):
    if case == "qwen2 biases":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(2)
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2)).eval()
    else:
        model = lora_model if case == "tiny lora fp32" else copy.deepcopy(tiny[0].model).double()
    with torch.no_grad():
        w = fs.Weights(model, "blas")
        ref = _reference_packing(model, fold=w.fold)
    assert w.fold == (case != "tiny float64")
    for layer, want in zip(w.layers, ref):
        for (got_w, got_b), (ref_w, ref_b) in zip((layer.qkv, layer.o, layer.gate_up, layer.down), want):
            assert got_w.is_contiguous() and torch.equal(got_w, ref_w)
            assert (got_b is None and ref_b is None) or torch.equal(got_b, ref_b)
    head = fs.base_model(model).lm_head.weight * (fs.base_model(model).model.norm.weight if w.fold else 1)
    assert torch.equal(w.head[0], head.t().contiguous())



@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")
@pytest.mark.parametrize("case", ["tiny lora fp32", "qwen2 biases"])
def test_onednn_weights_are_the_blas_ones_packed(tiny, lora_model, case):
    """products onednn packs the same matrices: each packed product of the identity gives W^T back bit for bit (a
    product with one non-zero term per sum is exact), with the same biases, and the step's linear layer applies
    it to many rows as torch.mm does, to fp32's noise."""
    if case == "qwen2 biases":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(2)
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2)).eval()
    else:
        model = lora_model
    with torch.no_grad():
        blas, dnn = fs.Weights(model, "blas"), fs.Weights(model, "onednn")
    assert (blas.products, dnn.products) == ("blas", "onednn") and dnn.vocab == blas.vocab
    pairs = [(a, b) for la, lb in zip(blas.layers, dnn.layers)
             for a, b in zip((la.qkv, la.o, la.gate_up, la.down), (lb.qkv, lb.o, lb.gate_up, lb.down))]
    for (wt, bias), (packed, dbias) in pairs + [(blas.head, dnn.head)]:
        assert packed.is_mkldnn and not wt.is_mkldnn
        assert (bias is None and dbias is None) or torch.equal(bias, dbias)
        eye = torch.eye(wt.shape[0])
        got = fs._lin(eye, (packed, None))
        assert torch.equal(got, wt)
        x = torch.randn(37, wt.shape[0], generator=torch.Generator().manual_seed(0))
        assert torch.allclose(fs._lin(x, (packed, dbias)), fs._lin(x, (wt, bias)), rtol=1e-5, atol=1e-5)


def test_the_products_choice(tiny, monkeypatch):
    """auto on fp32 CPU weights where the CPU is not Intel's: the native kernel where it runs (AVX-512, the C++
    operators built), else oneDNN; blas elsewhere. An unknown choice, or a library where it cannot run, is a
    one-line error, from the backend too."""
    from proposer.errors import BackendError

    f32 = torch.float32
    dnn = "onednn" if torch.backends.mkldnn.is_available() else "blas"
    avx512 = native_step.avx512()
    for vendor, has_avx512, want in (("GenuineIntel", avx512, "blas"), ("AuthenticAMD", avx512, "native" if avx512
                                                                         else dnn),
                                     ("AuthenticAMD", False, dnn), ("", avx512, "blas")):
        monkeypatch.setattr(fs, "cpu_vendor", lambda v=vendor: v)
        monkeypatch.setattr(native_step, "avx512", lambda h=has_avx512: h)
        assert fs.choose_products("auto", "cpu", f32) == want
        assert fs.choose_products("auto", "cpu", torch.float64) == "blas"
        assert fs.choose_products("blas", "cpu", f32) == "blas"
    monkeypatch.undo()
    bad = [(("mkl", "cpu", f32), "products must be one of auto, blas, onednn, native, got 'mkl'"),
           (("onednn", "cpu", torch.float64), "products onednn needs fp32 weights on a CPU"),
           (("native", "cpu", torch.float64), "products native needs fp32 weights on a CPU")]
    if not avx512:
        bad.append((("native", "cpu", f32), "products native: "))
    for args, msg in bad:
        with pytest.raises(ValueError, match=msg) as err:
            fs.choose_products(*args)
        assert "\n" not in str(err.value)
    with pytest.raises(BackendError, match="^hf: fast sampler: products must be one of") as err:
        make_backend("tiny", threads=1, products="mkl")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("option", ["products", "step"])
def test_the_run_configs_sampler_options_reach_the_sampler(monkeypatch, option):
    """``proposer.options.products`` and ``.step`` (``--hf-products``, ``--hf-step``) go from the run config to the
    backend and into every snapshot it samples from; a value outside the choices is a one-line config error."""
    from evolve.config.schema import ConfigError, load_config
    from evolve.launch.runner import backend_kwargs

    made = []

    class Seen(fs.Weights):
        def __init__(self, model, products="auto", step="auto"):
            super().__init__(model, products, step)
            made.append(getattr(self, option))

    monkeypatch.setattr(fs, "Weights", Seen)
    if option == "products":
        values = (["blas"] + (["onednn"] if torch.backends.mkldnn.is_available() else [])
                  + (["native"] if native_step.avx512() else []))
    else:
        values = ["python"] + (["native"] if native_step.load() is not None else [])
    for value in values:
        kw = backend_kwargs(load_config(None, {"proposer.spec": "tiny", f"proposer.options.{option}": value}))
        assert kw[option] == value
        be = make_backend("tiny", **{**kw, "threads": 1})
        assert getattr(be, option) == value
        be.generate(["def f(x):"], 2, SamplingParams(temperature=1.0, max_tokens=4, seed=0))
        assert be.pin_sampling()
        be.unpin_sampling()
        assert made[-2:] == [value, value]
    with pytest.raises(ConfigError, match=f"proposer.options.{option}") as err:
        load_config(None, {"proposer.spec": "tiny", f"proposer.options.{option}": "jit"})
    assert "\n" not in str(err.value)


def test_roofline_counts_are_the_models_matrices_and_caches(tiny):
    """learner_speed's limits: FLOPs per token and bytes per decode step, counted from the config by hand."""
    cfg = tiny[0].model.config
    h, f, v, n = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    kv = cfg.num_key_value_heads * cfg.head_dim
    mats = n * (h * (cfg.num_attention_heads * cfg.head_dim + 2 * kv) + h * h + 2 * h * f + f * h) + h * v
    assert fs.flops_per_token(tiny[0].model, 100) == 2 * mats + 4 * n * cfg.num_attention_heads * cfg.head_dim * 100
    assert fs.bytes_per_step(tiny[0].model, 8, 75, 100) == 4 * (mats + 2 * n * kv * (75 + 8 * 100))


def test_learner_speed_cpu_floor_counts_waited_children():
    """learner_speed's floor under a trained wall: a child's CPU seconds are counted once it is waited for, and
    the floor is the untrained wall plus the extra CPU seconds, spread over the cores (never below the untrained
    wall's share when the trained arm used less)."""
    import subprocess
    import sys

    from bench.perf import learner_speed as ls

    before = ls._children_cpu()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert ls._children_cpu() - before >= 0.25
    c = {"walls": {"none": [3.0], "vpo": [5.0]}, "wall_none": 3.0, "cpu_none": 8.0, "cpu_vpo": 14.0, "cpu_old": 7.0}
    assert ls.cpu_bound(c, "vpo", 2) == pytest.approx((3.0 + 6.0) / 2)
    c["walls"]["old"] = [4.0]
    assert ls.cpu_bound(c, "old", 2) == pytest.approx(1.5)
    assert ls.cpu_bound({"walls": {"vpo": [5.0]}}, "vpo", 2) is None


@pytest.mark.parametrize("layout", ["one prompt", "two prompts"])
def test_no_unwritten_cache_column_is_read(tiny, layout, monkeypatch):
    """The cache is allocated empty: with every new float tensor NaN instead, a call gives the same tokens and
    log-probs, compactions included (a NaN read anywhere, even under the padding mask, would spread)."""
    be, ids = tiny
    rows = [ids["long"]] * 8 if layout == "one prompt" else [ids["long"]] * 4 + [ids["short"]] * 4
    want = fs.sample(be.model, rows, 120, 1.0, 1.0, be.eos_ids, torch.Generator().manual_seed(3))
    empty, keep = torch.empty, fs._Cache.keep
    kept = []

    def nan_empty(*args, **kw):
        t = empty(*args, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", nan_empty)
    monkeypatch.setattr(fs._Cache, "keep", lambda self, idx, n: (kept.append(n), keep(self, idx, n)))
    got = fs.sample(be.model, rows, 120, 1.0, 1.0, be.eos_ids, torch.Generator().manual_seed(3))
    assert kept and got == want
    assert len({len(g[0]) for g in got}) > 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rope_and_norm_are_the_plain_formulas_bit_for_bit(tiny, dtype):
    """The sampler's rotary embedding (a roll against a sin table whose first half is negated) and its folded
    RMSNorm (sum, then divided by n, eps added, in place) are transformers' rotate_half form and
    x * rsqrt(mean(x^2) + eps) to the bit, the rope's gradient too (the trainer's forward shares ``_rope``)."""
    from transformers.models.llama.modeling_llama import rotate_half

    g = torch.Generator().manual_seed(0)
    ang = torch.rand(40, 32, generator=g) * 500
    cos, sin = fs.rope_tables(ang, dtype)
    emb = torch.cat((ang, ang), dim=-1)
    want_cos, want_sin = emb.cos().to(dtype), emb.sin().to(dtype)
    assert torch.equal(cos, want_cos)
    x = (torch.randn(40, 3, 64, generator=g, dtype=dtype) * 7).requires_grad_()
    got, want = fs._rope(x, cos[:, None], sin[:, None]), x * want_cos[:, None] + rotate_half(x) * want_sin[:, None]
    assert torch.equal(got, want)
    up = torch.randn(got.shape, generator=g, dtype=dtype)
    assert torch.equal(torch.autograd.grad(got, x, up)[0], torch.autograd.grad(want, x, up)[0])
    w = fs.Weights(tiny[0].model)
    for scale in (1e-3, 1.0, 40.0):
        h = torch.randn(8, tiny[0].model.config.hidden_size, generator=g) * scale
        assert torch.equal(fs._norm(w, h, None), h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + w.eps))
