"""The vevo reward manager for veRL's reward loop (veRL >= 0.9), loaded by file path::

    reward.reward_manager.source=importlib
    reward.reward_manager.name=VevoRewardManager
    reward.reward_manager.module.path=<vevo>/proposer/integrations/verl_reward.py

Each reward-loop worker scores one response: its answers run in a warm sandbox pool on that worker's node, and
the (m x d) answer matrix comes back as the sample's score; ``assemble_rm_scores`` (in the trainer process) packs
each matrix into the response's reward row for the ``vevo_*`` advantage estimators (proposer/integrations/verl_plugin.py).
Importing this file registers those estimators in the importing process.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from proposer.integrations.verl_plugin import AnswerScorer, comparable_score, pack_row, register_estimators

register_estimators()


class VevoRewardManager(RewardManagerBase):
    """Scores a multi-answer response by its answer-by-test matrix (sandboxed), for vevo's estimators."""

    _scorer: AnswerScorer | None = None  # one warm pool per reward-loop worker process

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None,
                 reward_model_tokenizer=None, **_: Any):
        super().__init__(config, tokenizer, compute_score)

    @classmethod
    def scorer(cls) -> AnswerScorer:
        if cls._scorer is None:
            dirs = [d for d in os.environ.get("VEVO_PROBLEMS_PATH", "").split(os.pathsep) if d]
            cls._scorer = AnswerScorer(dirs, workers=int(os.environ.get("VEVO_SANDBOX_WORKERS", "2")))
        return cls._scorer

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1:][0]
        response = item.batch["responses"]
        valid = int(item.batch["attention_mask"][-response.shape[-1]:].sum())
        text = self.tokenizer.decode(response[:valid], skip_special_tokens=True)
        info = item.non_tensor_batch.get("extra_info", {}) or {}
        pid = str(item.non_tensor_batch["reward_model"]["ground_truth"])
        mat = await self.loop.run_in_executor(
            None, lambda: self.scorer().matrix(pid, info.get("parent_code", ""), text, int(info.get("m", 4)),
                                               info.get("alias")))
        score = comparable_score(mat)
        return {"reward_score": {"matrix": mat.tolist(), "score": score},
                "reward_extra_info": {"vevo_set_reward": score, "vevo_answers": int(mat.shape[0])}}

    @classmethod
    def assemble_rm_scores(cls, data: DataProto, scores: list) -> torch.Tensor:
        """Each response's matrix packed into its reward row (rows still sum to the comparable score)."""
        plen = data.batch["prompts"].size(1)
        valid = data.batch["attention_mask"][:, plen:].sum(dim=1).tolist()
        out = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        for i, (s, n) in enumerate(zip(scores, valid)):
            if isinstance(s, dict):
                row = pack_row(np.asarray(s["matrix"], dtype=float), float(s["score"]), int(n))
            else:  # a plain scalar (another manager's output format): at the last valid token, as veRL does
                row = np.zeros(int(n))
                row[-1] = float(s)
            out[i, : int(n)] = torch.as_tensor(row, dtype=torch.float32)
        return out
