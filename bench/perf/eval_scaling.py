"""Evaluations/second: the local sandbox pool vs the Ray executor (one node, then two nodes), same candidates,
same sandboxes per node, measured in one run.

    .venv/bin/python bench/perf/eval_scaling.py [--n 240] [--workers 1] [--batch 8 --batch 120] [--repeats 2]

Candidates are MBPP reference solutions with their asserts (``../shared/data/mbpp``), or PBE references when that
file is absent. ``--batch`` is how many candidates one ``evaluate_many`` call carries: 8 is a campaign iteration
(answers x group after dedupe), a large batch is what a pipelined or many-problem campaign can hand over.
Candidates that time out at 2 s are dropped first (their verdict depends on timing, not on the executor).
Every configuration evaluates the same list; results are checked equal to the local pool's, so the comparison
is of where candidates run, not of what they compute. The Ray cluster is a real local one on 127.0.0.1: a head
and one more raylet process (``ray.cluster_utils.Cluster``); "1 node" is an executor held to one of them
(``max_nodes=1``). Configurations are interleaved within each repeat (best of repeats is kept), so load from
other work on the machine hits them alike. A
node's sandboxes share this machine's cores, so two nodes here measure the executor's overhead and its
spreading, not more hardware. Printed: evaluations/s per configuration and batch, and the ratio to the local pool
with the same total number of sandboxes.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a one-machine cluster: loopback only
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluators.pool import SandboxPool  # noqa: E402
from problems.model import Problem  # noqa: E402

from bench.perf.eval_throughput import MBPP, load as load_mbpp  # noqa: E402  (one MBPP loader for both benches)


def load(n: int) -> list[tuple[Problem, str]]:
    """eval_throughput's MBPP candidates, or PBE references where ../shared is absent."""
    if MBPP.is_file():
        return load_mbpp(n)
    from problems.suites import SUITES

    probs = SUITES["pbe"]()
    items: list[tuple[Problem, str]] = []
    while len(items) < n:
        items += [(p, p.reference_code) for p in probs][: n - len(items)]
    return items


def one_pass(ev, items, batch: int) -> tuple[float, list]:
    """Evaluations/s over the whole list, handed over `batch` candidates per call."""
    t0 = time.perf_counter()
    out = []
    for i in range(0, len(items), batch):
        out += ev.evaluate_many(items[i:i + batch])
    return len(items) / (time.perf_counter() - t0), out


def same(a, b) -> bool:
    return all(x.status == y.status and x.vector == y.vector for x, y in zip(a, b)) and len(a) == len(b)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=240)
    ap.add_argument("--workers", type=int, default=1, help="sandboxes per node (and in the local pool)")
    ap.add_argument("--batch", type=int, action="append", help="candidates per call (repeatable; default 8, 120)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    batches = args.batch or [8, 120]
    items = load(args.n)
    with SandboxPool(workers=2) as pool:  # near-limit candidates (mbpp/123 runs ~10 s) make verdicts timing-bound
        items = [it for it, ev in zip(items, pool.evaluate_many(items, time_limit=2.0)) if ev.status != "timeout"]
    w = args.workers
    print(f"{len(items)} candidates ({'MBPP' if MBPP.is_file() else 'PBE'}), {w} sandbox(es) per node, "
          f"{os.cpu_count()} cores, best of {args.repeats}")
    import ray
    from ray.cluster_utils import Cluster

    from evaluators.ray_executor import RayExecutor

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    evs = {f"local x{w}": SandboxPool(workers=w), f"local x{2 * w}": SandboxPool(workers=2 * w),
           "ray 1 node": RayExecutor(workers=w, max_nodes=1), "ray 2 nodes": RayExecutor(workers=w)}
    res: dict[tuple[str, int], float] = {}
    try:
        assert evs["ray 2 nodes"].wait_for_nodes(2) == 2, "the second node's sandbox actor did not start"
        for ev in evs.values():  # warm: problems shipped, every worker's first fork done
            ev.evaluate_many(items[:16])
        # configurations interleaved in every repeat, so a load spike from other work on the machine hits all alike
        for _ in range(args.repeats):
            for b in batches:
                ref = None
                for name, ev in evs.items():
                    r, out = one_pass(ev, items, b)
                    res[(name, b)] = max(res.get((name, b), 0.0), r)
                    ref = ref if ref is not None else out
                    assert same(out, ref), f"{name}: results differ from the local pool's"
    finally:
        for ev in evs.values():
            ev.close()
        ray.shutdown()
        c.shutdown()

    base = {"local x%d" % w: f"local x{w}", "ray 1 node": f"local x{w}", "local x%d" % (2 * w): f"local x{2 * w}",
            "ray 2 nodes": f"local x{2 * w}"}
    print(f"{'configuration':<14}" + "".join(f"{'batch ' + str(b):>22}" for b in batches))
    for name in (f"local x{w}", "ray 1 node", f"local x{2 * w}", "ray 2 nodes"):
        cells = []
        for b in batches:
            r = res[(name, b)]
            cells.append(f"{r:8.1f}/s  x{r / res[(base[name], b)]:.2f}")
        print(f"{name:<14}" + "".join(f"{c:>22}" for c in cells))
    for b in batches:
        print(f"batch {b}: ray 2 nodes / ray 1 node = {res[('ray 2 nodes', b)] / res[('ray 1 node', b)]:.2f}; "
              f"local x{2 * w} / local x{w} = {res[(f'local x{2 * w}', b)] / res[(f'local x{w}', b)]:.2f}")
    print("ratios in a cell: vs the local pool with the same total number of sandboxes "
          f"(ray 1 node vs local x{w}, ray 2 nodes vs local x{2 * w})")


if __name__ == "__main__":
    main()
