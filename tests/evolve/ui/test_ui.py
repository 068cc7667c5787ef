"""`vevo ui` on a real tiny campaign, over real HTTP on 127.0.0.1, in a real headless Chromium (Debian's, driven
by Playwright's client; no browser download).

One campaign (the pbe suite plus a folder problem whose title, seed code and error output are hostile) is
started in the background and the UI opened on it while it runs: the overview's program count and the curve
must grow in the open page without a reload. The other tests use the same run once it has finished.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from evolve.ui.charts import band, thin
from evolve.ui.components import e

from tests.campaign_helpers import ROOT, interruptible, last_iteration, length_problem_toml, vevo

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# script tags, a javascript: link, a bidi override and an ANSI colour escape
HOSTILE = "<script>window.__pwned=1</script><a href='javascript:window.__pwned=2'>x</a>\u202eevil\u202c\x1b[31mred"
HOSTILE_TOML = length_problem_toml("evil/ui", "<script>window.__pwned=3</script> \\u202etitle \\u001b[1m")
HOSTILE_SEED = (f"# {HOSTILE}\n# EVOLVE-BLOCK-START\ndef solve(s):\n    if not s:\n"
                f"        raise ValueError({HOSTILE!r})\n    return len(s)\n# EVOLVE-BLOCK-END\n")
ITERATIONS = 14
RUN = ["run", "--suite", "pbe", "--proposer", "tiny", "--iterations", str(ITERATIONS), "--islands", "2",
       "--answers", "3", "--group", "2", "--seed", "0", "--train", "vpo", "--train-every", "4",
       "--train-group", "2", "--quiet"]


def start_ui(*args: str) -> tuple[subprocess.Popen, str]:
    """`vevo ui ... --port 0` as a user starts it; returns the process and the URL of its first line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "ui", *args, "--port", "0"], cwd=str(ROOT),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    url = proc.stdout.readline().strip()
    assert url.startswith("http://"), (url, proc.stderr.read() if proc.poll() is not None else "")
    return proc, url


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    """Interrupt `vevo ui` as a user does: it must stop cleanly (exit 0) and at once."""
    proc.send_signal(sig)
    try:
        assert proc.wait(timeout=10) == 0, proc.stderr.read()
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("vevo ui kept serving after the interrupt")


def get(url: str, path: str, headers: dict | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    """One raw request: the path is sent exactly as given (no client-side normalisation of '..')."""
    u = urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A campaign running in the background and `vevo ui` on it; yields once its archive exists."""
    root = tmp_path_factory.mktemp("ui")
    folder = root / "problems" / "evil"
    folder.mkdir(parents=True)
    (folder / "problem.toml").write_text(HOSTILE_TOML)
    (folder / "seed.py").write_text(HOSTILE_SEED)
    run = root / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    campaign = subprocess.Popen([sys.executable, "-m", "evolve.cli", *RUN, "--problems-dir", str(root / "problems"),
                                 "--problem", "evil/ui", "--out", str(run)], cwd=str(ROOT), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (run / "archive.db").exists():
        assert campaign.poll() is None, campaign.stderr.read()
        assert time.time() < deadline, "the campaign never created its archive"
        time.sleep(0.2)
    ui, url = start_ui(f"camp={run}")
    shots = root / "screenshots"
    shots.mkdir()
    yield {"run": run, "campaign": campaign, "url": url, "shots": shots, "root": root}
    stop(ui)
    if campaign.poll() is None:
        campaign.kill()
    campaign.wait()
    print(f"screenshots: {shots}")


@pytest.fixture(scope="module")
def finished(live):
    out, err = live["campaign"].communicate(timeout=300)
    assert live["campaign"].returncode == 0, err[-2000:]
    return live


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install chromium)")
    playwright = pytest.importorskip("playwright.sync_api", reason="the dev extra installs playwright")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def new_page(browser):
    """CSP bypassed: the page's Content-Security-Policy would also stop an injected script, and escaping must
    hold without it (the tests' own predicates are evaluated strings, which the CSP forbids too)."""
    return browser.new_page(viewport={"width": 1300, "height": 900}, bypass_csp=True)


def not_blank(path: Path) -> None:
    import matplotlib.image

    img = matplotlib.image.imread(path)[:, :, :3]
    assert img.std() > 0.05 and (img < 0.9).any(axis=2).mean() > 0.01, f"{path} looks blank"


def sql(run: Path, query: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(f"file:{run / 'archive.db'}?mode=ro", uri=True) as c:
        return c.execute(query, params).fetchall()


# ---------------------------------------------------------------------------------------------- live

def test_page_grows_while_the_campaign_runs(live, browser):
    """Two pages open at once (the runs overview and the curves), neither reloaded: both follow the campaign."""
    ready = "document.getElementById('live-state').textContent.startsWith('live')"
    cell, line = "#runs tr[data-run='camp'] td.programs", "#curve-best polyline.series"
    overview = new_page(browser)
    overview.goto(live["url"])
    curves = new_page(browser)
    curves.goto(live["url"].rstrip("/") + "/curves?x=evaluations")
    for page in (overview, curves):
        page.wait_for_function(ready)
        page.evaluate("window.__noReload = 1")
    assert overview.inner_text("#runs tr[data-run='camp'] td.status-running") == "running"
    n0 = int(overview.inner_text(cell))
    points0 = int(curves.get_attribute(line, "data-points") or 0) if curves.locator(line).count() else 0
    overview.wait_for_function(f"parseInt(document.querySelector(\"{cell}\").textContent) > {n0}",
                               timeout=120_000)
    curves.wait_for_function(f"(document.querySelector(\"{line}\") || {{dataset: {{points: 0}}}}).dataset.points"
                             f" > {points0}", timeout=120_000)
    for page in (overview, curves):
        assert page.evaluate("window.__noReload") == 1, "the page reloaded"
    assert int(overview.inner_text(cell)) <= sql(live["run"], "SELECT COUNT(*) FROM programs")[0][0]
    for name, page in (("overview-live", overview), ("curves-live", curves)):
        page.screenshot(path=live["shots"] / f"{name}.png", full_page=True)
        not_blank(live["shots"] / f"{name}.png")
        page.close()


# ---------------------------------------------------------------------------------------------- API

def test_api_runs_is_current(finished):
    status, headers, body = get(finished["url"], "/api/runs")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    (row,) = json.loads(body)
    n, solved = sql(finished["run"], "SELECT COUNT(*), COUNT(DISTINCT CASE WHEN solved THEN problem END) "
                                     "FROM programs")[0]
    assert row["name"] == "camp" and row["programs"] == n and row["solved"] == solved
    assert row["status"] == "finished" and row["iterations"] == ITERATIONS
    status, headers, page = get(finished["url"], "/")
    assert status == 200 and b"camp" in page
    assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["X-Content-Type-Options"] == "nosniff"


# ---------------------------------------------------------------------------------------------- pages

def test_program_page_shows_code_diff_vector_and_answers(finished, browser):
    run = finished["run"]
    pid, parents, code, vector, cid = sql(run, "SELECT id, parent_ids, code, vector, completion_id FROM programs "
                                               "WHERE completion_id IS NOT NULL AND status = 'ok' ORDER BY id "
                                               "LIMIT 1")[0]
    parent = json.loads(parents)[0]
    m = len(json.loads(sql(run, "SELECT answers FROM completions WHERE id = ?", (cid,))[0][0]))
    page = new_page(browser)
    page.goto(f"{finished['url'].rstrip('/')}/run/camp/program/{pid}")
    assert page.inner_text("#code") == code.rstrip("\n") or page.inner_text("#code") == code
    diff = page.inner_text("#diff")
    assert f"--- program {parent}" in diff and f"+++ program {pid}" in diff
    assert page.locator("#vector .t").count() == len(json.loads(vector))
    assert page.locator("#vector table.tests tr").count() == len(json.loads(vector)) + 1
    assert "f(" in page.inner_text("#vector table.tests")  # the tests' labels, from the problem
    assert page.locator("#answers tr.answer").count() == m
    assert "(this program)" in page.inner_text("#answers")
    page.screenshot(path=finished["shots"] / "program.png", full_page=True)
    not_blank(finished["shots"] / "program.png")
    page.close()


def test_hostile_strings_render_as_text(finished, browser):
    run = finished["run"]
    (seed,) = sql(run, "SELECT id FROM programs WHERE problem = 'evil/ui' AND completion_id IS NULL")[0]
    page = new_page(browser)
    base = finished["url"].rstrip("/")
    for path in (f"/run/camp/program/{seed}", "/run/camp/problem?id=evil%2Fui", "/run/camp"):
        page.goto(base + path)
        page.wait_for_timeout(300)
        assert page.evaluate("window.__pwned") is None, path
        assert page.locator("a[href^='javascript']").count() == 0, path
        assert page.locator("main script").count() == 0, path
        text = page.inner_text("main")
        assert "\x1b" not in text and "\u202e" not in text, path
    page.goto(base + f"/run/camp/program/{seed}")
    code = page.inner_text("#code")
    assert "<script>window.__pwned=1</script><a href='javascript:window.__pwned=2'>" in code
    assert "\\u202eevil\\u202c\\x1b[31mred" in code  # controls shown, not obeyed
    feedback = page.inner_text("#feedback")
    assert "<script>window.__pwned=1</script>" in feedback  # the error output of the raising test
    page.goto(base + "/run/camp")
    assert "<script>window.__pwned=3</script> \\u202etitle \\x1b[1m" in page.inner_text("tr[data-problem='evil/ui']")
    page.screenshot(path=finished["shots"] / "hostile.png", full_page=True)
    not_blank(finished["shots"] / "hostile.png")
    page.close()


def test_every_view_renders(finished, browser):
    base = finished["url"].rstrip("/")
    (pid,) = sql(finished["run"], "SELECT problem FROM programs WHERE solved = 1 AND problem LIKE 'pbe/%' "
                                  "ORDER BY id LIMIT 1")[0]
    page = new_page(browser)
    views = {"overview": "/", "curves": "/curves?x=wall", "run": "/run/camp",
             "problem": f"/run/camp/problem?id={pid}", "lineage": f"/run/camp/lineage?problem={pid}&island=0",
             "training": "/run/camp/training"}
    for name, path in views.items():
        r = page.goto(base + path)
        assert r.status == 200, path
        page.screenshot(path=finished["shots"] / f"{name}.png", full_page=True)
        not_blank(finished["shots"] / f"{name}.png")
    page.goto(base + views["problem"])
    assert "Solved at iteration" in page.inner_text("main")
    assert page.locator("table.heat tr").count() >= 2
    page.goto(base + views["lineage"])
    nodes = page.locator("#lineage a.node")
    assert nodes.count() == int(page.get_attribute("#lineage", "data-nodes")) > 0
    target = nodes.first.get_attribute("data-id")
    nodes.first.click()
    page.wait_for_url(f"**/program/{target}")
    page.goto(base + views["training"])
    steps = sql(finished["run"], "SELECT COUNT(*) FROM training")[0][0]
    assert steps > 0 and page.locator("#train-mean_set_reward polyline.series").count() == 1
    assert page.locator("#policy-timeline polyline.series").count() == 1
    page.close()


# ---------------------------------------------------------------------------------------------- security

def test_default_binds_loopback_only(finished):
    u = urlsplit(finished["url"])
    assert u.hostname == "127.0.0.1" and "token" not in u.query
    listening = Path("/proc/net/tcp").read_text()
    assert re.search(rf"^\s*\d+: 0100007F:{u.port:04X} 00000000:0000 0A", listening, re.M), \
        "not listening on 127.0.0.1 alone"


def test_path_parameters_stay_inside_the_runs(finished):
    url = finished["url"]
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/..%2fserver.py",
                 "/run/../../etc/passwd", "/run/camp/../../../etc/passwd", "/run/camp%2F..%2F..%2Fetc%2Fpasswd",
                 "/run/camp/archive.db", "/run/camp/config.yaml", "/run/camp/program/1%2F..%2F..",
                 "/run/camp/program/%31%30%30%30%30%30", "/run/camp/problem?id=..%2F..%2Fetc%2Fpasswd",
                 "/run/camp/lineage?problem=%2Fetc%2Fpasswd", "//etc/passwd", "/static/", "/run/nope"):
        status, _, body = get(url, path)
        assert status == 404, (path, status)
        assert b"root:" not in body and b"import" not in body and b"SQLite" not in body, path
    assert get(url, "/", method="POST")[0] == 405


def test_token_required_off_loopback(finished):
    proc, url = start_ui(str(finished["run"]), "--host", "0.0.0.0")
    try:
        u = urlsplit(url)
        token = u.query.split("token=", 1)[1]
        assert len(token) >= 24
        local = f"http://127.0.0.1:{u.port}/"
        wrong = token[:-1] + ("y" if token.endswith("x") else "x")  # its last character changed (1 in 64 ends in x)
        for path in ("/", "/api/runs", "/api/events", "/static/live.js", "/run/run/training",
                     f"/?token={wrong}", "/?token="):
            assert get(local, path)[0] == 401, path
        assert get(local, "/api/runs", {"X-Vevo-Token": token + "x"})[0] == 401
        assert get(local, "/api/runs", {"X-Vevo-Token": token})[0] == 200
        assert get(local, "/api/runs", {"Authorization": f"Bearer {token}"})[0] == 200
        status, headers, _ = get(local, f"/?token={token}")
        assert status == 200 and "HttpOnly" in headers["Set-Cookie"]
        cookie = headers["Set-Cookie"].split(";")[0]
        assert get(local, "/api/runs", {"Cookie": cookie})[0] == 200
    finally:
        stop(proc)
    explicit, url = start_ui(str(finished["run"]), "--token", "s3cret")
    try:
        assert url.endswith("?token=s3cret") and get(url, "/api/runs")[0] == 401
        assert get(url, "/api/runs?token=s3cret")[0] == 200
    finally:
        stop(explicit, signal.SIGTERM)


def test_root_serves_every_run_below_it_to_loopback_hosts_only(finished):
    proc, url = start_ui("--root", str(finished["root"]))
    try:
        status, _, body = get(url, "/api/runs")
        assert status == 200 and [r["name"] for r in json.loads(body)] == ["run"]
        port = urlsplit(url).port
        assert get(url, "/", {"Host": f"localhost:{port}"})[0] == 200
        assert get(url, "/", {"Host": f"[::1]:{port}"})[0] == 200
        assert get(url, "/", {"Host": f"evil.example:{port}"})[0] == 403  # DNS rebinding
    finally:
        stop(proc)


def _status(folder: Path) -> str:
    from evolve.ui.store import RunStore

    store = RunStore("run", folder)
    try:
        return store.overview()["status"]
    finally:
        store.close()


def test_status_follows_the_running_file(finished, tmp_path):
    """finished: budget spent, running.json removed at the end; no file short of the budget: stopped; a file of
    this host whose process is gone: crashed; a file of another host: judged by the last write (running while
    it writes, crashed once silent for IDLE_SECONDS)."""
    from evolve import liveness
    from evolve.ui.store import IDLE_SECONDS

    assert _status(finished["run"]) == "finished" and not (finished["run"] / liveness.NAME).exists()
    run = tmp_path / "copy"
    run.mkdir()
    with sqlite3.connect(finished["run"] / "archive.db") as src, sqlite3.connect(run / "archive.db") as dst:
        src.backup(dst)
        config = json.loads(dst.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()[0])
        config["iterations"] = ITERATIONS + 100
        dst.execute("UPDATE meta SET value = ? WHERE key = 'config'", (json.dumps(config),))
    assert _status(run) == "stopped"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    (run / liveness.NAME).write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname(),
                                                 "started": time.time() - 5}))
    assert _status(run) == "crashed"
    (run / liveness.NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                 "started": time.time()}))
    assert _status(run) == "running"
    (run / liveness.NAME).write_text(json.dumps({"pid": os.getpid(), "host": "another-host.example",
                                                 "started": time.time()}))
    assert _status(run) == "running"  # written just now
    old = time.time() - IDLE_SECONDS - 5
    for f in run.iterdir():
        os.utime(f, (old, old))
    assert _status(run) == "crashed"


def test_status_of_a_real_run_killed_interrupted_and_finished(tmp_path):
    """A real `vevo run`: running while its process lives; crashed after kill -9 (running.json left behind);
    `vevo resume` running again, then Ctrl-C: stopped (the file removed); resumed to its budget: finished."""
    from evolve import liveness

    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def start(*args: str) -> subprocess.Popen:
        """Start the campaign and return once it has committed a new iteration."""
        before = last_iteration(run)
        p = subprocess.Popen([sys.executable, "-m", "evolve.cli", *args], cwd=str(ROOT), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                             preexec_fn=interruptible)
        deadline = time.time() + 180
        while not (last_iteration(run) > before and (liveness.read(run) or {}).get("pid") == p.pid):
            assert p.poll() is None, p.stderr.read()[-2000:]
            assert time.time() < deadline, "the campaign never started its loop"
            time.sleep(0.05)
        return p

    p = start("run", "--suite", "pbe", "--proposer", "tiny", "--iterations", "100000", "--answers", "2",
              "--group", "2", "--seed", "0", "--quiet", "--out", str(run))
    assert _status(run) == "running"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert (run / liveness.NAME).exists() and _status(run) == "crashed"
    p = start("resume", str(run), "--quiet")
    assert _status(run) == "running"
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C in its terminal
    p.communicate(timeout=120)
    assert not (run / liveness.NAME).exists() and _status(run) == "stopped"
    vevo("resume", str(run), "--iterations", str(last_iteration(run) + 1), "--quiet")
    assert not (run / liveness.NAME).exists() and _status(run) == "finished"


def test_wall_axis_is_the_recorded_wall_clock(finished, tmp_path):
    """Curves by wall time use the campaign's per-iteration wall_seconds; an archive without them falls back to
    summed generation + evaluation seconds, and the axis says so; drawn with it, a run with a clock is drawn by
    its summed seconds too."""
    from evolve.ui import pages
    from evolve.ui.store import RunStore

    with sqlite3.connect(finished["run"] / "archive.db") as c:
        rows = [(it, json.loads(d)) for it, d in c.execute("SELECT iteration, data FROM metrics ORDER BY iteration")]
    walls = [d["wall_seconds"] for _, d in rows]
    assert walls == sorted(walls) and walls[-1] > 0
    store = RunStore("camp", finished["run"])
    try:
        assert store.wall_clock() and [p[2] for p in store.curve_points()] == walls
        assert pages.AXES["wall"][1] in pages.curves([store], {"camp": [store]}, "wall")
    finally:
        store.close()
    old = tmp_path / "old"
    old.mkdir()
    with sqlite3.connect(finished["run"] / "archive.db") as src, sqlite3.connect(old / "archive.db") as dst:
        src.backup(dst)
        dst.execute("UPDATE metrics SET data = json_remove(data, '$.wall_seconds')")
    store = RunStore("old", old)
    try:
        summed = np.cumsum([d.get("gen_seconds", 0.0) + d.get("eval_seconds", 0.0) for _, d in rows])
        assert not store.wall_clock()
        assert np.allclose([p[2] for p in store.curve_points()], summed)
        assert e(pages.SUMMED_LABEL) in pages.curves([store], {"old": [store]}, "wall")
        new = RunStore("new", finished["run"])
        try:
            both = pages.curve_series({"old": [store], "new": [new]}, "wall")
            assert both["old"][0] == both["new"][0] and np.allclose([p[0] for p in both["new"][0][0]], summed)
        finally:
            new.close()
    finally:
        store.close()


def test_bad_runs_are_one_line_errors(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "archive.db").write_text("not sqlite")
    for args in (["ui", str(tmp_path / "junk")], ["ui", str(tmp_path / "nope")], ["ui"],
                 ["ui", "--root", str(tmp_path / "nope")], ["ui", "--root", str(tmp_path / "junk")]):
        r = vevo(*args, "--port", "0", check=False, timeout=60)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert r.stderr.startswith("vevo: error: ")


def test_a_port_in_use_is_a_one_line_error_that_opens_no_run(finished):
    """The port is bound before any run is opened: a refused port used to leave a thread reading the runs while
    they were closed, which crashed the interpreter now and then (seen as an ordinary user)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        for _ in range(3):
            r = vevo("ui", str(finished["run"]), "--port", port, check=False, timeout=60)
            assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert r.stderr.startswith("vevo: error: cannot listen on 127.0.0.1:" + port)


# ---------------------------------------------------------------------------------------------- pure parts

def test_a_series_of_one_point_is_drawn_as_a_dot():
    from evolve.ui.charts import line_chart

    one = line_chart([("a", [(10.0, 0.2)], None)], "probe_own", "iteration")
    two = line_chart([("a", [(10.0, 0.2), (20.0, 0.3)], None)], "probe_own", "iteration")
    assert one.count("<circle") == 1 and "<circle" not in two


def test_escape_makes_controls_visible():
    assert e("<a href=\"javascript:x\">") == "&lt;a href=&quot;javascript:x&quot;&gt;"
    assert e("a\u202eb\x1b[31mc\u2066") == "a\\u202eb\\x1b[31mc\\u2066"
    assert e("tab\tnew\nline") == "tab\tnew\nline"


def test_thin_keeps_the_steps_and_the_ends():
    pts = [(float(i), float(i // 100)) for i in range(10_000)]
    out = thin(pts, 600)
    assert out[0] == pts[0] and out[-1] == pts[-1] and len(out) <= 700
    assert {y for _, y in out} == {y for _, y in pts}
    assert thin(pts[:5], 600) == pts[:5]


def test_band_is_mean_min_max_up_to_each_runs_end():
    a = [(0.0, 0.0), (2.0, 2.0)]
    b = [(1.0, 1.0), (3.0, 5.0)]
    got = band([a, b])
    assert got == [(0.0, 0.0, 0.0, 0.0), (1.0, 0.5, 0.0, 1.0), (2.0, 1.5, 1.0, 2.0), (3.0, 5.0, 5.0, 5.0)]
    assert np.isclose(got[1][1], 0.5)


# ---------------------------------------------------------------------------------------------- scale

def test_pages_stay_bounded_on_a_large_archive(tmp_path):
    """bench/perf/ui_scale.py's synthetic archive, smaller: every page bounded by paging and thinning, whatever the
    archive holds (sizes, not times, are checked)."""
    from bench.perf import ui_scale as bench
    from evolve.ui.store import CURVE_POINTS, LINEAGE_PAGE, TOP_PROGRAMS

    info = bench.build(tmp_path / "synth", programs=6000, problems=5)
    assert info["programs"] >= 6000
    sizes = {path: size for path, _, _, size in bench.measure(tmp_path / "synth", info)}
    assert set(sizes) == set(bench.pages(info)) and max(sizes.values()) < 300_000

    from evolve.ui.server import App

    app = App({"synth": [tmp_path / "synth"]})
    try:
        lineage = app.route("/run/synth/lineage", {"problem": [info["big"]], "island": ["0"]})[1]
        assert lineage.count("class='node'") == LINEAGE_PAGE  # the big island holds more than a page
        assert "page 1 of " in lineage and "older</a>" in lineage
        curves = app.route("/curves", {"x": ["evaluations"]})[1]
        points = [int(n) for n in re.findall(r"data-points='(\d+)'", curves)]
        assert points and max(points) <= CURVE_POINTS + 1
        problem = app.route("/run/synth/problem", {"id": [info["big"]]})[1]
        assert problem.count("<tr><th><a href=") == TOP_PROGRAMS
    finally:
        app.close()
