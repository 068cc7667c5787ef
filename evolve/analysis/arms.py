"""Arms of a comparison: a run folder, or a seeds folder (``vevo run --seeds 0-4 --out D`` writes ``D/seed-N/``)
taken as one arm of several runs; and the difference between two arms with its 95% confidence interval.

Metrics per run (from its archive alone, `evolve.analysis.curves.run_curves`):

* ``solved``: problems solved at the end of the run;
* ``solved_auc``: the mean over iterations t = 0..T of problems solved by t (the area under solved@t divided by
  T + 1, T the run's iteration budget), which rewards solving early;
* ``best``: the mean over problems of the best score found.

The difference of arm B minus arm A is paired by seed when both arms ran the same seeds (two or more): the mean
of the per-seed differences with a Student t interval on them; otherwise Welch's unequal-variance t interval.
"""
from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from problems.errors import VevoError

from ..stats import sign_flip_p, t95
from .verdict import noise_words

SEED_DIR = re.compile(r"seed-(\d+)")
METRICS = {"solved": "problems solved at the end", "solved_auc": "mean problems solved over iterations 0..T",
           "best": "mean best score at the end"}
MAX_SEEDS = 1000


class ArmError(VevoError):
    """A folder that is neither a run nor a seeds folder, or a --seeds list that cannot be read."""


def parse_seeds(text: str) -> list[int]:
    """``0-4`` (inclusive), ``1,3,5`` or a mix (``0-2,7``) as a sorted list of distinct seeds."""
    seeds: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if b < a:
                raise ArmError(f"--seeds {text!r}: range {part!r} runs backwards")
            if b - a >= MAX_SEEDS:
                raise ArmError(f"--seeds {text!r}: more than {MAX_SEEDS} seeds")
            seeds.update(range(a, b + 1))
        elif part.isdigit():
            seeds.add(int(part))
        else:
            raise ArmError(f"--seeds {text!r}: expected A-B or A,B,C (non-negative integers)")
    if len(seeds) > MAX_SEEDS:
        raise ArmError(f"--seeds {text!r}: more than {MAX_SEEDS} seeds")
    return sorted(seeds)


def seed_dir(out: str | Path, seed: int) -> Path:
    return Path(out) / f"seed-{seed}"


def seed_runs(folder: str | Path) -> list[Path]:
    """The ``seed-N`` run folders (those holding an archive) of a seeds folder, by N."""
    from ..archive import archive_path

    folder = Path(folder)
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            m = SEED_DIR.fullmatch(child.name)
            if m and archive_path(child).is_file():
                found.append((int(m.group(1)), child))
    return [p for _, p in sorted(found)]


def expand(path: str | Path) -> list[Path]:
    """A run folder as itself; a seeds folder as its seed runs; anything else is an ArmError."""
    from ..archive import ARCHIVE_NAME, archive_path

    path = Path(path)
    if archive_path(path).is_file():
        return [path]
    runs = seed_runs(path)
    if not runs:
        raise ArmError(f"{path}: not a run directory (no {ARCHIVE_NAME}) nor a seeds folder (no seed-N/{ARCHIVE_NAME})")
    return runs


def run_seed(run_dir: str | Path) -> int | None:
    """The seed a run was started with (its archive's config), None if it cannot be read."""
    from ..archive import Archive, archive_path

    try:
        with Archive(archive_path(run_dir), readonly=True) as a:
            return int(json.loads(a.get_meta("config") or "{}").get("seed"))
    except (TypeError, ValueError, OSError):
        return None


# ------------------------------------------------------------------------------------------------ metrics

def curve_metrics(xs: np.ndarray, solved: np.ndarray, best: np.ndarray, horizon: int) -> dict[str, float]:
    """Pure: the run's metrics from its curves (step functions over iterations, as `run_curves` gives them)
    and its iteration budget T (the last value carries forward to T)."""
    xs, solved, best = (np.asarray(a, dtype=float) for a in (xs, solved, best))
    if xs.size == 0:
        return {"solved": 0.0, "solved_auc": 0.0, "best": 0.0}
    horizon = max(int(horizon), int(xs[-1]))
    grid = np.arange(horizon + 1)
    idx = np.searchsorted(xs, grid, side="right") - 1
    at = np.where(idx >= 0, solved[np.maximum(idx, 0)], 0.0)
    return {"solved": float(solved[-1]), "solved_auc": float(at.mean()), "best": float(best[-1])}


def run_metrics(run_dir: str | Path) -> dict[str, float]:
    from ..archive import Archive, archive_path
    from ..config.legacy import upgrade
    from .curves import run_curves

    db = archive_path(run_dir)
    with Archive(db, readonly=True) as a:
        budget = upgrade(json.loads(a.get_meta("config") or "{}")).get("search", {}).get("iterations") or 0
    xs, solved, best = run_curves(db, "iterations")
    return curve_metrics(xs, solved, best, int(budget))


# ------------------------------------------------------------------------------------------------ statistics

@dataclass(frozen=True)
class Difference:
    """B minus A on one metric: the arms' means, the difference, its 95% CI (nan when it cannot be estimated:
    one run in an arm) and how it was computed."""

    metric: str
    a: str
    b: str
    mean_a: float
    mean_b: float
    diff: float
    lo: float
    hi: float
    n_a: int
    n_b: int
    method: str  # "paired by seed (n pairs)", "Welch (unpaired)", or why there is no interval
    p_sign_flip: float = math.nan  # paired: the sign-flip permutation test's two-sided p (evolve/stats.py)

    @property
    def words(self) -> str:
        """How it reads: "arm higher", "arm lower", or within noise (the interval includes 0), or no interval."""
        return noise_words(self.diff, self.lo, self.hi, up=f"{self.b} higher", down=f"{self.b} lower")

    def line(self) -> str:
        ci = f"95% CI [{self.lo:+.3g}, {self.hi:+.3g}]" if math.isfinite(self.lo) else "no CI"
        if math.isfinite(self.p_sign_flip):
            ci += f", sign-flip p {self.p_sign_flip:.3g}"
        return (f"{self.metric}: {self.b} {self.mean_b:.3g} vs {self.a} {self.mean_a:.3g} (n={self.n_b}, "
                f"{self.n_a}): difference {self.diff:+.3g}, {ci}, {self.method}: {self.words}")


def difference(a: dict[Any, float], b: dict[Any, float], metric: str = "", names: tuple[str, str] = ("a", "b")
               ) -> Difference:
    """Pure: mean(b) - mean(a) with a 95% t interval. `a`, `b`: seed -> value (a run without a known seed can be
    keyed by anything unique). Paired when the two arms have the same keys, at least two."""
    va, vb = np.array(list(a.values()), float), np.array(list(b.values()), float)
    ma, mb = float(va.mean()) if va.size else math.nan, float(vb.mean()) if vb.size else math.nan
    diff = mb - ma
    lo = hi = p_perm = math.nan
    if set(a) == set(b) and len(a) >= 2:
        keys = sorted(a, key=str)
        d = np.array([b[k] - a[k] for k in keys], float)
        sd = float(d.std(ddof=1))
        half = t95(d.size - 1) * (sd if sd > 1e-12 * max(1.0, float(np.abs(d).max())) else 0.0) / math.sqrt(d.size)
        lo, hi, method = diff - half, diff + half, f"paired by seed ({d.size} pairs)"
        p_perm = sign_flip_p(d)
    elif va.size >= 2 and vb.size >= 2:
        sa, sb = float(va.var(ddof=1)) / va.size, float(vb.var(ddof=1)) / vb.size
        se = math.sqrt(sa + sb)
        if se == 0:
            df = float(va.size + vb.size - 2)
        else:
            df = (sa + sb) ** 2 / (sa**2 / (va.size - 1) + sb**2 / (vb.size - 1))
        half = t95(df) * se
        lo, hi, method = diff - half, diff + half, "Welch (unpaired: the seeds differ)"
    else:
        method = "one run in an arm: run more seeds for an interval"
    return Difference(metric, names[0], names[1], ma, mb, diff, lo, hi, int(va.size), int(vb.size), method, p_perm)


def compare(arms: dict[str, list[str | Path]], metrics: tuple[str, ...] = tuple(METRICS)) -> list[Difference]:
    """Every arm after the first against the first (the baseline), on each metric."""
    labels = list(arms)
    if len(labels) < 2:
        return []
    values: dict[str, dict[Any, dict[str, float]]] = {}
    for label in labels:
        per: dict[Any, dict[str, float]] = {}
        for i, run in enumerate(arms[label]):
            seed = run_seed(run)
            key = seed if seed is not None and seed not in per else f"run-{i}"
            per[key] = run_metrics(run)
        values[label] = per
    base = labels[0]
    out = []
    for label in labels[1:]:
        for m in metrics:
            out.append(difference({k: v[m] for k, v in values[base].items()},
                                  {k: v[m] for k, v in values[label].items()}, m, (base, label)))
    return out


def comparison_html(diffs: list[Difference]) -> str:
    """The differences as an HTML table (labels escaped), or '' when there is nothing to compare."""
    if not diffs:
        return ""
    e = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    f = lambda v: f"{v:+.3g}" if math.isfinite(v) else "–"  # noqa: E731
    rows = ["<table id='differences'><tr><th>metric</th><th>arm</th><th>baseline</th><th>mean (arm)</th>"
            "<th>mean (baseline)</th><th>difference</th><th>95% CI</th><th>reads</th><th>runs</th><th>method</th></tr>"]
    for d in diffs:
        ci = f"[{f(d.lo)}, {f(d.hi)}]" if math.isfinite(d.lo) else "–"
        rows.append(f"<tr><td title='{e(METRICS.get(d.metric, ''))}'>{e(d.metric)}</td><td>{e(d.b)}</td>"
                    f"<td>{e(d.a)}</td><td>{d.mean_b:.3g}</td><td>{d.mean_a:.3g}</td><td>{f(d.diff)}</td>"
                    f"<td>{ci}</td><td class='reads'>{e(d.words)}</td><td>{d.n_b} vs {d.n_a}</td>"
                    f"<td>{e(d.method)}</td></tr>")
    legend = "; ".join(f"<b>{e(k)}</b>: {e(v)}" for k, v in METRICS.items())
    return ("<h2>Differences between arms</h2>\n<p class='note'>Each arm minus the first, with a 95% t interval "
            f"of the difference of means. {legend}.</p>\n" + "\n".join(rows) + "</table>")
