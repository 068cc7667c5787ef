"""Learning diagnostics (evolve/training/probe.py): fixed probe sets, their rewards in `vevo train`, in a campaign's
training rows and in `runs show --json`'s `learning`."""
from __future__ import annotations

import json
import sys

import pytest

from evaluators.pool import SandboxPool
from evolve.archive import Archive, TrainingRow
from evolve.training.probe import PROBE_SUITES, Prober, heldout_problems, learning, pick
from problems.suites import SUITES
from tests.campaign_helpers import vevo


def test_pick_is_seeded_and_order_free():
    ids = [f"p{i}" for i in range(20)]
    a = pick(ids, 4, seed=3)
    assert a == pick(list(reversed(ids)), 4, seed=3) and len(set(a)) == 4 and set(a) <= set(ids)
    assert any(pick(ids, 4, seed=s) != a for s in range(4, 10))  # the seed decides
    assert pick(ids[:3], 4, seed=3) == ids[:3]  # fewer than k: all of them


def test_heldout_probe_never_overlaps_the_run():
    hard_train = {p.id for p in SUITES["pbe-hard-train"]()}
    got = heldout_problems(hard_train, 4, seed=0)  # the first suite is all used: the next one serves
    assert len(got) == 4 and not ({p.id for p in got} & hard_train)
    assert {p.id for p in got} <= {p.id for s in PROBE_SUITES[1:] for p in SUITES[s]()}
    everything = {p.id for s in PROBE_SUITES for p in SUITES[s]()}
    assert heldout_problems(everything, 4, seed=0) == []


def test_learning_rows_from_training_rows():
    rows = [TrainingRow(10, 1, {"mean_set_reward": 0.2, "probe_own_before": 0.1, "probe_heldout_before": 0.3,
                                "probe_own": 0.15, "probe_heldout": 0.31}),
            TrainingRow(20, 2, {"mean_set_reward": 0.4}),
            TrainingRow(30, 2, {"skipped": "no advantage"})]
    assert learning(rows) == [
        {"step": 0, "iteration": 10, "batch_reward": None, "probe_own": 0.1, "probe_heldout": 0.3},
        {"step": 1, "iteration": 10, "batch_reward": 0.2, "probe_own": 0.15, "probe_heldout": 0.31},
        {"step": 2, "iteration": 20, "batch_reward": 0.4, "probe_own": None, "probe_heldout": None},
        {"step": 2, "iteration": 30, "batch_reward": None, "probe_own": None, "probe_heldout": None}]


class _Fixed:
    """A proposer that always writes the same answers: probes of it must not change between runs."""

    def generate(self, prompts, n, sampling):
        from proposer.backends.base import Completion

        text = "<answer_1>\n```python\ndef f(xs):\n    return xs\n```\n</answer_1>"
        return [[Completion(text=text) for _ in range(n)] for _ in prompts]


def test_probe_is_deterministic_and_scores_in_the_sandbox():
    own = SUITES["pbe-train"]()[:6]
    prober = Prober(own, seed=1, k=3, group=2, m=1, temperature=1.0, max_tokens=64, style="compact")
    with SandboxPool(workers=2) as pool:
        a = prober.run(_Fixed(), pool)
        b = prober.run(_Fixed(), pool, "_before")
    assert set(a) == {"probe_own", "probe_heldout", "probe_seconds"}
    assert a["probe_own"] == b["probe_own_before"] and a["probe_heldout"] == b["probe_heldout_before"]
    assert [p.name for p in prober.probes] == ["own", "heldout"]
    assert len(prober.probes[0].problems) == 3 and {p.id for p in prober.probes[0].problems} <= {p.id for p in own}
    assert 0.0 <= a["probe_own"] <= 1.0


@pytest.mark.timeout(900)
def test_campaign_and_runs_show_report_probes(tmp_path):
    """A campaign with a probe after every update: a step-0 baseline, then a probe per step, in the training
    rows and in `runs show --json`."""
    run = tmp_path / "run"
    vevo("run", "--problem", "pbe/int-0", "--problem", "pbe/list-1", "--proposer", "tiny", "--iterations", "6",
         "--islands", "1", "--answers", "2", "--group", "2", "--seed", "3", "--train", "vpo", "--train-every", "3",
         "--set", "train.probe_every=1", "--set", "train.probe_problems=2", "--set", "train.batch=2",
         "--set", "train.group=2", "--set", "sampling.max_tokens=128", "--out", str(run), "--quiet", timeout=900)
    with Archive(run / "archive.db", readonly=True) as a:
        rows, metrics = a.training_rows(), a.metrics_rows()
    assert [r.step for r in rows] == [3, 6]
    shown = json.loads(vevo("runs", "show", str(run), "--json").stdout)["learning"]
    assert [e["step"] for e in shown] == [0] + [r.policy_version for r in rows]
    assert shown[0]["batch_reward"] is None and shown[1]["batch_reward"] == rows[0].data["mean_set_reward"]
    trained = [e for e, r in zip(shown[1:], rows) if r.data.get("samples")]
    assert trained and all(e["probe_own"] is not None and e["probe_heldout"] is not None for e in trained)
    assert all(0.0 <= e[k] <= 1.0 for e in shown for k in ("probe_own", "probe_heldout") if e[k] is not None)
    text = vevo("runs", "show", str(run)).stdout
    assert "probe reward (own / held-out) by policy version: v0 " in text
    # the account: every part of the run's time, from its archive alone (evolve/analysis/account.py)
    acc = json.loads(vevo("runs", "show", str(run), "--json").stdout)["compute"]
    trained_rows = [r for r in rows if r.data.get("samples")]
    assert acc["train_steps"] == len(trained_rows) and acc["train_seconds"] > 0 and acc["probe_seconds"] > 0
    assert acc["gen_tokens"] > 0 and acc["gen_seconds"] > 0 and acc["eval_seconds"] > 0
    # the step at the last iteration is published after that iteration's record, and with the learner process its
    # probe's values come after it (sampled in the child's idle time): the run's wall is the last of those stamps
    last_commit = max(m.data["wall_seconds"] for m in metrics)
    last = rows[-1].data
    assert last.get("probe_deferred", False) == sys.platform.startswith("linux")
    assert acc["wall_seconds"] == last.get("probe_wall_seconds", last["wall_seconds"]) >= last["wall_seconds"] \
        > last_commit >= rows[0].data["wall_seconds"]
    # overlapped steps run beside the loop: the wall holds what the loop waited for, and generation (<= 2 at once)
    assert acc["train_overlapped"] and acc["wall_seconds"] >= max(acc["train_wait_seconds"], acc["gen_seconds"] / 2)
    assert all(r.data["train_seconds"] > 0 for r in trained_rows)
    if sys.platform.startswith("linux"):  # the learner process (the default there): busy part of its time
        assert 0 < acc["learner_busy_seconds"] <= acc["learner_seconds"] <= acc["wall_seconds"] + 0.5
        assert f"the learner process busy {acc['learner_busy_seconds']:.1f}s" in text
    assert "compute: " in text and "training " in text
