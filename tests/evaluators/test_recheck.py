"""A new best of an OpenEvolve problem is re-run in a fresh worker before it is reported (evaluators/recheck.py)."""
from __future__ import annotations

import dataclasses

import pytest

from evaluators.pool import SandboxPool
from evaluators.recheck import BestTracker, settle
from evaluators.types import Evaluation
from problems.registry import load_folder
from tests.openevolve_helpers import PROBES


def _ev(scalar: float, solved: bool = False, status: str = "ok") -> Evaluation:
    return Evaluation(vector=[scalar], scalar=scalar, solved=solved, status=status, artifacts={})


def test_settle_keeps_the_lower_and_unverifies_a_disagreement():
    assert settle(_ev(0.5), _ev(0.5)).artifacts == {}  # confirmed: unchanged
    low = settle(_ev(1.5, solved=True), _ev(0.4))
    assert low.scalar == 0.4 and not low.solved and "unverified" in low.artifacts
    drift = settle(_ev(0.51), _ev(0.5))
    assert drift.scalar == 0.5 and "unverified" not in drift.artifacts and "lower" in drift.artifacts["recheck"]
    gone = settle(_ev(0.5), "RuntimeError: no worker")
    assert gone.scalar == 0.5 and gone.artifacts["recheck"].startswith("not re-checked")


def test_only_new_bests_are_rechecked_highest_first():
    prob = load_folder(PROBES / "pickled_output")
    calls: list[float] = []

    def fresh(p, code):
        calls.append(float(code))
        return _ev(0.2) if code == "0.9" else _ev(float(code))  # the 0.9 was a warm worker's lie
    t = BestTracker()
    items = [(prob, c) for c in ("0.3", "0.9", "0.6")]
    out = t.recheck(items, [_ev(0.3), _ev(0.9), _ev(0.6)], fresh)
    assert calls == [0.9, 0.6] and [e.scalar for e in out] == [0.3, 0.2, 0.6] and t.best[prob.id] == 0.6
    calls.clear()
    t.recheck([(prob, "0.5")], [_ev(0.5)], fresh)  # below the best: reported as it is
    assert calls == []
    fn = dataclasses.replace(prob, openevolve=None)  # scored in the orchestrator: never re-run
    t.recheck([(fn, "0.99")], [_ev(0.99)], fresh)
    assert calls == []


def test_pool_rechecks_a_new_best_in_a_fresh_worker(tmp_path):
    folder = tmp_path / "noisy"
    folder.mkdir()
    (folder / "initial_program.py").write_text("X = 1\n")
    (folder / "evaluator.py").write_text(  # a different score on every run: the lower of two is reported
        "import os\ndef evaluate(path):\n    return {'combined_score': int.from_bytes(os.urandom(4), 'big') / 2**32}\n")
    tmp_path.chmod(0o755)
    prob = load_folder(folder)
    seed = load_folder(PROBES / "pickled_output")
    with SandboxPool(workers=1) as pool:
        honest = pool.evaluate(seed, (PROBES / "pickled_output" / "initial_program.py").read_text())
        assert pool.bests.rechecked == 1 and pool.replaced == 0
        again = pool.evaluate(seed, (PROBES / "pickled_output" / "initial_program.py").read_text())
        assert pool.bests.rechecked == 1  # not a new best
        noisy = pool.evaluate(prob, "X = 2\n")
    assert "recheck" not in honest.artifacts and honest.scalar == pytest.approx(0.5)
    assert again.to_dict() == honest.to_dict() | {"artifacts": dict(honest.artifacts, wall=again.artifacts["wall"])}
    assert "the lower is reported" in noisy.artifacts["recheck"] and "unverified" not in noisy.artifacts
    warm = float(noisy.artifacts["recheck"].split("the warm worker ")[1].split(" ")[0])
    assert noisy.scalar <= warm
