"""The ray executor on a real local Ray cluster (head + one more node, each its own raylet process, on 127.0.0.1):
a campaign through it equals a local-executor campaign, also when a node is killed mid-run or the driver is
killed with -9 and resumed."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")  # on 127.0.0.1 only: tests/conftest.py sets Ray's single-machine switch

from evolve.archive import Archive  # noqa: E402
from evolve.config.schema import load_config  # noqa: E402
from evolve.launch.runner import start  # noqa: E402
from problems.suites import SUITES  # noqa: E402
from tests.campaign_helpers import ROOT, InFlight, last_iteration, pbe_replay, vevo  # noqa: E402

PBE = SUITES["pbe"]()
PROBS = [p for p in PBE if p.split == "heldout"][:3] + [p for p in PBE if p.split == "train"][:2]
IDS = [a for p in PROBS for a in ("--problem", p.id)]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    # fast node-death detection, small object stores: a 2-core test machine shared with other test runs
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": 80 * 2**20,
        "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3}})
    extra = c.add_node(num_cpus=1, object_store_memory=80 * 2**20)
    c.wait_for_nodes()
    assert c.address.startswith("127.0.0.1:")
    yield c, extra
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def export_csv(run: Path, tmp: Path) -> list[dict]:
    out = tmp / f"{run.name}.csv"
    vevo("export", str(run), "--format", "csv", "--out", str(out))
    with open(out) as f:
        return list(csv.DictReader(f))


def run_args(replay: Path, seed: int, iterations: int, depth: int = 1) -> list[str]:
    return [*IDS, "--proposer", f"replay:{replay}", "--iterations", str(iterations), "--answers", "3", "--group",
            "2", "--workers", "1", "--seed", str(seed), "--pipeline-depth", str(depth), "--quiet"]


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_node(cluster, node) -> None:
    """What a machine failure does to a node: its raylet and every process under it (the sandbox actor) SIGKILLed
    at once. remove_node alone kills the raylet, and an actor whose raylet died may go on answering for a while."""
    raylet = node.all_processes["raylet"][0].process.pid
    for pid in [raylet, *descendants(raylet)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    cluster.remove_node(node, allow_graceful=False)


class KillNodeOnCall:
    """An Evaluator that hands every call to the Ray executor and, at the first call from `at` on with two or more
    candidates, first kills the extra node (its raylet and the workers under it, SIGKILL): the executor does not
    know yet, so that call's chunk for the node is lost in flight and must run again on the head."""

    def __init__(self, inner, cluster, node, at: int):
        self.inner, self.cluster, self.node, self.at = inner, cluster, node, at
        self.killed_at: int | None = None
        self.inflight = InFlight()  # at pipeline depth > 1 calls come from several threads

    def evaluate_many(self, items, time_limit=None):
        with self.inflight as c:
            with c.lock:
                if self.killed_at is None and c.calls >= self.at and len(items) >= 2:
                    kill_node(self.cluster, self.node)
                    self.killed_at = c.calls
            return self.inner.evaluate_many(items, time_limit)

    def close(self):
        self.inner.close()


@pytest.mark.parametrize("depth", [1, 3])
def test_campaign_on_two_node_cluster_survives_a_node_kill(cluster, tmp_path, depth):
    """At depth 3, three batches are evaluated at once through the one executor (concurrent calls)."""
    from evaluators.ray_executor import RayExecutor

    c, extra = cluster
    if depth > 1:
        extra = c.add_node(num_cpus=1, object_store_memory=80 * 2**20)  # the depth-1 case killed the first one
        c.wait_for_nodes()
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    vevo("run", *run_args(replay, 5, 30, depth), "--out", str(tmp_path / "local"))
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    try:
        ex = RayExecutor(workers=1)
        assert ex.wait_for_nodes(2) == 2 and ex.isolation.get("pid") and ex.isolation.get("network") == "netns"
        wrapped = KillNodeOnCall(ex, c, extra, at=6)
        cfg = load_config(None, {"problems": [p.id for p in PROBS], "proposer.spec": f"replay:{replay}",
                                 "search.iterations": 30, "search.answers": 3, "search.group": 2,
                                 "executor.workers": 1, "seed": 5, "search.pipeline_depth": depth,
                                 "executor.kind": "ray", "executor.ray_address": c.address,
                                 "out": str(tmp_path / "ray")})
        start(cfg, progress=False, evaluator=wrapped)
        assert wrapped.killed_at is not None and wrapped.killed_at < wrapped.inflight.calls  # mid-run
        assert ex.lost_nodes == 1 and ex.rerun > 0  # the dead node's candidates ran again on the head
        assert wrapped.inflight.peak == depth  # at depth 3, three batches were evaluated at once
        assert len(ex.nodes) == 1
        ex.close()
    finally:
        ray.shutdown()
    a, b = export_csv(tmp_path / "local", tmp_path), export_csv(tmp_path / "ray", tmp_path)
    assert a == b and len(a) > 30  # nothing lost, nothing duplicated, same order
    its = []
    for name in ("local", "ray"):
        with Archive(tmp_path / name / "archive.db", readonly=True) as arc:
            its.append([r.iteration for r in arc.metrics_rows()])
    assert its[0] == its[1] == list(range(len(its[0])))


@pytest.mark.parametrize("depth", [1, 3])
def test_kill_nine_of_a_ray_driver_then_resume(cluster, tmp_path, depth):
    """`vevo run --executor ray --ray-address` killed with -9 after some iterations, twice; `vevo resume` each
    time; the export equals a local-executor run of the same seed and depth."""
    c, _ = cluster
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("search: {retire_solved: false}\n")
    args = [str(cfg), *run_args(replay, 3, 120, depth)]
    vevo("run", *args, "--out", str(tmp_path / "ref"))
    run = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for k, target in enumerate((10, 50)):
        cmd = (["run", *args, "--executor", "ray", "--ray-address", c.address, "--out", str(run)] if k == 0
               else ["resume", str(run), "--quiet"])
        p = subprocess.Popen([sys.executable, "-m", "evolve.cli", *cmd], cwd=str(ROOT), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        end = time.time() + 120
        while p.poll() is None and last_iteration(run) < target and time.time() < end:
            time.sleep(0.01)
        assert p.poll() is None, p.stderr.read().decode()[-3000:]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    r = vevo("resume", str(run), "--quiet", timeout=300)
    assert "120 iterations" in r.stdout
    assert export_csv(tmp_path / "ref", tmp_path) == export_csv(run, tmp_path)
