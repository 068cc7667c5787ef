"""The ``replay:FILE`` backend: recorded completions handed out in file order, cycling.

For tests and debugging: a campaign driven by a replay file is deterministic and needs no model. The file is
JSONL, one object per completion with a ``"text"`` string (other keys ignored, blank lines skipped). The whole
file is validated at load time so a bad line fails fast, naming file and line. The cursor is part of
``state()``, so a resumed campaign continues exactly where its checkpoint was.
"""
from __future__ import annotations

import json
import os
from typing import Any

from proposer.backends.base import STATE, VERSIONED, Completion, SamplingParams


def _load(path: str) -> list[tuple[int, str]]:
    """(line number, text) of every completion; ValueError naming file and line for a malformed one."""
    out: list[tuple[int, str]] = []
    with open(path, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{no}: malformed replay line: {exc.msg} (column {exc.colno})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{no}: malformed replay line: expected a JSON object, got {type(obj).__name__}")
            if not isinstance(obj.get("text"), str):
                raise ValueError(f"{path}:{no}: malformed replay line: needs a string \"text\" field")
            out.append((no, obj["text"]))
    if not out:
        raise ValueError(f"{path}: replay file has no completions")
    return out


class ReplayBackend:
    """Backend protocol over a JSONL file of completions; sampling parameters are ignored."""

    capabilities = frozenset({STATE, VERSIONED})

    def __init__(self, path: str | os.PathLike[str], policy_version: int = 0) -> None:
        self.path = os.fspath(path)
        self.name = f"replay:{self.path}"
        self.policy_version = int(policy_version)
        self._records = _load(self.path)
        self._cursor = 0  # completions handed out so far; the next one is records[cursor % len]

    def __len__(self) -> int:
        return len(self._records)

    def set_policy_version(self, v: int) -> None:
        self.policy_version = int(v)

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        """For each prompt, the next n recorded completions in file order (wrapping at the end)."""
        if n < 0:
            raise ValueError(f"{self.name}: n must be >= 0, got {n}")
        groups = []
        for _ in prompts:
            group = []
            for _ in range(n):
                line, text = self._records[self._cursor % len(self._records)]
                self._cursor += 1
                group.append(Completion(text=text, policy_version=self.policy_version, token_ids=None,
                                        logprobs=None, finish_reason="stop", meta={"replay_line": line}))
            groups.append(group)
        return groups

    def state(self) -> dict[str, Any]:
        return {"cursor": self._cursor, "policy_version": self.policy_version, "records": len(self._records)}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore the cursor (and policy version); ValueError if the state was made for a different file."""
        cursor = state.get("cursor")
        if not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 0:
            raise ValueError(f"{self.name}: bad replay state cursor {cursor!r}")
        records = state.get("records", len(self._records))
        if records != len(self._records):
            raise ValueError(f"{self.name}: state is for a replay file with {records} completions, "
                             f"this one has {len(self._records)}")
        self._cursor = cursor
        if "policy_version" in state:
            self.policy_version = int(state["policy_version"])

    def close(self) -> None:
        """Nothing to release: the file was read whole at load time."""
