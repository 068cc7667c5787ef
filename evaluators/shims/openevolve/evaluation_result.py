"""Same shape as openevolve.evaluation_result.EvaluationResult (metrics + artifacts)."""
from dataclasses import dataclass, field
from typing import Any, Dict, Union


@dataclass
class EvaluationResult:
    metrics: Dict[str, float]
    artifacts: Dict[str, Union[str, bytes]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, metrics: Dict[str, float]) -> "EvaluationResult":
        return cls(metrics=metrics)

    def to_dict(self) -> Dict[str, float]:
        return self.metrics

    def has_artifacts(self) -> bool:
        return bool(self.artifacts)

    def get_artifact_keys(self) -> list:
        return list(self.artifacts.keys())

    def get_artifact_size(self, key: str) -> int:
        v: Any = self.artifacts.get(key, "")
        return len(v) if isinstance(v, bytes) else len(str(v).encode("utf-8"))

    def get_total_artifact_size(self) -> int:
        return sum(self.get_artifact_size(k) for k in self.artifacts)
