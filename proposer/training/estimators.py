"""Advantage estimators for multi-answer completions with vector rewards: pure numpy, one function each.

Shared calling convention (contract 4 of docs/ARCHITECTURE.md: estimators equal the reference formulas)::

    advantages, diagnostics = estimator(score_matrices, group_ids, *, ..., eps=1e-6)

* ``score_matrices[j]``: the (m_j x d) reward matrix of completion j -- one row per parsed answer, one column per
  test. m_j may be 0 (``[]``, ``None`` or an array of shape (0, d)): a completion with no answers scores 0 under
  every estimator (the reference's convention: a missing answer is worth nothing).
* ``group_ids[j]``: any hashable; completions sharing it were sampled for the same prompt (a GRPO group).
  Groups are processed in order of first appearance, which fixes the order of random draws.
* ``advantages``: float64 array, one scalar per completion (every token of the completion gets it).

Group normalisation, everywhere unless stated (VPO reference ``vpo/utils/vpo.py`` in github.com/ryanboldi/vpo)::

    a_j = (x_j - mean_g) / (std_g + eps)     std_g = population std (ddof=0) of x over group g
    a_j = 0 for the whole group              when std_g < eps  (constant group: no learning signal)

A group of one completion gets advantage 0 (it has no baseline to compare with). NB: veRL's GRPO uses the
*unbiased* std and gives a singleton group (score - 0) / (1 + eps); this module follows the VPO reference's
population std and the project's "no baseline, no signal" rule for every estimator, so all six are comparable.

Validation: mismatched lengths, NaN/inf rewards or weights, a matrix that is not 2-D, or completions of one
group with different d raise ``ValueError`` with a one-line message naming the completion / group.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from math import comb
from typing import Any

import numpy as np

EPS = 1e-6  # reference eps for the z-norm
N_WEIGHTS = 100  # reference K: Dirichlet draws per group
ALPHA = 1.0  # reference concentration: Dirichlet(1) = uniform on the simplex


# --------------------------------------------------------------------------------------------------- helpers
def _as_matrix(x: Any, j: int) -> np.ndarray:
    """One completion's score matrix as float64 (m, d); empty -> shape (0, d) or (0, 0)."""
    if x is None:
        return np.zeros((0, 0))
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0:
        return a.reshape(0, a.shape[-1] if a.ndim == 2 else 0)
    if a.ndim != 2:
        raise ValueError(f"score_matrices[{j}] must be 2-D (answers x tests), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"score_matrices[{j}] contains NaN or inf")
    return a


def _prepare(score_matrices: Sequence[Any], group_ids: Sequence[Hashable]) -> tuple[list[np.ndarray], dict]:
    """Validate inputs; return the matrices and {group id: [completion indices]} in first-appearance order.

    Also checks that every non-empty matrix of a group has the same number of columns d.
    """
    n, n_ids = len(score_matrices), len(group_ids)
    if n != n_ids:
        raise ValueError(f"len(score_matrices)={n} != len(group_ids)={n_ids}")
    mats = [_as_matrix(x, j) for j, x in enumerate(score_matrices)]
    groups: dict[Hashable, list[int]] = {}
    for j, g in enumerate(group_ids):
        g = g.item() if isinstance(g, np.generic) else g
        groups.setdefault(g, []).append(j)
    for g, idx in groups.items():
        ds = {mats[j].shape[1] for j in idx if mats[j].shape[0] > 0}
        if len(ds) > 1:
            raise ValueError(f"group {g!r}: completions have different numbers of tests d={sorted(ds)}")
    return mats, groups


def _group_d(mats: list[np.ndarray], idx: list[int]) -> int:
    """d of a group: columns of its first non-empty matrix (0 if all are empty)."""
    for j in idx:
        if mats[j].shape[0] > 0:
            return mats[j].shape[1]
    return 0


def _normalise(x: np.ndarray, groups: dict, eps: float, scale: bool = True) -> tuple[np.ndarray, dict]:
    """Group z-norm (population std, +eps, 0 when std < eps or the group has one member).

    ``scale=False`` is the Dr. GRPO variant: mean-centring only, still 0 for a constant or singleton group.
    Returns the advantages and diagnostics: group_mean, group_std, frac_zero_adv_groups.
    """
    adv = np.zeros_like(x, dtype=np.float64)
    means, stds, n_zero = {}, {}, 0
    for g, idx in groups.items():
        v = x[idx]
        mu, sd = float(v.mean()), float(v.std())  # np.std: ddof=0, population std
        means[g], stds[g] = mu, sd
        if len(idx) < 2 or sd < eps:
            n_zero += 1  # adv stays 0
            continue
        adv[idx] = (v - mu) / (sd + eps) if scale else v - mu
    diag = {"group_mean": means, "group_std": stds,
            "frac_zero_adv_groups": n_zero / len(groups) if groups else 0.0, "n_groups": len(groups)}
    return adv, diag


def _w_star(w_star: Any, d: int, g: Hashable) -> np.ndarray:
    """Deployment weight for a group: None -> uniform mean (1/d each); an array (d,); or {group: (d,)}."""
    if isinstance(w_star, dict):
        if g not in w_star:
            raise ValueError(f"w_star has no entry for group {g!r}")
        w_star = w_star[g]
    if w_star is None:
        return np.full(d, 1.0 / d) if d else np.zeros(0)
    w = np.asarray(w_star, dtype=np.float64).reshape(-1)
    if w.shape != (d,):
        raise ValueError(f"group {g!r}: w_star has shape {w.shape}, expected ({d},)")
    if not np.all(np.isfinite(w)):
        raise ValueError(f"group {g!r}: w_star contains NaN or inf")
    return w


def _best_scalar(mats: list[np.ndarray], groups: dict, w_star: Any) -> np.ndarray:
    """Per completion: max over answers of w*.r (0 for a completion without answers)."""
    x = np.zeros(len(mats))
    for g, idx in groups.items():
        w = _w_star(w_star, _group_d(mats, idx), g)
        for j in idx:
            if mats[j].shape[0] > 0:
                x[j] = float((mats[j] @ w).max())
    return x


def _check_eps(eps: float) -> None:
    if not (np.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")


# ------------------------------------------------------------------------------------------------------- VPO
def set_reward(score_matrix: Any, weights: Any) -> float:
    """VPO set reward of one completion: S(R) = (1/K) sum_k max_i R_i . w_k.

    R: (m x d) answers x tests; weights: (K x d) scalarisations (a (d,) vector is one weight). 0 when m = 0.
    Source: ``vpo_advantage`` in github.com/ryanboldi/vpo, ``vpo/utils/vpo.py`` (raw score per rollout).
    With d = 1 and weights 1 it is the best answer's score; with m = 1 and weights averaging to w̄ it is R_1 . w̄.
    """
    r = _as_matrix(score_matrix, 0)
    if r.shape[0] == 0:
        return 0.0
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if w.shape[1] != r.shape[1]:
        raise ValueError(f"weights have d={w.shape[1]} but the score matrix has d={r.shape[1]}")
    if not np.all(np.isfinite(w)):
        raise ValueError("weights contain NaN or inf")
    return float((r @ w.T).max(axis=0).mean())


def vpo_advantage(
    score_matrices: Sequence[Any],
    group_ids: Sequence[Hashable],
    *,
    weights: dict[Hashable, Any] | None = None,
    n_weights: int = N_WEIGHTS,
    alpha: float = ALPHA,
    rng: np.random.Generator | None = None,
    eps: float = EPS,
) -> tuple[np.ndarray, dict]:
    """VPO (Vector Policy Optimization) advantage.

    Per group g (source: github.com/ryanboldi/vpo, ``vpo/utils/vpo.py::vpo_advantage``)::

        w_1..w_K ~ Dirichlet(alpha * 1_d)          K = n_weights draws, shared by all G completions of g
        x_j = (1/K) sum_k max_i R_j[i] . w_k       (x_j = 0 when completion j has no answers)
        a_j = (x_j - mean_g x) / (std_g x + eps)   population std; a = 0 for all of g when std_g < eps

    ``weights`` ({group id: (K x d)}) replaces the draws (contract 4: explicit weights reproduce the formula
    exactly); otherwise draws come from ``rng`` (``np.random.default_rng()`` when None), one
    ``rng.dirichlet(alpha*ones(d), size=K)`` call per group in first-appearance order, skipped for a group whose
    completions are all empty -- the reference's order, so the same seeded Generator gives the same draws.
    The reference keeps raw scores in float32 torch tensors; here they are float64 (agreement ~1e-7).

    Diagnostics: raw_scores (per completion), weights ({group: (K, d)} actually used), group_mean / group_std,
    frac_zero_adv_groups, argmax_diversity_mean (mean over non-empty completions of how many distinct answer
    vectors are the argmax for at least one w_k: 1 = one answer wins every scalarisation, m = all answers
    useful), and the reference's wandb metrics pool_size_mean, group_std_mean, own_pool_expected_max_mean,
    pool_expected_best_mean (mean over w of the max over the whole group's answers).
    """
    _check_eps(eps)
    if n_weights < 1:
        raise ValueError(f"n_weights must be >= 1, got {n_weights}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    mats, groups = _prepare(score_matrices, group_ids)
    rng = np.random.default_rng() if rng is None else rng
    raw = np.zeros(len(mats))
    used_w: dict[Hashable, np.ndarray] = {}
    diversity: list[int] = []
    pool_sizes, pool_best = [], []
    for g, idx in groups.items():
        d = _group_d(mats, idx)
        pool_sizes.append(sum(mats[j].shape[0] for j in idx))
        if d == 0:  # every completion empty (or zero tests): all raw scores 0, no draws
            pool_best.append(0.0)
            continue
        if weights is not None:
            if g not in weights:
                raise ValueError(f"weights has no entry for group {g!r}")
            w = np.atleast_2d(np.asarray(weights[g], dtype=np.float64))
            if w.ndim != 2 or w.shape[1] != d:
                raise ValueError(f"group {g!r}: weights have shape {w.shape}, expected (K, {d})")
            if not np.all(np.isfinite(w)):
                raise ValueError(f"group {g!r}: weights contain NaN or inf")
        else:
            w = rng.dirichlet(np.full(d, float(alpha)), size=n_weights)
        used_w[g] = w
        pool_max = np.full(w.shape[0], -np.inf)
        for j in idx:
            r = mats[j]
            if r.shape[0] == 0:
                continue
            scored = r @ w.T  # (m_j, K)
            best = scored.max(axis=0)  # (K,)
            raw[j] = float(best.mean())
            pool_max = np.maximum(pool_max, best)
            _, inverse = np.unique(r, axis=0, return_inverse=True)  # identical answers count once
            diversity.append(len(np.unique(inverse.reshape(-1)[scored.argmax(axis=0)])))
        pool_best.append(float(pool_max.mean()))
    adv, diag = _normalise(raw, groups, eps)
    n_g = max(len(groups), 1)
    diag.update(
        raw_scores=raw,
        weights=used_w,
        argmax_diversity_mean=float(np.mean(diversity)) if diversity else 0.0,
        pool_size_mean=sum(pool_sizes) / n_g,
        group_std_mean=sum(diag["group_std"].values()) / n_g,
        own_pool_expected_max_mean=sum(diag["group_mean"].values()) / n_g,
        pool_expected_best_mean=sum(pool_best) / n_g,
    )
    return adv, diag


# ------------------------------------------------------------------------------------------------- baselines
def grpo(
    score_matrices: Sequence[Any],
    group_ids: Sequence[Hashable],
    *,
    w_star: Any = None,
    eps: float = EPS,
    rng: np.random.Generator | None = None,  # unused: deterministic; the registry's common signature
) -> tuple[np.ndarray, dict]:
    """GRPO on a multi-answer completion: reward the completion by its best answer under the deployment weight.

    ``x_j = max_i R_j[i] . w*`` (0 without answers), then the group z-norm above (population std, +eps).
    w* = ``w_star``: (d,), {group: (d,)}, or None for the uniform mean (1/d each: the fraction of tests passed).
    Choice: GRPO is defined for one scalar per completion (Shao et al. 2024, arXiv:2402.03300); for m answers
    the natural scalar is the best one, which is what a deployed best-of-m selector would use. It is VPO with
    a single fixed weight w* (K = 1), so it differs from VPO only in not rewarding answers that win under
    other weightings. Source of the normalisation: veRL ``compute_grpo_outcome_advantage``.
    """
    _check_eps(eps)
    mats, groups = _prepare(score_matrices, group_ids)
    x = _best_scalar(mats, groups, w_star)
    adv, diag = _normalise(x, groups, eps)
    diag["raw_scores"] = x
    return adv, diag


def dr_grpo(
    score_matrices: Sequence[Any],
    group_ids: Sequence[Hashable],
    *,
    w_star: Any = None,
    eps: float = EPS,
    rng: np.random.Generator | None = None,  # unused: deterministic; the registry's common signature
) -> tuple[np.ndarray, dict]:
    """Dr. GRPO (Liu et al. 2025, arXiv:2503.20783): the GRPO scalar, mean-centred only.

    ``a_j = x_j - mean_g x`` with ``x_j = max_i R_j[i] . w*``; no division by std (removes the difficulty
    bias). 0 for a singleton group or when std_g < eps. veRL: ``norm_adv_by_std_in_grpo=False``.
    """
    _check_eps(eps)
    mats, groups = _prepare(score_matrices, group_ids)
    x = _best_scalar(mats, groups, w_star)
    adv, diag = _normalise(x, groups, eps, scale=False)
    diag["raw_scores"] = x
    return adv, diag


def gdpo(
    score_matrices: Sequence[Any],
    group_ids: Sequence[Hashable],
    *,
    dim_weights: Any = None,
    answer_reduce: str = "max",
    eps: float = EPS,
    rng: np.random.Generator | None = None,  # unused: deterministic; the registry's common signature
) -> tuple[np.ndarray, dict]:
    """GDPO, group reward-decoupled normalisation (arXiv:2601.05242; veRL ``compute_gdpo_outcome_advantage``).

    Each reward dimension is normalised within the group separately, then summed, then whitened over the batch::

        c_j[k] = max_i R_j[i, k]                          per-test reward of completion j (0 without answers)
        z_j[k] = (c_j[k] - mean_g c[k]) / (std_g c[k] + eps)   per dim, population std; 0 if std < eps / G = 1
        s_j    = sum_k u_k z_j[k]                          u = dim_weights, default all ones
        a_j    = (s_j - mean_batch s) / (std_batch s + eps)    0 for all when std_batch < eps

    A singleton group, or one where every dim is constant, has no signal and gets exactly 0 (s_j sums to 0
    over each group, so mean_batch s = 0 and the whitening leaves those entries at 0 anyway, up to rounding).

    Choices: ``answer_reduce="max"`` (a test counts as passed by the completion if any answer passes it --
    team coverage); ``"sum"`` is the column sum the VPO reference feeds GDPO (``Task.multi_named_channels``,
    decomposing its sum_all scalar). Batch whitening here is over completions, with population std + eps;
    veRL's ``masked_whiten`` weights each completion by its token count and uses the unbiased variance
    (rsqrt(var + 1e-8)). Groups may have different d; ``dim_weights`` then must be None or a {group: (d,)}.
    """
    _check_eps(eps)
    if answer_reduce not in ("max", "sum"):
        raise ValueError(f"answer_reduce must be 'max' or 'sum', got {answer_reduce!r}")
    mats, groups = _prepare(score_matrices, group_ids)
    s = np.zeros(len(mats))
    per_dim_std: dict[Hashable, np.ndarray] = {}
    live = np.zeros(len(mats), dtype=bool)  # completions of groups with some within-group signal
    for g, idx in groups.items():
        d = _group_d(mats, idx)
        if d == 0:
            continue
        c = np.zeros((len(idx), d))
        for r_i, j in enumerate(idx):
            if mats[j].shape[0] > 0:
                c[r_i] = mats[j].max(axis=0) if answer_reduce == "max" else mats[j].sum(axis=0)
        u = np.ones(d) if dim_weights is None else _w_star(dim_weights, d, g)
        mu, sd = c.mean(axis=0), c.std(axis=0)
        per_dim_std[g] = sd
        if len(idx) < 2:
            continue
        z = np.where(sd >= eps, (c - mu) / (sd + eps), 0.0)
        s[idx] = z @ u
        live[idx] = bool(np.any(sd >= eps))
    mu, sd = float(s.mean()) if len(s) else 0.0, float(s.std()) if len(s) else 0.0
    adv = (s - mu) / (sd + eps) if sd >= eps else np.zeros_like(s)
    # s sums to 0 within every group, so mu is 0 up to rounding; pin signal-free groups to exactly 0.
    adv[~live] = 0.0
    n_zero = sum(1 for idx in groups.values() if not live[idx[0]])
    diag = {"raw_scores": s, "per_dim_group_std": per_dim_std, "batch_mean": mu, "batch_std": sd,
            "frac_zero_adv_groups": n_zero / len(groups) if groups else 0.0, "n_groups": len(groups)}
    return adv, diag


def multi_rlvr(
    score_matrices: Sequence[Any],
    group_ids: Sequence[Hashable],
    *,
    w_star: Any = None,
    eps: float = EPS,
    rng: np.random.Generator | None = None,  # unused: deterministic; the registry's common signature
) -> tuple[np.ndarray, dict]:
    """Multi-answer RLVR: the completion's reward is the sum over its *distinct* answers of their scalar.

    ``x_j = sum_{r in unique rows of R_j} r . w*`` (identical reward rows count once), then group z-norm.
    Source: the VPO reference's multi_rlvr baseline, ``sum_all`` in ``vpo/utils/score_variants.py`` applied to
    the matrix after ``dedup_by_vector`` (``vpo/task.py``); ``sum_all`` is the special case w* = 1 (every
    entry summed), which equals d x this scalar under the default uniform-mean w*, so the z-normalised
    advantages coincide. Rewards both correctness and the number of distinct partially-correct answers.
    """
    _check_eps(eps)
    mats, groups = _prepare(score_matrices, group_ids)
    x = np.zeros(len(mats))
    for g, idx in groups.items():
        w = _w_star(w_star, _group_d(mats, idx), g)
        for j in idx:
            if mats[j].shape[0] > 0:
                x[j] = float((np.unique(mats[j], axis=0) @ w).sum())
    adv, diag = _normalise(x, groups, eps)
    diag["raw_scores"] = x
    return adv, diag


def _max_at_k_estimate(values: np.ndarray, k: int) -> float:
    """Unbiased estimate of E[max of k draws without replacement] from n samples (k <= n).

    ``rho = sum_{i=1..n} C(i-1, k-1) / C(n, k) * v_(i)`` with v_(1) <= ... <= v_(n): the i-th smallest value is the
    maximum of exactly C(i-1, k-1) of the C(n, k) size-k subsets. Ties do not change the value.
    """
    v = np.sort(values)
    n = len(v)
    total = comb(n, k)
    coef = np.array([comb(i - 1, k - 1) / total for i in range(1, n + 1)])
    return float(coef @ v)


def max_at_k(
    score_matrices: Sequence[Any],
    group_ids: Sequence[Hashable],
    *,
    k: int | None = None,
    w_star: Any = None,
    eps: float = EPS,
    rng: np.random.Generator | None = None,  # unused: deterministic; the registry's common signature
) -> tuple[np.ndarray, dict]:
    """max@k policy optimisation: credit each completion with its marginal effect on the best-of-k reward.

    Scalars: ``x_j = max_i R_j[i] . w*`` (as in ``grpo``). Within a group of n, the unbiased max@k estimate is
    ``rho(x; k) = sum_i C(i-1, k-1)/C(n, k) x_(i)`` (ascending order statistics; the pass@k estimator of
    Chen et al. 2021 generalised to real rewards). Each completion's raw advantage is its leave-one-out
    contribution::

        b_j = rho(x; k) - rho(x without j; k)          (the second term uses the n-1 other samples)

    then the group z-norm (population std, +eps). Choice / equivalence: the reference estimator (veRL
    ``compute_max_at_k_outcome_advantage``, "The Best of N Worlds", arXiv:2510.23393; also Walder & Karkhanis,
    "Pass@k policy optimization", arXiv:2505.15201) gives sample j ``(1/C(n,k)) sum_{|S|=k, S contains j} max S``
    = rho(x) - (n-k)/n * rho(x without j). Both are an affine function of rho(x without j) with a negative slope,
    so after mean-centring and std-scaling they agree (up to the eps in the denominator). k = 1 reduces to GRPO.

    ``k``: None -> max(2, n // 2) per group (reference default); it is clamped to n - 1 per group, since
    k = n leaves no subset without j (the reference raises instead). Groups of one get 0.
    Diagnostics: raw_scores (x), loo (b), k_used ({group: k}), group_mean / group_std of b, max_at_k ({group: rho}).
    """
    _check_eps(eps)
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    mats, groups = _prepare(score_matrices, group_ids)
    x = _best_scalar(mats, groups, w_star)
    b = np.zeros(len(mats))
    k_used, rho_all = {}, {}
    for g, idx in groups.items():
        n = len(idx)
        if n < 2:
            continue
        kk = min(max(2, n // 2) if k is None else k, n - 1)
        v = x[idx]
        rho = _max_at_k_estimate(v, kk)
        k_used[g], rho_all[g] = kk, rho
        for pos, j in enumerate(idx):
            b[j] = rho - _max_at_k_estimate(np.delete(v, pos), kk)
    adv, diag = _normalise(b, groups, eps)
    diag.update(raw_scores=x, loo=b, k_used=k_used, max_at_k=rho_all)
    return adv, diag


# The trainer-algorithm registry: name -> estimator(score_matrices, group_ids, *, rng=None) -> (advantages,
# diagnostics with "raw_scores"). Config types, CLI choices and docs read it. To add one: write the function
# above (pure numpy, formula in its docstring) and add it here or call ``register_estimator``.
Estimator = Callable[..., tuple[np.ndarray, dict]]
ESTIMATORS: dict[str, Estimator] = {
    "vpo": vpo_advantage,
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "gdpo": gdpo,
    "multi_rlvr": multi_rlvr,
    "max_at_k": max_at_k,
}


def register_estimator(name: str, fn: Estimator) -> None:
    if name == "none":
        raise ValueError("'none' means no training")
    ESTIMATORS[name] = fn
