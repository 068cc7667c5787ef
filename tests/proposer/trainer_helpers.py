"""A tiny random Llama and a campaign-shaped group of samples, for the trainer's tests (test_training.py) and the
learner process's (test_learner_process.py)."""
from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from proposer.backends.logprobs import sequence_logprobs
from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample

VOCAB = 32


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg)


def campaign_group(n=8, seed=0, model=None) -> list[TrainSample]:
    """A campaign-shaped group: one prompt, n completions of different lengths, behaviour log-probs, advantages."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, VOCAB, (9,), generator=g).tolist()
    out = []
    for i in range(n):
        c = torch.randint(0, VOCAB, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist()
        beh = [x - 0.01 * (i % 3) for x in sequence_logprobs(model, prompt, c)]
        out.append(TrainSample(prompt, c, beh, float(torch.randn(1, generator=g))))
    return out


def lora_trainer(seed: int = 3) -> PolicyTrainer:
    """A PolicyTrainer on tiny_llama(seed) with a rank-4 LoRA whose B is not zero (so the adapter acts)."""
    from proposer.training.lora import wrap_lora

    model = wrap_lora(tiny_llama(seed=seed), rank=4)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0.0, 0.1)
    return PolicyTrainer(model, TrainConfig(lr=1e-2, minibatch=8, kl_beta=0.05))
