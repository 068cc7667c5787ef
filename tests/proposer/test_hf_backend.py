"""HFBackend on a tiny random Llama (fast), make_backend specs, and the bundled tiny checkpoint (if present)."""
from __future__ import annotations

import json
import math
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from proposer.backends import TINY_CHECKPOINT, BackendError, make_backend  # noqa: E402
from proposer.backends.base import SamplingParams  # noqa: E402
from proposer.backends.hf import HFBackend  # noqa: E402
from proposer.backends.logprobs import batch_sequence_logprobs  # noqa: E402

TEXTS = [
    "def f(x):\n    x = x + 1\n    return x\n",
    "def f(xs):\n    xs = [x * 2 for x in xs]\n    return xs\n",
    "### Task: pbe/int-3\nWrite f(x) for an integer x.\n<answer_1>\n```python\ndef f(x):\n    return x\n```\n</answer_1>",
] * 20
PROMPTS = ["### Task: pbe/int-1\n<answer_1>", "def f(xs):\n    xs = [x for x in xs if x % 2 == 0]\n<answer_1>"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    from proposer.tiny.tokenizer import train_tokenizer

    d = tmp_path_factory.mktemp("tiny_llama")
    tok = train_tokenizer(TEXTS, vocab_size=300, model_max_length=128)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


@pytest.fixture(scope="module")
def backend(model_dir):
    return HFBackend(model_dir, device="cpu", batch_size=4, threads=1)


def test_structure_and_group_sizes(backend):
    sp = SamplingParams(temperature=1.0, max_tokens=12, seed=3)
    groups = backend.generate(PROMPTS, 3, sp)
    assert len(groups) == 2 and all(len(g) == 3 for g in groups)
    tok = backend.tokenizer
    for prompt, group in zip(PROMPTS, groups):
        for c in group:
            assert c.prompt_token_ids == tok(prompt)["input_ids"]
            assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0.0 and math.isfinite(lp) for lp in c.logprobs)
            assert c.finish_reason in ("stop", "length") and c.policy_version == 0
            body = c.token_ids[:-1] if c.finish_reason == "stop" else c.token_ids
            assert c.finish_reason != "stop" or c.token_ids[-1] == tok.eos_token_id
            assert c.text == tok.decode(body, skip_special_tokens=False)
    assert backend.generate(PROMPTS, 0, sp) == [[], []]


def test_seed_determinism(backend):
    sp = SamplingParams(temperature=1.0, max_tokens=10, seed=11)
    a = backend.generate(PROMPTS, 3, sp)
    b = backend.generate(PROMPTS, 3, sp)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    c = backend.generate(PROMPTS, 3, SamplingParams(temperature=1.0, max_tokens=10, seed=12))
    assert [[x.token_ids for x in g] for g in a] != [[x.token_ids for x in g] for g in c]


def _rounding_decides_the_nucleus(model, comps, temperature: float, top_p: float, rel: float = 1e-5) -> set:
    """The (completion, position) pairs whose top-p nucleus rounding decides: the last token kept and the first
    left out within ``rel`` of each other, or the mass before the first left out within ``rel`` of top_p (float64
    from a full forward). This random-init model's distributions are near uniform (~270 of its 300 tokens in a
    nucleus at 0.9, neighbours ~1e-7 apart), so fp32's noise between the sampler's step and the trainer's forward,
    which differs between CPUs' kernels, can move a token across the edge there and change the log-prob by ~1e-3."""
    out = set()
    with torch.no_grad():
        for i, c in enumerate(comps):
            ids = torch.tensor([c.prompt_token_ids + c.token_ids])
            logits = model(ids).logits[0, len(c.prompt_token_ids) - 1: -1].double() / temperature
            p = torch.softmax(logits, -1).sort(-1, descending=True).values
            before = p.cumsum(-1) - p
            for j in range(len(c.token_ids)):
                k = int((before[j] < top_p).sum())  # kept
                if k < p.shape[-1] and (p[j, k - 1] - p[j, k] <= rel * p[j, k - 1]
                                        or abs(float(before[j, k]) - top_p) <= rel):
                    out.add((i, j))
    return out


def test_logprobs_match_training(backend):
    """Behaviour log-probs are of the distribution sampled from (temperature, top-p nucleus), equal to what the
    trainer computes with the same temperature and top-p (where rounding does not decide the nucleus), and not to
    the untempered ones."""
    groups = backend.generate(PROMPTS, 3, SamplingParams(temperature=0.7, top_p=0.9, max_tokens=16, seed=5))
    comps = [c for g in groups for c in g]
    args = ([c.prompt_token_ids for c in comps], [c.token_ids for c in comps])
    ref = batch_sequence_logprobs(backend.model, *args, temperature=0.7, top_p=0.9)
    edge = _rounding_decides_the_nucleus(backend.model, comps, 0.7, 0.9)
    assert len(edge) <= 0.05 * sum(len(c.token_ids) for c in comps)  # a few; on most CPUs' kernels none differs
    for i, (c, r) in enumerate(zip(comps, ref)):
        assert max(abs(a - b) for j, (a, b) in enumerate(zip(c.logprobs, r)) if (i, j) not in edge) < 1e-4
    raw = batch_sequence_logprobs(backend.model, *args)
    assert max(abs(a - b) for c, r in zip(comps, raw) for a, b in zip(c.logprobs, r)) > 1e-2


def test_left_padding_matches_single_prompt_greedy(backend):
    sp = SamplingParams(temperature=0.0, max_tokens=10)
    both = backend.generate(PROMPTS, 1, sp)
    alone = [backend.generate([p], 1, sp)[0] for p in PROMPTS]
    assert [g[0].token_ids for g in both] == [g[0].token_ids for g in alone]
    for g, a in zip(both, alone):
        assert max(abs(x - y) for x, y in zip(g[0].logprobs, a[0].logprobs)) < 1e-4


def test_max_tokens_gives_length(backend):
    groups = backend.generate(PROMPTS, 4, SamplingParams(max_tokens=3, seed=0))
    lengths = [c for g in groups for c in g if c.finish_reason == "length"]
    assert lengths, "a random model should not stop within 3 tokens every time"
    assert all(len(c.token_ids) == 3 and backend.tokenizer.eos_token_id not in c.token_ids for c in lengths)


def test_eos_gives_stop(model_dir):
    """All-zero logits make greedy decoding pick token 0 = EOS: one token, empty text, log-prob -log V."""
    b = HFBackend(model_dir, device="cpu", threads=1)
    b.model.get_output_embeddings().weight.data.zero_()
    c = b.generate(["x"], 1, SamplingParams(temperature=0.0, max_tokens=5))[0][0]
    assert c.finish_reason == "stop" and c.token_ids == [b.tokenizer.eos_token_id] and c.text == ""
    assert abs(c.logprobs[0] + math.log(b.model.config.vocab_size)) < 1e-4


def test_left_truncation_keeps_the_end(model_dir):
    b = HFBackend(model_dir, device="cpu", max_context=32, threads=1)
    prompt = "def f(x):\n    x = x + 1\n" * 20 + "<answer_1>"
    full = b.tokenizer(prompt)["input_ids"]
    c = b.generate([prompt], 1, SamplingParams(max_tokens=8, seed=0))[0][0]
    assert c.prompt_token_ids == full[-24:] and c.meta["prompt_truncated"] == len(full) - 24
    assert len(c.prompt_token_ids) + len(c.token_ids) <= 32


def _random_adapter(model_dir, out, seed):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True)
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    g = torch.Generator().manual_seed(seed)
    for n, p in peft.named_parameters():
        if "lora_B" in n:
            p.data = torch.randn(p.shape, generator=g) * 0.5
    peft.save_pretrained(str(out))
    return peft.eval()


def test_lora_hot_swap(model_dir, tmp_path):
    b = HFBackend(model_dir, device="cpu", threads=1)
    sp = SamplingParams(temperature=0.0, max_tokens=8)
    base_out = b.generate(PROMPTS, 1, sp)
    ref1 = _random_adapter(model_dir, tmp_path / "a1", 1)
    ref2 = _random_adapter(model_dir, tmp_path / "a2", 2)

    b.load_adapter(tmp_path / "a1", version=5)
    out1 = b.generate(PROMPTS, 1, sp)
    assert all(g[0].policy_version == 5 for g in out1)
    assert [g[0].logprobs for g in out1] != [g[0].logprobs for g in base_out]
    want = batch_sequence_logprobs(ref1, [g[0].prompt_token_ids for g in out1], [g[0].token_ids for g in out1])
    assert all(max(abs(x - y) for x, y in zip(g[0].logprobs, w)) < 1e-4 for g, w in zip(out1, want))

    b.load_adapter(tmp_path / "a2", version=6)  # replaces a1, does not stack on it
    assert len(b.model.peft_config) == 1
    out2 = b.generate(PROMPTS, 1, sp)
    assert all(g[0].policy_version == 6 for g in out2)
    want = batch_sequence_logprobs(ref2, [g[0].prompt_token_ids for g in out2], [g[0].token_ids for g in out2])
    assert all(max(abs(x - y) for x, y in zip(g[0].logprobs, w)) < 1e-4 for g, w in zip(out2, want))

    b.set_policy_version(7)
    assert b.generate(PROMPTS[:1], 1, sp)[0][0].policy_version == 7
    assert b.state() == {"policy_version": 7, "adapter": str(tmp_path / "a2")}
    with pytest.raises(BackendError, match="no PEFT adapter"):
        b.load_adapter(tmp_path / "missing")


def test_chat_template_prefills_answer_tag(model_dir):
    b = HFBackend(model_dir, device="cpu", threads=1, chat="auto")
    assert b.chat is False  # auto: this tokenizer has no chat template
    with pytest.raises(BackendError, match="no chat template"):
        HFBackend(model_dir, device="cpu", threads=1, chat=True)
    b.tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
                                 "{% if not loop.last %}{{ '\\n' }}{% endif %}{% endfor %}")
    b.chat = True
    ids, _ = b.encode_prompt("solve this\n<answer_1>", 8)
    assert b.tokenizer.decode(ids) == "<|user|>solve this\n<|assistant|><answer_1>"


# ------------------------------------------------------------------------------------------------ specs

def test_make_backend_specs(model_dir, tmp_path):
    with pytest.raises(BackendError, match=r"unknown proposer spec 'gpt5'; expected tiny, hf:PATH"):
        make_backend("gpt5")
    with pytest.raises(BackendError, match="unknown proposer spec"):
        make_backend("hf:")
    with pytest.raises(BackendError, match="not found"):
        make_backend(f"hf:{tmp_path / 'nope'}")
    with pytest.raises(BackendError, match="not found"):
        make_backend(f"replay:{tmp_path / 'nope.jsonl'}")
    with pytest.raises(BackendError, match="not found"):
        make_backend(f"vllm:{tmp_path / 'nope'}")
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps({"text": "<answer_1>\n```python\nx = 1\n```\n</answer_1>"}) + "\n")
    r = make_backend(f"replay:{f}", seed=3)
    assert r.generate(["p"], 2, SamplingParams())[0][1].text.startswith("<answer_1>")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(BackendError, match="bad.jsonl:1"):
        make_backend(f"replay:{bad}")
    hb = make_backend(f"hf:{model_dir}", device="cpu", threads=1, seed=0)
    assert isinstance(hb, HFBackend) and len(hb.generate(PROMPTS, 2, SamplingParams(max_tokens=4))[1]) == 2
    for spec, module in (("openai:http://localhost:1/v1", "proposer.backends.openai"),
                         (f"vllm:{model_dir}", "proposer.backends.vllm")):
        try:
            __import__(module)
        except ModuleNotFoundError:
            with pytest.raises(BackendError) as e:
                make_backend(spec)
            assert "\n" not in str(e.value) and module in str(e.value)


def test_seedless_sampling_uses_backend_seed(model_dir):
    a = HFBackend(model_dir, device="cpu", threads=1, seed=4)
    b = HFBackend(model_dir, device="cpu", threads=1, seed=4)
    sp = SamplingParams(max_tokens=6)
    first = [c.token_ids for c in a.generate(PROMPTS[:1], 3, sp)[0]]
    assert first == [c.token_ids for c in b.generate(PROMPTS[:1], 3, sp)[0]]


# ----------------------------------------------------------------------------------- bundled checkpoint

@pytest.mark.skipif(not (TINY_CHECKPOINT / "model.safetensors").is_file(), reason="tiny checkpoint not built")
def test_bundled_tiny_checkpoint_answers_parse(pool):
    from proposer.answers.mutate import apply_answer
    from proposer.answers.parsing import parse_answers
    from proposer.tiny.quality import pbe_items

    b = make_backend("tiny", device="cpu")
    assert next(b.model.parameters()).dtype == torch.float32
    item = pbe_items("train", pool, 1)[0]
    groups = b.generate([item["prompt"]], 4, SamplingParams(temperature=1.0, max_tokens=384, seed=0))
    answers = [a for c in groups[0] for a in parse_answers(c.text, 4)]
    code = [a for a in answers if a.kind == "code"]
    assert len(code) >= 0.75 * len(answers), [c.text for c in groups[0]]
    applied = [apply_answer(item["parent"], a) for a in code]
    assert all("EVOLVE-BLOCK-START" in p and "def f(" in p for p in applied)
