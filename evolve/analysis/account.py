"""Where a run's time went: generation (seconds, tokens), evaluation, training, probes, wall clock.

Comparisons of proposers are only fair at a stated budget: equal evaluations (the x axis of the curves) or equal
wall-clock time on the same machine (training costs time that an untrained arm spends searching). The campaign
writes ``gen_seconds``, ``gen_tokens``, ``eval_seconds`` and the cumulative ``wall_seconds`` into every
iteration's metrics, and ``train_seconds`` / ``probe_seconds`` and the clock at publication (``wall_seconds``)
into every training row; this module only adds them up, so a run's account can be read from its archive alone.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def account(metrics: Sequence[Any], training: Sequence[Any]) -> dict[str, float]:
    """Pure: the totals from archive metric rows (``.data``) and training rows (``.data``)."""
    def total(rows: Sequence[Any], *keys: str) -> float:
        return float(sum(float(r.data.get(k) or 0.0) for r in rows for k in keys
                         if isinstance(r.data.get(k), (int, float))))

    # the last stamp: an iteration's, or a training step's published after the last iteration was recorded
    # (or a probe's values added to a step's row after it: evolve/training/campaign.py)
    wall = max((float(r.data[k]) for r in (*metrics, *training) for k in ("wall_seconds", "probe_wall_seconds")
                if isinstance(r.data.get(k), (int, float))), default=0.0)
    return {"wall_seconds": round(wall, 3),
            "gen_seconds": round(total(metrics, "gen_seconds"), 3),
            "gen_tokens": int(total(metrics, "gen_tokens")),
            "eval_seconds": round(total(metrics, "eval_seconds"), 3),
            "train_seconds": round(total(training, "train_seconds"), 3),
            # overlapped steps (train.overlap): what the loop waited for the learner thread, the rest ran beside it
            "train_wait_seconds": round(total(training, "train_wait_seconds"), 3),
            "train_overlapped": any("train_wait_seconds" in r.data for r in training),
            "train_steps": sum(1 for r in training if r.data.get("samples")),
            # the learner process (train.learner: process): its time from the fork to the last step, and the part
            # of it spent on requests (steps, probes); the rest it waited for the loop
            "learner_seconds": round(total(training, "learner_seconds"), 3),
            "learner_busy_seconds": round(total(training, "learner_busy_seconds"), 3),
            "probe_seconds": round(total(training, "probe_seconds", "probe_seconds_before"), 3)}


def wall_clock(metrics: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Pure: (iterations, cumulative wall seconds after each), to put a curve over iterations on a time axis."""
    pts = sorted((int(m.iteration), float(m.data["wall_seconds"])) for m in metrics
                 if isinstance(m.data.get("wall_seconds"), (int, float)))
    return np.array([p[0] for p in pts], dtype=float), np.array([p[1] for p in pts], dtype=float)


def describe(acc: dict[str, float]) -> str:
    """One line for `runs show`."""
    return (f"compute: {acc['wall_seconds']:.1f}s wall; generation {acc['gen_seconds']:.1f}s "
            f"({acc['gen_tokens']} tokens), evaluation {acc['eval_seconds']:.1f}s, training "
            f"{acc['train_seconds']:.1f}s ({acc['train_steps']} steps{_beside(acc)}), probes {acc['probe_seconds']:.1f}s")


def _beside(acc: dict[str, float]) -> str:
    """For overlapped training: how much of it the loop waited for."""
    if not acc.get("train_overlapped"):
        return ""
    out = f"; on the learner thread, the loop waited {acc.get('train_wait_seconds', 0.0):.1f}s"
    if acc.get("learner_seconds"):
        out += (f", the learner process busy {acc.get('learner_busy_seconds', 0.0):.1f}s of "
                f"{acc['learner_seconds']:.1f}s")
    return out
