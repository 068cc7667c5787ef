"""evolve/search/hooks.py: the trainer-hook protocol a campaign calls (`due`, the hook itself, `on_restore`, `begin`), checked on
a real campaign (sandboxed evaluation, SQLite archive) with a hook that records what it saw."""
from __future__ import annotations

import threading
import time

import pytest

from evaluators.pool import SandboxPool
from evolve.archive import Archive
from evolve.search.campaign import Campaign
from evolve.config.schema import load_config
from evolve.search.hooks import CampaignView, TrainerHook
from problems.suites import SUITES
from proposer.backends.base import CONCURRENT, VERSIONED, Completion
from proposer.answers.parsing import format_answers
from tests.campaign_helpers import tail

PROBS = [p for p in SUITES["pbe"]() if p.split == "train"][:2]


class SeededBackend:
    """Completions chosen by the sampling seed alone (so safe to call from several threads: CONCURRENT), each
    call slow enough that generations are still running when a batch ahead of them commits."""

    capabilities = frozenset({CONCURRENT, VERSIONED})
    name = "seeded"

    def __init__(self, delay: float = 0.05):
        self.delay, self.policy_version = delay, 0
        self.lines = [tail(format_answers([f"def f(x):\n    return x + {i}\n", f"def f(x):\n    return x * {i}\n"]))
                      for i in range(9)]
        self.lock = threading.Lock()
        self.done: set[int] = set()  # sampling seeds generated (the iteration, at campaign seed 0)

    def set_policy_version(self, v: int) -> None:
        self.policy_version = v

    def generate(self, prompts, n, sampling):
        time.sleep(self.delay)
        out = [[Completion(text=self.lines[(sampling.seed + i) % len(self.lines)],
                           policy_version=self.policy_version) for i in range(n)] for _ in prompts]
        with self.lock:
            self.done.add(sampling.seed)
        return out

    def close(self) -> None:
        pass


class RecordingHook:
    """A trainer that 'trains' every 3rd iteration by bumping the backend's policy version, and records each call
    with what the campaign and the archive showed then."""

    def __init__(self, backend: SeededBackend, depth: int, last: int):
        self.backend, self.depth, self.last = backend, depth, last
        self.events: list[tuple] = []
        self.unseen: set[str] = set()  # what `CampaignView` promises a trainer and the campaign lacked

    def saw(self, camp) -> None:
        self.unseen |= {k for k in CampaignView.__annotations__ if not hasattr(camp, k)}

    def due(self, iteration: int) -> bool:
        return iteration % 3 == 0

    def __call__(self, camp, iteration: int) -> None:
        self.saw(camp)
        self.events.append(("call", iteration, camp.iteration, camp.archive.last_iteration()))
        if self.due(iteration):
            prepared = range(iteration + 1, min(iteration + self.depth, self.last) + 1)
            self.events.append(("not generated at a step", [t for t in prepared if t not in self.backend.done]))
            self.backend.set_policy_version(self.backend.policy_version + 1)

    def drain(self, camp) -> None:
        self.events.append(("drain", camp.iteration))

    def on_restore(self, camp) -> None:
        self.saw(camp)
        self.events.append(("restore", camp.iteration, camp.archive.last_iteration()))

    def begin(self, camp) -> None:
        self.saw(camp)
        self.events.append(("begin", camp.iteration, sorted(self.backend.done)))


def campaign(run, backend, hook, iterations: int, pool) -> Campaign:
    cfg = load_config(None, {"problems": [p.id for p in PROBS], "proposer.spec": "seeded",
                             "search.iterations": iterations, "search.islands": 1, "search.answers": 2,
                             "search.group": 2, "seed": 0, "search.pipeline_depth": 3, "search.retire_solved": False,
                             "out": str(run)})
    return Campaign(cfg, run, PROBS, backend, pool, trainer=hook)


def test_the_campaign_trainer_is_a_trainer_hook_and_a_bare_callable_is_not():
    from evolve.training.campaign import CampaignTrainer

    assert issubclass(CampaignTrainer, TrainerHook)

    def just_call(camp, iteration):
        pass

    with pytest.raises(TypeError, match="not a TrainerHook"):
        Campaign(load_config(None, {"problems": [PROBS[0].id]}), "unused", PROBS, SeededBackend(), None,
                 trainer=just_call)


def test_hook_order_steps_after_generation_and_restore_on_resume(tmp_path):
    run = tmp_path / "run"
    with SandboxPool(workers=1) as pool:
        backend = SeededBackend()
        hook = RecordingHook(backend, depth=3, last=9)
        camp = campaign(run, backend, hook, 9, pool)
        try:
            camp.run()
        finally:
            camp.close()
        assert hook.events[0] == ("begin", 0, [])  # first: the seeds are in, nothing of iteration 1 generated
        calls = [e for e in hook.events if e[0] == "call"]
        assert calls == [("call", t, t, t) for t in range(1, 10)]  # after each commit, in order
        # before each step the campaign waited until every batch already prepared had its completions
        assert [e for e in hook.events[1:] if e[0] != "call"] == \
            [("not generated at a step", [])] * 3 + [("drain", 9)]

        again = RecordingHook(backend, depth=3, last=12)
        camp = campaign(run, backend, again, 12, pool)
        try:
            camp.run()
        finally:
            camp.close()
    assert again.events[0] == ("restore", 9, 9)  # first, before anything new is prepared
    assert again.events[1] == ("begin", 9, list(range(1, 10)))  # then begin, before iteration 10 is prepared
    assert hook.unseen == again.unseen == set()  # the campaign is the view the trainer is typed against
    assert [e for e in again.events if e[0] == "call"] == [("call", t, t, t) for t in range(10, 13)]
    with Archive(run / "archive.db", readonly=True) as a:
        versions = {g.iteration: {c.policy_version for c in g.completions} for g in a.recent_groups(100)}
    # which policy made a batch is fixed by the rule, not by timing: at depth 3 batch t is prepared before t-3
    # commits, and a step at s (3, 6) lets s+1..s+3 finish first: 1-6 by v0, 7-9 by v1
    assert {t: v for t, v in versions.items() if t <= 9} == {t: {max(0, (t - 1) // 3 - 1)} for t in range(1, 10)}
