"""The views of `vevo ui`, one function per URL, each returning a whole HTML page built from `RunStore` reads
and the shared components. No view reads more than a bounded number of rows (see store.py)."""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from ..analysis import verdict
from .charts import band, line_chart, lineage_svg, quote_seg, thin
from .components import by, diff_html, e, field, fmt, frame, heatmap, test_strip, test_table
from .info import WELL_KNOWN_KEYS, ProblemInfo, is_number, training_keys
from .store import CURVE_POINTS, RunStore

AXES = {"iterations": (0, "iteration"), "evaluations": (1, "evaluations"), "wall": (2, "wall-clock seconds")}
SUMMED_LABEL = "seconds of generation + evaluation (a run without a recorded wall clock)"
Info = Callable[[str], ProblemInfo]
LIVE_SCRIPT = "/static/live.js"
LIVE_STATE = "<span class='live' id='live-state'>live: connecting…</span>"


def run_href(name: str, rest: str = "") -> str:
    return f"/run/{quote_seg(name)}{rest}"


def _nav(stores: Sequence[RunStore], current: RunStore | None = None) -> str:
    links = ["<a href='/'>runs</a>", "<a href='/compare'>compare</a>", "<a href='/curves'>curves</a>"]
    if current is not None:
        base = run_href(current.name)
        links += [f"<b>{e(current.name)}</b>:", f"<a href='{e(base)}'>problems</a>",
                  f"<a href='{e(base)}/lineage'>lineage</a>", f"<a href='{e(base)}/training'>training</a>"]
    return "<nav>" + " ".join(links) + f" {LIVE_STATE}</nav>"


def page(title: str, body: str, stores: Sequence[RunStore], current: RunStore | None = None) -> str:
    return frame(title, body, _nav(stores, current), script=LIVE_SCRIPT)


# ------------------------------------------------------------------------------------------------ overview

def overview(stores: Sequence[RunStore], rows: list[dict[str, Any]]) -> str:
    head = ("<tr><th></th><th>run</th><th>status</th><th>training</th><th>solved</th><th>best (mean)</th>"
            "<th>iterations</th><th>programs</th><th>evaluations</th><th>evals/s</th><th>training steps</th></tr>")
    body = []
    for r in rows:
        href = run_href(r["name"])
        rate = f"{r['evals_per_s']:.3g}" if r["evals_per_s"] else "–"
        body.append(
            f"<tr data-run='{e(r['name'])}'><td><input type='checkbox' name='run' value='{e(r['name'])}' checked>"
            f"</td><td><a href='{e(href)}'>{e(r['name'])}</a><div class='title pid'>{e(r['path'])}</div></td>"
            f"<td class='status-{e(r['status'])}'>{e(r['status'])}</td><td>{e(r['train'])}</td>"
            f"<td class='solved-count'>{r['solved']}/{r['problems']}</td><td>{e(fmt(r['best']))}</td>"
            f"<td>{r['iterations']}</td><td class='programs'>{r['programs']}</td><td>{r['evaluations']}</td>"
            f"<td>{rate}</td><td><a href='{e(href)}/training'>{r['training_steps']}</a></td></tr>")
    table = f"<table id='runs'>{head}{''.join(body)}</table>"
    form = (f"<form action='/curves' method='get'>{table}<p>compare the selected runs: <select name='x'>"
            + "".join(f"<option value='{k}'>{e(v[1])}</option>" for k, v in AXES.items())
            + "</select> <button type='submit'>curves</button> <button type='submit' formaction='/compare'>side by "
            "side</button></p></form>")
    return page("vevo ui: runs", f"<h1>Runs</h1>{form}", stores)


# ------------------------------------------------------------------------------------------------ curves

def curve_series(groups: dict[str, list[RunStore]], x: str) -> dict[str, list]:
    """Per label: its runs' (x, solved) and (x, best) points, each thinned; a band when it has several. By wall
    time, when any run lacks the wall clock, every run is drawn by busy seconds, so one axis means one thing."""
    xi = 5 if axis_label(groups, x) == SUMMED_LABEL else AXES[x][0]
    out: dict[str, list] = {}
    for label, runs in groups.items():
        solved, best = [], []
        for s in runs:
            pts = s.curve_points()
            solved.append([(float(p[xi]), float(p[3])) for p in pts])
            best.append([(float(p[xi]), float(p[4])) for p in pts])
        out[label] = [solved, best]
    return out


def axis_label(groups: dict[str, list[RunStore]], x: str) -> str:
    """The x label; the wall axis says so when a run's archive predates the recorded wall clock."""
    if x == "wall" and not all(s.wall_clock() for rs in groups.values() for s in rs):
        return SUMMED_LABEL
    return AXES[x][1]


def curve_charts(groups: dict[str, list[RunStore]], x: str) -> str:
    """The two SVG charts (problems solved, mean best score) of the given runs by x."""
    series = curve_series(groups, x)
    charts = []
    for k, (title, integer) in enumerate((("problems solved", True), ("mean best score", False))):
        lines = []
        for label, pair in series.items():
            runs = pair[k]
            if len(runs) == 1:
                lines.append((label, thin(runs[0], CURVE_POINTS), None))
            else:
                b = band(runs)
                lines.append((f"{label} ({len(runs)} runs)", thin([(p[0], p[1]) for p in b], CURVE_POINTS),
                              [(p[0], p[2], p[3]) for p in thin_band(b)]))
        charts.append(line_chart(lines, title, axis_label(groups, x), chart_id=("curve-solved", "curve-best")[k],
                                 integer_y=integer))
    return f"<div class='charts'>{''.join(charts)}</div>"


def curves(stores: Sequence[RunStore], groups: dict[str, list[RunStore]], x: str) -> str:
    picks = "".join(f"<a href='{e(_curves_href(groups, k))}'>{e(v[1])}</a> " for k, v in AXES.items())
    note = ("<p class='note'>Runs sharing a name (NAME=RUN given twice) are seeds of one setting: their mean with "
            "the min–max band. x: " + picks + "</p>")
    return page("vevo ui: curves", f"<h1>Search curves</h1>{note}{curve_charts(groups, x)}", stores)


def thin_band(b: list[tuple[float, float, float, float]]) -> list[tuple[float, float, float, float]]:
    if len(b) <= CURVE_POINTS:
        return b
    k = -(-len(b) // CURVE_POINTS)
    return b[:-1:k] + [b[-1]]


def _curves_href(groups: dict[str, list[RunStore]], x: str) -> str:
    runs = "&".join(f"run={quote_seg(s.name)}" for rs in groups.values() for s in rs)
    return f"/curves?{runs}&x={x}" if runs else f"/curves?x={x}"


# ------------------------------------------------------------------------------------------------ compare

def compare(stores: Sequence[RunStore], groups: dict[str, list[RunStore]], x: str, info: Info,
            title: str = "Compare runs", extra_html: str = "", curve_figure: str | None = None,
            training_figures: Sequence[tuple[str, str]] = ()) -> str:
    """Several runs side by side: their table, curves, problems (first solve per run, best program over all)
    and training diagnostics. `vevo report` writes this page as its index.html, adding `extra_html` (already
    escaped: the differences between arms) after the curves and its matplotlib PNGs (files next to the page)."""
    runs = [s for rs in groups.values() for s in rs]
    rows = [s.overview() for s in runs]
    head = ("<tr><th>run</th><th>status</th><th>training</th><th>solved</th><th>best (mean)</th><th>iterations</th>"
            "<th>programs</th><th>evaluations</th><th>training steps</th></tr>")
    table = "".join(
        f"<tr data-run='{e(r['name'])}'><td><a href='{e(run_href(r['name']))}'>{e(r['name'])}</a>"
        f"<div class='title pid'>{e(r['path'])}</div></td><td class='status-{e(r['status'])}'>{e(r['status'])}</td>"
        f"<td>{e(r['train'])}</td><td>{r['solved']}/{r['problems']}</td><td>{e(fmt(r['best']))}</td>"
        f"<td>{r['iterations']}</td><td>{r['programs']}</td><td>{r['evaluations']}</td>"
        f"<td><a href='{e(run_href(r['name'], '/training'))}'>{r['training_steps']}</a></td></tr>" for r in rows)
    picks = " ".join(f"<a href='{e(_curves_href(groups, k))}'>{e(v[1])}</a>" for k, v in AXES.items())
    figure = (f"<details><summary>the same as a figure for papers (PNG; band: 95% confidence interval of the "
              f"mean)</summary><img id='curves' src='{e(curve_figure)}' alt='problems solved and best score by "
              f"{e(AXES[x][1])}'></details>") if curve_figure else ""
    body = (f"<h1>{e(title)}</h1><h2>Runs</h2><table id='runs'>{head}{table}</table>"
            f"<h2>Search curves</h2><p class='note'>Problems solved and mean best score by {e(axis_label(groups, x))}"
            f"; runs sharing a name (the seeds of an arm) are drawn as their mean with the min–max band. Other axes: "
            f"{picks}</p>{curve_charts(groups, x)}{figure}\n{extra_html}\n"
            "<h2>Problems</h2><p class='note'>Per run: the iteration of the first solving program and the policy "
            "version that proposed it (v0 is the untrained proposer). Best program: the highest score over all "
            f"runs; hover a test for its case.</p>{_compare_problems(runs, info)}"
            f"<h2>Training diagnostics</h2>{_compare_training(runs, training_figures, groups)}")
    return page(f"vevo: {title}", body, stores)


def _compare_problems(runs: Sequence[RunStore], info: Info) -> str:
    per_run = [{p["problem"]: p for p in s.problems()} for s in runs]
    order = list(dict.fromkeys(pid for d in per_run for pid in d))  # first-seen order
    head = "".join(f"<th title='{e(s.dir)}'>{e(s.name)}</th>" for s in runs)
    rows = [f"<table id='problems'><thead><tr><th>problem</th>{head}<th>best program</th></tr></thead><tbody>"]
    for pid in order:
        cells, best = [], None
        for s, d in zip(runs, per_run):
            p = d.get(pid)
            href = e(run_href(s.name, f"/problem?id={quote_seg(pid)}"))
            if p is None:
                cells.append("<td class='unsolved'>not in run</td>")
                continue
            solve = p["solve"]
            if solve is not None:
                cells.append(f"<td class='solved'><a href='{href}'>solved at iteration {solve['iteration']}</a><br>"
                             f"{by(solve['seed'], solve['policy_version'])}</td>")
            else:
                cells.append(f"<td class='unsolved'><a href='{href}'>best {e(fmt(p['best']))}</a></td>")
            top = s.best_program(pid)
            if top is not None and (best is None or (top.scalar, top.solved) > (best[1].scalar, best[1].solved)):
                best = (s, top)
        title = info(pid).title
        title_html = f"<div class='title'>{e(title)}</div>" if title and title != pid else ""
        rows.append(f"<tr data-problem='{e(pid)}'><td><span class='pid'>{e(pid)}</span>{title_html}</td>"
                    f"{''.join(cells)}{_best_cell(best, info(pid).test_labels)}</tr>")
    return "\n".join(rows) + "</tbody></table>"


def _best_cell(best: tuple[RunStore, Any] | None, labels: Sequence[str]) -> str:
    if best is None:
        return "<td class='unsolved'>no program</td>"
    s, p = best
    err = p.artifacts.get("first_error") or p.artifacts.get("error")
    err_html = f"<p>first error: <code>{field(err)}</code></p>" if err else ""
    return (f"<td><div><a href='{e(run_href(s.name, f'/program/{p.id}'))}'>{e(fmt(p.scalar))} · {e(p.status)}</a>"
            f" · {e(s.name)}, iteration {p.iteration}, {by(p.completion_id is None, p.policy_version)}</div>"
            f"<div>{test_strip(p.vector, labels)}</div><details><summary>program and per-test results</summary>"
            f"{err_html}{test_table(p.vector, labels)}<pre><code>{field(p.code)}</code></pre></details></td>")


def _verdicts(groups: dict[str, list[RunStore]], logs: dict[str, list]) -> str:
    """One line per trained arm above the charts: what training did (evolve/analysis/verdict.py)."""
    lines = []
    for label, stores in groups.items():
        trained = [s for s in stores if any(r.data.get("samples") for r in logs.get(s.name, []))]
        if trained:
            lines.append(verdict.arm_line(label, [verdict.run_training(logs[s.name]) for s in trained],
                                          [s.compute() for s in trained]))
    if not lines:
        return ""
    return ("<div id='verdicts'><p class='note'>What training did, per trained arm: the probe reward (fixed "
            "problems and sampling seed, so a change is the policy's) before the first step → at the last probe, "
            "on the run's own problems and on held-out ones; the change with its 95% interval over seeds; the KL "
            "to the start policy; the steps; where the time went.</p><ul>"
            + "".join(f"<li class='verdict'>{e(ln)}</li>" for ln in lines) + "</ul></div>")


def _compare_training(runs: Sequence[RunStore], figures: Sequence[tuple[str, str]],
                      groups: dict[str, list[RunStore]] | None = None) -> str:
    logs = {s.name: s.training() for s in runs}
    parts = [_verdicts(groups or {s.name: [s] for s in runs}, logs)]
    for s in runs:
        algo = s.meta()["config"].get("train", {}).get("algo", "none")
        rows = logs[s.name]
        if not rows:
            parts.append(f"<p class='note'>{e(s.name)}: no training (train: {e(algo)})</p>")
        skipped = [r for r in rows if "skipped" in r.data]
        if skipped:
            parts.append(f"<p class='note'>{e(s.name)}: {len(skipped)} steps skipped, last at iteration "
                         f"{skipped[-1].step}: {e(skipped[-1].data['skipped'])}</p>")
    keys = training_keys([r for rows in logs.values() for r in rows])
    charts = []
    for k in keys:
        lines = [(name, thin([(float(r.step), float(r.data[k])) for r in rows if is_number(r.data.get(k))],
                             CURVE_POINTS), None) for name, rows in logs.items() if rows]
        charts.append(line_chart([ln for ln in lines if ln[1]], k, "iteration", chart_id=f"train-{k}", width=360,
                                 height=220, step=False))
    if charts:
        parts.append(f"<div class='charts'>{''.join(charts)}</div>")
    elif any(logs.values()):
        parts.append("<p class='note'>training steps logged no numeric diagnostics</p>")
    if figures:
        parts.append("<details><summary>the same as figures for papers (PNG)</summary><div class='grid'>"
                     + "".join(f"<img src='{e(f)}' alt='{e(k)}'>" for k, f in figures) + "</div></details>")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------ one run

def run_problems(stores: Sequence[RunStore], s: RunStore, info: Info) -> str:
    rows = []
    for p in s.problems():
        pid, solve = p["problem"], p["solve"]
        href = run_href(s.name, f"/problem?id={quote_seg(pid)}")
        title = info(pid).title
        title_html = f"<div class='title'>{e(title)}</div>" if title and title != pid else ""
        if solve:
            cell = (f"<td class='solved'>solved at iteration {solve['iteration']}<br>"
                    f"{by(solve['seed'], solve['policy_version'])}</td>")
        else:
            cell = "<td class='unsolved'>unsolved</td>"
        rows.append(f"<tr data-problem='{e(pid)}'><td><a class='pid' href='{e(href)}'>{e(pid)}</a>{title_html}</td>"
                    f"{cell}<td>{e(fmt(p['best']))}</td><td>{p['programs']}</td></tr>")
    table = ("<table id='problems'><tr><th>problem</th><th>first solve</th><th>best score</th><th>programs</th>"
             f"</tr>{''.join(rows)}</table>")
    return page(f"vevo ui: {s.name}", f"<h1>{e(s.name)}</h1><p class='pid'>{e(s.dir)}</p>{proposers(s)}{table}",
                stores, s)


def proposers(s: RunStore) -> str:
    """The run's split by proposer (portfolio member): what each proposed, improved, solved first and cost."""
    members = s.members()
    if not members:
        return ""
    rows = "".join(f"<tr data-member='{e(name)}'><td>{e(name)}</td><td>{m['iterations']}</td><td>{m['programs']}</td>"
                   f"<td>{m['improvements']}</td><td>{m['improvement_rate']:.2f}</td><td>{m['solved_first']}</td>"
                   f"<td>{m['tokens']}</td><td>{m['gen_seconds']:.1f}</td></tr>" for name, m in members.items())
    return ("<h2>Proposers</h2><table id='proposers'><tr><th>proposer</th><th>iterations</th><th>programs</th>"
            "<th>improvements</th><th>per 100 proposals</th><th>solved first</th><th>tokens</th>"
            f"<th>generation s</th></tr>{rows}</table><h2>Problems</h2>")


def problem(stores: Sequence[RunStore], s: RunStore, pid: str, info: Info) -> str:
    d = s.problem(pid)
    labels = info(pid).test_labels
    prog_href = run_href(s.name, "/program/")
    first = d["first_solve"]
    if first is not None:
        member = None if first.completion_id is None else s.member_at(first.iteration)
        who = f" from proposer {e(member)}" if member else ""
        solve = (f"<p>Solved at iteration {first.iteration} by {by(first.completion_id is None, first.policy_version)}"
                 f"{who} (program <a href='{e(prog_href)}{first.id}'>{first.id}</a>).</p>")
    else:
        solve = "<p>Not solved yet.</p>"
    statuses = ", ".join(f"{e(k)} {v}" for k, v in sorted(d["statuses"].items()))
    best = d["top"][0] if d["top"] else None
    best_html = ""
    if best is not None:
        best_html = (f"<h2>Best program</h2><p><a href='{e(prog_href)}{best.id}'>program {best.id}</a> · score "
                     f"{e(fmt(best.scalar))} · {e(best.status)} · iteration {best.iteration} · "
                     f"{by(best.completion_id is None, best.policy_version)}</p><div>{test_strip(best.vector, labels)}"
                     f"</div><pre><code>{field(best.code)}</code></pre>")
    heat = heatmap(((f"{prog_href}{p.id}", f"{p.id} ({fmt(p.scalar)})", p.vector) for p in d["top"]), labels)
    lin = "".join(f"<a href='{e(run_href(s.name, f'/lineage?problem={quote_seg(pid)}&island={i}'))}'>island {i}</a> "
                  for i in d["islands"])
    title = info(pid).title
    body = (f"<h1 class='pid'>{e(pid)}</h1>" + (f"<p class='title'>{e(title)}</p>" if title else "") +
            f"{solve}<p>programs by status: {statuses or 'none'}</p><p>lineage: {lin or 'none'}</p>{best_html}"
            f"<h2>Top programs × tests</h2>{heat}")
    return page(f"vevo ui: {pid}", body, stores, s)


def lineage(stores: Sequence[RunStore], s: RunStore, pid: str | None, island: int, pg: int) -> str:
    problems = [p["problem"] for p in s.problems() if p["programs"]]
    if pid is None and problems:
        pid = problems[0]
    pick = "".join(f"<option value='{e(p)}'{' selected' if p == pid else ''}>{e(p)}</option>" for p in problems)
    form = (f"<form method='get' action='{e(run_href(s.name, '/lineage'))}'>problem <select name='problem'>{pick}"
            f"</select> island <input name='island' type='number' min='-1' value='{island}' style='width:4em'> "
            "<button>show</button></form>")
    if pid is None:
        return page(f"vevo ui: lineage of {s.name}", f"<h1>Lineage</h1>{form}<p>no programs yet</p>", stores, s)
    d = s.lineage(pid, island, pg)
    base = run_href(s.name, f"/lineage?problem={quote_seg(pid)}&island={island}")
    pager = []
    if d["page"] > 0:
        pager.append(f"<a href='{e(base)}&page={d['page'] - 1}'>newer</a>")
    pager.append(f"page {d['page'] + 1} of {d['pages']} ({d['total']} programs)")
    if d["page"] + 1 < d["pages"]:
        pager.append(f"<a href='{e(base)}&page={d['page'] + 1}'>older</a>")
    svg = lineage_svg(d["nodes"], d["outside"], island, run_href(s.name, "/program/{id}"))
    note = ("<p class='note'>x: iteration, y: score; colour: score; marker: policy version (● v0 ■ v1 ▲ v2 ◆ v3, "
            "repeating); red ring: solved; dashed orange edge: parent on another island (migration); grey stub: "
            "parent on an older page. Click a node for its program.</p>")
    return page(f"vevo ui: lineage of {s.name}",
                f"<h1>Lineage: <span class='pid'>{e(pid)}</span>, island {island}</h1>{form}{note}"
                f"<p class='pager'>{' · '.join(pager)}</p>{svg}", stores, s)


def program(stores: Sequence[RunStore], s: RunStore, program_id: int, info: Info) -> str | None:
    p = s.program(program_id)
    if p is None:
        return None
    labels = info(p.problem).test_labels
    prog_href = run_href(s.name, "/program/")
    parent = s.program(p.parent_ids[0]) if p.parent_ids else None
    parents = ", ".join(f"<a href='{e(prog_href)}{int(i)}'>{int(i)}</a>" for i in p.parent_ids) or "none (a seed)"
    head = (f"<h1>Program {p.id}</h1><p><a class='pid' href='{e(run_href(s.name, f'/problem?id={quote_seg(p.problem)}'))}'>"
            f"{e(p.problem)}</a> · island {p.island} · iteration {p.iteration} · status <b id='status'>{e(p.status)}"
            f"</b> · score {e(fmt(p.scalar))}{' · solved' if p.solved else ''} · "
            f"{by(p.completion_id is None, p.policy_version)} · parents: {parents}</p>")
    vec = f"<h2>Per-test results</h2><div id='vector'>{test_strip(p.vector, labels)}{test_table(p.vector, labels)}</div>"
    arts = p.artifacts
    feedback = "".join(f"<dt>{field(k, 200)}</dt><dd><pre>{field(v if isinstance(v, str) else json.dumps(v, default=str))}"
                       f"</pre></dd>" for k, v in sorted(arts.items()))
    fb = f"<h2>Evaluator feedback</h2><dl id='feedback'>{feedback or '<dd>none</dd>'}</dl>"
    code = f"<h2>Code</h2><pre id='code'><code>{field(p.code)}</code></pre>"
    diff = ("<h2>Diff against its parent</h2>" + (diff_html(parent.code, p.code, f"program {parent.id}",
                                                             f"program {p.id}") if parent else
                                                   "<p class='note'>no parent</p>"))
    comp = ""
    if p.completion_id is not None:
        got = s.completion(p.completion_id)
        if got is not None:
            group, c = got
            fates = s.answer_fates(c)
            rows = []
            for i, (ans, f) in enumerate(zip(c.answers, fates)):
                link = f" → <a href='{e(prog_href)}{f['program_id']}'>program {f['program_id']}</a>" \
                    if f["program_id"] is not None else ""
                mark = " (this program)" if p.answer_index == i else ""
                rows.append(f"<tr class='answer'><td>{i + 1}{mark}</td><td class='fate-{f['fate']}'>{f['fate']}{link}"
                            f"<div class='title'>{field(f['detail'], 2000)}</div></td><td><details><summary>answer text</summary>"
                            f"<pre>{field(ans)}</pre></details></td></tr>")
            comp = (f"<h2>The completion that produced it</h2><p>group {group.id} · completion {c.idx + 1} of "
                    f"{group.n} · policy v{c.policy_version} · {group.m} answers asked · finish: "
                    f"{e(c.finish_reason)}</p><table id='answers'><tr><th>answer</th><th>what became of it</th>"
                    f"<th></th></tr>{''.join(rows)}</table><details><summary>raw completion text</summary>"
                    f"<pre id='completion'>{field(c.text)}</pre></details>")
    return page(f"vevo ui: program {p.id}", head + code + diff + vec + fb + comp, stores, s)


def training(stores: Sequence[RunStore], s: RunStore) -> str:
    rows = s.training()
    keys = training_keys(rows)
    charts = []
    for k in keys:
        pts = [(float(r.step), float(r.data[k])) for r in rows
               if isinstance(r.data.get(k), (int, float)) and not isinstance(r.data.get(k), bool)]
        charts.append(line_chart([(s.name, thin(pts, CURVE_POINTS), None)], k, "iteration", chart_id=f"train-{k}", width=360,
                                 height=220, step=False))
    versions = s.policy_versions()
    changes = [(float(it), float(v)) for k, (it, v) in enumerate(versions)
               if k == 0 or v != versions[k - 1][1] or k == len(versions) - 1]
    timeline = line_chart([("policy version", thin(changes, CURVE_POINTS), None)], "policy version the proposer sampled with",
                          "iteration", chart_id="policy-timeline", width=740, height=200, integer_y=True)
    skipped = [r for r in rows if "skipped" in r.data]
    skip = (f"<p class='note'>{len(skipped)} steps skipped, last at iteration {skipped[-1].step}: "
            f"{e(skipped[-1].data['skipped'])}</p>") if skipped else ""
    algo = s.meta()["config"].get("train", {}).get("algo", "none")
    intro = (f"<p>train: {e(algo)} · {len(rows)} steps. Keys: the well-known ones first ({e(', '.join(WELL_KNOWN_KEYS))}), "
             "then the rest.</p>")
    body = (f"<h1>Training: {e(s.name)}</h1>{intro}{skip}{timeline}"
            f"<div class='charts'>{''.join(charts) or '<p>no training steps</p>'}</div>")
    return page(f"vevo ui: training of {s.name}", body, stores, s)


__all__ = ["AXES", "overview", "curves", "compare", "run_problems", "problem", "lineage", "program", "training"]
