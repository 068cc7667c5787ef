"""The proposer interface every backend implements: prompts in, groups of completions out."""
from __future__ import annotations

from dataclasses import dataclass, field, asdict
from typing import Protocol, Any


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


class Backend(Protocol):
    """generate(prompts, n) returns, for each prompt, a list of n completions (one group)."""

    name: str
    policy_version: int

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]: ...

    def close(self) -> None: ...
