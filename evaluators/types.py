"""The one object the orchestrator ever sees from an evaluation (contract 1: never an exception upward)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "wrong", "syntax_error", "timeout", "memory", "crash", "output_limit", "killed", "format_error")


@dataclass
class Evaluation:
    """vector: one score in [0, 1] per test case; scalar: w*·vector; solved: the problem's rule.

    status says how the run ended: ``ok`` (ran to completion, nothing failed), ``wrong`` (ran to
    completion, some test failed), or one of the failure modes in STATUSES.
    """

    vector: list[float]
    scalar: float
    solved: bool
    status: str
    artifacts: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown evaluation status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "vector": list(self.vector), "scalar": float(self.scalar),
                "solved": bool(self.solved), "artifacts": dict(self.artifacts)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evaluation":
        return cls(vector=[float(x) for x in d["vector"]], scalar=float(d["scalar"]), solved=bool(d["solved"]),
                   status=str(d["status"]), artifacts=dict(d.get("artifacts") or {}))

    @classmethod
    def failed(cls, status: str, n_tests: int, **artifacts: Any) -> "Evaluation":
        return cls(vector=[0.0] * n_tests, scalar=0.0, solved=False, status=status, artifacts=artifacts)


def error_text(artifacts: dict[str, Any]) -> str:
    """One line saying why a program failed: its load, syntax or format error, else the first failing test's
    message, else the exception an OpenEvolve evaluator's stage raised (``stage1: NameError: ...``, from the
    artifacts OpenEvolve itself records), else how its process ended ("" when nothing was reported)."""
    for key in ("error", "first_error", "error_type", "exit"):
        text = artifacts.get(key)
        if key == "error_type" and text:
            stage = artifacts.get("failure_stage")
            text = f"{str(stage) + ': ' if stage else ''}{text}: {artifacts.get('error_message') or ''}".rstrip(": ")
        if text:
            return " ".join(str(text).split())
    return ""
