"""Campaign iterations/s against pipeline_depth (batches in flight), measured in one run, ratios to depth 1.

    .venv/bin/python bench/perf/pipeline_depth.py [--depths 0,1,2,4,8] [--iterations 60] [--repeats 3] [--ray]

Two workloads, each a real campaign (replay proposer, real sandbox pool, real SQLite archive):

* ``latency``: every candidate sleeps ``--eval-s`` (0.1 s) before defining ``f``, and the proposer takes
  ``--gen-s`` (0.02 s) per batch; 2 candidates per iteration (answers 1, group 2) on 8 sandboxes. This stands
  for evaluation that waits rather than computes (remote nodes, slow tests, an evaluator calling out) with more
  sandboxes than one iteration fills: the case depth > 1 is for.
* ``cpu``: PBE reference-sized candidates that compute, 2 sandboxes on this 2-core machine: depth > 1 cannot
  add cores here, so it should only cost nothing.

``--ray`` adds the latency workload through the Ray executor on a local 2-node cluster (127.0.0.1).
Depths are interleaved within each repeat; the median of repeats is printed. Every depth's archive must be the
same set of programs (same candidates, deduplicated the same way): checked, since only the order of work changes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a one-machine cluster: loopback only
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluators.pool import SandboxPool  # noqa: E402
from evolve.archive import Archive, archive_path  # noqa: E402
from evolve.config.schema import load_config  # noqa: E402
from evolve.launch.runner import start  # noqa: E402
from problems.suites import SUITES  # noqa: E402
from proposer.answers.parsing import format_answers  # noqa: E402
from proposer.backends.replay import ReplayBackend  # noqa: E402


class SlowReplay(ReplayBackend):
    """Replay that takes gen_s per call, standing for a proposer's generation time."""

    def __init__(self, path, gen_s: float):
        super().__init__(path)
        self.gen_s = gen_s

    def generate(self, prompts, n, sampling):
        time.sleep(self.gen_s)
        return super().generate(prompts, n, sampling)


def replay_file(path: Path, n: int, sleep_s: float) -> Path:
    """n distinct one-answer completions (no duplicates, so every iteration evaluates its 2 candidates)."""
    head = f"import time\ntime.sleep({sleep_s})\n" if sleep_s else ""
    lines = [format_answers([f"{head}def f(x):\n    return x + {i}\n"])[len("<answer_1>"):] for i in range(n)]
    path.write_text("\n".join(json.dumps({"text": t}) for t in lines) + "\n")
    return path


def one(tmp: Path, name: str, depth: int, a, workload: str, ray_address: str | None) -> tuple[float, list]:
    probs = [p for p in SUITES["pbe"]() if p.split == "train"][:4]
    replay = replay_file(tmp / f"{workload}.jsonl", 4 * a.iterations, a.eval_s if workload != "cpu" else 0)
    workers = 2 if workload == "cpu" else 8
    run = tmp / name
    cfg = load_config(None, {"problems": [p.id for p in probs], "proposer.spec": f"replay:{replay}",
                             "search.iterations": a.iterations, "search.islands": 1, "search.answers": 1,
                             "search.group": 2, "seed": 0, "search.pipeline_depth": depth,
                             "search.retire_solved": False, "executor.workers": workers,
                             "executor.eval_timeout": 10.0, "out": str(run)})
    backend = SlowReplay(replay, a.gen_s if workload != "cpu" else 0.0)
    if ray_address:
        from evaluators.ray_executor import RayExecutor

        ev = RayExecutor(address=ray_address, workers=workers // 2)
        ev.wait_for_nodes(2)
    else:
        ev = SandboxPool(workers=workers)
    try:
        ev.evaluate_many([(probs[0], probs[0].seed_code)] * workers)  # warm
        t0 = time.perf_counter()
        start(cfg, progress=False, backend=backend, evaluator=ev)
        rate = a.iterations / (time.perf_counter() - t0)
    finally:
        ev.close()
    with Archive(archive_path(run), readonly=True) as arc:
        programs = sorted((r["problem"], r["code_hash"], r["status"]) for r in arc.export_rows())
    return rate, programs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depths", default="0,1,2,4,8")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--eval-s", type=float, default=0.1)
    ap.add_argument("--gen-s", type=float, default=0.02)
    ap.add_argument("--ray", action="store_true", help="also the latency workload on a local 2-node Ray cluster")
    a = ap.parse_args()
    depths = [int(x) for x in a.depths.split(",")]
    workloads = [("latency", None), ("cpu", None)]
    cluster = None
    if a.ray:
        import ray
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                                "object_store_memory": 80 * 2**20})
        cluster.add_node(num_cpus=1, object_store_memory=80 * 2**20)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        workloads.append(("latency-ray", cluster.address))
    rates: dict[tuple[str, int], list[float]] = {}
    sets: dict[str, dict[int, list]] = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            for rep in range(a.repeats):
                for w, addr in workloads:
                    for depth in depths:
                        r, progs = one(Path(d), f"{w}-{depth}-{rep}", depth, a, w.split("-")[0], addr)
                        rates.setdefault((w, depth), []).append(r)
                        sets.setdefault(w, {})[depth] = progs
                        print(f"repeat {rep} {w:12s} depth {depth}: {r:6.2f} it/s", file=sys.stderr, flush=True)
    finally:
        if cluster is not None:
            import ray

            ray.shutdown()
            cluster.shutdown()
    print(f"\niterations/s, median of {a.repeats} ({a.iterations} iterations, eval {a.eval_s} s/candidate and "
          f"gen {a.gen_s} s/batch in the latency workload)")
    print(f"{'workload':14s}" + "".join(f"{'depth ' + str(d):>16s}" for d in depths))
    for w, _ in workloads:
        base = statistics.median(rates[(w, 1)]) if (w, 1) in rates else None
        cells = []
        for d in depths:
            med = statistics.median(rates[(w, d)])
            cells.append(f"{med:7.2f} ({med / base:4.2f})" if base else f"{med:7.2f}")
        print(f"{w:14s}" + "".join(f"{c:>16s}" for c in cells))
        first = next(iter(sets[w].values()))
        same = all(v == first for v in sets[w].values())
        print(f"{'':14s}same programs at every depth: {same}")


if __name__ == "__main__":
    main()
