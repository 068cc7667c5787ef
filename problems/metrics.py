"""Named metrics of evaluators that report a dict (OpenEvolve): which way each one points, the fitness, and the
score columns selection sees. Pure functions.

Two numbers come out of a metrics dict:
- the **fitness** (the Evaluation's scalar) is OpenEvolve's own ``get_fitness_score``: ``combined_score`` when
  present, else the mean of the numeric metrics that are neither booleans nor MAP-Elites feature dimensions, so a
  campaign's best programs rank as OpenEvolve ranks them;
- the **score columns** (the Evaluation's vector, what lexicase and niches compare) are keyed by name and point
  one way: a metric is ``higher`` (kept), ``lower`` (negated, so larger is better everywhere) or ``ignore``
  (bookkeeping: times, counts, flags, feature dimensions). Booleans and non-numbers are never columns. Directions
  come from the problem's ``[metrics]`` table, else from the names OpenEvolve evaluators commonly use.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from .errors import ProblemError

DIRECTIONS = ("higher", "lower", "ignore")
# Checked in order; the first pattern that matches the whole (lower-cased) name decides.
KNOWN: tuple[tuple[str, str], ...] = (
    (r"combined_score|score|fitness|reward|accuracy|success_rate|validity|.*_score|.*_ratio|.*_accuracy", "higher"),
    (r"(eval|evaluation|execution|exec|run|wall|cpu|total|elapsed|compile|build)_?time(_s|_ms|_sec|_seconds)?"
     r"|time|runtime|latency|elapsed|duration|timestamp|.*_seconds|.*_secs|.*_ms|ms_.*|.*_per_frame|.*_per_call"
     r"|.*_time|time_.*", "ignore"),
    (r"num_.*|n_.*|.*_count|count|.*_counts|iterations?|trials|attempts?|stage|.*_size|length|.*_len|seed|"
     r"memory_.*|.*_bytes|.*_mb|complexity|diversity", "ignore"),
    (r"errors?|.*_errors?|error_.*|mse|rmse|mae|.*_mse|.*_rmse|.*_mae|loss|.*_loss|regret|.*_regret|"
     r"violations?|.*_violations?|penalty|.*_penalty|overlap|.*_overlap|distance_to_.*|gap|.*_gap|.*_residual",
     "lower"),
)
_KNOWN = [(re.compile(p), d) for p, d in KNOWN]


def direction(name: str, overrides: Mapping[str, str] | None = None, feature_dims: tuple[str, ...] = ()) -> str:
    """higher | lower | ignore for one metric name: the problem's override, then feature dimensions (ignored,
    as OpenEvolve leaves them out of its fitness), then KNOWN, else higher."""
    if overrides and name in overrides:
        return overrides[name]
    if name in feature_dims:
        return "ignore"
    low = name.lower()
    for pat, d in _KNOWN:
        if pat.fullmatch(low):
            return d
    return "higher"


def finite_number(v: Any) -> float | None:
    """A metric's value as a finite float; booleans (flags, not scores) and non-numbers are None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _mean_numeric(metrics: Mapping[str, Any]) -> float:
    """OpenEvolve's safe_numeric_average: mean of non-bool numbers that are not NaN (inf counts)."""
    vals = []
    for v in metrics.values():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            try:
                f = float(v)
            except OverflowError:
                continue
            if f == f:
                vals.append(f)
    return sum(vals) / len(vals) if vals else 0.0


def fitness(metrics: Mapping[str, Any], feature_dims: tuple[str, ...] = ()) -> float:
    """OpenEvolve's utils.metrics_utils.get_fitness_score, value for value."""
    if not metrics:
        return 0.0
    if "combined_score" in metrics:
        try:
            return float(metrics["combined_score"])
        except (ValueError, TypeError, OverflowError):
            pass
    kept = {k: v for k, v in metrics.items() if k not in feature_dims and isinstance(v, (int, float))
            and not isinstance(v, bool) and float(v) == float(v)}
    return _mean_numeric(kept) if kept else _mean_numeric(metrics)


def score_columns(metrics: Mapping[str, Any], overrides: Mapping[str, str] | None = None,
                  feature_dims: tuple[str, ...] = ()) -> tuple[list[str], list[float]]:
    """(names, values) of the score columns, sorted by name so two programs' columns line up; lower-is-better
    metrics negated. ``combined_score`` is a column only when nothing else is (it summarises the others)."""
    cols = {}
    for k, v in metrics.items():
        f = finite_number(v)
        if f is None:
            continue
        d = direction(k, overrides, feature_dims)
        if d != "ignore":
            cols[k] = f if d == "higher" else -f
    if len(cols) > 1:
        cols.pop("combined_score", None)
    names = sorted(cols)
    return names, [cols[k] for k in names]


def check_directions(table: Any, where, field_: str = "metrics") -> dict[str, str]:
    """A ``[metrics]`` table: metric name → higher | lower | ignore."""
    if not isinstance(table, dict):
        raise ProblemError(where, field_, "must be a table of metric name = \"higher\" | \"lower\" | \"ignore\"")
    for k, v in table.items():
        if v not in DIRECTIONS:
            raise ProblemError(where, f"{field_}.{k}", f"{v!r}: expected one of {', '.join(DIRECTIONS)}")
    return dict(table)


def align(names: list[str], values: list[float], columns: list[str], fill: float = 0.0) -> list[float]:
    """values (keyed by names) laid out on columns; a column the program did not report gets fill."""
    got = dict(zip(names, values))
    return [float(got.get(c, fill)) for c in columns]


def stack_named(rows: list[tuple[list[str], list[float]]]) -> tuple[list[str], list[list[float]]]:
    """Several programs' score columns on one sorted set of columns (the union). A column a program lacks gets
    the worst value any program has there, so a missing metric never wins a lexicase case."""
    columns = sorted({n for names, _ in rows for n in names})
    worst = {}
    for names, values in rows:
        for n, v in zip(names, values):
            worst[n] = min(worst.get(n, v), v)
    return columns, [[float(dict(zip(names, values)).get(c, worst.get(c, 0.0))) for c in columns]
                     for names, values in rows]
