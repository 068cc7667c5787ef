"""RL learns: from the bundled tiny proposer, VPO on one problem with enough signal per step (G = 8) raises the
reward of the batches it samples. The control (lr 0: the same samples, scoring and update path, no movement)
must fail the same check, so the check can fail.

Measured with these settings (`vevo train --proposer tiny --problem pbe/hard-list-7 --steps 30 --group 8 --batch 1
--probe-every 0 --out D`, seed 0): mean set reward of steps 0-4 vs steps 25-29, see docs/TRAINING.md.
"""
import numpy as np
import pytest

from proposer.backends import TINY_CHECKPOINT

needs_tiny = pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled tiny checkpoint")

STEPS, WINDOW, FACTOR = 30, 5, 1.4
PROBLEM = "pbe/hard-list-7"


def ratio_of_rewards(pool, lr: float) -> tuple[float, list[float]]:
    import torch

    from evolve.config.schema import CampaignConfig
    from evolve.training.study import train
    from problems.registry import Registry
    from proposer.backends import make_backend

    cfg = CampaignConfig(search={"group": 8, "answers": 4}, seed=0, train={"algo": "vpo", "batch": 1, "probe_every": 0})
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"lr": lr})})  # lr 0 is below the validator
    torch.manual_seed(0)
    # the general sampler, as this check was measured and registered: with the fast sampler's draw stream at
    # seed 0 the same run measured 1.33 (rewards 0.21 -> 0.30), under FACTOR; re-registering the check for the
    # new sampler on fresh seeds is open work (issue 32), not a threshold to move here
    hist = train(make_backend("tiny", fast_sampler=False), [Registry().get(PROBLEM)], pool, cfg, steps=STEPS, log=lambda s: None)
    r = [h["mean_set_reward"] for h in hist]
    return float(np.mean(r[-WINDOW:]) / max(np.mean(r[:WINDOW]), 1e-9)), r


@needs_tiny
@pytest.mark.parametrize("lr, learns", [(1e-3, True), (0.0, False)], ids=["lr1e-3", "lr0-control"])
def test_vpo_on_one_problem_raises_the_batch_reward(pool, lr, learns):
    ratio, rewards = ratio_of_rewards(pool, lr)
    detail = f"last {WINDOW} / first {WINDOW} steps = {ratio:.2f}; rewards {np.round(rewards, 3).tolist()}"
    print(f"lr {lr}: {detail}")  # `pytest -s` shows the measured numbers
    assert (ratio >= FACTOR) == learns, detail
