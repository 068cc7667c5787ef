"""``vevo problems check``: run a problem's seed and reference (if any) through the sandbox.

A healthy problem has a reference that is solved and a seed that is not; anything else usually means a
conversion bug (float comparison, tuple vs list, set order, arguments mutated by the tests).
"""
from __future__ import annotations

from typing import Any

from problems.model import Problem

MAX_VECTOR_CHARS = 64


def vector_text(vector: list[float], width: int = MAX_VECTOR_CHARS) -> str:
    """The per-test vector compactly: ``[1101]`` when every entry is 0 or 1, else ``[1,0.5,0]``; past width
    characters it is cut and says how many tests it left out (``[1101…+460]``)."""
    binary = all(v in (0.0, 1.0) for v in vector)
    parts = [("1" if v == 1.0 else "0") if binary else f"{v:.2g}" for v in vector]
    sep = "" if binary else ","
    out, shown = "", 0
    for part in parts:
        if len(out) + len(part) + len(sep) > width:
            break
        out += (sep if shown else "") + part
        shown += 1
    return f"[{out}…+{len(parts) - shown}]" if shown < len(parts) else f"[{out}]"



def check_problem(problem: Problem, pool) -> dict[str, Any]:
    """{"id", "seed": Evaluation.to_dict(), "reference": Evaluation.to_dict() or None}. The seed and the
    reference are evaluated together (``evaluate_many``), so a pool with two workers runs them in parallel."""
    items = [(problem, problem.seed_code)]
    if problem.reference_code is not None:
        items.append((problem, problem.reference_code))
    evs = pool.evaluate_many(items)
    return {"id": problem.id, "seed": evs[0].to_dict(),
            "reference": evs[1].to_dict() if len(evs) > 1 else None}


def check_many(problems: list[Problem], pool) -> list[dict[str, Any]]:
    """check_problem for many problems, keeping every worker of the pool busy (results in input order)."""
    items: list[tuple[Problem, str]] = []
    slots: list[tuple[int, int | None]] = []
    for p in problems:
        s = len(items)
        items.append((p, p.seed_code))
        r = None
        if p.reference_code is not None:
            r = len(items)
            items.append((p, p.reference_code))
        slots.append((s, r))
    evs = pool.evaluate_many(items)
    return [{"id": p.id, "seed": evs[s].to_dict(), "reference": evs[r].to_dict() if r is not None else None}
            for p, (s, r) in zip(problems, slots)]
