"""A new best is re-checked in a fresh process before it is reported.

An OpenEvolve evaluator's metrics are computed inside the sandbox, by code that ran next to earlier candidates in
the same warm worker; an evaluation that beats every earlier one of its problem is what a forgery would look like,
and what a campaign keeps. So it runs again in a worker started for it alone, and the lower of the two results is
the one reported: a forged or poisoned first result cannot survive, a deterministic honest one is unchanged, and a
nondeterministic one is reported as its worse draw. A result the two runs disagree on (status or solved) is marked
``unverified`` and never counts as solved. Problems scored in the orchestrator (tests with expected values the
sandbox never sees) need none of this: a candidate can only lose there.
"""
from __future__ import annotations

import threading
from typing import Callable

from problems.model import Problem

from .types import Evaluation

REL = 1e-9  # scalars this close are the same result


class BestTracker:
    """The best scalar this evaluator has reported per problem (OpenEvolve problems only)."""

    def __init__(self) -> None:
        self.best: dict[str, float] = {}
        self.lock = threading.Lock()
        self.rechecked = 0  # re-runs done (a confirmed result is left as it was: which program of a pipelined
        # campaign was a new best when it was evaluated depends on timing, and the archive must not)

    def recheck(self, items: list[tuple[Problem, str]], evs: list[Evaluation],
                fresh: Callable[[Problem, str], Evaluation]) -> list[Evaluation]:
        """evs with every new best of this batch re-run through ``fresh`` (highest first, until one stands)."""
        out = list(evs)
        by_problem: dict[str, list[int]] = {}
        for i, ((p, _), ev) in enumerate(zip(items, evs)):
            if p.openevolve is not None and ev.status == "ok" and "unverified" not in ev.artifacts:
                by_problem.setdefault(p.id, []).append(i)
        for pid, idx in by_problem.items():
            for i in sorted(idx, key=lambda i: -evs[i].scalar):
                with self.lock:
                    if pid in self.best and evs[i].scalar <= self.best[pid]:
                        break  # not a new best: nothing below it is either
                out[i] = settle(evs[i], _fresh_or_note(fresh, *items[i]))
                with self.lock:
                    self.rechecked += 1
                if "unverified" not in out[i].artifacts:  # the next one is a new best only if it beats this
                    with self.lock:
                        self.best[pid] = max(self.best.get(pid, out[i].scalar), out[i].scalar)
        return out


def _fresh_or_note(fresh: Callable[[Problem, str], Evaluation], problem: Problem, code: str) -> Evaluation | str:
    try:
        return fresh(problem, code)
    except Exception as e:  # no fresh worker could start: say so, keep the first result
        return f"{type(e).__name__}: {e}"[:300]


def settle(first: Evaluation, again: Evaluation | str) -> Evaluation:
    """The result reported for a new best, given its re-run (or why there was none)."""
    if isinstance(again, str):
        first.artifacts["recheck"] = f"not re-checked: {again}"
        return first
    same = again.status == first.status and again.solved == first.solved
    close = abs(again.scalar - first.scalar) <= REL * max(1.0, abs(first.scalar))
    if same and close:  # confirmed: reported as it was
        return first
    low = again if again.scalar < first.scalar else first
    out = Evaluation(vector=list(low.vector), scalar=low.scalar, solved=low.solved and same, status=low.status,
                     artifacts=dict(low.artifacts))
    out.artifacts["recheck"] = (f"a fresh process scored {again.scalar!r} ({again.status}), the warm worker "
                                f"{first.scalar!r} ({first.status}): the lower is reported")
    if not same:
        out.artifacts["unverified"] = "a fresh process disagreed with the first evaluation"
        out.solved = False
    return out
