"""Campaign iterations/s with a proposer served over HTTP: 1 vs 2 `openai:` replicas, pipeline depth 1 vs 4,
measured in one run, ratios to (1 replica, depth 1).

    .venv/bin/python bench/perf/replica_depth.py [--iterations 24] [--repeats 3] [--delay 0.25]

The servers are the test suite's OpenAI-compatible server on 127.0.0.1 (tests/openai_helpers.py) sampling
the bundled tiny proposer with transformers. Each server answers one request at a time and each request takes
``--delay`` seconds more: a saturated GPU server, one per replica (on this 2-core machine the tiny model's own
compute is shared by both servers, so it cannot stand for separate hardware; ``--max-tokens`` keeps it small).
At depth 1 a campaign has one generation in flight whatever the number of replicas; at depth D a CONCURRENT
proposer generates the D batches in flight at once, spread over the replicas.
Every configuration's archive is checked equal to (1 replica, depth 4)'s or (1 replica, depth 1)'s: the replica
count never changes what a run finds, the depth changes only which parents are used.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evolve.archive import Archive, archive_path  # noqa: E402
from evolve.config.schema import load_config  # noqa: E402
from evolve.launch.runner import start  # noqa: E402
from proposer.backends import TINY_CHECKPOINT, make_backend  # noqa: E402
from tests.openai_helpers import MODEL_NAME, Server, TinyLM  # noqa: E402


class SerialLM(TinyLM):
    """One request at a time, each `delay` s longer than the tiny model's own sampling."""

    def __init__(self, path, delay: float):
        super().__init__(path)
        self.delay, self.busy = delay, threading.Lock()

    def sample(self, *args, **kw):
        with self.busy:
            time.sleep(self.delay)
            return super().sample(*args, **kw)


def one(tmp: Path, name: str, urls: list[str], depth: int, a) -> tuple[float, list]:
    spec = "openai:" + ",".join(urls)
    cfg = load_config(None, {"problems": ["pbe/int-0", "pbe/list-1"], "proposer.spec": spec,
                             "search.iterations": a.iterations, "search.islands": 2, "search.answers": 2,
                             "search.group": 2, "executor.workers": 2, "sampling.max_tokens": a.max_tokens, "seed": 4,
                             "search.retire_solved": False, "search.pipeline_depth": depth, "out": str(tmp / name)})
    backend = make_backend(spec, model=MODEL_NAME, chat=False)
    t0 = time.perf_counter()
    start(cfg, progress=False, backend=backend)
    rate = a.iterations / (time.perf_counter() - t0)
    with Archive(archive_path(tmp / name), readonly=True) as a:
        return rate, a.export_rows()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.4)
    ap.add_argument("--max-tokens", type=int, default=8)
    a = ap.parse_args()
    servers = [Server(SerialLM(TINY_CHECKPOINT, a.delay)) for _ in range(2)]
    configs = [(1, 1), (2, 1), (1, 4), (2, 4)]  # (replicas, depth)
    rates: dict[tuple[int, int], list[float]] = {}
    rows: dict[tuple[int, int], list] = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            for rep in range(a.repeats):
                for n, depth in configs:
                    r, rows[(n, depth)] = one(Path(d), f"{n}-{depth}-{rep}", [s.url for s in servers[:n]], depth, a)
                    rates.setdefault((n, depth), []).append(r)
                    print(f"repeat {rep} replicas {n} depth {depth}: {r:5.2f} it/s", file=sys.stderr, flush=True)
    finally:
        for s in servers:
            s.stop()
    base = statistics.median(rates[(1, 1)])
    print(f"\niterations/s, median of {a.repeats} ({a.iterations} iterations, 4 candidates each; each server one "
          f"request at a time, {a.delay} s + the tiny model's {a.max_tokens} tokens)")
    for key in configs:
        med = statistics.median(rates[key])
        print(f"  replicas {key[0]}  depth {key[1]}: {med:6.2f} it/s ({med / base:4.2f})")
    print(f"same archive with 1 and 2 replicas: depth 1 {rows[(1, 1)] == rows[(2, 1)]}, "
          f"depth 4 {rows[(1, 4)] == rows[(2, 4)]}")


if __name__ == "__main__":
    main()
