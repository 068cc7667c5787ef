"""Search curves from archive files alone (contract 6: any run can be re-plotted later).

pass@t: problems solved by iteration (or evaluation) t; a run that solved (and so retired) every problem
before its iteration budget keeps its final values to the budget, so averaging seeds never drops a finished run. best@t: mean over the run's problems of the best scalar
found so far; a problem listed in meta "problems" counts 0 until it has a program. Curves are step functions:
the value at x is the value after the last point at or before x, and 0 before the first point.
"""
from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np

from evolve.archive import Archive, ProgressRow
from evolve.config.legacy import upgrade
from evolve.stats import mean_ci95, t95

Axis = Literal["iterations", "evaluations"]
CSV_COLUMNS = ("label", "x", "runs", "solved_mean", "solved_min", "solved_max", "solved_std",
               "best_mean", "best_min", "best_max", "best_std")


def _check_axis(x: str) -> None:
    if x not in ("iterations", "evaluations"):
        raise ValueError(f"x must be 'iterations' or 'evaluations', got {x!r}")


class CurveFold:
    """The one fold behind pass@t and best@t, advanced one program at a time in evaluation order: `run_curves`
    folds a whole archive, `vevo ui` (evolve/ui/store.py) only the programs committed since its last look.
    A problem in `problems` counts 0 until it has a program."""

    def __init__(self, problems: Any = ()):
        self.problems: set[str] = set(problems)
        self.best: dict[str, float] = {}
        self.solved: set[str] = set()
        self.total_best = 0.0

    def expect(self, problems: Any) -> None:
        """Count these problems from now on (before their programs are added, so every mean has one divisor)."""
        self.problems.update(problems)

    def add(self, problem: str, scalar: float, solved: bool) -> None:
        self.problems.add(problem)
        old = self.best.get(problem)
        if old is None or scalar > old:
            self.total_best += scalar - (old if old is not None else 0.0)
            self.best[problem] = scalar
        if solved:
            self.solved.add(problem)

    @property
    def n_solved(self) -> int:
        return len(self.solved)

    @property
    def mean_best(self) -> float:
        return self.total_best / max(len(self.problems), 1)


def _run_curves(rows: list[ProgressRow], listed: list[str], x: Axis,
                iterations: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pure core: (xs, solved count, mean best) from progress rows in evaluation order."""
    fold = CurveFold(set(listed) | {r.problem for r in rows})
    n_solved = np.zeros(len(rows))
    mean_best = np.zeros(len(rows))
    for i, r in enumerate(rows):
        fold.add(r.problem, r.scalar, r.solved)
        n_solved[i] = fold.n_solved
        mean_best[i] = fold.mean_best
    if x == "evaluations":
        return np.array([r.eval_index for r in rows], dtype=float), n_solved, mean_best
    # iterations increase with evaluation order (the archive enforces it), so the value after an iteration is
    # the value after its last program; iterations without programs (all duplicates) carry the value forward
    xs = np.array(sorted(set(iterations) | {r.iteration for r in rows}), dtype=float)
    its = np.array([r.iteration for r in rows], dtype=float)
    return xs, step_at(its, n_solved, xs, past_end=None), step_at(its, mean_best, xs, past_end=None)


def run_curves(archive_path: str | Path | tuple[str | Path, str],
               x: Axis = "iterations") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xs, pass@x, best@x) of one archive, read in one pass. ``(path, member)``: only the programs that
    portfolio member proposed (and the seeds), on the campaign's own iterations (`split_by_proposer`)."""
    _check_axis(x)
    path, member = archive_path if isinstance(archive_path, tuple) else (archive_path, None)
    with Archive(path, readonly=True) as a:
        rows = a.progress_rows()
        listed = json.loads(a.get_meta("problems") or "[]")
        iterations = [m.iteration for m in a.metrics_rows()]
        if member is not None:
            own = {r.iteration for r in a.portfolio_rows() if r.member == member} | {0}
            rows = [r for r in rows if r.iteration in own]
            iterations = [i for i in iterations if i in own]
        search = upgrade(json.loads(a.get_meta("config") or "{}")).get("search", {})
    budget = search.get("iterations")
    if isinstance(budget, int) and search.get("retire_solved", True) and listed and \
            {str(p) for p in listed} <= {r.problem for r in rows if r.solved}:
        iterations.append(budget)  # every problem solved and retired: the run is over, its curve stays flat
    return _run_curves(rows, [str(p) for p in listed], x, iterations)


def split_by_proposer(runs: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Each label's runs as one label per portfolio member, ``LABEL/MEMBER``: [(archive, member), ...]."""
    out: dict[str, list[Any]] = {}
    for label, paths in runs.items():
        for p in paths:
            with Archive(p, readonly=True) as a:
                members = list(dict.fromkeys(r.member for r in a.portfolio_rows()))
            for m in members:
                out.setdefault(f"{label}/{m}", []).append((p, m))
    return out


def pass_at(archive_path: str | Path, x: Axis = "iterations") -> tuple[np.ndarray, np.ndarray]:
    """xs and the number of problems solved by each x."""
    xs, solved, _ = run_curves(archive_path, x)
    return xs, solved


def best_at(archive_path: str | Path, x: Axis = "iterations") -> tuple[np.ndarray, np.ndarray]:
    """xs and the mean over the run's problems of the best scalar found by each x."""
    xs, _, best = run_curves(archive_path, x)
    return xs, best


def step_at(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray, past_end: float | None = np.nan) -> np.ndarray:
    """Pure: the value of the step function (xs sorted, ys) at each grid point: 0 before the first x, the last value
    carried forward after the last x, or `past_end` there unless it is None."""
    if len(xs) == 0:
        return np.zeros(len(grid)) if past_end is None else np.full(len(grid), past_end)
    idx = np.searchsorted(xs, grid, side="right") - 1
    out = np.where(idx >= 0, ys[np.maximum(idx, 0)], 0.0)
    return out if past_end is None else np.where(grid > xs[-1], past_end, out)


def on_clock(xs: np.ndarray, ys: np.ndarray, clock_its: np.ndarray,
             clock_secs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pure: a curve over iterations put on a run's clock (`compute.wall_clock`): (seconds, ys), the value after
    iteration i holding from the second i was committed. Iteration 0 (the seeds) sits at 0 s; an iteration
    without a recorded clock is left out."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    t_of = dict(zip(np.asarray(clock_its, dtype=float).tolist(), np.asarray(clock_secs, dtype=float).tolist()))
    keep = [i for i, x in enumerate(xs.tolist()) if x in t_of or x == 0]
    return np.array([0.0 if xs[i] == 0 else t_of[xs[i]] for i in keep]), ys[keep]


def curve_table(runs: dict[str, list[str | Path]], x: Axis = "iterations") -> list[dict[str, Any]]:
    """Rows (label, x, runs, solved_*, best_*) on one x grid shared by every label (the union of all runs'
    xs). Runs under one label are averaged, with min/max/std across them; a run counts only up to its own
    last x, and `runs` says how many runs a row averages. Rows no run of a label reaches are left out."""
    _check_axis(x)
    curves = {label: [run_curves(p, x) for p in paths] for label, paths in runs.items()}
    all_xs = [c[0] for cs in curves.values() for c in cs]
    grid = np.unique(np.concatenate(all_xs)) if all_xs else np.array([])
    rows: list[dict[str, Any]] = []
    for label, cs in curves.items():
        if not cs:
            continue
        solved = np.array([step_at(c[0], c[1], grid) for c in cs])
        best = np.array([step_at(c[0], c[2], grid) for c in cs])
        present = (~np.isnan(solved)).sum(axis=0)
        for j, gx in enumerate(grid):
            if present[j] == 0:
                continue
            s, b = solved[:, j][~np.isnan(solved[:, j])], best[:, j][~np.isnan(best[:, j])]
            rows.append({"label": label, "x": int(gx) if float(gx).is_integer() else float(gx),
                         "runs": int(present[j]),
                         "solved_mean": float(s.mean()), "solved_min": float(s.min()),
                         "solved_max": float(s.max()), "solved_std": float(s.std()),
                         "best_mean": float(b.mean()), "best_min": float(b.min()),
                         "best_max": float(b.max()), "best_std": float(b.std())})
    return rows


def ci95(values: Any) -> tuple[float, float]:
    """(mean, half-width) of a 95% t confidence interval for the mean of independent runs (half-width 0 for
    fewer than two runs)."""
    mean, half = mean_ci95(np.asarray(values, dtype=float).ravel())
    return (0.0 if math.isnan(mean) else mean), (0.0 if math.isnan(half) else half)


def _ci_half(row: dict[str, Any], key: str) -> float:
    """95% half-width from a curve_table row (its std is the population std over `runs` runs)."""
    n = row["runs"]
    if n < 2:
        return 0.0
    return t95(n - 1) * row[f"{key}_std"] * np.sqrt(n / (n - 1)) / np.sqrt(n)


def plot(runs: dict[str, list[str | Path]], x: Axis, out_path: str | Path, band: str = "minmax") -> Path:
    """Two panels (problems solved vs x, mean best score vs x), one line per label with a band when a label has
    several runs: min–max over runs, or ``band="ci95"``, a 95% t interval of the mean. PNG, SVG or PDF by the
    file's extension. Uses the Agg canvas, no pyplot state."""
    if band not in ("minmax", "ci95"):
        raise ValueError(f"band must be 'minmax' or 'ci95', got {band!r}")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    out = Path(out_path)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"{out}: plot format must be .png, .svg or .pdf")
    rows = curve_table(runs, x)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    panels = fig.subplots(1, 2)
    for ax, key, title in ((panels[0], "solved", "problems solved"), (panels[1], "best", "mean best score")):
        for label in runs:
            rs = [r for r in rows if r["label"] == label]
            if not rs:
                continue
            xs = [r["x"] for r in rs]
            line, = ax.step(xs, [r[f"{key}_mean"] for r in rs], where="post", label=label)
            if max(r["runs"] for r in rs) > 1:
                if band == "ci95":
                    lo = [r[f"{key}_mean"] - _ci_half(r, key) for r in rs]
                    hi = [r[f"{key}_mean"] + _ci_half(r, key) for r in rs]
                else:
                    lo, hi = [r[f"{key}_min"] for r in rs], [r[f"{key}_max"] for r in rs]
                ax.fill_between(xs, lo, hi, step="post", alpha=0.2, color=line.get_color(), linewidth=0)
        ax.set_xlabel(x)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations and evaluations are counts
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    panels[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    lo, hi = panels[0].get_ylim()  # a flat curve (nothing solved yet) spans +-0.05: integer ticks need a range
    panels[0].set_ylim(min(lo, -0.05), max(hi, 1.05))
    panels[0].legend(loc="best")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def write_csv(rows: list[dict[str, Any]], path_or_stdout: str | Path | IO[str] | None = None) -> None:
    """Write curve_table rows as CSV to a path, an open text stream, or stdout (None or "-")."""
    if path_or_stdout is None or str(path_or_stdout) == "-":
        _write(rows, sys.stdout)
    elif hasattr(path_or_stdout, "write"):
        _write(rows, path_or_stdout)  # type: ignore[arg-type]
    else:
        with open(path_or_stdout, "w", newline="", encoding="utf-8") as f:  # type: ignore[arg-type]
            _write(rows, f)


def _write(rows: list[dict[str, Any]], f: IO[str]) -> None:
    w = csv.DictWriter(f, fieldnames=list(CSV_COLUMNS), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
