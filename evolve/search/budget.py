"""Budgets as stop rules: a run stops at N evaluations, T wall seconds or K generated tokens, whichever comes first
(``search.budget.evaluations`` / ``.seconds`` / ``.tokens``), so arms are compared at equal compute in one command.

What has been spent is read from what the archive commits (the programs' count, each iteration's ``gen_tokens``
and its cumulative ``wall_seconds``), never from a process-local counter: a run killed and resumed counts what it
did before, and `vevo runs show` / `vevo report` say which rule stopped a run from its archive alone. The check
runs after each commit, so a run ends at the first commit whose totals reach a budget (one batch may carry it
past N); the batches then still in flight are dropped, never committed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

KINDS = ("evaluations", "seconds", "tokens")  # the order ties are named in (several reached at one commit)


@dataclass
class Spent:
    """A run's totals so far, as committed."""
    evaluations: int = 0   # programs recorded (seeds and format errors included): the archive's eval_index
    seconds: float = 0.0   # the run's wall clock at its last commit (it continues across resumes)
    tokens: int = 0        # tokens the proposers generated

    def add(self, programs: int, metrics: Mapping[str, Any]) -> None:
        """One committed iteration: its programs and its metrics row."""
        self.evaluations += int(programs)
        tok = metrics.get("gen_tokens")
        if isinstance(tok, (int, float)):
            self.tokens += int(tok)
        wall = metrics.get("wall_seconds")
        if isinstance(wall, (int, float)):
            self.seconds = max(self.seconds, float(wall))


def spent(n_evaluations: int, metrics: Sequence[Any]) -> Spent:
    """Pure: the totals from the archive's evaluation count and its metric rows (``.data``)."""
    s = Spent(evaluations=int(n_evaluations))
    for m in metrics:
        s.add(0, m.data)
    return s


def limits(budget: Any) -> dict[str, float]:
    """The budgets that are set, by kind, from a config's ``search.budget`` (a model or its dict)."""
    get = budget.get if isinstance(budget, Mapping) else (lambda k, d=None: getattr(budget, k, d))
    return {k: get(k) for k in KINDS if get(k) is not None}


def reached(budget: Any, s: Spent) -> str | None:
    """``"budget.<kind>"`` of the first budget ``s`` has reached (in `KINDS` order), None while none is."""
    for kind, limit in limits(budget).items():
        if getattr(s, kind) >= limit:
            return f"budget.{kind}"
    return None


def run_state(archive: Any) -> tuple[str | None, Spent, dict[str, float]]:
    """What ended a run, from its archive alone, with its totals and the budgets set. The reason is a budget
    (``budget.evaluations`` | ``budget.seconds`` | ``budget.tokens``), ``iterations`` (search.iterations spent),
    ``solved`` (every problem solved and retired), or None (running, or stopped short of all of them: Ctrl-C, an error,
    kill -9)."""
    from ..config.legacy import upgrade

    search = upgrade(json.loads(archive.get_meta("config") or "{}")).get("search", {})
    lim = limits(search.get("budget") or {})
    s = spent(archive.n_evaluations(), archive.metrics_rows())
    why = reached(lim, s)
    if why is None:
        last, its = archive.last_iteration(), search.get("iterations")
        problems = json.loads(archive.get_meta("problems", "[]") or "[]")
        if last is not None and its is not None and last >= int(its):
            why = "iterations"
        elif search.get("retire_solved", True) and problems and len(archive.solved_problems()) >= len(problems):
            why = "solved"
    return why, s, lim


def stopped_by(archive: Any) -> str | None:
    """`run_state`'s reason alone."""
    return run_state(archive)[0]


def describe(why: str | None, s: Spent, budget: Any) -> str:
    """One line: what stopped the run and where its totals stand against the budgets set."""
    lim = limits(budget)
    fmt = {"evaluations": lambda v: f"{int(v)}", "seconds": lambda v: f"{v:.1f}s", "tokens": lambda v: f"{int(v)}"}
    parts = [f"{k} {fmt[k](getattr(s, k))} of {fmt[k](v)}" for k, v in lim.items()]
    head = f"stopped by {why}" if why else "not stopped by a budget"
    return head + (f" (budgets: {', '.join(parts)})" if parts else "")
