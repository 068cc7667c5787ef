"""The training algorithms a run may name (`train.algo`, `--train`, `vevo train --algo`): every advantage
estimator in `proposer.training.estimators.ESTIMATORS` (a PPO step on archive groups), plus the algorithms whose step is
not an advantage estimate. To add one of the latter: its step in its own module, its name here, and its dispatch
in `evolve/campaign_training.py` (and `evolve/study.py` for standalone training)."""
from __future__ import annotations

from proposer.training.estimators import ESTIMATORS

# name -> what a step does; CoVRL is verifier-free (proposer/training/covrl.py), so it is not a vector-reward estimator
STEP_ALGORITHMS: dict[str, str] = {
    "covrl": "CoVRL steps toward archive references (proposer/training/covrl.py)",
    "vpo+covrl": "VPO and CoVRL steps, CoVRL on a train.covrl.share of them",
}
STANDALONE = ("covrl",)  # those `vevo train` can run without a campaign


def training_algorithms(campaign: bool = True) -> list[str]:
    """Names a run config accepts (campaign) or `vevo train --algo` accepts (not campaign), 'none' first."""
    extra = list(STEP_ALGORITHMS) if campaign else list(STANDALONE)
    return (["none"] if campaign else []) + [*ESTIMATORS, *extra]
