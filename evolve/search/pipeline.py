"""The pipeline scheduler: which batch is prepared, generated, evaluated and committed when.

With ``depth=D`` up to D generated batches are in flight (each evaluated in its own lane thread: batch t goes to
lane t % D) while the next one is prepared and generated; the oldest is committed before another is prepared
(back-pressure: never more than D batches of work queued). Batches commit in iteration order, whatever the
timing and the executor. ``depth=0`` is the sequential loop: prepare, generate, screen and commit one batch at a
time in the loop's thread. With ``concurrent`` (every proposer declares CONCURRENT) generations also run at
once, in a pool of D+1 threads, each from the moment its batch is prepared; a lane waits for its batch's
generation before screening it.

What a stage does with a batch (select a parent, build the prompt, call the proposer, triage and evaluate the
answers, write the archive) is the `Stages`' business (the campaign); the scheduler only fixes the order, which
is what keeps a run reproducible for a given depth: see evolve/search/campaign.py's docstring for the rules built on it.
"""
from __future__ import annotations

import queue
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from typing import Any, Callable, Generic, Protocol, TypeVar

from proposer.backends.base import Completion

from ..progress import Reporter

S = TypeVar("S")  # what screening a batch gives, handed from its lane to the commit


@dataclass
class Batch:
    """One iteration's prompt and (after generation) its group of completions."""
    iteration: int
    problem: str
    island: int
    parent_id: int
    inspiration_ids: list[int]
    prompt: str
    staleness: int
    completions: list[Completion] = field(default_factory=list)
    gen_seconds: float = 0.0
    known_limit: int | None = None  # programs with id <= this are the first dedupe's archive (set at submission)
    generated: bool = False         # completions are in (set after them, by the thread that generated them)
    member: str = ""                # the portfolio member that proposes it ("": the first, in old checkpoints)

    def to_dict(self) -> dict:
        generated = self.generated  # read first: when it is True the completions are already there
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**d, "inspiration_ids": list(self.inspiration_ids), "generated": generated,
                "completions": [asdict(c) for c in (self.completions if generated else [])]}

    @classmethod
    def from_dict(cls, d: dict) -> "Batch":
        d = dict(d)
        d.setdefault("known_limit", None)
        d.setdefault("generated", True)  # checkpoints before concurrent generation kept generated batches only
        d.setdefault("member", "")
        d["completions"] = [Completion(**c) for c in d["completions"]]
        return cls(**d)


class Stages(Protocol[S]):
    """The work the scheduler orders (evolve/search/campaign.py: Campaign)."""

    def prepare(self, t: int, in_flight: list[Batch]) -> Batch | None:
        """Iteration t's batch from the state committed so far (``in_flight``: the batches prepared and not yet
        committed, oldest first); None when there is nothing left to prepare (every problem retired)."""

    def generate(self, batch: Batch) -> None:
        """Fill in ``batch.completions`` (in the generation pool when concurrent)."""

    def submitted(self, batch: Batch) -> None:
        """In the loop's thread, as ``batch`` enters a lane (or, at depth 0, is screened)."""

    def screen(self, batch: Batch) -> S:
        """In ``batch``'s lane: what can be done before its commit (it reads only what was committed before)."""

    def commit(self, screened: S, in_flight: list[Batch]) -> None:
        """In the loop's thread, in iteration order; ``in_flight``: the batches still to commit after it."""

    def stopped(self) -> bool:
        """After every commit (optional; absent: never): True ends the run there, the batches in flight are
        dropped uncommitted (a budget is reached, evolve/search/budget.py)."""


class Pipeline(Generic[S]):
    def __init__(self, depth: int, concurrent: bool, reporter: Reporter):
        """``concurrent``: generate the batches in flight at once (only used at depth > 1)."""
        self.depth, self.concurrent, self.reporter = depth, concurrent and depth > 1, reporter
        self._generating: dict[int, Future] = {}  # iteration -> its generation in the pool (concurrent only)

    def run(self, stages: Stages[S], resumed: list[Batch], t: int, last: int) -> None:
        """Commit the ``resumed`` batches (prepared before a restart, generated, never committed: the iterations
        just before ``t``) in order, then prepare and commit iterations ``t`` through ``last`` (fewer when
        `Stages.prepare` has nothing left)."""
        depth, rep = self.depth, self.reporter
        stopped = getattr(stages, "stopped", lambda: False)
        gen_pool = ThreadPoolExecutor(depth + 1, thread_name_prefix="vevo-gen") if self.concurrent else None
        lanes = [_EvalThread(partial(self._lane_work, stages)) for _ in range(depth)]  # t goes to lane t % depth
        flight: deque[tuple[Batch, _EvalThread | None]] = deque()
        self._generating = {}

        def submit(b: Batch) -> _EvalThread | None:
            stages.submitted(b)
            return lanes[b.iteration % depth].submit(b) if lanes else None

        def commit_oldest(nxt: Batch | None) -> None:
            b, lane = flight.popleft()
            rep.phase(f"evaluating iteration {b.iteration}", log=False)
            screened = lane.result() if lane is not None else stages.screen(b)
            rest = [x for x, _ in flight] + ([nxt] if nxt is not None else [])
            stages.commit(screened, rest)  # the checkpoint keeps every batch in flight

        try:
            for b in resumed:  # generated before a crash, never committed: evaluated again, in order
                flight.append((b, submit(b)))
            while len(flight) > depth and not stopped():  # a run resumed with a smaller depth drains down to it
                commit_oldest(None)
            while not stopped():
                nxt = stages.prepare(t, [x for x, _ in flight]) if t <= last else None
                if nxt is not None:
                    rep.phase(f"generating iteration {t}", log=False)
                if nxt is not None and gen_pool is not None:
                    self._generating[nxt.iteration] = gen_pool.submit(stages.generate, nxt)
                elif nxt is not None:
                    stages.generate(nxt)
                if flight and (len(flight) >= depth or nxt is None):  # back-pressure: at most depth in flight
                    commit_oldest(nxt)
                    if stopped():  # a budget is reached: nxt and the batches in flight are never committed
                        break
                if nxt is None:
                    if not flight:
                        break
                    continue
                flight.append((nxt, submit(nxt)))
                if not lanes:  # depth 0: the sequential loop
                    commit_oldest(None)
                t += 1
        finally:
            for lane in lanes:
                lane.close()
            if gen_pool is not None:
                gen_pool.shutdown(wait=True, cancel_futures=True)

    def wait_generated(self) -> None:
        """Block until every generation already started has its completions (before a new policy is published,
        so the batches prepared before it are generated with the old one)."""
        if self._generating:
            futures_wait(list(self._generating.values()))

    def _lane_work(self, stages: Stages[S], b: Batch) -> S:
        """In a lane: wait for the batch's generation if it runs in the generation pool, then screen it."""
        fut = self._generating.get(b.iteration)
        if fut is not None:
            fut.result()  # a generation error comes back with the lane's result
            self._generating.pop(b.iteration, None)
        return stages.screen(b)


class _EvalThread:
    """One thread evaluating one batch at a time, handed over through two C-level queues. A thread pool did
    the same with more Python on both sides of the hand-over, where the two threads contend for the GIL
    (measurably, at depth 1 in bench/perf/loop_overhead.py)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="vevo-eval", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        get, put, fn = self.inbox.get, self.outbox.put, self.fn
        while (batch := get()) is not None:
            try:
                put((True, fn(batch)))
            except BaseException as e:  # re-raised in the loop's thread
                put((False, e))

    def submit(self, batch: Any) -> "_EvalThread":
        self.inbox.put(batch)
        return self

    def result(self) -> Any:
        ok, value = self.outbox.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Waits for a batch in flight (its outcome is dropped: it was never committed) and stops."""
        self.inbox.put(None)
        self.thread.join()
