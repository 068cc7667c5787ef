"""`vevo report` on two real tiny campaigns (one trained, one not), checked as HTML and in headless Chromium.

The untrained run also carries a folder problem whose title, test input and seed program hold HTML, to show
that nothing from a program or a problem reaches the page unescaped.
"""
from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import threading
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from evolve.archive import TrainingRow
from evolve.ui.report import WELL_KNOWN_KEYS, gather, training_keys

from tests.campaign_helpers import length_problem_toml, vevo

TINY = ["--suite", "pbe", "--proposer", "tiny", "--iterations", "6", "--islands", "2", "--answers", "2",
        "--group", "2", "--seed", "0", "--quiet"]
HOSTILE_CODE = "# </details><script>alert('code')</script>\n"
HOSTILE_TITLE = "<script>alert('title')</script> & <b>count</b>"
HOSTILE_TOML = length_problem_toml("evil/escape", HOSTILE_TITLE)
# the seed solves its problem, so it is the problem's best program and its code is on the page
HOSTILE_SEED = HOSTILE_CODE + "# EVOLVE-BLOCK-START\ndef solve(s):\n    return len(s)\n# EVOLVE-BLOCK-END\n"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real campaigns, vpo (trained every 3 iterations) and none (plus the hostile problem), and the report
    of both: `vevo report vpo=A B` (a NAME=RUN and a plain RUN, labelled by its folder name)."""
    root = tmp_path_factory.mktemp("report")
    folder = root / "problems" / "evil"
    folder.mkdir(parents=True)
    (folder / "problem.toml").write_text(HOSTILE_TOML)
    (folder / "seed.py").write_text(HOSTILE_SEED)
    a, b, out = root / "a", root / "none", root / "report"
    vevo("run", *TINY, "--train", "vpo", "--train-every", "3", "--train-group", "2", "--out", str(a))
    vevo("run", *TINY, "--problems-dir", str(root / "problems"), "--problem", "evil/escape", "--train", "none",
         "--out", str(b))
    r = vevo("report", f"vpo={a}", str(b), "--out", str(out))
    lines = r.stdout.strip().splitlines()
    stops = [x for x in lines if ": stopped by " in x]  # first what stopped each run (evolve/search/budget.py)
    assert len(stops) == 2 and all("stopped by its iterations" in x for x in stops), stops
    *diffs, last = lines[len(stops):]  # the differences between arms (one run each: no CI), then
    assert last == f"wrote {out / 'index.html'}" and len(diffs) == 3 and all("no CI" in d for d in diffs)
    return {"vpo": a, "none": b, "out": out, "html": (out / "index.html").read_text(encoding="utf-8")}


class Page(HTMLParser):
    """The parts of the page the tests look at: images, problem rows (cell texts) and script elements."""

    def __init__(self, text: str):
        super().__init__()
        self.imgs: list[str] = []
        self.rows: dict[str, list[str]] = {}
        self.scripts = 0
        self._row: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a["src"])
        elif tag == "script":
            self.scripts += 1
        elif tag == "tr" and "data-problem" in a:
            self._row = a["data-problem"]
            self.rows[self._row] = []
        elif tag == "td" and self._row is not None and self._cell is None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self.rows[self._row].append(" ".join(" ".join(self._cell).split()))
            self._cell = None
        elif tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def listed(run: Path) -> list[str]:
    with sqlite3.connect(run / "archive.db") as c:
        return json.loads(c.execute("SELECT value FROM meta WHERE key = 'problems'").fetchone()[0])


def first_solves(run: Path) -> dict[str, tuple[int, str]]:
    """problem -> (iteration, who proposed it) of its first solving program, straight from SQL."""
    with sqlite3.connect(run / "archive.db") as c:
        rows = c.execute("SELECT problem, iteration, policy_version, completion_id FROM programs "
                         "WHERE solved = 1 ORDER BY id")
        out: dict[str, tuple[int, str]] = {}
        for pid, it, v, completion in rows:
            out.setdefault(pid, (it, "seed program" if completion is None else f"policy v{v}"))
    return out


def test_figures_exist_as_png(runs):
    page = Page(runs["html"])
    assert page.imgs[0] == "curves.png"
    with sqlite3.connect(runs["vpo"] / "archive.db") as c:
        logged = {k for (d,) in c.execute("SELECT data FROM training") for k in json.loads(d)}
    assert len(page.imgs) > 1 + 5  # the curves, then one figure per training key
    for src in page.imgs:
        data = (runs["out"] / src).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, src
    keys = [src.split("-", 2)[2][:-4] for src in page.imgs[1:]]
    assert set(keys) <= logged and {"mean_set_reward", "loss", "grad_norm"} <= set(keys)
    assert keys[:2] == ["mean_set_reward", "reward_diversity"]  # well-known keys first


def test_table_has_a_row_per_problem_with_first_solves(runs):
    page = Page(runs["html"])
    problems = list(dict.fromkeys(listed(runs["vpo"]) + listed(runs["none"])))
    assert list(page.rows) == problems and "evil/escape" in problems
    for col, run in ((1, runs["vpo"]), (2, runs["none"])):
        solves = first_solves(run)
        assert solves, f"{run}: the tiny campaign solved nothing; the table would show no solve"
        for pid, cells in page.rows.items():
            if pid in solves:
                it, by = solves[pid]
                assert cells[col] == f"solved at iteration {it} {by}", (pid, cells[col])
            else:
                assert not cells[col].startswith("solved"), (pid, cells[col])
    assert page.rows["evil/escape"][1:3] == ["not in run", "solved at iteration 0 seed program"]


def test_untrusted_text_is_escaped(runs):
    html = runs["html"]
    assert Page(html).scripts == 0
    for raw in ("</details><script>", "<script>alert('title')", "<b>count</b>", "<i>x</i>"):
        assert raw not in html
    assert "&lt;/details&gt;&lt;script&gt;alert(&#x27;code&#x27;)&lt;/script&gt;" in html
    assert "&lt;script&gt;alert(&#x27;title&#x27;)&lt;/script&gt; &amp; &lt;b&gt;count&lt;/b&gt;" in html
    assert "solve(&#x27;&lt;i&gt;x&lt;/i&gt;&#x27;)" in html  # the test case label


def test_training_section(runs):
    html = runs["html"]
    section = html[html.index("<h2>Training diagnostics</h2>"):]
    assert "none: no training (train: none)" in section
    assert "vpo: no training" not in section
    # it starts with the verdict of the trained arm, above the charts, from the archive's own rows
    assert section.index("id='verdicts'") < section.index("<svg") and section.count("class='verdict'") == 1
    with sqlite3.connect(runs["vpo"] / "archive.db") as c:
        logged = [json.loads(d) for (d,) in c.execute("SELECT data FROM training ORDER BY step")]
    own = [d[k] for d in logged for k in ("probe_own_before", "probe_own") if k in d]
    steps = sum(1 for d in logged if d.get("samples"))
    verdict = re.search(r"<li class='verdict'>([^<]*)</li>", section).group(1)
    assert verdict.startswith(f"vpo: own probe {own[0]:.3f} → {own[-1]:.3f} ({own[-1] - own[0]:+.3f}, one run)")
    assert f"; {steps} steps; time: " in verdict and "s wall, generation " in verdict and "KL " in verdict


def test_labels_share_one_convention(runs):
    """Runs under one label are seeds: numbered columns here, one averaged curve in curves.png."""
    data = gather({"seeds": [runs["vpo"], runs["none"]]})
    assert [r.name for r in data.run_data] == ["seeds #1", "seeds #2"]
    assert data.problems[-1] == "evil/escape" and len(data.problems) == len(set(data.problems))


def test_bad_input_is_one_line(runs, tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "archive.db").write_text("not sqlite")
    for args in (["report", str(tmp_path / "junk"), "--out", str(tmp_path / "r")],
                 ["report", str(tmp_path / "nope"), "--out", str(tmp_path / "r")],
                 ["report", "--out", str(tmp_path / "r")],
                 ["report", "=x", "--out", str(tmp_path / "r")],
                 ["report", "--label", str(runs["vpo"]), "--out", str(tmp_path / "r")],
                 ["report", str(runs["vpo"]), "--out", str(runs["out"] / "index.html")]):
        r = vevo(*args, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert r.stderr.startswith("vevo: error: ")


def test_training_keys_order_and_filter():
    rows = [TrainingRow(3, 1, {"iteration": 3, "algo": "vpo", "zeta": 1, "kl": 0.1, "loss": 0.5,
                               "greedy_changed": 0.25, "flag": True, "nan": float("nan")}),
            TrainingRow(6, 1, {"skipped": "no groups"}),
            TrainingRow(9, 2, {"alpha": 2.0, "mean_set_reward": 0.4})]
    keys = training_keys(rows)
    assert keys == ["mean_set_reward", "loss", "kl", "greedy_changed", "alpha", "zeta"]
    assert keys[:4] == [k for k in WELL_KNOWN_KEYS if k in keys]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
def test_page_renders_in_headless_chromium(runs):
    out = runs["out"]
    url = (out / "index.html").as_uri()
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={out.parent / 'chromium-profile'}", "--window-size=1400,2000"]
    dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = Page(dom.stdout)
    assert list(rendered.rows) == list(Page(runs["html"]).rows)
    assert rendered.imgs == Page(runs["html"]).imgs and rendered.scripts == 0

    shot = out.parent / "screenshot.png"  # kept with the test's tmp dir
    r = subprocess.run(base + [f"--screenshot={shot}", url], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    import matplotlib.image

    img = matplotlib.image.imread(shot)[:, :, :3]  # PNG decodes to floats in [0, 1]
    assert img.shape == (2000, 1400, 3)
    assert img.std() > 0.05 and (img < 0.95).any(axis=2).mean() > 0.03  # not blank, not all white

    def has_colour(hex_rgb: str) -> bool:
        rgb = np.array([int(hex_rgb[i:i + 2], 16) for i in (0, 2, 4)]) / 255
        return bool((np.abs(img - rgb).max(axis=2) < 4 / 255).sum() > 20)

    assert has_colour("ff7f0e") and has_colour("1f77b4"), "the curves figure (matplotlib's C0/C1 lines) did not render"
    assert has_colour("eaa8a8") or has_colour("8fcf8f"), "the problem table's per-test cells did not render"
    print(f"screenshot: {shot}")

    with sqlite3.connect(runs["vpo"] / "archive.db") as c:  # a program page of the report, read offline too
        first = c.execute("SELECT MIN(id) FROM programs WHERE solved = 1").fetchone()[0]
    shot = out.parent / "screenshot-program.png"
    r = subprocess.run(base + [f"--screenshot={shot}", (out / f"run-0-program-{first}.html").as_uri()],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    img = matplotlib.image.imread(shot)[:, :, :3]
    assert img.std() > 0.03 and (img < 0.95).any(axis=2).mean() > 0.01  # a text page: ~2% of its pixels ink
    assert has_colour("8fcf8f"), "the solving program's per-test strip did not render"
    print(f"screenshot: {shot}")


MAIN = re.compile(r"<main id='live'>(.*)</main>", re.S)
HREF = re.compile(r" href='[^']*'")


def main_of(page: str) -> str:
    """A page's main content without its link targets: a server path in the UI, a file name in the report (or
    none, for a page the report does not hold: a lineage page)."""
    return HREF.sub("", MAIN.search(page).group(1))


@pytest.fixture(scope="module")
def ui(runs):
    """`vevo ui` on the same two runs, served in this process over real HTTP on 127.0.0.1."""
    from evolve.ui.server import Server

    server = Server({"vpo": [runs["vpo"]], "none": [runs["none"]]}, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield lambda path: urllib.request.urlopen(server.url.rstrip("/") + path, timeout=60).read().decode("utf-8")
    server.shutdown()


def test_report_pages_are_the_ui_pages(runs, ui):
    """The report's pages are the UI's, written once: the same main content for a program (the first solve and
    the best), a problem, a run, its training and the curves; the index's tables are the UI's compare page's."""
    out = runs["out"]
    solves = first_solves(runs["vpo"])
    pid = sorted(solves)[0]
    with sqlite3.connect(runs["vpo"] / "archive.db") as c:
        first = c.execute("SELECT MIN(id) FROM programs WHERE problem = ? AND solved = 1", (pid,)).fetchone()[0]
        best = c.execute("SELECT id FROM programs WHERE problem = ? AND status != 'format_error' "
                         "ORDER BY scalar DESC, id LIMIT 1", (listed(runs["vpo"])[-1],)).fetchone()[0]
    j = listed(runs["vpo"]).index(pid)
    pairs = [(f"run-0-program-{first}.html", f"/run/vpo/program/{first}"),
             (f"run-0-program-{best}.html", f"/run/vpo/program/{best}"),
             (f"run-0-problem-{j}.html", f"/run/vpo/problem?id={quote(pid, safe='')}"),
             ("run-0.html", "/run/vpo"), ("run-0-training.html", "/run/vpo/training"),
             ("run-1.html", "/run/none"), ("curves-evaluations.html", "/curves?x=evaluations")]
    for name, path in pairs:
        frozen, served = (out / name).read_text(encoding="utf-8"), ui(path)
        assert main_of(frozen) == main_of(served), name
        assert "id='code'" in frozen or "program" not in name
    index, compare = runs["html"], ui("/compare")
    for table in ("runs", "problems"):
        cut = re.compile(rf"<table id='{table}'>.*?</table>", re.S)
        assert HREF.sub("", cut.search(index).group(0)) == HREF.sub("", cut.search(compare).group(0))
    assert "<script" in served and "/static/live.js" in served  # the UI's page is live, the report's is not


def test_report_files_link_to_each_other_offline(runs):
    """Every link of every page names a file written next to it (no server path, no script); following links
    from index.html reaches every page; each problem of each run has its page, and the programs of its best and
    first solve theirs."""
    out = runs["out"]
    pages = {p.name: p.read_text(encoding="utf-8") for p in out.glob("*.html")}
    seen, todo = set(), ["index.html"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        page = Page(pages[name])
        assert page.scripts == 0, name
        for target in re.findall(r"href='([^']*)'", pages[name]):
            assert re.fullmatch(r"[a-z0-9-]+\.html", target) and target in pages, (name, target)
            todo.append(target)
    assert seen == set(pages)
    for i, run in enumerate((runs["vpo"], runs["none"])):
        problems = listed(run)
        assert {f"run-{i}-problem-{j}.html" for j in range(len(problems))} <= set(pages)
        with sqlite3.connect(run / "archive.db") as c:
            for pid in problems:
                ids = [r[0] for r in c.execute(
                    "SELECT MIN(id) FROM programs WHERE problem = ? AND solved = 1 UNION ALL SELECT id FROM "
                    "(SELECT id FROM programs WHERE problem = ? AND status != 'format_error' ORDER BY scalar DESC, "
                    "id LIMIT 1)", (pid, pid)) if r[0] is not None]
                assert ids and all(f"run-{i}-program-{k}.html" in pages for k in ids), (pid, ids)
    assert {"curves-iterations.html", "curves-evaluations.html", "curves-wall.html"} <= set(pages)
    evil = pages[f"run-1-problem-{listed(runs['none']).index('evil/escape')}.html"]
    assert "<script>alert" not in evil and "&lt;script&gt;alert(&#x27;title&#x27;)" in evil
