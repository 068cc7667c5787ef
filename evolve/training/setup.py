"""One way to set up the learner, from a run config's ``train`` section: used by campaigns
(evolve/training/campaign.py) and by `vevo train` (evolve/training/study.py), so both train with the same defaults and
every ``train`` key means the same in both.

The LoRA adapter's random initialisation is drawn from the run's seed (two runs of one config train the same
adapter); for full fine-tuning the KL reference is copied before PolicyTrainer makes the trainable weights fp32,
so it stays in the loading dtype (half the memory in bf16).
"""
from __future__ import annotations

from typing import Any

from proposer.backends.fast_logprobs import frozen_bf16_pays
from proposer.errors import TrainingError
from proposer.training.trainer import PolicyTrainer, TrainConfig

from ..config.schema import CampaignConfig


def training_config(cfg: CampaignConfig) -> TrainConfig:
    """The ``train`` keys (and the sampling temperature / top-p) of a run config as a TrainConfig; a step's
    samples are ``train.batch`` groups of ``trained_group`` completions."""
    t = cfg.train
    return TrainConfig(lr=t.lr, epochs=t.epochs, clip_eps=t.clip_eps, kl_beta=t.kl_beta,
                       max_grad_norm=t.max_grad_norm, weight_decay=t.weight_decay, is_cap=t.is_cap,
                       minibatch=t.minibatch or min(8, t.batch * cfg.trained_group), micro_batch=t.micro_batch,
                       max_seq_len=t.max_seq_len, gradient_checkpointing=t.grad_checkpointing,
                       bf16_autocast_on_gpu=t.autocast == "bf16", fast_forward=t.fast_forward,
                       frozen_bf16=t.frozen_dtype == "bf16" or (t.frozen_dtype == "auto" and frozen_bf16_pays()),
                       temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p)


def movement_due(cfg: CampaignConfig, version: int) -> bool:
    """Whether the update that makes policy ``version`` + 1 measures its movement (``train.movement_every``)."""
    every = cfg.train.movement_every
    return bool(every) and (version == 0 or (version + 1) % every == 0)


def trainable_model(model: Any, cfg: CampaignConfig) -> Any:
    """The model with its LoRA adapter (``train.lora``: seeded init), or the model itself for full fine-tuning;
    an adapter already there (a resumed learner) is kept."""
    if not cfg.train.lora:
        return model
    from peft import PeftModel

    from proposer.training.lora import LoraError, wrap_lora

    if isinstance(model, PeftModel):
        return model
    import torch

    try:
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            return wrap_lora(model, cfg.train.lora_rank, cfg.train.lora_alpha, cfg.train.lora_targets)
    except LoraError as e:
        raise TrainingError(str(e)) from None


def build_trainer(learner: Any, cfg: CampaignConfig) -> PolicyTrainer:
    """Wrap ``learner.model`` for training (in place: the backend generates with what is trained) and return
    its PolicyTrainer."""
    learner.model = trainable_model(learner.model, cfg)
    ref = None if cfg.train.lora else PolicyTrainer.frozen_copy(learner.model)
    return PolicyTrainer(learner.model, training_config(cfg), ref_model=ref)
