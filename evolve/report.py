"""`vevo report`: one static HTML page comparing runs, built from their archives alone (contract 6).

Gathering (reads of the archives, no HTML) is kept apart from `render`, so the numbers can be checked without
parsing a page. The page works offline and without JavaScript: the figures are PNG files next to index.html
and program code sits in <details>. Its frame, style, escaping and per-test pieces are `vevo ui`'s
(evolve/ui/components.py), so the two show a program the same way. Program code, error messages, problem
titles and test labels are untrusted text and are HTML-escaped wherever they appear.
"""
from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .archive import Archive, ProgramRow, TrainingRow
from .campaign import summarize
from .config import nest
from .curves import Axis, plot
from .ui.components import by as _by, e as _e, fmt as _fmt, frame, test_strip, test_table
from .portfolio_stats import member_stats

# Training keys plotted first, in this order; every other numeric key follows alphabetically.
WELL_KNOWN_KEYS = ("mean_set_reward", "probe_own", "probe_heldout", "reward_diversity", "loss", "pg_loss", "kl",
                   "mean_abs_dlogp", "clip_frac", "greedy_changed", "grad_norm", "mean_ratio")
# The x-axis of the training plots, not a diagnostic.
_AXIS_KEYS = frozenset({"iteration", "step"})


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
class ProblemInfo:
    """What the registry knows about a problem id; empty when it can no longer be found."""

    title: str = ""
    test_labels: tuple[str, ...] = ()


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
        raise ValueError(f"{run_dir / 'archive.db'}: {e}") from e


def _read_run(label: str, name: str, run_dir: Path) -> RunData:
    with Archive(run_dir / "archive.db", readonly=True) as a:
        listed = [str(p) for p in json.loads(a.get_meta("problems") or "[]")]
        config = nest(json.loads(a.get_meta("config") or "{}"))  # archives of earlier versions hold flat keys
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


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def training_keys(rows: Sequence[TrainingRow]) -> list[str]:
    """Numeric diagnostics present in any step: the well-known ones first, in WELL_KNOWN_KEYS order, then the
    rest alphabetically. Text (algo, skip reasons), booleans and the x-axis keys are left out."""
    present = {k for r in rows for k, v in r.data.items()
               if _is_number(v) and k not in _AXIS_KEYS and not k.endswith("_before")}  # before: the probes' v0
    known = [k for k in WELL_KNOWN_KEYS if k in present]
    return known + sorted(present - set(known))


def problem_info(configs: Sequence[dict[str, Any]]) -> dict[str, ProblemInfo]:
    """Titles and test labels from the registry the runs were configured with (their problem folders and
    suites). Best effort: a folder that moved or a suite that is gone only loses the titles, not the report."""
    from problems.model import ProblemError
    from problems.registry import discover

    dirs = sorted({str(d) for c in configs for d in c.get("problems_dir") or [] if Path(d).is_dir()})
    try:
        reg = discover(dirs)
    except (ProblemError, OSError):  # a folder that no longer holds problems
        reg = discover([])
    found = dict(reg.problems)
    for c in configs:
        try:
            for p in reg.select(suite=c.get("suite"), ids=[str(i) for i in c.get("problems") or []]):
                found.setdefault(p.id, p)
        except (ProblemError, KeyError, OSError, ValueError):
            continue
    info = {}
    for pid, p in found.items():
        labels: tuple[str, ...] = ()
        if p.openevolve is None:
            labels = tuple(p.test_label(i) for i in range(p.n_tests))
        info[pid] = ProblemInfo(title=p.title or "", test_labels=labels)
    return info


def gather(runs: dict[str, list[str | Path]]) -> ReportData:
    """runs: label -> run directories (the runs of one label are seeds, averaged in the curves)."""
    run_data = []
    for label, dirs in runs.items():
        for i, d in enumerate(dirs):
            name = label if len(dirs) == 1 else f"{label} #{i + 1}"
            run_data.append(gather_run(label, name, d))
    problems = list(dict.fromkeys(p for r in run_data for p in r.problems))  # first-seen order
    keys = training_keys([row for r in run_data for row in r.training])
    return ReportData(runs={k: [str(Path(d) / "archive.db") for d in v] for k, v in runs.items()},
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


# ---------------------------------------------------------------------------------------------- HTML

def _runs_table(data: ReportData) -> str:
    rows = ["<table id='runs'><tr><th>run</th><th>folder</th><th>training</th><th>iterations</th>"
            "<th>evaluations</th><th>solved</th><th>training steps</th></tr>"]
    for r in data.run_data:
        s = r.summary
        rows.append(f"<tr><td>{_e(r.name)}</td><td class='pid'>{_e(r.path)}</td>"
                    f"<td>{_e(r.config.get('train', {}).get('algo', 'none'))}</td><td>{s['iterations']}</td>"
                    f"<td>{s['evaluations']}</td><td>{s['solved']}/{s['problems']}</td>"
                    f"<td>{len(r.training)}</td></tr>")
    return "\n".join(rows) + "</table>"


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


def _best_cell(data: ReportData, pid: str) -> str:
    found = overall_best(data, pid)
    if found is None:
        return "<td class='unsolved'>no program</td>"
    run, p = found
    labels = data.info.get(pid, ProblemInfo()).test_labels
    err = p.artifacts.get("first_error") or p.artifacts.get("error")
    err_html = f"<p>first error: <code>{_e(err)}</code></p>" if err else ""
    return (f"<td><div>{_e(_fmt(p.scalar))} · {_e(p.status)} · {_e(run.name)}, iteration {p.iteration}, "
            f"{_by(p.completion_id is None, p.policy_version)}</div><div>{test_strip(p.vector, labels)}</div>"
            f"<details><summary>program and per-test results</summary>{err_html}"
            f"{test_table(p.vector, labels)}"
            f"<pre><code>{_e(p.code)}</code></pre></details></td>")


def _problem_table(data: ReportData) -> str:
    head = "".join(f"<th title='{_e(r.path)}'>{_e(r.name)}</th>" for r in data.run_data)
    rows = [f"<table id='problems'><thead><tr><th>problem</th>{head}<th>best program</th></tr></thead><tbody>"]
    for pid in data.problems:
        title = data.info.get(pid, ProblemInfo()).title
        cells = []
        for r in data.run_data:
            s, b = r.solved.get(pid), r.best.get(pid)
            if s is not None:
                cells.append(f"<td class='solved'>solved at iteration {s.iteration}<br>{_by(s.seed, s.policy_version)}"
                             "</td>")
            elif pid not in r.problems:
                cells.append("<td class='unsolved'>not in run</td>")
            else:
                cells.append(f"<td class='unsolved'>best {_e(_fmt(b.scalar)) if b else '–'}</td>")
        title_html = f"<div class='title'>{_e(title)}</div>" if title and title != pid else ""
        rows.append(f"<tr data-problem='{_e(pid)}'><td><span class='pid'>{_e(pid)}</span>{title_html}</td>"
                    f"{''.join(cells)}{_best_cell(data, pid)}</tr>")
    return "\n".join(rows) + "</tbody></table>"


def _training_section(data: ReportData, figures: list[tuple[str, str]]) -> str:
    parts = []
    for r in data.run_data:
        if not r.training:
            parts.append(f"<p class='note'>{_e(r.name)}: no training (train: {_e(r.config.get('train', {}).get('algo', 'none'))})"
                         "</p>")
        skipped = [row for row in r.training if "skipped" in row.data]
        if skipped:
            parts.append(f"<p class='note'>{_e(r.name)}: {len(skipped)} steps skipped, last at iteration "
                         f"{skipped[-1].step}: {_e(skipped[-1].data['skipped'])}</p>")
    if figures:
        parts.append("<div class='grid'>" + "".join(f"<img src='{_e(f)}' alt='{_e(k)}'>"
                                                   for k, f in figures) + "</div>")
    elif any(r.training for r in data.run_data):
        parts.append("<p class='note'>training steps logged no numeric diagnostics</p>")
    return "\n".join(parts)


def render(data: ReportData, out_dir: str | Path, x: Axis = "iterations", extra_html: str = "") -> Path:
    """Write out_dir/index.html with curves.png and one train-*.png per training key next to it; `extra_html`
    (already escaped: the differences between arms) follows the curves."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot(data.runs, x, out / "curves.png", band="ci95")
    figures = plot_training(data, out)
    body = f"""<h1>vevo report: {_e(", ".join(r.name for r in data.run_data))}</h1>
<h2>Runs</h2>
{_runs_table(data)}
<h2>Proposers</h2>
<p class="note">Per portfolio member (a run with one proposer has one): an improvement is a program that beats
max(parent, seed) or passes a test its parent fails; a proposal is one answer asked for.</p>
{_proposers_table(data)}
<h2>Search curves</h2>
<p class="note">Problems solved and mean best score by {_e(x[:-1])}; runs sharing a label (the seeds of an arm)
are averaged, with a 95% confidence band of the mean.</p>
<img id="curves" src="curves.png" alt="problems solved and best score by {_e(x[:-1])}">
{extra_html}
<h2>Problems</h2>
<p class="note">Per run: the iteration of the first solving program and the policy version that proposed it
(v0 is the untrained proposer). Best program: the highest score over all runs; hover a test for its case.</p>
{_problem_table(data)}
<h2>Training diagnostics</h2>
{_training_section(data, figures)}"""
    page = frame("vevo report", body)  # the UI's page frame and style, without its live script
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
