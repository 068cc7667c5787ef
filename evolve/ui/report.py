"""`vevo report`: static HTML pages comparing runs, built from their archives alone.

The pages are `vevo ui`'s own, frozen (evolve/ui/freeze.py): the same page functions over the same read-only
stores, written as files with relative links, no script and no server, so they work offline. Gathering (reads
of the archives, no HTML) is kept apart from `render`, so the numbers can be checked without parsing a page and
the PNG figures for papers can be drawn. Every untrusted string is escaped by the UI's `e()`.
"""
from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.curves import Axis, plot
from ..analysis.portfolio_stats import member_stats
from ..archive import Archive, ProgramRow, TrainingRow, archive_path
from ..config.legacy import upgrade
from ..search.campaign import summarize
from . import pages
from .components import e as _e
from .freeze import freeze
from .info import WELL_KNOWN_KEYS, ProblemInfo, is_number as _is_number, problem_info, training_keys
from .server import App

__all__ = ["WELL_KNOWN_KEYS", "ProblemInfo", "ReportData", "RunData", "Solve", "gather", "gather_run",
           "overall_best", "plot_training", "problem_info", "render", "training_keys"]

@dataclass(frozen=True)
class Solve:
    """The first program that solved a problem in one run."""

    iteration: int
    policy_version: int
    program_id: int
    seed: bool  # the problem's seed program (no completion proposed it)


@dataclass(frozen=True)
class RunData:
    label: str
    name: str  # the run's column header: the label, numbered when a label has several runs
    path: Path
    problems: list[str]  # listed in the run's meta, then any other problem it has programs of
    summary: dict[str, Any]
    config: dict[str, Any]
    solved: dict[str, Solve]
    best: dict[str, ProgramRow]  # highest scalar; the earliest on ties
    training: list[TrainingRow]
    proposers: dict[str, dict[str, Any]] = field(default_factory=dict)  # portfolio_stats.member_stats


@dataclass(frozen=True)
class ReportData:
    runs: dict[str, list[str]]  # label -> archive paths, as curves.plot takes them
    run_data: list[RunData]
    problems: list[str]
    info: dict[str, ProblemInfo]
    training_keys: list[str]


# ---------------------------------------------------------------------------------------------- gathering

def gather_run(label: str, name: str, run_dir: str | Path) -> RunData:
    """Everything the page shows about one run, read per problem so a large archive never sits in memory.
    ValueError (naming the run) when its archive.db is not a vevo archive."""
    run_dir = Path(run_dir)
    try:
        return _read_run(label, name, run_dir)
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{archive_path(run_dir)}: {e}") from e


def _read_run(label: str, name: str, run_dir: Path) -> RunData:
    with Archive(archive_path(run_dir), readonly=True) as a:
        listed = [str(p) for p in json.loads(a.get_meta("problems") or "[]")]
        config = upgrade(json.loads(a.get_meta("config") or "{}"))  # archives of earlier versions: older keys
        seen = {r.problem for r in a.progress_rows()}
        problems = listed + sorted(seen - set(listed))
        solved: dict[str, Solve] = {}
        best: dict[str, ProgramRow] = {}
        for pid in problems:
            for prog in a.programs(problem=pid):  # id order = evaluation order, iterations non-decreasing
                if prog.solved and pid not in solved:
                    solved[pid] = Solve(prog.iteration, prog.policy_version, prog.id, prog.completion_id is None)
                if pid not in best or prog.scalar > best[pid].scalar:
                    best[pid] = prog
        summary = summarize(a)
        training = a.training_rows()
        proposers = member_stats(a)
    return RunData(label=label, name=name, path=run_dir, problems=problems, summary=summary, config=config,
                   solved=solved, best=best, training=training, proposers=proposers)


def gather(runs: dict[str, list[str | Path]]) -> ReportData:
    """runs: label -> run directories (the runs of one label are seeds, averaged in the curves)."""
    run_data = []
    for label, dirs in runs.items():
        for i, d in enumerate(dirs):
            name = label if len(dirs) == 1 else f"{label} #{i + 1}"
            run_data.append(gather_run(label, name, d))
    problems = list(dict.fromkeys(p for r in run_data for p in r.problems))  # first-seen order
    keys = training_keys([row for r in run_data for row in r.training])
    return ReportData(runs={k: [str(archive_path(d)) for d in v] for k, v in runs.items()},
                      run_data=run_data, problems=problems, info=problem_info([r.config for r in run_data]),
                      training_keys=keys)


def overall_best(data: ReportData, pid: str) -> tuple[RunData, ProgramRow] | None:
    """The best program of a problem over all runs: highest scalar, then solved, then the earlier run."""
    best: tuple[RunData, ProgramRow] | None = None
    for r in data.run_data:
        p = r.best.get(pid)
        if p is not None and (best is None or (p.scalar, p.solved) > (best[1].scalar, best[1].solved)):
            best = (r, p)
    return best


# ---------------------------------------------------------------------------------------------- figures

def plot_training(data: ReportData, out_dir: Path) -> list[tuple[str, str]]:
    """One small PNG per training key, a line per run that logged it; returns (key, file name) pairs."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    trained = [r for r in data.run_data if r.training]
    files = []
    for i, key in enumerate(data.training_keys):
        fig = Figure(figsize=(3.6, 2.5), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        for r in trained:
            pts = [(row.step, row.data[key]) for row in r.training if _is_number(row.data.get(key))]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=r.name)
        fig.suptitle(key, fontsize=9)  # above the y-axis multiplier, which a title would collide with
        ax.set_xlabel("iteration", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(ScalarFormatter(useOffset=False))  # 0.99998, not 1e-5 + 9.9998e-1
        ax.yaxis.get_offset_text().set_fontsize(7)
        ax.grid(alpha=0.3)
        if len(trained) > 1:
            ax.legend(fontsize=7, loc="best")
        name = f"train-{i:02d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}.png"
        fig.savefig(out_dir / name)
        files.append((key, name))
    return files


# ---------------------------------------------------------------------------------------------- pages

def _proposers_table(data: ReportData) -> str:
    """Per run and portfolio member: iterations, problems first solved, improvements per 100 proposals, cost."""
    rows = ["<table id='proposers'><tr><th>run</th><th>proposer</th><th>iterations</th><th>solved first</th>"
            "<th>improvements / 100 proposals</th><th>tokens</th><th>generation s</th></tr>"]
    for r in data.run_data:
        for name, m in r.proposers.items():
            rows.append(f"<tr><td>{_e(r.name)}</td><td>{_e(name)}</td><td>{m['iterations']}</td>"
                        f"<td>{m['solved_first']}</td><td>{m['improvement_rate']:.2f}</td><td>{m['tokens']}</td>"
                        f"<td>{m['gen_seconds']:.1f}</td></tr>")
    return "\n".join(rows) + "</table>"


def stop_line(r: RunData) -> str:
    """What stopped one run (evolve/search/budget.py) and its totals against the budgets set, in one line."""
    sp, lim = r.summary.get("spent") or {}, r.summary.get("budgets") or {}
    why = r.summary.get("stopped_by")
    what = {"iterations": "its iterations", "solved": "every problem solved", None: "nothing yet (running or "
            "interrupted)"}.get(why, why)
    return (f"{r.name}: stopped by {what}; {r.summary.get('iterations', 0)} iterations, "
            f"{sp.get('evaluations', 0)} evaluations, {sp.get('tokens', 0)} tokens, {sp.get('seconds', 0.0):.1f}s"
            + (" (budgets: " + ", ".join(f"{k} {v:g}" for k, v in lim.items()) + ")" if lim else ""))


def _stops_table(data: ReportData) -> str:
    """Per run: what stopped it, and its totals (equal-compute comparisons read this first)."""
    rows = ["<table id='stops'><tr><th>run</th><th>stopped by</th><th>iterations</th><th>evaluations</th>"
            "<th>tokens</th><th>wall s</th><th>budgets</th></tr>"]
    for r in data.run_data:
        sp, lim = r.summary.get("spent") or {}, r.summary.get("budgets") or {}
        rows.append(f"<tr><td>{_e(r.name)}</td><td>{_e(r.summary.get('stopped_by') or '-')}</td>"
                    f"<td>{r.summary.get('iterations', 0)}</td><td>{sp.get('evaluations', 0)}</td>"
                    f"<td>{sp.get('tokens', 0)}</td><td>{sp.get('seconds', 0.0):.1f}</td>"
                    f"<td>{_e(', '.join(f'{k} {v:g}' for k, v in lim.items()) or '-')}</td></tr>")
    return "\n".join(rows) + "</table>"


def render(data: ReportData, out_dir: str | Path, x: Axis = "iterations", extra_html: str = "") -> Path:
    """Write the UI's pages as static files (evolve/ui/freeze.py): index.html is its comparison page, then the
    curves, each run's problems, problem pages, best and first-solving programs, and training. Next to them
    the matplotlib PNGs for papers: curves.png (band: 95% CI of the mean) and one train-*.png per training key.
    `extra_html` (already escaped: the differences between arms) follows the curves on index.html."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot(data.runs, x, out / "curves.png", band="ci95")
    figures = plot_training(data, out)
    runs = {label: [Path(db).parent for db in dbs] for label, dbs in data.runs.items()}
    title = f"vevo report: {', '.join(r.name for r in data.run_data)}"
    sections = extra_html  # report-only sections (tables that need whole archives) go after the curves
    sections += ("<h2>Stops</h2><p class='note'>What ended each run: its iterations, every problem solved, or a "
                 "budget (search.budget: evaluations, wall seconds, generated tokens; the first reached).</p>"
                 + _stops_table(data))
    if any(r.proposers for r in data.run_data):
        sections += ("<h2>Proposers</h2><p class='note'>Per portfolio member (a run with one proposer has one): an "
                     "improvement is a program that beats max(parent, seed) or passes a test its parent fails; a "
                     "proposal is one answer asked for.</p>" + _proposers_table(data))

    def index(app: App) -> str:
        return pages.compare(list(app.stores.values()), app.groups, x, app.info, title=title, extra_html=sections,
                             curve_figure="curves.png", training_figures=figures)

    freeze(runs, out, x, index=index, note="static report: the pages of `vevo ui`, written once")
    return out / "index.html"
