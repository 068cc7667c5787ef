"""Typed, strict campaign configuration (contract 5: an unknown key is an error that names the key).

One flat pydantic model keeps every knob of a campaign in one place; `load_config` merges a YAML file with
command-line overrides and turns every failure into a one-line `ConfigError` that names the file and the key,
so a typo never silently falls back to a default.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

Selection = Literal["lexicase", "tournament", "niches"]
Trainer = Literal["none", "vpo", "grpo", "dr_grpo", "gdpo", "multi_rlvr", "max_at_k", "covrl", "vpo+covrl"]


MAX_EVAL_TIMEOUT = 86_400.0  # seconds; the sandbox's timers need finite values, and a day is already a typo


class ConfigError(Exception):
    """A configuration problem; str() is one line naming the source (file) and the key."""


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, assignments are validated too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class CampaignConfig(StrictModel):
    """Everything one campaign needs. Defaults give a small, runnable campaign with the tiny proposer."""

    # what to solve
    problems: list[str] = Field(default_factory=list, description="problem ids")
    suite: str | None = Field(None, description="a named suite of problems")
    problems_dir: list[str] = Field(default_factory=list, description="extra folders to load problems from")
    # proposer and search shape
    proposer: str = "tiny"
    proposer_threads: int | None = Field(1, ge=1, description="torch threads for tiny/hf on CPU; 1 while the "
                                         "sandbox overlaps generation ran 2.06x faster than 2 (bench/cpu_schedule.py); "
                                         "None: the backend's default")
    iterations: int = Field(50, ge=0)
    islands: int = Field(2, ge=1)
    answers: int = Field(4, ge=1, description="m: answers per completion")
    group: int = Field(2, ge=1, description="G: completions per prompt")
    seed: int = 0
    workers: int = Field(2, ge=1)
    out: str | None = None
    # selection and islands
    selection: Selection = "lexicase"
    lexicase_epsilon: float | None = Field(None, ge=0, description="None: per-test median absolute deviation")
    tournament_size: int = Field(3, ge=1)
    inspirations: int = Field(2, ge=0)
    island_capacity: int = Field(40, ge=1)
    migration_every: int = Field(10, ge=0, description="0: never migrate")
    migration_count: int = Field(1, ge=0)
    retire_solved: bool = True
    # prompting and sampling
    answer_mode: Literal["full", "diff"] = "full"
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(384, ge=1)
    eval_timeout: float | None = Field(None, gt=0, le=MAX_EVAL_TIMEOUT, description="None: the problem's own timeout")
    pipeline_depth: int = Field(1, ge=0, le=1, description="1: generate iteration t+1 while evaluating t")
    reasoning: bool = Field(False, description="the prompt asks for a short <reasoning> section before the answers "
                            "(CoVRL's prior template); parsing works with or without it")
    chat: bool | Literal["auto"] = Field("auto", description="chat template + chat prompt style for hf/vllm/"
                                         "openai proposers; auto: when the tokenizer has a chat template")
    proposer_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weights of hf/vllm proposers (auto: bf16 on a GPU that has it, else fp32); a trainer "
        "keeps its trainable weights in fp32 whatever this is")
    vllm_gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="vLLM's share of the GPU; None: 0.85, or 0.5 when a trainer shares the GPU "
        "without vllm_sleep")
    vllm_sleep: bool = Field(False, description="vLLM sleep mode: the engine frees its GPU memory during each "
                             "training step (CUDA only)")
    # training
    train: Trainer = "none"
    train_every: int = Field(10, ge=1)
    train_batch: int = Field(8, ge=1, description="recent groups per training step")
    train_lr: float = Field(1e-3, gt=0, description="AdamW lr; 1e-3 with LoRA r8 is the smallest that moves the "
                            "tiny proposer (bench/train_sweep.py, docs/results/train_sweep.md)")
    train_lora: bool = True
    train_epochs: int = Field(1, ge=1)
    train_reward: Literal["vector", "novel", "improvement"] = Field(
        "vector", description="vector: answers' test vectors; novel: answers that reproduce a known program score "
        "0; improvement: per test max(0, answer - parent)")
    train_replay_older: float = Field(0.0, ge=0, le=1, description="share of each step's groups drawn from older "
                                      "archive groups (the rest are the most recent)")
    train_minibatch: int | None = Field(None, ge=1, description="completions per optimizer update; None: "
                                        "min(8, train_batch * group)")
    train_micro_batch: int = Field(0, ge=0, description="completions per forward/backward (0: the minibatch)")
    train_clip_eps: float = Field(0.2, gt=0, description="PPO clip range")
    train_kl_beta: float = Field(1e-3, ge=0, description="k3 KL weight to the reference (LoRA: adapter off)")
    train_is_cap: float = Field(2.0, ge=1, description="truncation of the sampler importance weight")
    train_max_grad_norm: float = Field(1.0, ge=0, description="0: no clipping")
    train_weight_decay: float = Field(0.0, ge=0)
    train_lora_rank: int = Field(8, ge=1)
    train_lora_alpha: float | None = Field(None, gt=0, description="None: 2 * rank")
    train_lora_targets: list[str] | None = Field(None, description="module names; None: found per architecture")
    train_max_seq_len: int = Field(0, ge=0, description="prompt + completion tokens per row (0: no limit)")
    train_grad_checkpointing: bool = False
    train_autocast: Literal["bf16", "none"] = Field("bf16", description="forward precision on CUDA")
    # CoVRL (train: covrl | vpo+covrl; proposer/covrl.py)
    train_covrl_alpha: float = Field(0.5, ge=0, le=1, description="share of trajectories sampled from the prior")
    train_covrl_clip_eps: float = Field(0.3, gt=0, description="PPO clip of p'_new / p_hybrid_old")
    train_covrl_nll_coef: float = Field(1.0, ge=0, description="selective NLL of the reference after good z")
    train_covrl_kl_coef: float = Field(0.1, ge=0, description="weight of KL(p' || prior), Bregman estimator")
    train_covrl_std_norm: bool = Field(False, description="divide advantages by the group's reward std")
    train_covrl_reason_tokens: int = Field(32, ge=1, description="reasoning budget per trajectory")
    train_covrl_share: float = Field(0.5, gt=0, le=1, description="vpo+covrl: share of training steps that are "
                                     "CoVRL (0.5: alternate)")
    # bookkeeping
    archive_sync: Literal["normal", "full"] = Field("normal", description="full: fsync every iteration "
                                                    "(survives power loss; normal survives kill -9)")

    _source: str = PrivateAttr(default="<config>")

    @model_validator(mode="after")
    def _cross_field(self) -> "CampaignConfig":
        dup = sorted({p for p in self.problems if self.problems.count(p) > 1})
        if dup:
            raise ValueError(f"'problems': listed more than once: {', '.join(dup)}")
        if self.migration_count > self.island_capacity:
            raise ValueError(f"'migration_count': {self.migration_count} exceeds 'island_capacity' "
                             f"{self.island_capacity}")
        if self.train != "none" and self.proposer_dtype == "float16":
            raise ValueError("'proposer_dtype': float16 cannot be trained without loss scaling, which vevo does "
                             "not do; use bfloat16 or float32")
        if self.train != "none" and self.temperature == 0:
            raise ValueError("'temperature': 0 is greedy, every completion of a group is the same; training "
                             "needs temperature > 0")
        if self.train != "none" and self.group < 2:
            raise ValueError(f"'group': train={self.train!r} estimates advantages within a group, "
                             f"so it needs group >= 2 (got {self.group})")
        return self

    def __eq__(self, other: object) -> bool:
        # compare settings only: where a config was read from (_source) does not make it different
        return type(other) is type(self) and self.model_dump() == other.model_dump()  # type: ignore[union-attr]

    __hash__ = None  # type: ignore[assignment]

    def require_problems(self) -> "CampaignConfig":
        """A campaign needs something to solve; checked when one starts, not at construction, so a config
        can be built up from several sources first. Returns self."""
        if not self.problems and not self.suite:
            raise ConfigError(f"{self._source}: 'problems': no problems given (set 'problems' or 'suite')")
        return self


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _format_error(source: str, err: ValidationError) -> str:
    known = list(CampaignConfig.model_fields)
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        if e["type"] == "extra_forbidden":
            hint = difflib.get_close_matches(str(e["loc"][-1]), known, n=1)
            parts.append(f"unknown key '{loc}'" + (f" (did you mean '{hint[0]}'?)" if hint else ""))
            continue
        msg = e["msg"]
        if msg.startswith("Value error, "):  # raised by a validator, already names its key
            msg = msg[len("Value error, "):]
        parts.append(f"'{loc}': {msg}" if loc else msg)
    return _one_line(f"{source}: " + "; ".join(parts))


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(_one_line(f"{path}: cannot read: {e}")) from None
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or e
        raise ConfigError(_one_line(f"{path}: invalid YAML{where}: {problem}")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return {str(k): v for k, v in data.items()}


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> CampaignConfig:
    """Read the YAML file (missing path: defaults), apply overrides whose value is not None, validate.

    Every failure is a ConfigError with a one-line message naming the file and the key."""
    source = str(path) if path is not None else "<config>"
    data = _read_yaml(Path(path)) if path is not None else {}
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        cfg = CampaignConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_error(source, e)) from None
    cfg._source = source
    return cfg


def config_to_yaml(cfg: CampaignConfig) -> str:
    """YAML text that `load_config` turns back into an equal config (keys in declaration order)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=False)
