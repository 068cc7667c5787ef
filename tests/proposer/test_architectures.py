"""Real architectures at toy size (random init, a tokenizer trained here with a chat template): LoRA targets
found per architecture, the chat path renders the template with the answer tag pre-filled, and a LoRA step and
a bf16-loaded full fine-tuning step run on each."""
from __future__ import annotations

import pytest
import torch
from transformers import (GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig,
                          LlamaForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM)

from proposer.backends.base import SamplingParams
from proposer.backends.hf import HFBackend
from proposer.training.lora import LoraError, lora_targets, wrap_lora
from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
SMALL = dict(num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=128)
ARCHS = {
    "llama": (LlamaForCausalLM, lambda v: LlamaConfig(vocab_size=v, hidden_size=32, intermediate_size=64,
                                                      num_key_value_heads=2, **SMALL),
              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "qwen2": (Qwen2ForCausalLM, lambda v: Qwen2Config(vocab_size=v, hidden_size=32, intermediate_size=64,
                                                      num_key_value_heads=2, **SMALL),
              ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "phi3": (Phi3ForCausalLM, lambda v: Phi3Config(vocab_size=v, hidden_size=32, intermediate_size=64,
                                                   num_key_value_heads=2, pad_token_id=0, **SMALL),
             ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
    "gpt2": (GPT2LMHeadModel, lambda v: GPT2Config(vocab_size=v, n_embd=32, n_layer=2, n_head=4, n_positions=128),
             ["c_attn", "c_proj", "c_fc"]),
    "gpt_neox": (GPTNeoXForCausalLM, lambda v: GPTNeoXConfig(vocab_size=v, hidden_size=32, intermediate_size=64,
                                                             **SMALL),
                 ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"]),
}


@pytest.fixture(scope="module")
def tokenizer():
    from proposer.tiny.tokenizer import train_tokenizer

    corpus = [f"def f{i}(xs):\n    return [x + {i} for x in xs]\n" for i in range(60)] + ["add 3 to each element"] * 5
    tok = train_tokenizer(corpus, vocab_size=320, model_max_length=128)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build(arch: str, vocab: int, seed: int = 0):
    cls, cfg, _ = ARCHS[arch]
    torch.manual_seed(seed)
    return cls(cfg(vocab))


def batch(vocab: int) -> list[TrainSample]:
    g = torch.Generator().manual_seed(1)
    return [TrainSample(torch.randint(0, vocab, (3 + i,), generator=g).tolist(),
                        torch.randint(0, vocab, (2 + 2 * i,), generator=g).tolist(), None, float(i - 1))
            for i in range(3)]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_lora_targets_and_steps(arch, tokenizer):
    v = len(tokenizer)
    model = build(arch, v)
    assert lora_targets(model) == ARCHS[arch][2]
    peft_model = wrap_lora(model, rank=4)
    wrapped = {n.split(".lora_B")[0].rsplit(".", 1)[-1] for n, _ in peft_model.named_parameters() if "lora_B" in n}
    assert wrapped == set(ARCHS[arch][2])
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    st = PolicyTrainer(peft_model, TrainConfig(lr=1e-2, kl_beta=0.1, micro_batch=2,
                                               gradient_checkpointing=True)).step(batch(v))
    assert st["mean_ratio"] == 1.0 and st["n_updates"] == 1
    changed = {n for n, p in peft_model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert {n.split(".lora_B")[0].rsplit(".", 1)[-1] for n in changed if "lora_B" in n} == set(ARCHS[arch][2])
    # full fine-tuning of the same architecture loaded in bf16: fp32 learner, a step that moves the weights
    full = build(arch, v).to(torch.bfloat16)
    ref = PolicyTrainer.frozen_copy(full)
    st = PolicyTrainer(full, TrainConfig(lr=1e-4, kl_beta=0.1), ref_model=ref).step(batch(v))
    assert st["mean_ratio"] == 1.0 and st["grad_norm"] > 0
    assert all(p.dtype == torch.float32 for p in full.parameters())
    assert next(ref.parameters()).dtype == torch.bfloat16


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_save_lora_writes_what_save_pretrained_writes_without_the_model_card(arch, tokenizer, tmp_path):
    from peft import PeftModel

    from proposer.training.lora import save_lora

    v = len(tokenizer)
    build(arch, v).save_pretrained(tmp_path / "base")
    model = wrap_lora(type(build(arch, v)).from_pretrained(tmp_path / "base"), rank=4)
    trainer = PolicyTrainer(model, TrainConfig(lr=1e-2))
    trainer.step(batch(v))  # lora_B no longer zero
    model.save_pretrained(str(tmp_path / "peft"))
    assert save_lora(model, str(tmp_path / "lean"))
    assert sorted(p.name for p in (tmp_path / "lean").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (tmp_path / "lean" / name).read_bytes() == (tmp_path / "peft" / name).read_bytes()
    assert (tmp_path / "peft" / "README.md").is_file()
    assert not model.peft_config["default"].inference_mode  # put back after writing
    loaded = PeftModel.from_pretrained(type(build(arch, v)).from_pretrained(tmp_path / "base"), tmp_path / "lean")
    ids = torch.tensor([batch(v)[0].prompt_ids])
    assert torch.equal(loaded(ids).logits, model(ids).logits)
    # a model whose base has no path: save_pretrained's own handling, through the trainer's save_adapter
    bare = wrap_lora(build(arch, v), rank=4)
    assert not save_lora(bare, str(tmp_path / "bare"))
    assert not (tmp_path / "bare").exists()
    out = PolicyTrainer(bare, TrainConfig()).save_adapter(tmp_path / "bare")
    assert (out / "adapter_model.safetensors").is_file()


def test_lora_bad_targets_are_one_line_errors(tokenizer):
    model = build("gpt2", len(tokenizer))
    with pytest.raises(LoraError, match="q_proj are not linear layers of this model"):
        wrap_lora(model, targets=["q_proj"])


@pytest.mark.parametrize("arch", ["qwen2", "phi3"])
def test_chat_auto_renders_template_with_prefilled_answer(arch, tokenizer, tmp_path):
    build(arch, len(tokenizer)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    b = HFBackend(tmp_path, device="cpu", threads=1, chat="auto")  # the tokenizer has a template
    assert b.chat is True
    ids, _ = b.encode_prompt("Improve f.\n<answer_1>", 8)
    assert b.tokenizer.decode(ids) == "<|user|>Improve f.\n<|assistant|><answer_1>"
    (c,) = b.generate(["Improve f.\n<answer_1>"], 1, SamplingParams(temperature=0.8, max_tokens=4, seed=0))[0]
    assert c.prompt_token_ids == ids and len(c.logprobs) == len(c.token_ids) >= 1
    assert HFBackend(tmp_path, device="cpu", threads=1, chat=False).chat is False
