"""What a program's evaluation tells the proposer next time that program is a parent: its named metrics and
the evaluator's artifacts (stderr, ``stage1_result``, custom keys), bounded in size -- OpenEvolve feeds the same
back to its model. Only for evaluators that report named metrics; native problems show their failing tests.
"""
from __future__ import annotations

from typing import Any

# Keys vevo itself adds to an Evaluation's artifacts: bookkeeping, not the evaluator's feedback.
INTERNAL = frozenset({"metrics", "metric_names", "wall", "failing_tests", "unverified_tests"})
VALUE_CHARS = 600
TOTAL_CHARS = 2000


def named_metrics(artifacts: dict[str, Any]) -> tuple[list[str], dict[str, Any]] | None:
    """(score column names, all reported metrics) when the evaluator reports metrics by name, else None."""
    m = artifacts.get("metrics")
    names = artifacts.get("metric_names")
    if not isinstance(m, dict) or not isinstance(names, list):
        return None
    return [str(n) for n in names], dict(m)


def feedback(artifacts: dict[str, Any], value_chars: int = VALUE_CHARS, total_chars: int = TOTAL_CHARS) -> dict[str, str]:
    """The evaluator's own artifacts as short text, in the order it gave them, at most total_chars in all."""
    out: dict[str, str] = {}
    used = 0
    for k, v in artifacts.items():
        if k in INTERNAL or v is None or v == "":
            continue
        s = v if isinstance(v, str) else str(v)
        s = s.strip()
        if len(s) > value_chars:
            s = s[: value_chars - 16] + " ... (truncated)"
        if used + len(s) > total_chars:
            break
        out[str(k)] = s
        used += len(s) + len(k)
    return out
