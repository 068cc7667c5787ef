"""The proposer interface every backend implements: prompts in, groups of completions out."""
from __future__ import annotations

from dataclasses import dataclass, field, asdict
from typing import Any, Callable, Protocol


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Completion:
    """One proposer output for one prompt. token_ids/logprobs are the generated tokens only and their
    behaviour log-probs (needed by PPO-clip); None when the backend cannot give them."""

    text: str
    policy_version: int = 0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_token_ids: list[int] | None = None
    finish_reason: str = "stop"  # "stop" | "length" | "error"
    meta: dict[str, Any] = field(default_factory=dict)


# What a backend can do beyond generating, declared by the backend class in ``capabilities`` (never guessed
# from attribute names: an OpenAI backend's ``model`` is a model *name*, not weights to train).
STATE = "state"            # state() -> dict and load_state(dict): checkpointed with the campaign
VERSIONED = "versioned"    # set_policy_version(v): completions carry the policy version that made them
ADAPTERS = "adapters"      # load_adapter(path, version): a LoRA adapter saved by a trainer is served next
TRAINABLE = "trainable"    # .model: the torch module it samples from, trained in place by the trainer
CONCURRENT = "concurrent"  # generate() may run in several threads at once, and a call's completions depend only
                           # on its prompts, sampling params (seed) and policy version, not on other calls


def has(backend: object, capability: str) -> bool:
    """Whether ``backend`` declares ``capability`` (one of the constants above)."""
    return capability in getattr(backend, "capabilities", frozenset())


# Optional attributes other layers read off a backend, each with the value a backend without it stands for.
# Read them through `optional`; a name not listed here is a KeyError there, so a new one is declared here first.
OPTIONAL: dict[str, Any] = {
    "chat": False,            # prompts go through the model's chat template (the campaign's and `vevo train`'s style)
    "entry_name": None,       # the one function name its model ever learnt (see Backend)
    "path": None,             # its local weights folder: a separate HF learner loads it (vllm + LoRA training),
                              # `vevo train` copies its pretraining record
    "tokenizer": None,        # the model's HF tokenizer (local backends: CoVRL encodes with it, `vevo train` saves it)
    "eos_ids": frozenset(),   # token ids that end a completion (CoVRL's sampler)
    "max_context": 0,         # prompt + completion tokens the model holds, 0: unknown (CoVRL's sampler)
}
# Optional methods, looked up with `method` (None where a backend has none):
#   encode_prompt(prompt, max_tokens) -> (ids, dropped)  local backends: CoVRL builds its own prompts' ids
#   sleep(), wake_up()          free / retake an engine's accelerator memory while a separate learner steps (vllm)
#   pinnable() -> bool, pin_sampling() -> bool, unpin_sampling(), live_sampling() (a context manager)   hf
#       (train.overlap): sample a pinned snapshot of the policy while a trainer updates the live model on another
#       thread; pinnable says whether pin_sampling would pin (without pinning), pin_sampling returns False where
#       nothing was pinned, live_sampling lets one thread (the learner's probe) sample the live model meanwhile
OPTIONAL_METHODS = frozenset({"encode_prompt", "sleep", "wake_up", "pinnable", "pin_sampling", "unpin_sampling",
                              "live_sampling"})


def optional(backend: object, name: str) -> Any:
    """The backend's optional attribute ``name`` (a key of OPTIONAL), or the default a backend without it has."""
    return getattr(backend, name, OPTIONAL[name])


def method(backend: object, name: str) -> Callable[..., Any] | None:
    """The backend's optional method ``name`` (one of OPTIONAL_METHODS), None where it has none."""
    if name not in OPTIONAL_METHODS:
        raise KeyError(name)
    fn = getattr(backend, name, None)
    return fn if callable(fn) else None


class Backend(Protocol):
    """generate(prompts, n) returns, for each prompt, a list of n completions (one group). Optional abilities
    are declared in ``capabilities`` (see STATE, VERSIONED, ADAPTERS, TRAINABLE, CONCURRENT) and implemented as
    named there. Other code may also read the optional attributes in OPTIONAL (``chat``, ``entry_name``,
    ``path``, ``tokenizer``, ``eos_ids``, ``max_context``; through `optional`, which gives a backend without one
    its default) and call the optional methods in OPTIONAL_METHODS (through `method`). A backend whose model
    only ever learnt one function name may set ``entry_name`` (the tiny one: "f"): the campaign then shows
    each problem's entry point under that name and renames answers back (``proposer/answers/naming.py``)."""

    name: str
    policy_version: int
    capabilities: frozenset[str]

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]: ...

    def close(self) -> None: ...


class AdapterState:
    """Checkpoint state shared by the backends whose policy is a base model plus an optional LoRA adapter
    (hf, vllm, openai): the policy version, the adapter to reload on resume, and the call counter that seeds
    calls made without an explicit seed."""

    capabilities = frozenset({STATE, VERSIONED, ADAPTERS})

    policy_version: int
    adapter_path: str | None
    _calls: int
    _state_has_calls = True  # hf keeps its call counter out of checkpoints (its state has always been two keys)

    def state(self) -> dict[str, Any]:
        st: dict[str, Any] = {"policy_version": self.policy_version, "adapter": self.adapter_path}
        if self._state_has_calls:
            st["calls"] = self._calls
        return st

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("adapter") and state["adapter"] != self.adapter_path:
            self.load_adapter(state["adapter"], state.get("policy_version"))  # type: ignore[attr-defined]
        elif "policy_version" in state:
            self.set_policy_version(int(state["policy_version"]))  # type: ignore[attr-defined]
        if isinstance(state.get("calls"), int):
            self._calls = state["calls"]
