"""vevo's estimators and multi-answer reward inside veRL (multi-GPU RL): an advantage-estimator plugin and a reward
manager, plus the problem export veRL trains on. Guide: docs/VERL.md; config: examples/verl/vevo_vpo.yaml.

veRL (>= 0.9, reward loop API) hands a custom advantage estimator only ``token_level_rewards`` (bs, L), ``response_mask``, ``index`` (the
prompt uid) and ``config`` (``verl/trainer/ppo/ray_trainer.py::compute_advantage``), one scalar reward per response
as far as veRL knows. VPO and the multi-answer baselines need each response's (m x d) answer-by-test matrix, so
the vevo reward manager writes that matrix into the response's reward row (``assemble_rm_scores``) and the ``vevo_*`` estimators read
it back::

    row[0] = MAGIC, row[1] = m, row[2] = d, row[3 : 3 + m*d] = the matrix, row by row,
    row[valid_len - 1] += score - sum(row)        (so the row still sums to the scalar score veRL logs)

A row without MAGIC is a plain scalar reward: its sum becomes a 1 x 1 matrix, so the estimators also run on any
scalar reward function. The packing needs ``algorithm.use_kl_in_reward=False`` (KL as a loss term, veRL's GRPO
default): a KL penalty folded into the reward would change the packed numbers, and is refused.

Registration: ``register_estimators()`` adds ``vevo_<name>`` for every estimator in ``proposer.training.estimators`` to veRL's
``ADV_ESTIMATOR_REGISTRY``. ``proposer/integrations/verl_reward.py`` (the reward manager veRL loads by file path,
``reward.reward_manager.source=importlib``) calls it when imported, so the estimators exist in the trainer process
that computes advantages. This module imports no veRL at import time: its pure parts are tested without it.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable

import numpy as np

from proposer.training.estimators import EPS, ESTIMATORS
from proposer.training.rewards import eval_weights

MAGIC = -999.0  # first entry of a packed row: exact in float32, small enough that the row sum stays ~1e-4 exact
HEADER = 3


# ----------------------------------------------------------------------------------------------- packing (pure)
def pack_row(matrix: Any, score: float, length: int) -> np.ndarray:
    """A reward row of `length` positions (the response's valid tokens) carrying `matrix` and summing to `score`."""
    mat = np.asarray(matrix, dtype=np.float64)
    mat = mat.reshape(0, 0) if mat.size == 0 and mat.ndim != 2 else mat
    if mat.ndim != 2:
        raise ValueError(f"answer matrix must be 2-D (answers x tests), got shape {mat.shape}")
    need = HEADER + mat.size + 1
    if length < need:
        raise ValueError(f"response of {length} tokens cannot carry a {mat.shape[0]}x{mat.shape[1]} answer matrix "
                         f"(needs {need}); raise data.max_response_length or lower m")
    row = np.zeros(length)
    row[:HEADER] = (MAGIC, mat.shape[0], mat.shape[1])
    row[HEADER:HEADER + mat.size] = mat.reshape(-1)
    row[length - 1] += float(score) - row.sum()
    return row


def unpack_row(row: Any) -> np.ndarray:
    """The (m x d) matrix a packed row carries; a row that is not packed is a scalar reward, its sum as 1 x 1."""
    r = np.asarray(row, dtype=np.float64)
    if r.size >= HEADER and r[0] == MAGIC:
        m, d = int(r[1]), int(r[2])
        if m < 0 or d < 0 or HEADER + m * d > r.size:
            raise ValueError(f"packed reward row claims a {m}x{d} matrix in {r.size} positions")
        return r[HEADER:HEADER + m * d].reshape(m, d)
    return np.array([[float(r.sum())]])


def comparable_score(matrix: Any) -> float:
    """The scalar veRL logs per response: mean over fixed Dirichlet weights of the best answer (rewards.py)."""
    mat = np.asarray(matrix, dtype=np.float64)
    if mat.size == 0:
        return 0.0
    return float((mat @ eval_weights(mat.shape[1]).T).max(axis=0).mean())


# ----------------------------------------------------------------------------------------------- estimators
_RNG = np.random.default_rng(int(os.environ.get("VEVO_VERL_SEED", "0")))


def seed(value: int) -> None:
    """Re-seed the draws of the stochastic estimators (VPO's Dirichlet weights); VEVO_VERL_SEED at import."""
    global _RNG
    _RNG = np.random.default_rng(value)


def make_estimator(name: str) -> Callable[..., tuple[Any, Any]]:
    """veRL's estimator signature around ``ESTIMATORS[name]``: every token of a response gets its advantage."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}")
    fn = ESTIMATORS[name]

    def estimator(token_level_rewards, response_mask, index=None, epsilon: float = EPS, config=None, **_: Any):
        import torch

        if config is not None and _get(config, "use_kl_in_reward", False):
            raise ValueError(f"vevo_{name}: algorithm.use_kl_in_reward must be false (the reward rows carry the "
                             "answer matrices; use the actor's KL loss instead)")
        rows = token_level_rewards.detach().to(torch.float64).cpu().numpy()
        mats = [unpack_row(r) for r in rows]
        groups = list(index) if index is not None else list(range(len(mats)))
        kw = {"rng": _RNG} if "rng" in fn.__code__.co_varnames else {}
        adv, _diag = fn(mats, groups, eps=epsilon, **kw)
        scores = torch.as_tensor(adv, dtype=torch.float32, device=token_level_rewards.device).unsqueeze(-1)
        out = scores * response_mask
        return out, out

    estimator.__name__ = f"vevo_{name}"
    estimator.__doc__ = f"vevo's {name} estimator as a veRL advantage estimator (proposer/integrations/verl_plugin.py)."
    return estimator


def _get(config: Any, key: str, default: Any) -> Any:
    getter = getattr(config, "get", None)
    return getter(key, default) if callable(getter) else getattr(config, key, default)


ESTIMATOR_FNS = {f"vevo_{name}": make_estimator(name) for name in ESTIMATORS}


# ----------------------------------------------------------------------------------------------- reward
class AnswerScorer:
    """(m x d) answer-by-test matrix of one multi-answer completion, scored as a campaign scores a batch
    (proposer/answers/scoring.py: parse, apply to the parent, dedupe, run the new programs in a warm sandbox pool, the
    same sandbox as a campaign). Unparsable or inapplicable answers score 0 on every test."""

    def __init__(self, problems_dir: Iterable[str] = (), workers: int = 2, evaluator=None):
        from problems.registry import discover

        self.registry = discover(list(problems_dir))
        self._evaluator = evaluator
        self.workers = workers

    @property
    def evaluator(self):
        if self._evaluator is None:
            from evaluators.pool import SandboxPool

            self._evaluator = SandboxPool(workers=self.workers)
        return self._evaluator

    def matrix(self, problem_id: str, parent_code: str, text: str, m: int, alias: str | None = None) -> np.ndarray:
        """``alias``: the function name the prompt showed (`export_rows`), answers are renamed back from it."""
        from proposer.answers.scoring import score_completions

        problem = self.registry.get(problem_id)
        return score_completions(problem, [text], m, self.evaluator, d=problem.n_tests, parent_code=parent_code,
                                 alias=alias).matrices[0]

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator.close()


def export_rows(problems: Iterable[Any], evaluator, m: int = 4, style: str = "compact",
                alias: str | None = None) -> list[dict]:
    """veRL dataset rows (RLHFDataset's fields) for problems, with the seed as parent: one multi-answer prompt each,
    the one a campaign shows first (its seed program evaluated by ``evaluator``: real per-test results; ``alias``:
    the function name the model writes, as a campaign shows it to that model). The reward manager finds the
    problem again by id (``reward_model.ground_truth``) and scores the answers against the same parent."""
    from proposer.answers.scoring import problem_labels, seed_prompt

    problems = list(problems)
    seeds = evaluator.evaluate_many([(p, p.seed_code) for p in problems]) if problems else []
    rows = []
    for p, ev in zip(problems, seeds):
        info = {"problem_id": p.id, "parent_code": p.seed_code, "m": m, "tests": json.dumps(problem_labels(p))}
        if alias is not None:
            info["alias"] = alias
        rows.append({"data_source": "vevo",
                     "prompt": [{"role": "user", "content": seed_prompt(p, ev, m, style=style, alias=alias)}],
                     "ability": "code", "reward_model": {"style": "rule", "ground_truth": p.id}, "extra_info": info})
    return rows


_SCORER: AnswerScorer | None = None


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **_: Any) -> dict:
    """The multi-answer reward as a veRL reward function (``custom_reward_function.name=compute_score``): the
    completion's answers run in the sandbox against the problem ``ground_truth``; score = the comparable set reward
    (mean over fixed Dirichlet weights of the best answer), plus the answer matrix for logging."""
    global _SCORER
    if _SCORER is None:
        _SCORER = AnswerScorer(os.environ.get("VEVO_PROBLEMS_PATH", "").split(os.pathsep) if
                               os.environ.get("VEVO_PROBLEMS_PATH") else ())
    info = extra_info or {}
    mat = _SCORER.matrix(str(ground_truth), info.get("parent_code", ""), solution_str, int(info.get("m", 4)),
                         info.get("alias"))
    return {"score": comparable_score(mat), "answers": int(mat.shape[0]), "matrix": json.dumps(mat.tolist())}


def register_estimators() -> list[str]:
    """Add vevo_<name> for every estimator to veRL's ADV_ESTIMATOR_REGISTRY (idempotent); returns the names."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    for name, fn in ESTIMATOR_FNS.items():
        if ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            register_adv_est(name)(fn)
    return list(ESTIMATOR_FNS)
