"""Typed, strict campaign configuration: an unknown key is an error that names the key.

A campaign's knobs in sections that match the rooms: ``proposer`` (spec, threads, dtype, and the backend's own
``options``, declared by its factory in proposer/backends), ``search`` (budget, islands, groups, ``selection``,
``migration``), ``sampling``, ``train`` (with ``covrl``), ``executor`` (kind, sandbox workers, timeouts, Ray) and
``portfolio``; beside them the top-level keys that say what to solve and where the run goes. `load_config` merges a
YAML file with dotted overrides (``train.lr``) and turns every failure into a one-line `ConfigError` naming the
file and the key, so a typo never silently falls back to a default. The CLI's run flags are generated from the
models (`run_flags`), so a new field is a new flag. Keys of earlier versions are known only to
evolve/config/legacy.py: reading an old run folder converts them, writing one is an error naming the new key.
"""
from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticUndefined

from evaluators.executor import EXECUTORS
from problems.errors import VevoError

from .dotted import merge, unflatten

if TYPE_CHECKING:
    from proposer.backends.options import BackendRun

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
        from ..policies.selection import SELECTIONS

        return list(SELECTIONS)
    if section == "train":
        from proposer.training.algorithms import training_algorithms

        return training_algorithms()
    if section == "portfolio":
        from ..policies.portfolio import CHOICES

        return list(CHOICES)
    if section == "strategy":
        from ..policies.strategies import STRATEGIES

        return list(STRATEGIES)
    return list(EXECUTORS)


def _known(name: str, section: str, what: str) -> str:
    table = registered(section)
    if name not in table:
        raise ValueError(f"unknown {what} {name!r} (known: {', '.join(table)})")
    return name


class SelectionConfig(StrictModel):
    """How parents and inspirations are chosen."""

    method: str = Field("lexicase", description="how parents are chosen")
    lexicase_epsilon: float | None = Field(None, ge=0, description="ε of ε-lexicase; None: per-test median "
                                           "absolute deviation")
    tournament_size: int = Field(3, ge=1, description="programs drawn per tournament (selection tournament)")
    inspirations: int = Field(2, ge=0, description="other programs shown in the prompt")

    @field_validator("method")
    @classmethod
    def _registered(cls, v: str) -> str:
        return _known(v, "selection", "selection method")


class MigrationConfig(StrictModel):
    """How islands exchange members (a ring: each island sends to the next)."""

    every: int = Field(10, ge=0, description="iterations between migrations (0: never)")
    count: int = Field(1, ge=0, description="programs each island sends to the next at a migration")


class BudgetConfig(StrictModel):
    """Stop rules beside search.iterations (evolve/search/budget.py): the run stops at the commit where the first of
    them is reached, counted from the archive (so a resumed run counts what it did before)."""

    evaluations: int | None = Field(None, ge=1, description="stop once this many programs are evaluated (the "
                                    "seeds included: the x axis of `vevo curves --x evaluations`); unset: no limit")
    seconds: float | None = Field(None, gt=0, description="stop once the run's wall clock (across resumes) "
                                  "reaches this many seconds; unset: no limit")
    tokens: int | None = Field(None, ge=1, description="stop once the proposer has generated this many tokens; "
                               "unset: no limit")


class SearchSection(StrictModel):
    """The shape of the evolution: budget, islands, groups, selection and migration."""

    iterations: int = Field(50, ge=0, description="island steps: each one prompt, its group of completions and "
                            "their evaluation")
    islands: int = Field(2, ge=1, description="separate populations per problem (ring migration between them)")
    island_capacity: int = Field(40, ge=1, description="programs an island keeps")
    answers: int = Field(4, ge=1, description="m: answers per completion")
    # one G for every arm (docs/results/decisive_study.md): an untrained run samples as many completions per
    # iteration as a trained one at the default schedule (train.group None follows this)
    group: int = Field(8, ge=1, description="G: completions per prompt (a trained proposer's too, unless "
                       "train.group is set)")
    pipeline_depth: int = Field(1, ge=0, le=64, description="batches in flight: generate iteration t while "
                                "t-1 ... t-D are evaluated (several at once); parents come from the state committed "
                                "through t-D-1, so a run is reproducible for a given depth. 0: sequential")
    retire_solved: bool = Field(True, description="stop working on a problem once it is solved")
    strategy: str = Field("evolve", description="where proposals start from (evolve/policies/strategies.py): evolve (the "
                          "selection method's parent and inspirations), iid (always the problem's seed, nothing "
                          "else shown), topk (one of the island's top_k best, alone)")
    top_k: int = Field(4, ge=1, description="strategy topk: the best programs of an island a parent is drawn from")
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    migration: MigrationConfig = Field(default_factory=MigrationConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)

    @field_validator("strategy")
    @classmethod
    def _registered(cls, v: str) -> str:
        return _known(v, "strategy", "search strategy")

    @model_validator(mode="after")
    def _migration_fits(self) -> "SearchSection":
        if self.migration.count > self.island_capacity:
            raise ValueError(f"'search.migration.count': {self.migration.count} exceeds 'search.island_capacity' "
                             f"{self.island_capacity}")
        return self


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


class CoVRLSection(StrictModel):
    """CoVRL (train.algo covrl | vpo+covrl; proposer/training/covrl.py)."""

    alpha: float = Field(0.5, ge=0, le=1, description="share of trajectories sampled from the prior")
    clip_eps: float = Field(0.3, gt=0, description="PPO clip of p'_new / p_hybrid_old")
    nll_coef: float = Field(1.0, ge=0, description="selective NLL of the reference after good z")
    kl_coef: float = Field(0.1, ge=0, description="weight of KL(p' || prior), Bregman estimator")
    std_norm: bool = Field(False, description="divide advantages by the group's reward std")
    reason_tokens: int = Field(32, ge=1, description="reasoning budget per trajectory")
    share: float = Field(0.5, gt=0, le=1, description="vpo+covrl: share of training steps that are CoVRL "
                         "(0.5: alternate)")


class TrainSection(StrictModel):
    """Periodic proposer updates inside the campaign (evolve/training/campaign.py)."""

    algo: str = Field("none", description="training algorithm; none: the proposer is never updated")
    # the default schedule (a step after every iteration on that iteration's group of 8) was chosen by a
    # pre-registered check: docs/results/ttt_check.md, docs/TRAINING.md
    every: int = Field(1, ge=1, description="iterations between updates")
    batch: int = Field(1, ge=1, description="archive groups per training step")
    group: int | None = Field(None, ge=2, description="G: completions per prompt of the trained proposer while "
                              "it trains, in place of search.group (None: search.group, 8 by default, so trained "
                              "and untrained arms sample alike); the estimators' baseline is the group")
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
    # learning diagnostics (evolve/training/probe.py): a fixed probe set, sampled with a fixed seed
    probe_every: int = Field(20, ge=0, description="probe after every N-th policy update, and once before the "
                             "first (0: no probes; at 20 they took a tenth of a trained run's wall clock, ~2% "
                             "since the learner process samples them in its idle time)")
    probe_problems: int = Field(4, ge=1, description="problems per probe set (own problems; held-out problems)")
    probe_group: int = Field(2, ge=1, description="completions per probe problem")
    movement_every: int = Field(10, ge=0, description="measure how far an update moved the policy (policy_kl, "
                                "mean_abs_dlogp, greedy_changed: one more forward) on every N-th update and the "
                                "first (0: never)")
    fast_forward: bool = Field(True, description="on CPU, a group's training forwards in plain torch (the same "
                               "function as transformers', padding skipped; Llama-family models with plain LoRA), "
                               "else through transformers")
    frozen_dtype: Literal["auto", "bf16", "fp32"] = Field("auto", description="on CPU, the dtype the plain-torch "
                                                         "forward of train.fast_forward (training and reference) "
                                                         "multiplies a LoRA's frozen base weights in (fp32 "
                                                         "accumulation; the adapter, norms, attention and LM head "
                                                         "stay fp32); auto: bf16 where the CPU multiplies bf16 in "
                                                         "hardware, AMX tiles or AVX512-BF16 (a lean step "
                                                         "~1.2x faster; log-probs ~1e-3 from fp32's; a bf16 copy "
                                                         "of those weights, half their size, in each process that "
                                                         "runs it), else fp32")
    overlap: bool = Field(True, description="run each update beside the next iteration's generation "
                          "(train.learner), publishing it one iteration later (one version more stale); applies to "
                          "tiny / hf:PATH with the fast sampler, LoRA, one proposer and no CoVRL, else steps run "
                          "in the loop")
    learner: Literal["process", "thread"] = Field("process", description="where an overlapped update runs: "
                                                  "a process forked from the campaign's (its own interpreter "
                                                  "lock; Linux, CPU) or the second thread itself")
    lag: int = Field(1, ge=1, le=4, description="overlapped updates in flight: the update started at iteration t "
                     "is published at t + lag, so a batch is sampled lag - 1 versions more stale than at 1; above 1 "
                     "the learner works through the loop's slow iterations instead of waiting (needs train.learner: "
                     "process)")
    covrl: CoVRLSection = Field(default_factory=CoVRLSection)

    @field_validator("algo")
    @classmethod
    def _registered(cls, v: str) -> str:
        return _known(v, "train", "training algorithm")


class ExecutorSection(StrictModel):
    """Where and how candidates are evaluated: a sandbox pool here or one per Ray node."""

    kind: str = Field("local", description="local: a sandbox pool on this machine; ray: one sandbox pool per Ray "
                      "node (the results do not depend on it)")
    workers: int = Field(2, ge=1, description="sandbox worker processes (per node with executor.kind ray)")
    eval_timeout: float | None = Field(None, gt=0, le=MAX_EVAL_TIMEOUT, description="seconds per candidate; "
                                       "None: the problem's own timeout")
    unsafe_no_sandbox: bool = Field(False, description="run candidates even where neither user namespaces nor "
                                    "Landlock can confine them: they then read your files and signal your processes")
    ray_address: str | None = Field(None, description="the Ray cluster to join for kind ray and for vllm-ray: "
                                    "proposers (one cluster serves both), HOST:PORT or auto (None: start a local "
                                    "Ray on 127.0.0.1)")

    @field_validator("kind")
    @classmethod
    def _registered(cls, v: str) -> str:
        return _known(v, "executor", "executor")


class ProposerSection(StrictModel):
    """The model that writes the candidates: its spec, the run's settings for it, its backend's own options."""

    spec: str = Field("tiny", description="tiny | hf:PATH | vllm:PATH | vllm-ray:PATH | openai:URL[,URL...] | "
                      "replay:FILE")
    threads: int | None = Field(1, ge=1, description="torch threads for tiny/hf on CPU (1 leaves the other cores to "
                                "the sandbox); None: the backend's default")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weights of hf/vllm proposers (auto: bf16 on a GPU that has it, else fp32); a trainer "
        "keeps its trainable weights in fp32 whatever this is")
    options: dict[str, Any] = Field(default_factory=dict, description="the backend's own options, declared by its "
                                    "factory (proposer/backends/options.py), e.g. vllm: gpu_memory_utilization, "
                                    "tensor_parallel_size, sleep; vllm-ray: the first two, replicas, restarts")

    @model_validator(mode="after")
    def _options_fit_spec(self) -> "ProposerSection":
        from proposer.backends import check_options

        checked = check_options(self.spec, self.options)
        if checked != self.options:  # normalised values ("0.5" -> 0.5); bypasses validate_assignment
            object.__setattr__(self, "options", checked)
        return self


from .portfolio import PortfolioConfig, ProposerMember, check_members  # noqa: E402

SECTIONS: dict[str, type[StrictModel]] = {"proposer": ProposerSection, "search": SearchSection,
                                          "sampling": SamplingConfig, "train": TrainSection,
                                          "executor": ExecutorSection, "portfolio": PortfolioConfig}


class CampaignConfig(StrictModel):
    """Everything one campaign needs, in sections that match the rooms. Defaults give a small, runnable campaign
    with the tiny proposer."""

    # what to solve
    problems: list[str] = Field(default_factory=list, description="a problem id (repeatable)")
    suite: str | None = Field(None, description="a named suite of problems")
    problems_dir: list[str] = Field(default_factory=list, description="folders of problems; given alone, the "
                                    "campaign runs every problem in them")
    # the run
    seed: int = Field(0, description="seeds selection, sampling and training: one seed and config, one run")
    out: str | None = Field(None, description="run folder (default runs/<timestamp>)")
    archive_sync: Literal["normal", "full"] = Field("normal", description="full: fsync every iteration "
                                                    "(survives power loss; normal survives kill -9)")
    # sections
    proposer: ProposerSection = Field(default_factory=ProposerSection)
    proposers: list[ProposerMember] = Field(default_factory=list, description="a portfolio of proposers chosen per "
                                            "iteration by portfolio.policy (YAML only; replaces proposer.spec)")
    search: SearchSection = Field(default_factory=SearchSection)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    train: TrainSection = Field(default_factory=TrainSection)
    executor: ExecutorSection = Field(default_factory=ExecutorSection)
    portfolio: PortfolioConfig = Field(default_factory=PortfolioConfig)

    _source: str = PrivateAttr(default="<config>")

    @model_validator(mode="after")
    def _cross_field(self) -> "CampaignConfig":
        dup = sorted({p for p in self.problems if self.problems.count(p) > 1})
        if dup:
            raise ValueError(f"'problems': listed more than once: {', '.join(dup)}")
        tr = self.train
        if tr.algo != "none" and self.proposer.dtype == "float16":
            raise ValueError("'proposer.dtype': float16 cannot be trained without loss scaling, which vevo does "
                             "not do; use bfloat16 or float32")
        if tr.algo != "none" and self.sampling.temperature == 0:
            raise ValueError("'sampling.temperature': 0 is greedy, every completion of a group is the same; "
                             "training needs temperature > 0")
        if tr.algo != "none" and self.trained_group < 2:
            key = "train.group" if tr.group else "search.group"
            raise ValueError(f"'{key}': train.algo={tr.algo!r} estimates advantages within a group, "
                             f"so it needs group >= 2 (got {self.trained_group})")
        check_members(self.proposers, tr.algo)
        return self

    @property
    def trained_group(self) -> int:
        """G of the groups the trained proposer samples (and the trainer learns from): ``train.group`` when
        training is on and it is set, else ``search.group``."""
        return self.train.group if self.train.algo != "none" and self.train.group else self.search.group

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

    def backend_run(self) -> "BackendRun":
        """What every proposer backend is told about this run (proposer/backends/options.py)."""
        from proposer.backends.options import BackendRun

        return BackendRun(chat=self.sampling.chat, threads=self.proposer.threads, dtype=self.proposer.dtype,
                          trained=self.train.algo != "none", lora_rank=self.train.lora_rank,
                          ray_address=self.executor.ray_address)


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


class Flag(typing.NamedTuple):
    """One generated run flag: its name, the config key it sets, how to read it, and where `--help` shows it."""

    flag: str
    key: str  # the dotted config key it sets (its argparse dest; what `load_config` accepts as an override)
    kind: str  # list | bool | int | float | str
    choices: tuple[str, ...] | None
    help: str
    group: str  # the help section: a config section, or one of TOP_GROUPS
    default: Any  # the config's default (None: none or decided later)


# keys whose values are a registry's names (the flag's choices): the key -> its `registered` section
REGISTRY_KEYS = {"search.selection.method": "selection", "search.strategy": "strategy", "train.algo": "train",
                 "executor.kind": "executor", "portfolio.policy": "portfolio"}
# flag names that are not the rule's (below): a section's primary key is the section's own flag
FLAG_NAMES = {"problems": "problem", "proposer.spec": "proposer", "search.selection.method": "selection",
              "train.algo": "train", "executor.kind": "executor", "portfolio.policy": "portfolio"}
# a section's flags are its dotted key below the longest of these prefixes, prefixed by the value
# (search.migration.every: --migration-every, search.selection.tournament_size: --tournament-size,
# train.covrl.alpha: --train-covrl-alpha, executor.workers: --workers)
FLAG_PREFIX = {"proposer.": "proposer-", "search.selection.": "", "search.": "", "sampling.": "", "train.": "train-",
               "executor.": "", "portfolio.": "portfolio-"}
# the help sections of top-level keys, in order, before the config sections
TOP_GROUPS = {"what to solve": ("problems", "suite", "problems_dir"), "run": ("seed", "out", "archive_sync")}
NO_FLAG = {"proposers", "proposer.options"}  # a list of mappings (YAML or --set only); options: one flag each


def _default(f: Any) -> Any:
    if f.default_factory is not None:
        return f.default_factory()
    return None if f.default is PydanticUndefined else f.default


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _leaves(model: type[BaseModel], prefix: str = ""):
    """(dotted key, field) for every leaf of a config model, sections walked depth first."""
    for name, f in model.model_fields.items():
        key = prefix + name
        if _is_section(f.annotation):
            yield from _leaves(f.annotation, key + ".")
        else:
            yield key, f


def _flag(key: str, f: Any, group: str, name: str) -> Flag:
    kind, choices = _flag_kind(f.annotation)
    return Flag(name, key, kind, choices, f.description or "", group, _default(f))


def run_flags() -> list[Flag]:
    """A `Flag` for every config key, named by `FLAG_NAMES` or the section rule, each with its help section and
    default; and one per backend option (``--vllm-sleep`` sets proposer.options.sleep), named by the options
    model's ``flag_prefix`` (proposer/backends/options.py)."""
    out = []
    for key, f in _leaves(CampaignConfig):
        if key in NO_FLAG:
            continue
        sec, _, rest = key.partition(".")
        pre = max((p for p in FLAG_PREFIX if key.startswith(p)), key=len, default="")
        name = FLAG_NAMES.get(key) or (FLAG_PREFIX[pre] + key[len(pre):] if pre else key).replace(".", "-")
        flag = _flag(key, f, sec if rest else next(g for g, ks in TOP_GROUPS.items() if key in ks),
                     name.replace("_", "-"))
        if key in REGISTRY_KEYS:  # a registry's names
            flag = flag._replace(choices=tuple(registered(REGISTRY_KEYS[key])))
        out.append(flag)
    from proposer.backends import OPTIONS

    options: dict[str, tuple[str, Any, list[str]]] = {}  # flag name -> (option, field, the backends taking it)
    for kind, model in OPTIONS.items():
        for opt, f in model.model_fields.items():
            name = f"{model.flag_prefix or kind}-{opt}".replace("_", "-")
            options.setdefault(name, (opt, f, []))[2].append(kind)
    for name, (opt, f, kinds) in options.items():
        flag = _flag(f"proposer.options.{opt}", f, "proposer", name)
        out.append(flag._replace(help=f"{', '.join(kinds)}: {flag.help}"))
    return out


def flag_groups() -> dict[str, tuple[str, str]]:
    """Help section (a `Flag.group`) -> (title, one-line description), in the order `vevo run --help` shows them."""
    top = {"what to solve": "a suite, problem ids, or folders of problems (alone: all their problems)", "run": ""}
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


def known_keys() -> list[str]:
    """Every dotted config key (for did-you-mean hints), sections included."""
    out = []
    for name, f in CampaignConfig.model_fields.items():
        out.append(name)
        if _is_section(f.annotation):
            out += [f"{name}.{k}" for k, _ in _leaves(f.annotation)]
    return out


def _format_error(source: str, err: ValidationError) -> str:
    known = known_keys()
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        if e["type"] == "extra_forbidden":
            leaf = str(e["loc"][-1])
            hint = difflib.get_close_matches(loc, known, n=1) or \
                [k for k in known if k.rpartition(".")[2] == leaf][:1] or difflib.get_close_matches(leaf, known, n=1)
            parts.append(f"unknown key '{loc}'" + (f" (did you mean '{hint[0]}'?)" if hint else ""))
            continue
        msg = e["msg"]
        if msg.startswith("Value error, "):  # raised by a validator
            msg = msg[len("Value error, "):]
        if loc and msg.startswith("'options."):  # a backend option: named below its section
            loc, msg = "", f"'{loc}.{msg[1:]}"
        parts.append(f"'{loc}': {msg}" if loc and not msg.startswith(f"'{loc}") else msg)
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


def _no_legacy(data: dict[str, Any], source: str) -> dict[str, Any]:
    from .legacy import legacy_keys

    old = legacy_keys(data)
    if old:
        raise ConfigError(f"{source}: " + "; ".join(f"'{o}' is now '{n}'" for o, n in old))
    return data


def _validate(data: dict[str, Any], source: str) -> CampaignConfig:
    try:
        cfg = CampaignConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_error(source, e)) from None
    cfg._source = source
    return cfg


class _Null:
    """An explicit null in an override (``--set train.group=null``): a None value means "not given"."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


def _given(overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The overrides that were given, nested; an explicit NULL becomes None."""
    return unflatten({k: None if v is NULL else v for k, v in (overrides or {}).items() if v is not None})


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                overrides_source: str = "overrides") -> CampaignConfig:
    """Read the YAML file (missing path: defaults), apply overrides whose value is not None (NULL: set to null),
    validate.

    ``overrides`` map dotted keys (``train.lr``) or sections (``{"search": {...}}``) to values. Every failure is a
    ConfigError with a one-line message naming the file and the key; a key of an earlier version names its new
    spelling (in an override: after ``overrides_source``, e.g. "--set")."""
    source = str(path) if path is not None else "<config>"
    data = _no_legacy(_read_yaml(Path(path)), source) if path is not None else {}
    over = _no_legacy(_given(overrides), overrides_source)
    return _validate(merge(data, over), source)


def load_run_config(path: str | Path, overrides: dict[str, Any] | None = None) -> CampaignConfig:
    """A run folder's own config.yaml, written by this or an earlier version (evolve/config/legacy.py)."""
    from .legacy import upgrade

    over = _no_legacy(_given(overrides), "overrides")
    return _validate(merge(upgrade(_read_yaml(Path(path))), over), str(path))


def stored_config(data: dict[str, Any]) -> CampaignConfig:
    """A config mapping stored by a run of this or an earlier version (seeds.yaml, archive meta) as a config."""
    from .legacy import upgrade

    return _validate(upgrade(dict(data)), "<stored config>")


def config_to_yaml(cfg: CampaignConfig) -> str:
    """YAML text that `load_config` turns back into an equal config (keys in declaration order, sections
    nested)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=False)
