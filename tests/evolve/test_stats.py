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
    from evolve.arms import difference
    from evolve.curves import _ci_half, ci95

    v = np.arange(40.0)
    half = t95(39) * v.std(ddof=1) / math.sqrt(40)
    assert ci95(v)[1] == pytest.approx(half)
    row = {"runs": 40, "solved_std": float(v.std())}  # curve_table keeps the population std
    assert _ci_half(row, "solved") == pytest.approx(half)
    d = difference({k: 0.0 for k in range(40)}, {k: float(k) for k in range(40)}, "solved")
    assert d.hi - d.diff == pytest.approx(half)


def test_mean_ci95_is_the_t_interval_and_says_nan_where_none_exists():
    from evolve.curves import ci95
    from evolve.stats import mean_ci95

    v = [0.0028, 0.0046, 0.0043, -0.0018, 0.0106]  # ttt_check's five own-probe slopes
    mean, half = mean_ci95(v)
    assert mean == pytest.approx(0.0041)
    assert (mean - half, mean + half) == pytest.approx((-0.0014, 0.0096), abs=5e-5)  # as docs/results/ttt_check.md
    assert mean_ci95([3.0])[0] == 3.0 and math.isnan(mean_ci95([3.0])[1])
    assert all(math.isnan(x) for x in mean_ci95([]))
    assert ci95([3.0]) == (3.0, 0.0) and ci95([]) == (0.0, 0.0)  # curve bands keep their zero-width convention
