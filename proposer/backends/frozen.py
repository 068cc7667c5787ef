"""A frozen member that shares the weights of a trained one: the same backend object, sampled with its LoRA
adapter switched off (peft's ``disable_adapter``), so a portfolio of {trained policy, its frozen start} holds one
copy of the base weights. Its completions carry policy version 0, whatever the trained member has reached."""
from __future__ import annotations

import contextlib
from typing import Any

from proposer.backends.base import Backend, Completion, SamplingParams, optional


class FrozenAdapterView:
    """Generates with ``backend``'s model with its adapter disabled. Not CONCURRENT: the switch is on the shared
    model, so generations must not overlap those of the trained member (hf backends never run concurrently)."""

    capabilities: frozenset[str] = frozenset()
    policy_version = 0

    def __init__(self, backend: Backend, name: str | None = None):
        self.inner = backend
        self.name = name or f"{getattr(backend, 'name', 'backend')}-frozen"
        self.chat = optional(backend, "chat")
        self.entry_name = optional(backend, "entry_name")  # the same model writes the same function name

    def _adapter_off(self) -> Any:
        model = getattr(self.inner, "model", None)
        off = getattr(model, "disable_adapter", None)
        return off() if callable(off) else contextlib.nullcontext()  # no adapter yet: the base is the start

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        with self._adapter_off():
            out = self.inner.generate(prompts, n, sampling)
        for group in out:
            for c in group:
                c.policy_version = 0
        return out

    def close(self) -> None:
        """The weights belong to the trained member's backend, which closes them."""
