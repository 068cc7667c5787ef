"""The compute account (evolve/analysis/account.py): pure sums over archive rows."""
from evolve.archive import MetricsRow, TrainingRow
from evolve.analysis.account import account, describe, wall_clock


def test_account_adds_up_each_part_and_takes_the_clock_at_its_end():
    metrics = [MetricsRow(0, {"seeds": 3, "eval_seconds": 0.5, "wall_seconds": 1.0}),
               MetricsRow(1, {"gen_seconds": 2.0, "gen_tokens": 100, "eval_seconds": 0.25, "wall_seconds": 3.5}),
               MetricsRow(2, {"gen_seconds": 1.0, "gen_tokens": 50, "eval_seconds": 0.25, "wall_seconds": 9.0})]
    training = [TrainingRow(2, 1, {"samples": 4, "train_seconds": 4.0, "probe_seconds_before": 1.0,
                                   "probe_seconds": 0.5}),
                TrainingRow(4, 1, {"skipped": "no groups"})]  # a skipped step costs nothing and is not a step
    acc = account(metrics, training)
    assert acc == {"wall_seconds": 9.0, "gen_seconds": 3.0, "gen_tokens": 150, "eval_seconds": 1.0,
                   "train_seconds": 4.0, "train_wait_seconds": 0.0, "train_overlapped": False, "train_steps": 1,
                   "learner_seconds": 0.0, "learner_busy_seconds": 0.0, "probe_seconds": 1.5}
    assert describe(acc).startswith("compute: 9.0s wall; generation 3.0s (150 tokens)")
    assert "learner thread" not in describe(acc)
    overlapped = account(metrics, [TrainingRow(2, 1, {"samples": 4, "train_seconds": 4.0, "train_wait_seconds": 0.5})])
    assert overlapped["train_wait_seconds"] == 0.5 and overlapped["train_overlapped"]
    assert "training 4.0s (1 steps; on the learner thread, the loop waited 0.5s)" in describe(overlapped)
    assert "learner process" not in describe(overlapped)  # the step ran on the thread
    steps = [TrainingRow(i, i, {"samples": 4, "train_seconds": 1.0, "train_wait_seconds": 0.25,
                                "learner_seconds": 2.0, "learner_busy_seconds": 1.5}) for i in (1, 2)]
    proc = account(metrics, steps)  # per-step shares of the learner process's time add up (a resumed run forks anew)
    assert (proc["learner_seconds"], proc["learner_busy_seconds"]) == (4.0, 3.0)
    assert "the loop waited 0.5s, the learner process busy 3.0s of 4.0s)" in describe(proc)
    it, wall = wall_clock(list(reversed(metrics)))
    assert it.tolist() == [0, 1, 2] and wall.tolist() == [1.0, 3.5, 9.0]


def test_account_of_an_empty_or_old_run_is_zero_not_an_error():
    assert account([], [])["wall_seconds"] == 0.0
    old = [MetricsRow(1, {"gen_seconds": "bad", "wall_seconds": None})]  # nothing decoded is trusted
    assert account(old, [])["gen_seconds"] == 0.0
