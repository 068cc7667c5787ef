"""A campaign without a trainer samples one snapshot of its proposer's weights for the whole start
(`Campaign._pin_fixed_policy`): checked on real campaigns of the bundled tiny model (sandboxed evaluation, SQLite
archive) against the same campaign taking a snapshot per call."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from evolve.config.schema import load_config  # noqa: E402
from evolve.search.campaign import Campaign  # noqa: E402
from problems.suites import SUITES  # noqa: E402
from proposer.backends import TINY_CHECKPOINT, make_backend  # noqa: E402
from proposer.backends import fast_sampler as fs  # noqa: E402

pytestmark = pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled checkpoint")

PROBS = [p for p in SUITES["pbe"]() if p.split == "train"][:2]


@pytest.fixture(scope="module")
def tiny():
    be = make_backend("tiny", threads=1)
    yield be
    be.close()


def _run(run, backend, pool, trainer=None):
    cfg = load_config(None, {"problems": [p.id for p in PROBS], "proposer.spec": "tiny", "search.iterations": 3,
                             "search.islands": 2, "search.answers": 2, "search.group": 4, "seed": 0,
                             "sampling.max_tokens": 48, "out": str(run)})
    camp = Campaign(cfg, run, PROBS, backend, pool, trainer=trainer)
    try:
        camp.run()
        return [(r.problem, r.iteration, r.code, r.vector, r.status) for r in camp.archive.programs()]
    finally:
        camp.close()


@pytest.fixture
def snapshots(monkeypatch):
    """How many weight snapshots the fast sampler takes (the real class, counted)."""
    made = []

    class Counted(fs.Weights):
        def __init__(self, model, *args, **kwargs):
            made.append(1)
            super().__init__(model, *args, **kwargs)

    monkeypatch.setattr(fs, "Weights", Counted)
    return made


def test_an_untrained_campaign_samples_one_snapshot_and_the_same_programs(tmp_path, tiny, pool, snapshots,
                                                                           monkeypatch):
    pinned = _run(tmp_path / "pinned", tiny, pool)
    assert len(snapshots) == 1  # 3 iterations, one call each, one snapshot
    assert tiny._pinned is None  # given back at the end: a later trainer's updates are sampled
    monkeypatch.setattr(Campaign, "_pin_fixed_policy", lambda self: False)
    snapshots.clear()
    per_call = _run(tmp_path / "per-call", tiny, pool)
    assert len(snapshots) >= 3  # one per call
    assert pinned == per_call and len(pinned) > len(PROBS)


def test_a_campaign_with_a_trainer_samples_the_live_model(tmp_path, tiny, pool):
    class Hook:
        """A trainer that never trains and records whether the backend was pinned when it was called."""

        def __init__(self):
            self.pinned = []

        def due(self, iteration):
            return False

        def __call__(self, camp, iteration):
            self.pinned.append(tiny._pinned is not None)

        def drain(self, camp):
            pass

        def on_restore(self, camp):
            pass

        def begin(self, camp):
            pass

    hook = Hook()
    _run(tmp_path / "hooked", tiny, pool, trainer=hook)
    assert hook.pinned and not any(hook.pinned)
