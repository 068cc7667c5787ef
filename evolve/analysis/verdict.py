"""What training did, in one line per trained arm: the probe rewards first → last (own problems and held-out
ones, evolve/training/probe.py), with a 95% interval of the change over the arm's seeds or "one run", the KL to the
start policy at the last step, the steps taken and where the time went (evolve/analysis/account.py).

Also the words for a difference of two means with its interval: within noise when the 95% interval includes 0.
Pure: archive rows in, text out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..stats import t95

PROBES = (("probe_own", "own"), ("probe_heldout", "held-out"))


def noise_words(diff: float, lo: float, hi: float, *, up: str = "higher", down: str = "lower") -> str:
    """Pure: how a difference with its 95% CI reads: "higher"/"lower" when the interval excludes 0, "within
    noise" when it includes 0, and "no interval (one run)" when there is none (nan bounds)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval (one run): cannot be told from noise"
    if lo <= 0.0 <= hi:
        return "within noise (the 95% CI includes 0)"
    return up if diff > 0 else down


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Pure: (mean, lo, hi), the Student t 95% interval of the mean; nan bounds for fewer than two values."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], float)
    if v.size == 0:
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan
    half = t95(v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return m, m - half, m + half


@dataclass(frozen=True)
class RunTraining:
    """One run's training at a glance: probe values before the first step and at the last probe, the last
    step's KL, the steps that updated the policy."""

    probes: dict[str, tuple[float, float]]  # key -> (first, last); a probe never taken is absent
    kl: float | None
    steps: int


def run_training(rows: Sequence[Any]) -> RunTraining:
    """Pure: from a run's training rows (``.data``, in step order)."""
    probes: dict[str, tuple[float, float]] = {}
    for key, _ in PROBES:
        seen = [r.data[k] for r in rows for k in (f"{key}_before", key) if _num(r.data.get(k))]
        if seen:
            probes[key] = (float(seen[0]), float(seen[-1]))
    kls = [float(r.data["kl"]) for r in rows if _num(r.data.get("kl"))]
    return RunTraining(probes, kls[-1] if kls else None, sum(1 for r in rows if r.data.get("samples")))


def arm_line(label: str, runs: Sequence[RunTraining], accounts: Sequence[dict[str, float]]) -> str:
    """Pure: the verdict of one arm (its runs are seeds of one setting)."""
    n = len(runs)
    parts = []
    for key, name in PROBES:
        pairs = [r.probes[key] for r in runs if key in r.probes]
        if not pairs:
            continue
        first, _, _ = mean_ci([p[0] for p in pairs])
        last, _, _ = mean_ci([p[1] for p in pairs])
        change, lo, hi = mean_ci([p[1] - p[0] for p in pairs])
        ci = f"95% CI [{lo:+.3f}, {hi:+.3f}] over {len(pairs)} seeds" if math.isfinite(lo) else "one run"
        words = noise_words(change, lo, hi, up="rose", down="fell") if math.isfinite(lo) else ""
        parts.append(f"{name} probe {first:.3f} → {last:.3f} ({change:+.3f}, {ci}{': ' + words if words else ''})")
    if not parts:
        parts.append("no probe taken (train.probe_every 0)")
    kls = [r.kl for r in runs if r.kl is not None]
    kl = f"KL {float(np.mean(kls)):.3g}" if kls else "KL not logged"
    steps = [r.steps for r in runs]
    steps_text = f"{steps[0]} steps" if len(set(steps)) == 1 else f"{min(steps)}–{max(steps)} steps"
    acc = {k: float(np.mean([a[k] for a in accounts])) for k in
           ("wall_seconds", "gen_seconds", "eval_seconds", "train_seconds", "probe_seconds")} if accounts else None
    cost = "" if acc is None else (
        f"; time{' (mean per seed)' if n > 1 else ''}: {acc['wall_seconds']:.0f}s wall, generation "
        f"{acc['gen_seconds']:.0f}s, evaluation {acc['eval_seconds']:.0f}s, training {acc['train_seconds']:.0f}s, "
        f"probes {acc['probe_seconds']:.0f}s")
    who = label if n == 1 else f"{label} ({n} seeds)"
    return f"{who}: " + "; ".join(parts) + f"; {kl} at the last step; {steps_text}{cost}"


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
