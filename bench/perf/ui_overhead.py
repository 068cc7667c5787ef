"""Does an open `vevo ui` slow the campaign? The loop of bench/perf/loop_overhead.py (instant proposer, instant
evaluator, real SQLite archive: the loop's own cost, where a reader would show most) with no UI, and with
`vevo ui` attached in its own process while two "browsers" follow it as live.js does: an events stream and, on
every change, a fetch of the page (one on the runs overview, one on the curves).

Runs alternate (none, ui, none, ui, ...) so machine load drifts hit both. The UI attaches once the run's
archive exists (`vevo ui` refuses a folder without one) and takes ~1 s to start, so each run is measured over its
second half only, and a UI run counts only if its clients were already fetching pages then. Per run the median
ms/iteration over that half, then the median over runs and the ratio ui/none. Wall-clock numbers are printed,
never asserted.

    .venv/bin/python bench/perf/ui_overhead.py                 # 3 + 3 runs of 4,000 programs
    .venv/bin/python bench/perf/ui_overhead.py --runs 5 --programs 8000
"""
from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _loop_overhead():
    from bench.perf import loop_overhead

    return loop_overhead


class Browsers:
    """Starts `vevo ui` on the run once its archive exists, then follows it like two open pages."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.stop = threading.Event()
        self.fetches = 0
        self.first_fetch: float | None = None
        self.proc: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        from evolve.archive import archive_path

        while not archive_path(self.run_dir).exists():
            if self.stop.wait(0.005):
                return
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "ui", str(self.run_dir), "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        url = self.proc.stdout.readline().strip()
        if not url:
            raise RuntimeError(f"vevo ui did not start: {self.proc.stderr.read()}")
        port = int(url.rsplit(":", 1)[1].strip("/"))
        events = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        events.request("GET", "/api/events")
        stream = events.getresponse()
        pages = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(2)]
        try:
            while not self.stop.is_set():
                line = stream.fp.readline()
                if not line:
                    return
                if line.startswith(b"data:"):
                    for conn, path in zip(pages, ("/", "/curves")):
                        conn.request("GET", path)
                        conn.getresponse().read()
                        self.fetches += 1
                        if self.first_fetch is None:
                            self.first_fetch = time.perf_counter()
        except OSError:
            pass
        finally:
            events.close()
            for c in pages:
                c.close()

    def close(self) -> None:
        self.stop.set()
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each kind (alternating)")
    ap.add_argument("--programs", type=int, default=40_000)
    args = ap.parse_args()
    lo = _loop_overhead()
    results: dict[str, list[float]] = {"none": [], "ui": []}
    fetched = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.runs):
            for kind in ("none", "ui"):
                run_dir = Path(tmp) / f"{kind}-{k}"
                browsers = Browsers(run_dir) if kind == "ui" else None
                t0 = time.perf_counter()
                try:
                    r = lo.run_vevo(run_dir, args.programs, depth=0)
                finally:
                    if browsers is not None:
                        browsers.close()
                        fetched.append(browsers.fetches)
                half = len(r["ms"]) // 2
                second_half_starts = t0 + sum(r["ms"][:half]) / 1e3
                if browsers is not None and (browsers.first_fetch is None or browsers.first_fetch > second_half_starts):
                    print(f"run {k} ui: the UI was not attached by mid-run; not counted (use more --programs)")
                    continue
                ms = statistics.median(r["ms"][half:])
                results[kind].append(ms)
                print(f"run {k} {kind:>4}: {r['iterations']} iterations, median {ms:.3f} ms/iteration"
                      + (f", {browsers.fetches} page fetches by the UI's clients" if browsers else ""), flush=True)
    none, ui = statistics.median(results["none"]), statistics.median(results["ui"])
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"median ms/iteration: none {none:.3f}, ui {ui:.3f}; ratio ui/none {ui / none:.3f} "
          f"(spread of none: {min(results['none']):.3f}..{max(results['none']):.3f}, "
          f"ui: {min(results['ui']):.3f}..{max(results['ui']):.3f})")


if __name__ == "__main__":
    main()
