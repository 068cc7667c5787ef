"""`vevo ui` bounds each request (evolve/ui/budget.py): shown fields cut with a note, a page over the size budget
cut at a safe boundary with a note, a render past its deadline answered with a "took too long" page while other
requests are served. Real archives (written by `Archive`), a real HTTP server on 127.0.0.1."""
from __future__ import annotations

import http.client
import json
import sqlite3
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest

from evaluators.types import Evaluation
from evolve.archive import Archive, ProgramRecord
from evolve.ui import budget
from evolve.ui.server import App, Server

CODE = "# EVOLVE-BLOCK-START\ndef solve(s):\n    return len(s)\n# EVOLVE-BLOCK-END\n"


def make_run(run: Path, programs: list[tuple[str, dict]]) -> list[int]:
    """A run folder whose archive holds a seed and then each (code, artifacts) as a child of the seed."""
    run.mkdir(parents=True)
    ok = Evaluation(vector=[1.0], scalar=1.0, solved=True, status="ok")
    with Archive(run / "archive.db") as a:
        a.set_meta("problems", json.dumps(["p"]))
        a.set_meta("config", json.dumps({"search": {"iterations": 1, "islands": 1, "answers": 1, "group": 1}}))
        (seed,) = a.record_iteration(0, [], [ProgramRecord(problem="p", island=-1, code=CODE, evaluation=ok)],
                                     {"seeds": 1})
        ids = [seed]
        for k, (code, arts) in enumerate(programs):
            ev = Evaluation(vector=[0.0], scalar=0.0, solved=False, status="crash", artifacts=arts)
            ids += a.record_iteration(k + 1, [], [ProgramRecord(problem="p", island=0, code=code, evaluation=ev,
                                                               parent_ids=[seed])], {"problem": "p", "island": 0})
    return ids


@pytest.fixture
def serve():
    servers = []

    def start(runs: dict[str, list[Path]], **kw) -> str:
        s = Server(runs, **kw)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
        return s.url

    yield start
    for s in servers:
        s.shutdown()


def get(url: str, path: str) -> tuple[int, str]:
    host, port = url.split("//")[1].rstrip("/").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8")
    finally:
        c.close()


class Balance(HTMLParser):
    """The elements left open at the end of a page (void elements aside)."""

    VOID = {"meta", "input", "br", "img", "hr", "link", "col", "area", "base", "embed", "source", "track", "wbr"}

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()


def balanced(page: str) -> bool:
    p = Balance()
    p.feed(page)
    p.close()
    return p.stack == []


def test_huge_code_and_error_are_cut_with_a_note_and_the_page_stays_under_the_cap(tmp_path, serve):
    code = CODE + "# " + "x" * 3_000_000 + "\n"
    error = "Traceback <b>hostile</b>\n" + "E" * 2_000_000
    stdout = "o" * 500_000
    ids = make_run(tmp_path / "run", [(code, {"error": error, "stdout": stdout})])
    url = serve({"run": [tmp_path / "run"]})
    status, page = get(url, f"/run/run/program/{ids[1]}")
    assert status == 200 and len(page.encode()) < budget.MAX_PAGE_BYTES
    assert f"… ({len(code) - budget.MAX_FIELD_CHARS} more characters)" in page
    assert f"… ({len(error) - budget.MAX_FIELD_CHARS} more characters)" in page
    assert f"… ({len(stdout) - budget.MAX_FIELD_CHARS} more characters)" in page
    assert "&lt;b&gt;hostile&lt;/b&gt;" in page and "id='truncated'" not in page and balanced(page)
    status, problem = get(url, "/run/run/problem?id=p")  # the best program's code is a shown field too
    assert status == 200 and "more characters)" not in problem  # the seed is the best here: small, uncut
    small = get(url, f"/run/run/program/{ids[0]}")[1]
    assert "more characters)" not in small and "return len(s)" in small


def test_a_page_over_the_size_budget_is_cut_and_ends_with_the_note(tmp_path, serve):
    """An evaluator's feedback of 100 keys, each a full field: the program page is over 8 MB (the default cap)."""
    arts = {f"key{k:03d}": f"<i>{k}</i>" + "z" * budget.MAX_FIELD_CHARS for k in range(100)}
    ids = make_run(tmp_path / "run", [(CODE, arts)])
    url = serve({"run": [tmp_path / "run"]})
    status, page = get(url, f"/run/run/program/{ids[1]}")
    assert status == 200 and len(page.encode()) <= budget.MAX_PAGE_BYTES
    tail = page[-2000:]
    assert "truncated: this page is over 8 MB; showing the first" in tail
    assert tail.rstrip().endswith("</main></body></html>") and balanced(page)
    assert "key000" in page and "key099" not in page
    # the same page under a smaller cap (the Server parameter): cut sooner, still closed
    url = serve({"run": [tmp_path / "run"]}, max_bytes=300_000)
    status, page = get(url, f"/run/run/program/{ids[1]}")
    assert status == 200 and len(page.encode()) <= 300_000 and "id='truncated'" in page[-2000:]
    assert balanced(page)
    # a page under the cap is untouched
    assert budget.cap_html(page, 10 ** 9) == page


def test_a_render_past_its_deadline_says_so_while_other_requests_are_served(tmp_path, serve):
    """One run's archive is held under an exclusive lock by another process's connection (its readers wait on
    SQLite's busy timeout): its page is answered "took too long" at the deadline, and a page of the other run is
    served meanwhile; once the lock goes, the page renders again."""
    ids = make_run(tmp_path / "locked", [(CODE, {})])
    make_run(tmp_path / "free", [(CODE, {"error": "boom"})])
    db = tmp_path / "locked" / "archive.db"
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA journal_mode=DELETE")  # a rollback-journal file: an exclusive lock keeps readers out
    url = serve({"locked": [tmp_path / "locked"], "free": [tmp_path / "free"]}, render_seconds=1.0)
    assert get(url, "/run/locked/training")[0] == 200 and get(url, "/run/free")[0] == 200  # meta read, warm
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    got: dict[str, tuple[int, str]] = {}
    slow = threading.Thread(target=lambda: got.update(slow=get(url, f"/run/locked/program/{ids[1]}")))
    try:
        slow.start()
        status, page = get(url, f"/run/free/program/{ids[1]}")  # while the locked render waits
        assert status == 200 and "boom" in page
        slow.join(30)
        assert not slow.is_alive(), "the request past its deadline was never answered"
        status, page = got["slow"]
        assert status == 503 and "This page took too long" in page and "time budget of 1 s" in page
        assert "narrower view" in page and balanced(page)
        assert get(url, "/run/free/training")[0] == 200
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    status, page = get(url, f"/run/locked/program/{ids[1]}")
    assert status == 200 and f"Program {ids[1]}" in page


def test_the_deadline_is_checked_by_the_work_itself(tmp_path):
    """Cooperative checks: a real render given no time stops at its first check (TooSlow), not at the join;
    without a deadline (`vevo report`'s freeze) the same render completes; what it caches is computed anyway."""
    ids = make_run(tmp_path / "run", [(CODE, {"error": "e"})])
    app = App({"run": [tmp_path / "run"]})
    try:
        with pytest.raises(budget.TooSlow):
            budget.within(lambda: app.route(f"/run/run/program/{ids[1]}", {}), 0.0)
        assert f"Program {ids[1]}" in app.route(f"/run/run/program/{ids[1]}", {})[1]
        assert not budget.expired()
        # a cache the render fills (the curve fold) is filled to the end though the render is past its deadline
        store = app.stores["run"]
        assert store._curve.last_id == 0
        with pytest.raises(budget.TooSlow):
            budget.within(lambda: (store.curve_points(), store.members(), budget.check()), 0.0)
        assert store._curve.last_id == ids[-1] and store._curve.points[-1][0] == 1
    finally:
        app.close()


def test_vevo_ui_takes_the_budgets_as_flags(tmp_path):
    """`vevo ui --max-page-mb`: the page cut at that size; a budget out of range: one line."""
    import os
    import signal
    import subprocess
    import sys

    from tests.campaign_helpers import ROOT, interruptible, vevo

    arts = {f"key{k:02d}": "z" * 50_000 for k in range(20)}
    ids = make_run(tmp_path / "run", [(CODE, arts)])
    for bad, low in ((["--max-page-mb", "0.01"], "0.05"), (["--render-seconds", "nan"], "0"),
                     (["--render-seconds", "-1"], "0")):
        r = vevo("ui", str(tmp_path / "run"), "--port", "0", *bad, check=False, timeout=60)
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"vevo: error: {bad[0]} {float(bad[1])}: expected a number over {low}"], r.stderr
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "ui", str(tmp_path / "run"), "--port", "0",
                             "--max-page-mb", "0.25", "--render-seconds", "30"], cwd=str(ROOT),
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://"), proc.stderr.read() if proc.poll() is not None else url
        status, page = get(url, f"/run/run/program/{ids[1]}")
        assert status == 200 and len(page.encode()) <= 0.25 * (1 << 20)
        assert "truncated: this page is over 0.25 MB" in page[-2000:] and balanced(page)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


def test_json_over_the_budget_is_one_line_of_json_and_small_bodies_pass():
    from evolve.ui.server import cap

    big = json.dumps([{"name": "x" * 1000}] * 100)
    out = cap("application/json", big, 10_000)
    assert json.loads(out) == {"error": f"truncated: this response is over {budget.mb(10_000)} "
                                        f"({budget.mb(len(big))})"}
    assert cap("application/json", big, 10 ** 6) is big and cap("application/javascript", b"x", 10) == b"x"
