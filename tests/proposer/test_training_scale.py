"""The trainer's correctness at scale, on tiny random models (fp32 on CPU): micro-batches, exact on-policy
ratio, checkpointing that runs, dropout off without eval(), no updates lost to bf16, tempered log-probs."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from proposer.backends.logprobs import completion_logprobs, tempered_logprobs
from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample

VOCAB = 48


def llama(seed: int = 0, dropout: float = 0.0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        attention_dropout=dropout, tie_word_embeddings=False))


def samples(n: int = 6, seed: int = 0) -> list[TrainSample]:
    """Different prompt and completion lengths, so every micro-batch split pads differently."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = torch.randint(0, VOCAB, (2 + (3 * i) % 5,), generator=g).tolist()
        c = torch.randint(0, VOCAB, (1 + (5 * i) % 7,), generator=g).tolist()
        out.append(TrainSample(p, c, None, float(i % 3) - 1.0))  # advantages -1, 0, 1: zeros stay in
    return out


def grads_after_step(k: int) -> dict[str, torch.Tensor]:
    model = llama()
    PolicyTrainer(model, TrainConfig(lr=0.0, minibatch=6, micro_batch=k, kl_beta=0.0)).step(samples())
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_micro_batched_gradients_equal_full_batch():
    """Gradient accumulation with a minibatch-wide token-mean: the same gradient for any split (fp32; only the
    padding and summation order differ, so agreement is to 1e-6 relative / 1e-7 absolute)."""
    full = grads_after_step(0)
    for k in (1, 2, 4):
        for n, g in grads_after_step(k).items():
            torch.testing.assert_close(g, full[n], rtol=1e-6, atol=1e-7, msg=f"micro_batch={k}: {n}")
    assert any(g.abs().sum() > 0 for g in full.values())


def test_first_ratio_is_exactly_one_with_micro_batches_and_checkpointing():
    for k, ckpt in ((0, False), (2, True), (1, True)):
        model = llama()
        st = PolicyTrainer(model, TrainConfig(lr=1e-3, minibatch=3, micro_batch=k, epochs=1,
                                              gradient_checkpointing=ckpt)).step(samples(3))
        assert st["mean_ratio"] == 1.0 and st["clip_frac"] == 0.0, (k, ckpt)
        assert st["n_missing_behaviour"] == 3


def test_gradient_checkpointing_really_recomputes():
    """A decoder layer's MLP runs once more per training forward (the recompute in backward) with checkpointing
    on: it is not silently disabled (HF skips it in eval mode)."""
    calls = {}
    for ckpt in (False, True):
        model = llama()
        n, mlp = [0], model.model.layers[0].mlp
        forward = mlp.forward

        def counted(*a, _f=forward, **k):  # not a hook: torch's recompute does not re-run module hooks
            n[0] += 1
            return _f(*a, **k)

        mlp.forward = counted
        PolicyTrainer(model, TrainConfig(minibatch=4, micro_batch=2, kl_beta=0.0,
                                         gradient_checkpointing=ckpt)).step(samples(4))
        calls[ckpt] = n[0]
    # the lean step (one minibatch, one epoch): the training forward (pi_old is its own) and the movement probe,
    # 2 micro-batches each; the general step adds a pi_old forward
    assert calls[False] == 4
    assert calls[True] == 6  # + a recompute in each backward


def test_dropout_off_in_train_mode():
    model = llama(dropout=0.5)
    PolicyTrainer(model, TrainConfig(lr=0.0))
    model.train()
    ids = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=ids).logits
    assert model.training and torch.equal(a, b) and model.config.attention_dropout == 0.0


def changed_fraction(dtype: torch.dtype) -> tuple[torch.Tensor, float]:
    model = llama().to(dtype)
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    tr = PolicyTrainer(model, TrainConfig(lr=1e-5, minibatch=6, kl_beta=0.0))
    tr.step(samples())
    flags = torch.cat([(p.detach().float() != before[n]).flatten() for n, p in model.named_parameters()])
    return flags, float(flags.float().mean())


def test_bf16_model_trains_without_losing_updates():
    """A model loaded in bf16 gets an fp32 learner: one lr-1e-5 step changes > 95% of the weights that an fp32
    model's step changes (AdamW on the bf16 weights themselves changed ~15%)."""
    f32, frac32 = changed_fraction(torch.float32)
    b16, _ = changed_fraction(torch.bfloat16)
    assert frac32 > 0.5
    assert float((b16 & f32).sum()) / float(f32.sum()) > 0.95
    model = llama().to(torch.bfloat16)
    PolicyTrainer(model, TrainConfig())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with pytest.raises(ValueError, match="loses most updates"):
        PolicyTrainer(llama().to(torch.bfloat16), TrainConfig(upcast_trainable=False))


def test_tempered_logprobs_match_reference():
    model = llama().eval()
    ss = samples(4)
    prompts, comps = [s.prompt_ids for s in ss], [s.completion_ids for s in ss]
    for t in (0.5, 1.7):
        with torch.no_grad():
            got, mask = completion_logprobs(model, prompts, comps, temperature=t)
        for i, (p, c) in enumerate(zip(prompts, comps)):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1: len(p) + len(c) - 1]
            want = F.log_softmax(logits.double() / t, dim=-1).gather(-1, torch.tensor(c)[:, None]).squeeze(-1)
            np.testing.assert_allclose(got[i, : len(c)].numpy(), want.numpy(), atol=1e-5)
            assert mask[i].sum() == len(c)


def test_top_p_logprobs_renormalise_over_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    lp = tempered_logprobs(logits.expand(4, 4), torch.arange(4), top_p=0.7)
    # nucleus {0, 1} (mass 0.8 >= 0.7); a target outside it is kept with its own mass
    np.testing.assert_allclose(lp[:2].exp().numpy(), [0.5 / 0.8, 0.3 / 0.8], rtol=1e-6)
    np.testing.assert_allclose(lp[2].exp().item(), 0.15 / 0.95, rtol=1e-6)


def test_max_seq_len_cuts_the_prompt_start():
    s = TrainSample(list(range(1, 11)), [11, 12, 13], [-1.0, -2.0, -3.0], 1.0)
    st = PolicyTrainer(llama(), TrainConfig(max_seq_len=6, lr=0.0)).step([s])
    assert st["n_truncated"] == 1 and st["n_tokens"] == 3
    with pytest.raises(ValueError, match="micro_batch"):
        TrainConfig(micro_batch=-1)
