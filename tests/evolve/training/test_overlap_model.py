"""bench/perf/overlap_model.py: a trained run's timings from its archive, and the overlapped pipeline replayed on
them (hand-worked timelines)."""
from __future__ import annotations

import json

import pytest

from bench.perf.overlap_model import Timings, modelled, replay, timings
from evolve.archive import Archive


def test_a_deeper_learner_queue_lets_a_long_step_overlap_the_next_generations():
    """Loop 1, 1, 3, 1 s and steps 3, 1, 1, 1 s. Lag 1: each commit waits for the step before it (commits at 1,
    4, 7, 8; the last step ends at 9). Lag 2: step 1 runs beside the next two generations (ends at 7)."""
    tm = Timings(loop={1: 1.0, 2: 1.0, 3: 3.0, 4: 1.0}, step={1: 3.0, 2: 1.0, 3: 1.0, 4: 1.0}, probe={},
                 start=0.0, first=0.0, wall=0.0)
    assert replay(tm, lag=1) == pytest.approx(9.0)
    assert replay(tm, lag=2) == pytest.approx(7.0)


def test_probes_in_the_learners_idle_time_leave_its_steps_path():
    """Step 1's flight ends after the probe of the policy it made (1 + 1 s): commit 2 waits for it until 3. Taken
    off the path, the probe runs while the loop generates iteration 3 (3 s, the learner idle from 3 to 5)."""
    tm = Timings(loop={1: 1.0, 2: 1.0, 3: 3.0}, step={1: 1.0, 2: 1.0, 3: 1.0}, probe={1: 1.0}, start=0.0,
                 first=0.0, wall=0.0)
    assert replay(tm) == pytest.approx(7.0)
    assert replay(tm, background_probes=True) == pytest.approx(6.0)
    tm.start = 2.0  # the baseline probe holds the learner from the run's start, unless it waits for idle time
    assert replay(tm) == pytest.approx(8.0)  # step 1 starts at 2 instead of 1: commit 2 waits for it until 4
    assert replay(tm, background_probes=True) == pytest.approx(6.0)  # both probes fit the idle time
    # a run that sampled its step's probe in the learner's idle time (`probe_deferred`) replays so as it ran,
    # its baseline probe still on the learner's path (step 1 starts at 2, commit 2 waits for it until 3)
    tm.idle_probes = frozenset({1})
    assert replay(tm) == pytest.approx(7.0)
    tm.idle_start = True  # and its baseline probe too: as if both had been moved
    assert replay(tm) == replay(tm, background_probes=True) == pytest.approx(6.0)


def test_a_steps_reference_in_the_learners_idle_time_shortens_it():
    """Loop 1, 1, 3 s and steps of 2 s: lag 1 ends at 8. With a quarter of each step (0.5 s) taken while the learner
    waits for its commit: step 1 is 1.5 s (the learner idle from 0 to 1), step 2 2 s (no idle time: commit 2 waits
    for step 1 until 2.5), step 3 1.5 s (idle from 4.5 to 5.5): the last step ends at 7."""
    tm = Timings(loop={1: 1.0, 2: 1.0, 3: 3.0}, step={1: 2.0, 2: 2.0, 3: 2.0}, probe={}, start=0.0, first=0.0,
                 wall=0.0)
    assert replay(tm) == pytest.approx(8.0)
    assert replay(tm, idle_share=0.25) == pytest.approx(7.0)
    assert replay(tm, idle_share=0.0) == replay(tm)


def test_timings_come_from_the_archive_stamps(tmp_path):
    """Each iteration's loop work is the time between two commits less what the hook between them waited for
    (the hook of t waits for step t - 1); a step's work leaves out the reference forwards the loop took ahead."""
    run = tmp_path / "run"
    run.mkdir()
    with Archive(run / "archive.db") as a:
        for t, wall in enumerate([0.1, 1.1, 2.0, 3.3]):
            a.record_iteration(t, [], [], metrics={"wall_seconds": wall})
        a.record_training(1, 1, {"train_seconds": 0.8, "reference_ahead_seconds": 0.1, "train_wait_seconds": 0.3,
                                 "probe_seconds_before": 0.9, "wall_seconds": 3.0})
        a.record_training(2, 2, {"train_seconds": 0.5, "train_wait_seconds": 0.2, "probe_seconds": 0.4,
                                 "wall_seconds": 3.5})
    tm = timings(run)
    assert tm.loop == pytest.approx({1: 1.0, 2: 0.9, 3: 1.0})
    assert tm.step == pytest.approx({1: 0.7, 2: 0.5})
    assert tm.probe == pytest.approx({1: 0.0, 2: 0.4})
    assert (tm.start, tm.first, tm.wall) == pytest.approx((0.9, 0.1, 3.5))
    m = modelled(run)
    assert m["as run"] == replay(tm) and m["two steps in flight (lag 2)"] == replay(tm, lag=2) and tm.lag == 1

    with Archive(run / "archive.db") as a:  # a step in the loop (no overlap) has no wait to replay
        a.record_training(3, 3, {"train_seconds": 0.5})
    with pytest.raises(ValueError, match="not a trained run whose every step ran on the overlapped learner"):
        timings(run)
    assert modelled(run) is None

    two = tmp_path / "two"  # train.lag 2: the hook of t waits for step t - 2
    two.mkdir()
    with Archive(two / "archive.db") as a:
        a.set_meta("config", json.dumps({"train": {"lag": 2}}))
        for t, wall in enumerate([0.1, 1.1, 2.0, 3.3]):
            a.record_iteration(t, [], [], metrics={"wall_seconds": wall})
        a.record_training(1, 1, {"train_seconds": 0.8, "train_wait_seconds": 0.3, "wall_seconds": 3.4,
                                 "probe_deferred_before": True, "probe_seconds_before": 0.9})
        a.record_training(2, 2, {"train_seconds": 0.5, "train_wait_seconds": 0.2, "wall_seconds": 3.5,
                                 "probe_deferred": True})
        a.add_training_data(2, {"probe_seconds": 0.4, "probe_wall_seconds": 3.8})  # its probe came after the row
    tm = timings(two)
    assert tm.lag == 2 and tm.loop == pytest.approx({1: 1.0, 2: 0.9, 3: 1.3})  # step 1 is waited for at hook 3
    assert tm.idle_probes == {2} and tm.probe[2] == pytest.approx(0.4) and tm.wall == pytest.approx(3.8)
    assert tm.idle_start and tm.start == pytest.approx(0.9)
    assert modelled(two)["as run"] == replay(tm, lag=2)

    bad = tmp_path / "bad"  # a stamp missing: one line, not a KeyError
    bad.mkdir()
    with Archive(bad / "archive.db") as a:
        a.record_iteration(0, [], [], metrics={"wall_seconds": 0.1})
        a.record_iteration(1, [], [], metrics={})
        a.record_training(1, 1, {"train_seconds": 0.8, "train_wait_seconds": 0.3})
    with pytest.raises(ValueError, match="a stamp the replay needs is missing"):
        timings(bad)
