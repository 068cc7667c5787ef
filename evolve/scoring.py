"""Seed-program prompts and the score matrices of their completions: the one path from a problem to the
numbers `vevo train`, `vevo eval` and the learning probes (evolve/probe.py) learn from or report."""
from __future__ import annotations

import numpy as np

from evaluators.types import Evaluation
from problems.model import Problem
from proposer.answers import naming
from proposer.answers.mutate import MutationError, apply_answer
from proposer.answers.parsing import parse_answers
from proposer.answers.prompting import PromptContext, build_prompt


def seed_prompt(problem: Problem, seed_eval: Evaluation, m: int, style: str = "compact",
                alias: str | None = None) -> str:
    """The prompt for a problem's seed; ``alias``: the function name the model writes (``naming.entry_name``)."""
    labels = [problem.test_label(i) for i in range(problem.n_tests)] or \
        [f"metric {j}" for j in range(len(seed_eval.vector))]
    ctx = PromptContext(problem_id=problem.id, description=problem.description, parent_code=problem.seed_code,
                        parent_vector=list(seed_eval.vector), test_labels=labels[: len(seed_eval.vector)], m=m)
    return build_prompt(naming.present(ctx, naming.Renaming.make(problem.entry_point, alias, problem.seed_code)),
                        style=style)


def score_completions(problem: Problem, texts: list[str], m: int, d: int, pool,
                      alias: str | None = None) -> tuple[list[np.ndarray], list[Evaluation]]:
    """Each completion → its (m × d) score matrix; unparseable or inapplicable answers score 0. ``alias``: as
    for `seed_prompt` (answers are renamed back to the problem's entry point)."""
    ren = naming.Renaming.make(problem.entry_point, alias, problem.seed_code)
    parent = ren.to_model(problem.seed_code) if ren is not None else problem.seed_code
    codes, where = [], []
    for ci, text in enumerate(texts):
        for ai, a in enumerate(parse_answers(text, m)):
            if a.kind in ("code", "diff"):
                try:
                    code = apply_answer(parent, a)
                    codes.append(ren.from_model(code) if ren is not None else code)
                    where.append((ci, ai))
                except MutationError:
                    pass
    evs = pool.evaluate_many([(problem, c) for c in codes]) if codes else []
    mats = [np.zeros((m, d)) for _ in texts]
    for (ci, ai), ev in zip(where, evs):
        v = np.asarray(ev.vector[:d], dtype=float)
        mats[ci][ai, : v.size] = v
    return mats, evs
