import math

import numpy as np
import pytest

from evolve.stats import t95

# t_{0.975, df} to 7 decimals (scipy.stats.t.ppf(0.975, df); the same in any statistics table)
KNOWN = {1: 12.7062047, 2: 4.3026527, 5: 2.5705818, 30: 2.0422725, 31: 2.0395134, 40: 2.0210754, 60: 2.0002978,
         120: 1.9799304, 1000: 1.9623391}


@pytest.mark.parametrize("df", sorted(KNOWN))
def test_t95_matches_the_known_quantiles(df):
    assert abs(t95(df) - KNOWN[df]) < 1e-3


def test_t95_falls_with_df_towards_the_normal_quantile():
    qs = [t95(df) for df in range(1, 5001)]
    assert all(a >= b for a, b in zip(qs, qs[1:]))  # no step up where the table hands over to the expansion
    assert 1.96 < qs[-1] < 1.9605


def test_t95_rounds_a_fractional_df_down_and_has_no_value_below_one():
    assert t95(2.72) == t95(2) and t95(29.9) == t95(29) and t95(30) > t95(30.5) > t95(31)
    assert math.isnan(t95(0)) and math.isnan(t95(0.5)) and math.isnan(t95(-3)) and math.isnan(t95(math.nan))


def test_every_interval_uses_the_one_quantile():
    from evolve.analysis.arms import difference
    from evolve.analysis.curves import _ci_half, ci95

    v = np.arange(40.0)
    half = t95(39) * v.std(ddof=1) / math.sqrt(40)
    assert ci95(v)[1] == pytest.approx(half)
    row = {"runs": 40, "solved_std": float(v.std())}  # curve_table keeps the population std
    assert _ci_half(row, "solved") == pytest.approx(half)
    d = difference({k: 0.0 for k in range(40)}, {k: float(k) for k in range(40)}, "solved")
    assert d.hi - d.diff == pytest.approx(half)


def test_mean_ci95_is_the_t_interval_and_says_nan_where_none_exists():
    from evolve.analysis.curves import ci95
    from evolve.stats import mean_ci95

    v = [0.0028, 0.0046, 0.0043, -0.0018, 0.0106]  # ttt_check's five own-probe slopes
    mean, half = mean_ci95(v)
    assert mean == pytest.approx(0.0041)
    assert (mean - half, mean + half) == pytest.approx((-0.0014, 0.0096), abs=5e-5)  # as docs/results/ttt_check.md
    assert mean_ci95([3.0])[0] == 3.0 and math.isnan(mean_ci95([3.0])[1])
    assert all(math.isnan(x) for x in mean_ci95([]))
    assert ci95([3.0]) == (3.0, 0.0) and ci95([]) == (0.0, 0.0)  # curve bands keep their zero-width convention


# ------------------------------------------------------------------ sign-flip test and Holm, by hand
@pytest.mark.parametrize("diffs,p", [
    ([1, 2, 3], 2 / 8),            # sums over the 8 sign patterns: 6 4 2 0 0 -2 -4 -6; |sum| >= 6 twice
    ([1, 2, 3, 4], 2 / 16),        # only all-plus and all-minus reach |10|
    ([1, 1, 1, 1, 1], 2 / 32),
    ([3, -1], 1.0),                # sums 2 -2 4 -4: every pattern reaches |2|
    ([0, 0, 0], 1.0),
    ([2, 1], 2 / 4),               # sums 3 1 -1 -3
    ([0.1, 0.2, 0.3], 2 / 8),      # ties within rounding count (0.1 + 0.2 is not exactly 0.3)
])
def test_sign_flip_exact_matches_hand_counts(diffs, p):
    from evolve.stats import sign_flip_p

    assert sign_flip_p(diffs) == pytest.approx(p, abs=1e-15)


def test_sign_flip_monte_carlo_above_sixteen_is_seeded_and_close_to_exact():
    import itertools

    from evolve.stats import EXACT_MAX_N, sign_flip_p

    rng = np.random.default_rng(5)
    d = rng.normal(0.3, 1.0, size=EXACT_MAX_N + 2)
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=d.size)))
    exact = float((np.abs((signs * d).mean(axis=1)) >= abs(d.mean()) - 1e-12).mean())
    mc = sign_flip_p(d, n_resamples=20_000, seed=1)
    assert mc == sign_flip_p(d, n_resamples=20_000, seed=1)  # seeded
    assert abs(mc - exact) < 0.015
    assert sign_flip_p(np.ones(20), n_resamples=999, seed=0) == pytest.approx(1 / 1000)  # (1 + 0) / (1 + N)
    assert math.isnan(sign_flip_p([]))


def test_holm_adjusts_step_down_by_hand():
    from evolve.stats import holm

    # sorted 0.01 0.03 0.04: 3 * 0.01 = 0.03; 2 * 0.03 = 0.06; 1 * 0.04 = 0.04 -> kept monotone at 0.06
    out = holm({"vpo-grpo": 0.01, "vpo-none": 0.04, "evo-iid": 0.03})
    assert [r["name"] for r in out] == ["vpo-grpo", "vpo-none", "evo-iid"]
    assert [r["p_holm"] for r in out] == pytest.approx([0.03, 0.06, 0.06])
    assert [r["reject"] for r in out] == [True, False, False]
    assert [r["p_holm"] for r in holm([0.5, 0.2])] == pytest.approx([0.5, 0.4])
    assert [r["p_holm"] for r in holm([0.4, 0.9, 0.6])] == pytest.approx([1.0, 1.0, 1.0])  # capped at 1
    assert holm([0.01, 0.02], alpha=0.03)[1]["reject"] and not holm([0.01, 0.02], alpha=0.01)[1]["reject"]
    both = holm([0.01, math.nan])  # a registered contrast left unmeasured still counts in m
    assert both[0]["p_holm"] == pytest.approx(0.02) and math.isnan(both[1]["p_holm"]) and not both[1]["reject"]


def test_paired_contrast_puts_the_permutation_p_beside_the_t_interval():
    from evolve.stats import paired_contrast

    c = paired_contrast([0, 0, 0], [1, 2, 3])
    assert c["n"] == 3 and c["mean"] == pytest.approx(2.0)
    h = 4.303 / math.sqrt(3)  # sd of (1, 2, 3) is 1; t_{0.975, 2} = 4.303
    assert (c["lo"], c["hi"]) == pytest.approx((2 - h, 2 + h))
    assert c["p_sign_flip"] == pytest.approx(0.25)
    with pytest.raises(ValueError):
        paired_contrast([1], [1, 2])


def test_paired_difference_reports_the_sign_flip_p():
    from evolve.analysis.arms import difference

    d = difference({0: 0.0, 1: 0.0, 2: 0.0}, {0: 1.0, 1: 2.0, 2: 3.0}, "best", ("none", "vpo"))
    assert d.p_sign_flip == pytest.approx(0.25) and "sign-flip p 0.25" in d.line()
    assert math.isnan(difference({0: 1.0, 1: 2.0}, {5: 1.0, 6: 3.0}).p_sign_flip)  # unpaired: no sign-flip test


def test_decisive_study_contrasts_count_unmeasured_ones_in_holm(tmp_path):
    """bench/studies/decisive_study.py: a registered contrast with no runs stays nan and still counts in Holm's m;
    measured runs are kept in one JSON that a later start reads instead of rerunning."""
    from bench.studies.decisive_study import Measured, contrast_rows

    res = {a: {s: {"best_auc": base + 0.01 * s} for s in range(6)}
           for a, base in (("grpo", 0.5), ("none", 0.4), ("vpo", 0.6), ("iid", 0.4))}
    rows = contrast_rows(res, list(range(6)), (("best_auc", "grpo", "vpo"), ("best_auc_wall", "none", "vpo")))
    measured, missing = rows
    assert measured["mean"] == pytest.approx(0.1) and measured["p_sign_flip"] == pytest.approx(2 / 64)
    assert measured["p_holm"] == pytest.approx(2 * 2 / 64) and not measured["reject"]  # m = 2: 0.0625, not 0.031
    assert missing["n"] == 0 and math.isnan(missing["p_sign_flip"]) and not missing["reject"]
    kept = Measured(tmp_path / "runs.json", 100)
    kept.put("vpo", 3, {"best_auc": 0.5})
    assert Measured(tmp_path / "runs.json", 100).get("vpo", 3) == {"best_auc": 0.5}
    with pytest.raises(SystemExit, match="iterations 100, not 50"):
        Measured(tmp_path / "runs.json", 50)
    wall = Measured(tmp_path / "wall.json", 100_000, 99.7)  # the wall-clock runs are kept under their budget
    wall.put("none", 0, {"best_auc_wall": 0.4})
    with pytest.raises(SystemExit, match="budget_seconds 99.7, not 50.0"):
        Measured(tmp_path / "wall.json", 100_000, 50.0)
