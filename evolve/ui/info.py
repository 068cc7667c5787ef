"""What the UI's pages and `vevo report` know about problems and training logs beyond the archive: problem
titles and test labels (from the registry the runs were configured with) and which training keys to chart."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..archive import TrainingRow

# Training keys plotted first, in this order; every other numeric key follows alphabetically.
WELL_KNOWN_KEYS = ("mean_set_reward", "probe_own", "probe_heldout", "reward_diversity", "loss", "pg_loss", "kl",
                   "mean_abs_dlogp", "clip_frac", "greedy_changed", "grad_norm", "mean_ratio")
# The x-axis of the training plots, not a diagnostic.
_AXIS_KEYS = frozenset({"iteration", "step"})


@dataclass(frozen=True)
class ProblemInfo:
    """What the registry knows about a problem id; empty when it can no longer be found."""

    title: str = ""
    test_labels: tuple[str, ...] = ()


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def training_keys(rows: Sequence[TrainingRow]) -> list[str]:
    """Numeric diagnostics present in any step: the well-known ones first, in WELL_KNOWN_KEYS order, then the
    rest alphabetically. Text (algo, skip reasons), booleans and the x-axis keys are left out."""
    present = {k for r in rows for k, v in r.data.items()
               if is_number(v) and k not in _AXIS_KEYS and not k.endswith("_before")}  # before: the probes' v0
    known = [k for k in WELL_KNOWN_KEYS if k in present]
    return known + sorted(present - set(known))


def problem_info(configs: Sequence[dict[str, Any]]) -> dict[str, ProblemInfo]:
    """Titles and test labels from the registry the runs were configured with (their problem folders and
    suites). Best effort: a folder that moved or a suite that is gone only loses the titles, not the report."""
    from problems.model import ProblemError
    from problems.registry import discover

    dirs = sorted({str(d) for c in configs for d in c.get("problems_dir") or [] if Path(d).is_dir()})
    try:
        reg = discover(dirs)
    except (ProblemError, OSError):  # a folder that no longer holds problems
        reg = discover([])
    found = dict(reg.problems)
    for c in configs:
        try:
            for p in reg.select(suite=c.get("suite"), ids=[str(i) for i in c.get("problems") or []]):
                found.setdefault(p.id, p)
        except (ProblemError, KeyError, OSError, ValueError):
            continue
    info = {}
    for pid, p in found.items():
        labels: tuple[str, ...] = ()
        if p.openevolve is None:
            labels = tuple(p.test_label(i) for i in range(p.n_tests))
        info[pid] = ProblemInfo(title=p.title or "", test_labels=labels)
    return info
