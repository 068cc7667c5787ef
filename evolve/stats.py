"""The 95% Student t quantile every confidence interval of vevo uses (curve bands, `vevo run --seeds` summaries,
differences between arms, `vevo train`'s trend), in one place; and the tests a pre-registered study reports beside
those intervals: a paired sign-flip permutation test and Holm's correction across its contrasts. Pure; scipy is not a dependency of the core install,
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


# ------------------------------------------------------------------ tests for pre-registered contrasts
EXACT_MAX_N = 16  # sign-flip tests enumerate all 2^n sign patterns up to here (65,536), then sample


def sign_flip_p(diffs, n_resamples: int = 20_000, seed: int = 0) -> float:
    """Two-sided p of the paired sign-flip permutation test of mean(diffs) = 0 (under the null each paired
    difference is as likely to have either sign). Statistic |mean|; a pattern counts when its |mean| reaches
    the observed one (within 1e-12 relative, so exact ties count). Exact enumeration for n <= EXACT_MAX_N (the
    identity pattern and its mirror included, so p >= 2^(1-n), and p = 1 when every difference is 0); above it ``n_resamples``
    seeded draws, p = (1 + hits) / (1 + n_resamples). nan for no differences. No normality assumed: it stands
    beside the t interval, not in place of it."""
    import numpy as np

    d = np.asarray([float(x) for x in diffs], dtype=float)
    n = d.size
    if n == 0 or not np.isfinite(d).all():
        return math.nan
    obs = abs(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if n <= EXACT_MAX_N:
        bits = (np.arange(2 ** n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)) & 1
        means = np.abs(((1 - 2 * bits) * d).mean(axis=1))
        return float((means >= obs - tol).sum() / means.size)
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_resamples, 4096):  # in chunks: bounded memory for large n
        k = min(4096, n_resamples - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(k, n))
        hits += int((np.abs((signs * d).mean(axis=1)) >= obs - tol).sum())
    return (1 + hits) / (1 + n_resamples)


def holm(pvalues, alpha: float = 0.05) -> list[dict]:
    """Holm's step-down correction across a family of pre-registered contrasts (controls the family-wise error
    at ``alpha`` under any dependence). ``pvalues``: a mapping name -> p, or a sequence (named by index).
    Returns, in the given order, {"name", "p", "p_holm", "reject"}: p_holm is the adjusted p,
    max over j <= rank of min(1, (m - j + 1) p_(j)); reject when p_holm <= alpha. A nan p is never rejected and
    counts in m (a contrast registered and not measured still costs its share)."""
    items = list(pvalues.items()) if hasattr(pvalues, "items") else list(enumerate(pvalues))
    m = len(items)
    order = sorted(range(m), key=lambda i: (math.isnan(float(items[i][1])), float(items[i][1])))
    adj = [math.nan] * m
    running = 0.0
    for rank, i in enumerate(order):
        p = float(items[i][1])
        if math.isnan(p):
            running = math.nan if math.isnan(running) else 1.0
            adj[i] = math.nan
            continue
        running = max(running, min(1.0, (m - rank) * p))
        adj[i] = running
    return [{"name": name, "p": float(p), "p_holm": adj[i],
             "reject": bool(not math.isnan(adj[i]) and adj[i] <= alpha)} for i, (name, p) in enumerate(items)]


def paired_contrast(a, b, n_resamples: int = 20_000, seed: int = 0) -> dict:
    """b - a paired by position (seeds): mean difference, its 95% t interval and the sign-flip p beside it."""
    if len(a) != len(b):
        raise ValueError(f"paired contrast needs equal lengths, got {len(a)} and {len(b)}")
    d = [float(y) - float(x) for x, y in zip(a, b)]
    mean, half = mean_ci95(d)
    return {"n": len(d), "mean": mean, "lo": mean - half, "hi": mean + half,
            "p_sign_flip": sign_flip_p(d, n_resamples, seed)}
