"""How soon does a committed program show in an open `vevo ui` page? A run folder written through the real
`Archive` API, `vevo ui` on it (its own process), the runs overview open in headless Chromium (Debian's, through
Playwright); then, repeatedly, one iteration committed and the time until the page's program count shows it,
without a reload. Printed, never asserted (the issue asks for ~2 s).

    .venv/bin/python bench/perf/ui_latency.py [--commits 10]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=10)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from evaluators.types import Evaluation
    from evolve.archive import Archive, ProgramRecord, archive_path

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        archive = Archive(archive_path(run))
        archive.set_meta("problems", json.dumps(["p"]))
        archive.set_meta("config", json.dumps({"search": {"iterations": 10 ** 6}}))

        def commit(it: int) -> None:
            archive.record_iteration(it, [], [ProgramRecord(problem="p", island=0, code=f"x = {it}\n",
                                                            evaluation=Evaluation(vector=[0.5], scalar=0.5,
                                                                                  solved=False, status="wrong"))],
                                     {"gen_seconds": 0.1, "eval_seconds": 0.1})

        commit(0)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        ui = subprocess.Popen([sys.executable, "-m", "evolve.cli", "ui", str(run), "--port", "0"], env=env,
                              stdout=subprocess.PIPE, text=True)
        url = ui.stdout.readline().strip()
        delays = []
        try:
            with sync_playwright() as p:
                chromium = shutil.which("chromium") or "/usr/bin/chromium"
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(bypass_csp=True)
                page.goto(url)
                page.wait_for_function("document.getElementById('live-state').textContent.startsWith('live')")
                cell = "#runs td.programs"
                for it in range(1, args.commits + 1):
                    time.sleep(0.3 + 0.17 * it % 0.5)  # commits land at different phases of the 0.5 s poll
                    t0 = time.perf_counter()
                    commit(it)
                    page.wait_for_function(f"document.querySelector('{cell}').textContent == '{it + 1}'",
                                           polling=10, timeout=30_000)
                    delays.append(time.perf_counter() - t0)
                browser.close()
        finally:
            ui.terminate()
            ui.wait()
            archive.close()
    print(f"commit -> visible in the open page, {len(delays)} commits: median {statistics.median(delays):.2f} s, "
          f"max {max(delays):.2f} s")


if __name__ == "__main__":
    main()
