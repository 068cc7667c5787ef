"""The 95% Student t quantile every confidence interval of vevo uses (curve bands, `vevo run --seeds` summaries,
differences between arms, `vevo train`'s trend), in one place. Pure; scipy is not a dependency of the core install,
so a table and an expansion stand in for ``scipy.stats.t.ppf(0.975, df)``."""
from __future__ import annotations

import math

# two-sided 95% Student t quantiles t_{0.975, df} for df = 1..30, as printed in the standard tables (3 decimals)
T95_TABLE = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
             2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
             2.042)
_Z975 = 1.959964  # the normal quantile, the limit as df grows


def t95(df: float) -> float:
    """Two-sided 95% Student t quantile t_{0.975, df}: the table for df <= 30 (a fractional df, as Welch's, is
    rounded down: wider, never narrower), then the Cornish–Fisher expansion in 1/df (within 1e-3 of the exact
    value from df = 31 on, tending to 1.96); nan below df = 1, where no interval exists."""
    if not df >= 1:
        return math.nan
    if df <= len(T95_TABLE):
        return T95_TABLE[int(math.floor(df)) - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci95(values) -> tuple[float, float]:
    """(mean, half-width) of the 95% t interval for the mean of independent values (seeds, runs, paired
    differences); the half-width is nan below two values, the mean nan for none."""
    v = [float(x) for x in values]
    n = len(v)
    if not n:
        return math.nan, math.nan
    mean = sum(v) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1))
    return mean, t95(n - 1) * sd / math.sqrt(n)
