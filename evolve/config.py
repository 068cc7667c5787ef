"""Typed, strict campaign configuration (contract 5: an unknown key is an error that names the key).

A campaign's knobs in typed sections — `selection`, `sampling`, `train`, `sandbox`, `executor` — beside the
top-level keys that say what to solve and with what proposer. `load_config` merges a YAML file with command-line
overrides and turns every failure into a one-line `ConfigError` naming the file and the key, so a typo never
silently falls back to a default.

The flat keys of earlier versions (``train_lr``, ``temperature``, ``selection: lexicase``, ``train: vpo``) are
still accepted everywhere — in YAML, in overrides, in old run folders — and mean the section key they name
(`FLAT_KEYS`); the CLI's run flags are generated from the same table (`run_flags`), so a new field is a new flag.
"""
from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticUndefined

from evaluators.executor import EXECUTORS
from problems.errors import VevoError

MAX_EVAL_TIMEOUT = 86_400.0  # seconds; the sandbox's timers need finite values, and a day is already a typo


class ConfigError(VevoError):
    """A configuration problem; str() is one line naming the source (file) and the key."""


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, assignments are validated too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def registered(section: str) -> list[str]:
    """The names a section's primary key accepts, read from the live registry (a plugin's entry counts); one
    place for both the validators and the CLI's choices."""
    if section == "selection":
        from .selection import SELECTIONS

        return list(SELECTIONS)
    if section == "train":
        from proposer.training.algorithms import training_algorithms

        return training_algorithms()
    if section == "portfolio":
        from .portfolio import CHOICES

        return list(CHOICES)
    return list(EXECUTORS)


def _known(name: str, section: str, what: str) -> str:
    table = registered(section)
    if name not in table:
        raise ValueError(f"unknown {what} {name!r} (known: {', '.join(table)})")
    return name


class SelectionConfig(StrictModel):
    """How parents and inspirations are chosen, and how islands keep and exchange members."""

    method: str = Field("lexicase", description="how parents are chosen")
    lexicase_epsilon: float | None = Field(None, ge=0, description="ε of ε-lexicase; None: per-test median "
                                           "absolute deviation")
    tournament_size: int = Field(3, ge=1, description="programs drawn per tournament (selection tournament)")
    inspirations: int = Field(2, ge=0, description="other programs shown in the prompt")
    island_capacity: int = Field(40, ge=1, description="programs an island keeps")
    migration_every: int = Field(10, ge=0, description="iterations between migrations (0: never)")
    migration_count: int = Field(1, ge=0, description="programs each island sends to the next at a migration")

    @field_validator("method")
    @classmethod
    def _registered(cls, v: str) -> str:
        return _known(v, "selection", "selection method")


class SamplingConfig(StrictModel):
    """What the proposer is asked for and how it samples."""

    answer_mode: Literal["full", "diff"] = Field("full", description="answers are whole blocks or SEARCH/REPLACE diffs")
    temperature: float = Field(1.0, ge=0, description="sampling temperature (0: greedy)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling: the smallest set of tokens with this "
                         "probability")
    max_tokens: int = Field(384, ge=1, description="tokens per completion")
    chat: bool | Literal["auto"] = Field("auto", description="chat template + chat prompt style for hf/vllm/"
                                         "openai proposers; auto: when the tokenizer has a chat template")
    reasoning: bool = Field(False, description="the prompt asks for a short <reasoning> section before the answers "
                            "(CoVRL's prior template); parsing works with or without it")


class TrainSection(StrictModel):
    """Periodic proposer updates inside the campaign (evolve/campaign_training.py)."""

    algo: str = Field("none", description="training algorithm; none: the proposer is never updated")
    every: int = Field(10, ge=1, description="iterations between updates")
    batch: int = Field(8, ge=1, description="archive groups per training step")
    group: int | None = Field(None, ge=2, description="G: completions per prompt of the trained proposer while it "
                              "trains (None: the search's group); the estimators' baseline is the group, and "
                              "larger groups give each step more signal")
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate")
    lora: bool = Field(True, description="train a LoRA adapter (false: every weight)")
    epochs: int = Field(1, ge=1, description="passes over each step's samples")
    reward: Literal["vector", "novel", "improvement"] = Field(
        "vector", description="vector: answers' test vectors; novel: answers that reproduce a known program score "
        "0; improvement: per test max(0, answer - parent)")
    replay_older: float = Field(0.0, ge=0, le=1, description="share of each step's groups drawn from older "
                                "archive groups (the rest are the most recent)")
    minibatch: int | None = Field(None, ge=1, description="completions per optimizer update; None: "
                                  "min(8, batch * group)")
    micro_batch: int = Field(0, ge=0, description="completions per forward/backward (0: the minibatch)")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range")
    kl_beta: float = Field(1e-3, ge=0, description="k3 KL weight to the reference (LoRA: adapter off)")
    is_cap: float = Field(2.0, ge=1, description="truncation of the sampler importance weight")
    max_grad_norm: float = Field(1.0, ge=0, description="gradient norm clip (0: no clipping)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    lora_rank: int = Field(8, ge=1, description="LoRA rank")
    lora_alpha: float | None = Field(None, gt=0, description="None: 2 * rank")
    lora_targets: list[str] | None = Field(None, description="module names; None: found per architecture")
    max_seq_len: int = Field(0, ge=0, description="prompt + completion tokens per row (0: no limit)")
    grad_checkpointing: bool = Field(False, description="recompute activations in the backward pass (less "
                                     "memory, slower)")
    autocast: Literal["bf16", "none"] = Field("bf16", description="forward precision on CUDA")
    # learning diagnostics (evolve/probe.py): a fixed probe set, sampled with a fixed seed
    probe_every: int = Field(5, ge=0, description="probe after every N-th policy update, and once before the "
                             "first (0: no probes)")
    probe_problems: int = Field(4, ge=1, description="problems per probe set (own problems; held-out problems)")
    probe_group: int = Field(2, ge=1, description="completions per probe problem")
    # CoVRL (algo: covrl | vpo+covrl; proposer/training/covrl.py)
    covrl_alpha: float = Field(0.5, ge=0, le=1, description="share of trajectories sampled from the prior")
    covrl_clip_eps: float = Field(0.3, gt=0, description="PPO clip of p'_new / p_hybrid_old")
    covrl_nll_coef: float = Field(1.0, ge=0, description="selective NLL of the reference after good z")
    covrl_kl_coef: float = Field(0.1, ge=0, description="weight of KL(p' || prior), Bregman estimator")
    covrl_std_norm: bool = Field(False, description="divide advantages by the group's reward std")
    covrl_reason_tokens: int = Field(32, ge=1, description="reasoning budget per trajectory")
    covrl_share: float = Field(0.5, gt=0, le=1, description="vpo+covrl: share of training steps that are CoVRL "
                               "(0.5: alternate)")

    @field_validator("algo")
    @classmethod
    def _registered(cls, v: str) -> str:
        return _known(v, "train", "training algorithm")


class SandboxConfig(StrictModel):
    """The local sandbox pool that evaluates candidates."""

    workers: int = Field(2, ge=1, description="sandbox worker processes (per node with executor ray)")
    eval_timeout: float | None = Field(None, gt=0, le=MAX_EVAL_TIMEOUT, description="seconds per candidate; "
                                       "None: the problem's own timeout")
    unsafe_no_sandbox: bool = Field(False, description="run candidates even where neither user namespaces nor "
                                    "Landlock can confine them: they then read your files and signal your processes")


class ExecutorConfig(StrictModel):
    """Where evaluations run."""

    kind: str = Field("local", description="local: a sandbox pool on this machine; ray: one sandbox pool per Ray "
                      "node (the results do not depend on it)")
    ray_address: str | None = Field(None, description="the Ray cluster to join for kind ray and for vllm-ray: "
                                    "proposers (one cluster serves both), HOST:PORT or auto (None: start a local "
                                    "Ray on 127.0.0.1)")

    @field_validator("kind")
    @classmethod
    def _registered(cls, v: str) -> str:
        return _known(v, "executor", "executor")


from .portfolio_config import PortfolioConfig, ProposerMember, check_members  # noqa: E402

SECTIONS: dict[str, type[StrictModel]] = {"selection": SelectionConfig, "sampling": SamplingConfig,
                                          "train": TrainSection, "sandbox": SandboxConfig, "executor": ExecutorConfig,
                                          "portfolio": PortfolioConfig}
_PRIMARY = {"selection": "method", "train": "algo", "executor": "kind",  # `selection: tournament` == method
            "portfolio": "policy"}
_FLAT_PREFIX = {"train": "train_", "portfolio": "portfolio_"}  # other sections' flat names are the key itself


def _flat_keys() -> dict[str, tuple[str, str]]:
    out = {}
    for sec, model in SECTIONS.items():
        for name in model.model_fields:
            flat = sec if _PRIMARY.get(sec) == name else _FLAT_PREFIX.get(sec, "") + name
            out[flat] = (sec, name)
    return out


FLAT_KEYS: dict[str, tuple[str, str]] = _flat_keys()  # flat (legacy, CLI) key -> (section, key)


def nest(data: dict[str, Any], source: str = "<config>") -> dict[str, Any]:
    """Flat keys moved into their sections; a key given both ways in one source is an error naming both."""
    out: dict[str, Any] = {}
    moved: dict[tuple[str, str], str] = {}
    for k, v in data.items():
        if k in SECTIONS and isinstance(v, BaseModel):  # already a section (validated assignment, copies)
            out[k] = v
        elif k in SECTIONS and isinstance(v, dict):
            out.setdefault(k, {})
            for kk, vv in v.items():
                if (k, kk) in moved:
                    raise ConfigError(f"{source}: '{k}.{kk}' is also given as '{moved[(k, kk)]}'")
                out[k][kk] = vv
        elif k in FLAT_KEYS and (k not in SECTIONS or not isinstance(v, dict)):
            sec, key = FLAT_KEYS[k]
            if key in out.get(sec, {}):
                raise ConfigError(f"{source}: '{k}' is also given as '{sec}.{key}'")
            out.setdefault(sec, {})[key] = v
            moved[(sec, key)] = k
        else:
            out[k] = v
    return out


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, one level deep for sections (an override of train.lr keeps train.algo)."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for k, v in over.items():
        if k in SECTIONS and isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k].update(v)
        else:
            out[k] = v
    return out


class CampaignConfig(StrictModel):
    """Everything one campaign needs. Defaults give a small, runnable campaign with the tiny proposer."""

    # what to solve
    problems: list[str] = Field(default_factory=list, description="a problem id (repeatable)")
    suite: str | None = Field(None, description="a named suite of problems")
    problems_dir: list[str] = Field(default_factory=list, description="folders of problems; given alone, the "
                                    "campaign runs every problem in them")
    # proposer and search shape
    proposer: str = Field("tiny", description="tiny | hf:PATH | vllm:PATH | vllm-ray:PATH | openai:URL[,URL...] | "
                          "replay:FILE")
    proposers: list[ProposerMember] = Field(default_factory=list, description="a portfolio of proposers chosen per "
                                            "iteration by portfolio.policy (YAML only; replaces 'proposer')")
    proposer_threads: int | None = Field(1, ge=1, description="torch threads for tiny/hf on CPU (1 leaves the "
                                         "other cores to the sandbox); None: the backend's default")
    proposer_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weights of hf/vllm proposers (auto: bf16 on a GPU that has it, else fp32); a trainer "
        "keeps its trainable weights in fp32 whatever this is")
    vllm_gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="vLLM's share of the GPU; None: 0.85, or 0.5 when a trainer shares the GPU "
        "without vllm_sleep")
    vllm_sleep: bool = Field(False, description="vLLM sleep mode: the engine frees its GPU memory during each "
                             "training step (CUDA only)")
    vllm_tensor_parallel_size: int = Field(1, ge=1, description="GPUs per vLLM engine (vllm:, vllm-ray:)")
    vllm_replicas: int = Field(1, ge=1, description="vllm-ray:PATH: vLLM engines started as Ray actors "
                               "(executor.ray_address is the cluster)")
    vllm_restarts: int = Field(1, ge=0, description="vllm-ray:PATH: new actors started for each replica whose "
                               "actor is lost")
    iterations: int = Field(50, ge=0, description="island steps: each one prompt, its group of completions and "
                            "their evaluation")
    islands: int = Field(2, ge=1, description="separate populations per problem (ring migration between them)")
    answers: int = Field(4, ge=1, description="m: answers per completion")
    group: int = Field(2, ge=1, description="G: completions per prompt")
    seed: int = Field(0, description="seeds selection, sampling and training: one seed and config, one run")
    out: str | None = Field(None, description="run folder (default runs/<timestamp>)")
    retire_solved: bool = Field(True, description="stop working on a problem once it is solved")
    pipeline_depth: int = Field(1, ge=0, le=64, description="batches in flight: generate iteration t while "
                                "t-1 ... t-D are evaluated (several at once); parents come from the state committed "
                                "through t-D-1, so a run is reproducible for a given depth. 0: sequential")
    archive_sync: Literal["normal", "full"] = Field("normal", description="full: fsync every iteration "
                                                    "(survives power loss; normal survives kill -9)")
    # sections
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    train: TrainSection = Field(default_factory=TrainSection)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    portfolio: PortfolioConfig = Field(default_factory=PortfolioConfig)

    _source: str = PrivateAttr(default="<config>")

    @model_validator(mode="before")
    @classmethod
    def _accept_flat_keys(cls, data: Any) -> Any:
        return nest(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _cross_field(self) -> "CampaignConfig":
        dup = sorted({p for p in self.problems if self.problems.count(p) > 1})
        if dup:
            raise ValueError(f"'problems': listed more than once: {', '.join(dup)}")
        sel, tr = self.selection, self.train
        if sel.migration_count > sel.island_capacity:
            raise ValueError(f"'selection.migration_count': {sel.migration_count} exceeds "
                             f"'selection.island_capacity' {sel.island_capacity}")
        if self.vllm_replicas > 1 and not self.proposer.startswith("vllm-ray:"):
            raise ValueError(f"'vllm_replicas': {self.vllm_replicas} replicas are started for vllm-ray:PATH "
                             f"proposers only, not {self.proposer!r}")
        if tr.algo != "none" and self.proposer_dtype == "float16":
            raise ValueError("'proposer_dtype': float16 cannot be trained without loss scaling, which vevo does "
                             "not do; use bfloat16 or float32")
        if tr.algo != "none" and self.sampling.temperature == 0:
            raise ValueError("'sampling.temperature': 0 is greedy, every completion of a group is the same; "
                             "training needs temperature > 0")
        if tr.algo != "none" and self.trained_group < 2:
            raise ValueError(f"'group': train.algo={tr.algo!r} estimates advantages within a group, "
                             f"so it needs group >= 2 (got {self.group})")
        check_members(self.proposers, tr.algo)
        return self

    @property
    def trained_group(self) -> int:
        """G of the groups the trained proposer samples (and the trainer learns from): ``train.group`` when
        training is on and it is set, else the search's ``group``."""
        return self.train.group if self.train.algo != "none" and self.train.group else self.group

    def __eq__(self, other: object) -> bool:
        # compare settings only: where a config was read from (_source) does not make it different
        return type(other) is type(self) and self.model_dump() == other.model_dump()  # type: ignore[union-attr]

    __hash__ = None  # type: ignore[assignment]

    def require_problems(self) -> "CampaignConfig":
        """A campaign needs something to solve; checked when one starts, not at construction, so a config
        can be built up from several sources first. Returns self."""
        if not self.problems and not self.suite and not self.problems_dir:
            raise ConfigError(f"{self._source}: 'problems': no problems given (set 'problems', 'suite' or "
                              f"'problems_dir')")
        return self


# ------------------------------------------------------------------------------------ flags from fields
def _flag_kind(annotation: Any) -> tuple[str, tuple[str, ...] | None]:
    """('list' | 'bool' | 'int' | 'float' | 'str', choices) for a field's annotation."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        lits = [x for a in args if typing.get_origin(a) is Literal for x in typing.get_args(a)]
        if bool in args and lits:
            return "str", ("true", "false", *lits)
        return _flag_kind(args[0]) if len(args) == 1 else ("str", None)
    if origin is Literal:
        return "str", tuple(str(x) for x in typing.get_args(annotation))
    if origin is list:
        return "list", None
    if annotation is bool:
        return "bool", ("true", "false")
    return {int: "int", float: "float"}.get(annotation, "str"), None


FLAG_NAMES = {"problems": "problem"}  # --problem ID (repeatable) reads better than --problems


class Flag(typing.NamedTuple):
    """One generated run flag: its name, the config key it sets, how to read it, and where `--help` shows it."""

    flag: str
    key: str  # dest: what `load_config` accepts as an override
    kind: str  # list | bool | int | float | str
    choices: tuple[str, ...] | None
    help: str
    group: str  # the help section: a config section, or one of TOP_GROUPS
    default: Any  # the config's default (None: none or decided later)


# the help sections of top-level keys, in order; a key not named here is part of the search's shape
TOP_GROUPS = {"what to solve": ("problems", "suite", "problems_dir", "retire_solved"),
              "proposer": ("proposer", "proposer_threads", "proposer_dtype", "vllm_gpu_memory_utilization",
                           "vllm_sleep", "vllm_tensor_parallel_size", "vllm_replicas", "vllm_restarts"),
              "search": (),
              "run folder": ("out", "archive_sync")}


def _top_group(name: str) -> str:
    return next((g for g, names in TOP_GROUPS.items() if name in names), "search")


def _default(f: Any) -> Any:
    if f.default_factory is not None:
        return f.default_factory()
    return None if f.default is PydanticUndefined else f.default


def run_flags() -> list[Flag]:
    """A `Flag` for every config key: top-level fields, then each section's keys under their flat names
    (`--train-lr`, `--temperature`, `--selection`), each with its help section and default."""
    out = []
    for name, f in CampaignConfig.model_fields.items():
        if name in SECTIONS or name == "proposers":  # a list of mappings: YAML only
            continue
        kind, choices = _flag_kind(f.annotation)
        out.append(Flag(FLAG_NAMES.get(name, name).replace("_", "-"), name, kind, choices, f.description or "",
                        _top_group(name), _default(f)))
    for flat, (sec, key) in FLAT_KEYS.items():
        f = SECTIONS[sec].model_fields[key]
        kind, choices = _flag_kind(f.annotation)
        if _PRIMARY.get(sec) == key:
            choices = tuple(registered(sec))
        out.append(Flag(flat.replace("_", "-"), flat, kind, choices, f.description or "", sec, _default(f)))
    return out


def flag_groups() -> dict[str, tuple[str, str]]:
    """Help section (a `Flag.group`) -> (title, one-line description), in the order `vevo run --help` shows them."""
    top = {"what to solve": "a suite, problem ids, or folders of problems (alone: all their problems)",
           "proposer": "the model that writes the candidates", "search": "the shape of the evolution",
           "run folder": ""}
    secs = {sec: (f"{sec} section", f"config key {sec}.KEY: " +
                  re.sub(r" \(.*\)", "", (model.__doc__ or "").strip().splitlines()[0]))
            for sec, model in SECTIONS.items()}
    return {**{g: (g, text) for g, text in top.items()}, **secs}


def flag_value(kind: str, text: str) -> Any:
    """A flag's text as the config value: true/false become booleans; numbers are left to the validator."""
    if kind in ("bool", "str") and text in ("true", "false"):
        return text == "true"
    return text


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _format_error(source: str, err: ValidationError) -> str:
    known = list(CampaignConfig.model_fields) + list(FLAT_KEYS) + [f"{s}.{k}" for s, k in FLAT_KEYS.values()]
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        if e["type"] == "extra_forbidden":
            hint = difflib.get_close_matches(loc, known, n=1) or difflib.get_close_matches(str(e["loc"][-1]), known, n=1)
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
    data = nest(_read_yaml(Path(path)), source) if path is not None else {}
    data = merge(data, nest({k: v for k, v in (overrides or {}).items() if v is not None}, "overrides"))
    try:
        cfg = CampaignConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_error(source, e)) from None
    cfg._source = source
    return cfg


def config_to_yaml(cfg: CampaignConfig) -> str:
    """YAML text that `load_config` turns back into an equal config (keys in declaration order, sections
    nested)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=False)
