"""What training did, in one line per arm (evolve/analysis/verdict.py), on hand-worked numbers; and the words of a
difference between arms."""
from __future__ import annotations

import math

import pytest

from evolve.archive import TrainingRow
from evolve.analysis.arms import difference
from evolve.analysis.verdict import arm_line, mean_ci, noise_words, run_training

ACC = {"wall_seconds": 100.0, "gen_seconds": 40.0, "eval_seconds": 20.0, "train_seconds": 30.0,
       "probe_seconds": 10.0, "gen_tokens": 5, "train_steps": 2}


def rows(before: float, after: float, kl: float) -> list[TrainingRow]:
    return [TrainingRow(1, 1, {"samples": 4, "probe_own_before": before, "probe_own": before + 0.01, "kl": 0.5}),
            TrainingRow(2, 2, {"samples": 4, "kl": kl}),
            TrainingRow(3, 3, {"samples": 4, "probe_own": after, "kl": kl}),
            TrainingRow(4, 3, {"skipped": "no group had two different rewards"})]


def test_run_training_reads_first_and_last_probe_last_kl_and_steps():
    t = run_training(rows(0.43, 0.21, 0.02))
    assert t.probes == {"probe_own": (0.43, 0.21)} and t.kl == 0.02 and t.steps == 3  # a skipped step is no step


def test_one_run_says_one_run():
    line = arm_line("vpo", [run_training(rows(0.43, 0.21, 0.02))], [ACC])
    assert line == ("vpo: own probe 0.430 → 0.210 (-0.220, one run); KL 0.02 at the last step; 3 steps; time: "
                    "100s wall, generation 40s, evaluation 20s, training 30s, probes 10s")


def test_seeds_give_an_interval_and_words():
    # changes -0.2, -0.3, -0.1: mean -0.2, sd 0.1, half-width t(2) 4.303 * 0.1 / sqrt(3) = 0.248 -> includes 0
    runs = [run_training(rows(0.5, 0.3, 0.01)), run_training(rows(0.5, 0.2, 0.02)), run_training(rows(0.5, 0.4, 0.03))]
    m, lo, hi = mean_ci([-0.2, -0.3, -0.1])
    assert m == pytest.approx(-0.2) and hi - m == pytest.approx(4.303 * 0.1 / math.sqrt(3), rel=1e-3)
    line = arm_line("vpo", runs, [ACC] * 3)
    assert line.startswith("vpo (3 seeds): own probe 0.500 → 0.300 (-0.200, 95% CI [-0.448, +0.048] over 3 seeds: "
                           "within noise (the 95% CI includes 0)); KL 0.02 at the last step; 3 steps; time (mean")
    tight = [run_training(rows(0.5, 0.3, 0.01)), run_training(rows(0.5, 0.31, 0.01))]
    assert "over 2 seeds: fell)" in arm_line("vpo", tight, [ACC] * 2)
    assert "no probe taken" in arm_line("x", [run_training([TrainingRow(1, 1, {"samples": 2})])], [])


def test_noise_words_and_the_difference_between_arms():
    assert noise_words(0.3, 0.1, 0.5) == "higher" and noise_words(-0.3, -0.5, -0.1) == "lower"
    assert noise_words(0.1, -0.1, 0.3).startswith("within noise")
    assert noise_words(0.1, math.nan, math.nan).startswith("no interval (one run)")
    d = difference({0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.5, 1: 1.5, 2: 3.5}, "solved", ("base", "new"))
    assert d.lo < 0 < d.hi and d.line().endswith(": within noise (the 95% CI includes 0)")
    d = difference({0: 1.0, 1: 2.0}, {0: 3.0, 1: 4.1}, "solved", ("base", "new"))
    assert d.words == "new higher"
