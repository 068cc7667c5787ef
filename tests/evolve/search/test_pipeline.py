"""evolve/search/pipeline.py alone: the order in which the scheduler prepares, generates, screens and commits batches,
driven by stages that only record what they were asked (no proposer, no sandbox)."""
from __future__ import annotations

import threading
import time

import pytest

from evolve.search.pipeline import Batch, Pipeline
from evolve.progress import as_reporter


class Recorder:
    """Stages that log every call: prepare(t) notes the last committed iteration and what was in flight."""

    def __init__(self, committed: int = 0, stop_at: int | None = None, gen_delay: float = 0.0,
                 fail_screen: int | None = None):
        self.committed, self.stop_at, self.gen_delay, self.fail_screen = committed, stop_at, gen_delay, fail_screen
        self.lock = threading.Lock()
        self.prepared: list[tuple[int, int, list[int]]] = []  # (t, last committed, in flight)
        self.commits: list[tuple[int, list[int]]] = []        # (t, in flight after it)
        self.generated: dict[int, str] = {}                   # t -> thread that generated it
        self.screening = self.peak = 0

    def prepare(self, t, in_flight):
        if self.stop_at is not None and t >= self.stop_at:
            return None
        self.prepared.append((t, self.committed, [b.iteration for b in in_flight]))
        return Batch(iteration=t, problem="p", island=0, parent_id=1, inspiration_ids=[], prompt=f"t{t}",
                     staleness=0)

    def generate(self, batch):
        time.sleep(self.gen_delay)
        with self.lock:
            self.generated[batch.iteration] = threading.current_thread().name
        batch.generated = True

    def submitted(self, batch):
        if batch.known_limit is None:
            batch.known_limit = self.committed

    def screen(self, batch):
        with self.lock:
            self.screening += 1
            self.peak = max(self.peak, self.screening)
        time.sleep(0.002)
        with self.lock:
            self.screening -= 1
        if batch.iteration == self.fail_screen:
            raise KeyError(f"screen {batch.iteration}")
        return batch

    def commit(self, screened, in_flight):
        assert screened.iteration == self.committed + 1, "commits out of order"
        self.commits.append((screened.iteration, [b.iteration for b in in_flight]))
        self.committed = screened.iteration


def run(stages: Recorder, depth: int, last: int, resumed=(), concurrent=False) -> Pipeline:
    pipe = Pipeline(depth, concurrent, as_reporter(False))
    resumed = list(resumed)
    pipe.run(stages, resumed, stages.committed + 1 + len(resumed), last)
    return pipe


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_iteration_t_is_prepared_from_the_state_committed_through_t_minus_depth_minus_one(depth):
    st = Recorder()
    run(st, depth, 12)
    assert [t for t, _ in st.commits] == list(range(1, 13))
    for t, committed, in_flight in st.prepared:
        assert committed == max(0, t - depth - 1)
        assert in_flight == list(range(max(1, t - depth), t))  # the batches prepared and not yet committed
    assert st.peak <= max(depth, 1)
    # each commit's checkpoint keeps the batches still to commit, the one prepared just before it included
    assert all(rest == list(range(t + 1, min(t + depth, 12) + 1)) for t, rest in st.commits)


def test_resumed_batches_commit_first_and_a_smaller_depth_drains_down_to_it():
    old = [Batch(iteration=t, problem="p", island=0, parent_id=1, inspiration_ids=[], prompt="", staleness=0,
                 generated=True, known_limit=3) for t in (5, 6, 7, 8)]
    st = Recorder(committed=4)
    run(st, 1, 10, resumed=old)
    assert [t for t, _ in st.commits] == [5, 6, 7, 8, 9, 10]
    assert st.prepared[0] == (9, 7, [8])  # drained to one in flight before preparing 9


def test_nothing_left_to_prepare_commits_what_is_in_flight_and_stops():
    st = Recorder(stop_at=5)
    run(st, 3, 100)
    assert [t for t, _ in st.commits] == [1, 2, 3, 4]


def test_concurrent_generation_runs_in_the_pool_and_wait_generated_waits_for_it():
    st = Recorder(gen_delay=0.02)
    seen = []

    def commit(screened, in_flight, inner=st.commit):
        inner(screened, in_flight)
        if screened.iteration == 4:
            pipe.wait_generated()  # what the campaign does before a training step
            seen.extend(t for t in (b.iteration for b in in_flight) if t not in st.generated)

    st.commit = commit
    pipe = Pipeline(3, True, as_reporter(False))
    pipe.run(st, [], 1, 9)
    assert [t for t, _ in st.commits] == list(range(1, 10))
    assert set(st.generated.values()) != {threading.current_thread().name}
    assert all(name.startswith("vevo-gen") for name in st.generated.values())
    assert seen == []  # every batch prepared before the wait had its completions after it
    st2 = Recorder()
    run(st2, 1, 3, concurrent=True)  # depth 1: nothing to overlap, generated in the loop's thread
    assert set(st2.generated.values()) == {threading.current_thread().name}


def test_a_screen_error_stops_the_run_and_closes_every_lane():
    before = {t.ident for t in threading.enumerate()}
    st = Recorder(fail_screen=4)
    with pytest.raises(KeyError, match="screen 4"):
        run(st, 3, 12)
    assert [t for t, _ in st.commits] == [1, 2, 3]
    assert not [t for t in threading.enumerate() if t.ident not in before and t.name == "vevo-eval"]


def test_eval_thread_hands_results_and_errors_back():
    from evolve.search.pipeline import _EvalThread

    def fn(x):
        if x == "boom":
            raise KeyError("boom")
        return x * 2

    ev = _EvalThread(fn)
    assert ev.submit(3).result() == 6
    with pytest.raises(KeyError, match="boom"):
        ev.submit("boom").result()
    assert ev.submit("ab").result() == "abab"  # still serving after an error
    ev.submit(5)
    ev.close()  # with a batch in flight: waits for it, then stops
    assert not ev.thread.is_alive()
