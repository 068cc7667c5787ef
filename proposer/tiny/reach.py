"""Whether a problem is within the bundled tiny proposer's reach, judged from the problem alone.

The tiny proposer was pretrained only on pbe's integer and integer-list functions (proposer/tiny/corpus.py: the
pbe DSL's compositions: one argument that is an int or a list of ints, returning an int or a list of ints). On a
problem whose values are other types (strings, floats, dicts), a stdin/stdout program or an OpenEvolve evaluator
it writes integer arithmetic that never improves, so a campaign should say so up front instead of only "no
improvement for N iterations". Pure: no I/O; a problem with only assert tests (values unseen) is not judged.
"""
from __future__ import annotations

from typing import Any, Iterable

from problems.model import CallCase, PointsCase, Problem, StdioCase

PRETRAINED_ON = "integer and integer-list functions"
TINY_SPECS = ("tiny",)


def _kind(x: Any) -> str:
    return "bool" if isinstance(x, bool) else "nested list" if isinstance(x, list) else type(x).__name__


def _kinds(value: Any) -> set[str]:
    """The type names in a value, a list's elements in its place: an int and a flat list of ints give {"int"}."""
    if isinstance(value, list):
        return {_kind(x) for x in value} or {"int"}
    return {_kind(value)}


def out_of_reach(problem: Problem) -> str | None:
    """Why the tiny proposer cannot be expected to solve this problem, one clause ("str inputs, str outputs",
    "float/str inputs, 2 arguments"); None when its tests look like what it was pretrained on, or cannot be
    judged."""
    if problem.openevolve is not None:
        return "an OpenEvolve evaluator's whole program"
    if any(isinstance(t, StdioCase) for t in problem.tests):
        return "a stdin/stdout program"
    if any(isinstance(t, PointsCase) for t in problem.tests):
        return "float data points (symbolic regression)"
    ins: set[str] = set()
    outs: set[str] = set()
    arity: set[int] = set()
    for t in problem.tests:
        if isinstance(t, CallCase):
            arity.add(len(t.args) + len(t.kwargs))
            for a in (*t.args, *t.kwargs.values()):
                ins |= _kinds(a)
            outs |= _kinds(t.expected)
    ins.discard("int")
    outs.discard("int")
    parts = [f"{'/'.join(sorted(ins))} inputs"] * bool(ins) + [f"{'/'.join(sorted(outs))} outputs"] * bool(outs)
    if arity - {1}:
        parts.append(f"{' or '.join(str(n) for n in sorted(arity - {1}))} arguments")
    return ", ".join(parts) or None


def reach_note(specs: Iterable[str], problems: Iterable[Problem], limit: int = 2, reasons: int = 4) -> str | None:
    """One line for a campaign whose proposers are ``specs``: when one is the tiny proposer, how many of the
    problems are out of its reach and why (``limit`` ids named per reason, the ``reasons`` commonest reasons, so
    an imported suite of 974 problems gets a line one can read); None when none is, or no tiny."""
    if not any(s in TINY_SPECS for s in specs):
        return None
    problems = list(problems)
    by_reason: dict[str, list[str]] = {}
    for p in problems:
        why = out_of_reach(p)
        if why:
            by_reason.setdefault(why, []).append(p.id)
    if not by_reason:
        return None
    n = sum(len(ids) for ids in by_reason.values())
    common = sorted(by_reason.items(), key=lambda kv: -len(kv[1]))  # stable: ties keep first-seen order
    named = "; ".join(", ".join(ids[:limit]) + (f" +{len(ids) - limit} more" if len(ids) > limit else "") + f": {why}"
                      for why, ids in common[:reasons])
    if len(common) > reasons:
        rest = common[reasons:]
        k, m = len(rest), sum(len(ids) for _, ids in rest)
        named += f"; {k} other reason{'s' * (k > 1)}, {m} problem{'s' * (m > 1)}"
    return (f"{n} of {len(problems)} problems are out of the bundled tiny proposer's reach ({named}); it was "
            f"pretrained on {PRETRAINED_ON} only (proposer/tiny/corpus.py): expect no progress there, or use a "
            "larger proposer (hf:, vllm:, openai:)")
