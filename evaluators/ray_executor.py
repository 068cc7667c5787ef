"""The ``ray`` executor: candidates evaluated on every node of a Ray cluster, each node behind one warm sandbox pool.

Decisions:

* One actor per alive node (hard node affinity, ``num_cpus=0`` so it never competes with the node's other work for
  Ray's CPU slots) holds a ``SandboxPool`` of ``workers`` sandboxes: the same jail, namespaces and cgroups as the
  local executor, so every node must run its Ray workers as root, like a local campaign.
* Problems are put in the object store once and fetched by each actor once: the driver remembers which problems an
  actor holds (once a chunk of them came back) and hands over references only for the others; the actor fetches
  them to its node and keeps them.
* One call's candidates are cut into chunks (one per ready actor, at most ``max_chunk`` candidates each) and results
  are filled by input index, so order and content do not depend on where a candidate ran.
* A chunk whose actor or node is lost (actor died, node died, object lost) goes back to the queue and runs on
  another actor; each index is filled once, so nothing is lost or counted twice. The campaign commits an
  iteration only when every result of it is in (the archive's atomic iteration stays the unit of commit).
* Nodes that join later get an actor, started in the background and used once it answers.
* An actor runs up to ``workers + 1`` chunks at once (a threaded actor; its pool hands each chunk the sandboxes
  that are free), so small chunks from several calls keep all of a node's sandboxes busy, and one more waits.
* Several threads may call ``evaluate_many`` at once (a campaign with ``pipeline_depth`` > 1): the node table is
  shared under one lock, each call keeps its own chunks in flight, and a call that finds every actor at its
  limit waits for any call to free one. Only ``ray.wait`` and ``ray.get`` run outside the lock.
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Iterable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from problems.model import Problem

from .errors import ExecutorError
from .ray_cluster import connect, lost_errors
from .types import Evaluation

LOST = lost_errors()  # what a lost actor or node looks like; anything else an actor raises is a bug and propagates
REFRESH_S = 2.0       # how often the node list is read again while work is in flight
NO_NODE_TIMEOUT = 120.0  # seconds with no actor able to take work before giving up


@ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)
class SandboxNode:
    """A warm SandboxPool on one node, and the problems this node has been sent."""

    def __init__(self, workers: int, hide: list[str]):
        from evaluators.pool import SandboxPool

        self.pool = SandboxPool(workers=workers, hide=hide)
        self.problems: dict[str, Problem] = {}

    def info(self) -> dict:
        return {"node": ray.get_runtime_context().get_node_id(), "isolation": self.pool.isolation}

    def evaluate(self, new: dict[str, list], items: list[tuple[str, str]],
                 time_limit: float | None) -> list[Evaluation]:
        for key, (ref,) in new.items():  # references nested in a dict are not resolved by Ray: fetched here, once
            if key not in self.problems:  # chunks running side by side may both carry it
                self.problems[key] = ray.get(ref)
        return self.pool.evaluate_many([(self.problems[k], code) for k, code in items], time_limit)

    def close(self) -> None:
        self.pool.close()


class _Node:
    def __init__(self, node_id: str, handle, ready_ref):
        self.node_id, self.handle, self.ready_ref = node_id, handle, ready_ref
        self.ready = False
        self.held: set[str] = set()  # problem keys this actor already has
        self.busy = 0                # chunks in flight


class RayExecutor:
    """Evaluator over a Ray cluster. address: ``ray.init`` address (None: start a local Ray here, or use the one
    this process is already connected to). workers: sandboxes per node."""

    def __init__(self, address: str | None = None, workers: int = 2, hide: Iterable[str] = (), max_chunk: int = 64,
                 ready_timeout: float = NO_NODE_TIMEOUT, max_nodes: int | None = None):
        """max_nodes: use at most this many nodes (None: all of them)."""
        self.workers, self.hide, self.max_chunk = max(1, int(workers)), [str(h) for h in hide], max(1, int(max_chunk))
        self.max_nodes = max_nodes
        self.ready_timeout = float(ready_timeout)
        self._own = connect(address, ExecutorError)
        self.nodes: dict[str, _Node] = {}
        self._gone: set[str] = set()  # nodes whose actor was lost: no new actor there (a restarted node has a new id)
        self.problems: dict[str, tuple[Problem, ray.ObjectRef]] = {}
        self._turn = 0
        self.rerun = 0   # candidates re-run because their node or actor was lost
        self.lost_nodes = 0
        self._last_refresh = 0.0
        self._lock = threading.RLock()
        self._freed = threading.Condition(self._lock)  # notified when a chunk's result is in
        with self._lock:
            self._refresh()
            self._wait_ready()

    # ------------------------------------------------------------------ nodes
    def _refresh(self) -> None:
        """Drop actors of nodes that are gone; start one on each node that has none."""
        self._last_refresh = time.monotonic()
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        for nid in [n for n in self.nodes if n not in alive]:
            self._drop(nid)
        for nid in sorted(alive - set(self.nodes) - self._gone):
            if self.max_nodes is not None and len(self.nodes) >= self.max_nodes:
                break
            h = SandboxNode.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False),
                                    max_concurrency=self.workers + 1, name=None).remote(self.workers, self.hide)
            self.nodes[nid] = _Node(nid, h, h.info.remote())

    def _drop(self, nid: str) -> None:
        node = self.nodes.pop(nid, None)
        if node is None:
            return
        self._gone.add(nid)
        self.lost_nodes += int(node.ready)
        try:
            ray.kill(node.handle, no_restart=True)
        except Exception:
            pass

    def _poll_ready(self, timeout: float = 0.0) -> None:
        waiting = {n.ready_ref: n for n in self.nodes.values() if not n.ready}
        if not waiting:
            return
        done, _ = ray.wait(list(waiting), num_returns=1 if timeout else len(waiting), timeout=timeout)
        if timeout:  # then take whatever else is already there too
            done = set(done) | set(ray.wait(list(waiting), num_returns=len(waiting), timeout=0)[0])
        for ref in done:
            node = waiting[ref]
            try:
                ray.get(ref)
                node.ready = True
            except LOST:
                self._drop(node.node_id)
            except Exception as e:  # the sandbox could not start there (not root, no namespaces): say so
                self._drop(node.node_id)
                raise ExecutorError(" ".join(f"ray: the sandbox failed to start on node {node.node_id[:8]}: "
                                             f"{type(e).__name__}: {e}".split())[:300]) from None

    def _ready_nodes(self) -> list[_Node]:
        self._poll_ready()
        return [n for n in self.nodes.values() if n.ready]

    def _wait_ready(self) -> list[_Node]:
        """At least one ready actor, waiting for nodes (and reading the node list again) up to ready_timeout."""
        end = time.monotonic() + self.ready_timeout
        while True:
            ready = self._ready_nodes()
            if ready:
                return ready
            if time.monotonic() > end:
                raise ExecutorError(f"ray: no node could take sandbox work for {self.ready_timeout:.0f} s")
            if time.monotonic() - self._last_refresh > REFRESH_S or not self.nodes:
                self._refresh()
            if self.nodes:
                self._poll_ready(timeout=min(REFRESH_S, max(0.01, end - time.monotonic())))
            else:
                time.sleep(0.2)

    def wait_for_nodes(self, n: int, timeout: float = 60.0) -> int:
        """Wait until n nodes have a ready sandbox actor (benches and tests that need every node warm); returns
        how many are ready then."""
        end = time.monotonic() + timeout
        with self._lock:
            while len(self._ready_nodes()) < n and time.monotonic() < end:
                self._refresh()
                self._poll_ready(timeout=0.2)
            return len(self._ready_nodes())

    @property
    def isolation(self) -> dict:
        """The sandbox layers active on one ready node (every node runs the same pool code)."""
        with self._lock:
            ready = self._ready_nodes()
        return ray.get(ready[0].ready_ref)["isolation"] if ready else {}

    # ------------------------------------------------------------------ problems
    def _key(self, p: Problem) -> str:
        """The key a problem is shipped under: its id, or id@k when another object already uses the id."""
        k, key = 0, p.id
        while key in self.problems and self.problems[key][0] is not p:
            k += 1
            key = f"{p.id}@{k}"
        if key not in self.problems:
            self.problems[key] = (p, ray.put(p))
        return key

    # ------------------------------------------------------------------ evaluation
    def evaluate_many(self, items: list[tuple[Problem, str]], time_limit: float | None = None) -> list[Evaluation]:
        if not items:
            return []
        out: list[Evaluation | None] = [None] * len(items)
        with self._lock:
            keys = [self._key(p) for p, _ in items]
            n_chunks = max(len(self._wait_ready()), math.ceil(len(items) / self.max_chunk))
        size = math.ceil(len(items) / n_chunks)
        todo = deque(list(range(i, min(i + size, len(items)))) for i in range(0, len(items), size))
        flight: dict[ray.ObjectRef, tuple[_Node, list[int]]] = {}
        while todo or flight:
            if todo:
                with self._lock:
                    self._schedule(todo, flight, keys, items, time_limit)
                    if not flight:  # every actor is at its limit with other calls' chunks: wait for one
                        self._freed.wait(timeout=REFRESH_S)
                        continue
            done, _ = ray.wait(list(flight), num_returns=1, timeout=REFRESH_S)
            got = {}
            for ref in done:
                try:
                    got[ref] = ray.get(ref)
                except LOST:
                    got[ref] = None
            with self._lock:
                for ref in done:
                    node, chunk = flight.pop(ref)
                    node.busy -= 1
                    if got[ref] is None:
                        self._drop(node.node_id)
                        self.rerun += len(chunk)
                        todo.appendleft(chunk)
                        continue
                    node.held |= {keys[i] for i in chunk}  # sent with every chunk until one has come back
                    for i, ev in zip(chunk, got[ref]):
                        out[i] = ev
                if done:
                    self._freed.notify_all()
                if not done or time.monotonic() - self._last_refresh > REFRESH_S:
                    self._refresh()  # a node that left (its refs may still hang a while) or joined
                    for ref, (node, chunk) in list(flight.items()):
                        if node.node_id not in self.nodes:  # its node is gone: run the chunk elsewhere now
                            del flight[ref]
                            self.rerun += len(chunk)
                            todo.appendleft(chunk)
        return out  # type: ignore[return-value]

    def _schedule(self, todo: deque, flight: dict, keys: list[str], items: list[tuple[Problem, str]],
                  time_limit: float | None) -> None:
        """Send chunks of one call to the least busy ready actors, up to two chunks in flight per actor."""
        ready = self._ready_nodes() if flight else self._wait_ready()
        while todo and ready:
            self._turn += 1  # round robin among the least busy, so small calls spread over the nodes
            node = min(ready, key=lambda n: (n.busy, (ready.index(n) - self._turn) % len(ready)))
            if node.busy > self.workers:  # as many running as it has sandboxes, one queued; the rest waits
                break
            chunk = todo.popleft()
            need = {keys[i] for i in chunk} - node.held
            new = {k: [self.problems[k][1]] for k in sorted(need)}
            ref = node.handle.evaluate.remote(new, [(keys[i], items[i][1]) for i in chunk], time_limit)
            node.busy += 1
            flight[ref] = (node, chunk)

    def close(self) -> None:
        nodes, self.nodes = list(self.nodes.values()), {}
        if ray.is_initialized():
            refs = [n.handle.close.remote() for n in nodes if n.ready]
            try:
                ray.wait(refs, num_returns=len(refs), timeout=10)
            except Exception:
                pass
            for n in nodes:
                try:
                    ray.kill(n.handle, no_restart=True)
                except Exception:
                    pass
            if self._own:
                ray.shutdown()

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
