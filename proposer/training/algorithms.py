"""The training algorithms a run may name (`train.algo`, `--train`, `vevo train --algo`): every advantage
estimator in `proposer.training.estimators.ESTIMATORS` (a PPO step on archive groups), plus the step algorithms
whose step is not (always) an advantage estimate, as `StepAlgorithm` objects: which of a campaign's steps are
CoVRL steps, which estimator the others use, and whether `vevo train` can run it alone. Callers ask the object
(`spec.covrl_due(...)`, `spec.estimator`), never compare names. To add one: its step in its own module, a
`StepAlgorithm` here (`register_step_algorithm`), and its step call where `covrl_due` is asked
(`evolve/training/campaign.py`; `evolve/training/study.py` when ``standalone``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from proposer.training.estimators import ESTIMATORS


@dataclass(frozen=True)
class StepAlgorithm:
    name: str
    about: str
    estimator: str | None    # the advantage estimator of its non-CoVRL steps; None: every step is a CoVRL step
    standalone: bool = False  # `vevo train --algo NAME` runs it without a campaign

    def covrl_due(self, iteration: int, every: int, share: float) -> bool:
        """Whether the step due at ``iteration`` (steps every ``every`` iterations) is a CoVRL step: every step
        without an estimator, else a ``share`` of them, spread evenly (step k is one when floor(k·share) grows)."""
        if self.estimator is None:
            return True
        k = iteration // every
        return math.floor(k * share) > math.floor((k - 1) * share)


STEP_ALGORITHMS: dict[str, StepAlgorithm] = {}


def register_step_algorithm(spec: StepAlgorithm) -> StepAlgorithm:
    if spec.name in ESTIMATORS or spec.name in STEP_ALGORITHMS or spec.name == "none":
        raise ValueError(f"training algorithm {spec.name!r} is already registered")
    if spec.estimator is not None and spec.estimator not in ESTIMATORS:
        raise ValueError(f"{spec.name}: unknown estimator {spec.estimator!r}")
    STEP_ALGORITHMS[spec.name] = spec
    return spec


# CoVRL is verifier-free (proposer/training/covrl.py), so it is not a vector-reward estimator
register_step_algorithm(StepAlgorithm("covrl", "CoVRL steps toward archive references (proposer/training/covrl.py)",
                                      estimator=None, standalone=True))
register_step_algorithm(StepAlgorithm("vpo+covrl", "VPO and CoVRL steps, CoVRL on a train.covrl.share of them",
                                      estimator="vpo"))


def step_algorithm(name: str) -> StepAlgorithm | None:
    """The step algorithm of a training-algorithm name; None for a plain advantage estimator (or 'none')."""
    return STEP_ALGORITHMS.get(name)


def training_algorithms(campaign: bool = True) -> list[str]:
    """Names a run config accepts (campaign) or `vevo train --algo` accepts (not campaign), 'none' first."""
    extra = [n for n, s in STEP_ALGORITHMS.items() if campaign or s.standalone]
    return (["none"] if campaign else []) + [*ESTIMATORS, *extra]
