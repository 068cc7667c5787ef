"""LoRA for any causal LM vevo trains: target modules found from the model's own linear layers, one wrapper.

Why by architecture and not by guessing Llama names: Phi-3 fuses q/k/v into ``qkv_proj`` and gate/up into
``gate_up_proj``, GPT-2 uses ``Conv1D`` layers ``c_attn``/``c_proj``/``c_fc``, GPT-NeoX ``query_key_value`` and
``dense*``; a Llama-name guess puts LoRA on ``o_proj`` alone (Phi-3) or on nothing. The table below lists, per
``config.model_type``, the attention and MLP projections (the set PEFT/TRL recipes use, "all-linear" minus the
head); an unknown architecture gets every linear layer inside its decoder blocks.
"""
from __future__ import annotations

from typing import Any

import torch

from problems.errors import VevoError

# attention + MLP projections per architecture (vLLM can serve LoRA on all of these)
_LLAMA_LIKE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ARCH_TARGETS: dict[str, tuple[str, ...]] = {
    **{t: _LLAMA_LIKE for t in ("llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "olmo", "olmo2",
                                "granite", "internlm2")},
    "phi3": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    "gpt2": ("c_attn", "c_proj", "c_fc"),
    "gpt_neox": ("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"),
    "gptj": ("q_proj", "k_proj", "v_proj", "out_proj", "fc_in", "fc_out"),
    "phi": ("q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"),
}
_NEVER = ("lm_head", "embed_out", "wte", "wpe", "embed_tokens", "score")


class LoraError(VevoError, ValueError):
    """One-line error: LoRA cannot be put on this model as asked."""


def _base(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def linear_leaf_names(model: torch.nn.Module) -> set[str]:
    """Last name component of every linear layer (``nn.Linear`` or transformers' ``Conv1D``), minus the head."""
    from transformers.pytorch_utils import Conv1D

    return {name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
            if isinstance(mod, (torch.nn.Linear, Conv1D)) and name.rsplit(".", 1)[-1] not in _NEVER}


def lora_targets(model: torch.nn.Module) -> list[str]:
    """The module names LoRA goes on: the architecture's projections that this model has (table above), else
    every linear layer but the head. A known architecture missing all of its names is an error."""
    have = linear_leaf_names(_base(model))
    mtype = getattr(getattr(_base(model), "config", None), "model_type", None)
    if mtype in ARCH_TARGETS:
        found = [t for t in ARCH_TARGETS[mtype] if t in have]
        if not found:
            raise LoraError(f"lora: {mtype} model has none of {', '.join(ARCH_TARGETS[mtype])}")
        return found
    if not have:
        raise LoraError(f"lora: no linear layers found in {type(model).__name__}")
    return sorted(have)


def wrap_lora(model: torch.nn.Module, rank: int = 8, alpha: float | None = None,
              targets: list[str] | None = None) -> torch.nn.Module:
    """A trainable ``peft`` LoRA around ``model`` (lora_B = 0, so the wrapped model equals the base at first).
    ``targets`` None: ``lora_targets(model)``; names the model lacks are an error. Dropout 0 (the trainer's
    ratio must be exactly 1 on fresh samples). LoRA weights are fp32 whatever the base dtype."""
    from peft import LoraConfig, get_peft_model

    if rank < 1:
        raise LoraError(f"lora: rank must be >= 1, got {rank}")
    found = lora_targets(model)
    if targets:
        missing = [t for t in targets if t not in linear_leaf_names(_base(model))]
        if missing:
            raise LoraError(f"lora: target modules {', '.join(missing)} are not linear layers of this model "
                            f"(it has {', '.join(sorted(linear_leaf_names(_base(model))))})")
        found = list(targets)
    mtype = getattr(getattr(model, "config", None), "model_type", None)
    cfg = LoraConfig(r=int(rank), lora_alpha=float(alpha if alpha is not None else 2 * rank), lora_dropout=0.0,
                     target_modules=found, fan_in_fan_out=mtype == "gpt2", task_type="CAUSAL_LM")
    return get_peft_model(model, cfg, autocast_adapter_dtype=True)


def save_lora(model: Any, directory: str) -> bool:
    """Write the model's one LoRA adapter as ``save_pretrained`` does (``adapter_model.safetensors`` and
    ``adapter_config.json``, the same bytes, from peft's own state dict and config writer) but without the model
    card that peft re-renders from a template at every save (half of the call's ~15 ms; a campaign saves a
    snapshot per step). False, and nothing written, for anything else (other PEFT types, several adapters):
    the caller then uses ``save_pretrained``."""
    import os

    from peft import PeftType, get_peft_model_state_dict
    from safetensors.torch import save_file

    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or list(configs) != ["default"]:
        return False
    cfg = configs["default"]
    if cfg.peft_type != PeftType.LORA or cfg.task_type is None or cfg.base_model_name_or_path is None:
        return False  # save_pretrained fills these in (an auto-mapping, the base's path): leave that to it
    state = {k: v.contiguous() for k, v in get_peft_model_state_dict(model, adapter_name="default").items()}
    if len({t.untyped_storage().data_ptr() for t in state.values()}) != len(state):
        return False  # shared tensors: save_pretrained clones them first
    os.makedirs(directory, exist_ok=True)
    save_file(state, os.path.join(directory, "adapter_model.safetensors"), metadata={"format": "pt"})
    inference_mode, cfg.inference_mode = cfg.inference_mode, True
    try:
        cfg.save_pretrained(directory)
    finally:
        cfg.inference_mode = inference_mode
    return True
