"""Reference answers for verifier-free training (CoVRL) from the archive itself.

For a prompt built on parent P, the reference is the best program the archive found among P's descendants
(children, their children, ...; recorded up to the training iteration) when it scores above P; otherwise the
problem's best solved program, if there is one and it is not P itself; otherwise there is none and the sample is
skipped (counted by the caller). "Best" = highest scalar, the earliest program on ties. The reference text is the
program's EVOLVE-BLOCK (what an answer rewrites), or the whole program when it has none. Pure over ProgramRows.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from problems.evolve_block import evolve_block


@dataclass(frozen=True)
class Reference:
    program_id: int
    kind: str  # "descendant" | "solved"
    text: str


def answer_text(code: str) -> str:
    """What an answer would contain to produce ``code``: its EVOLVE-BLOCK, or the whole program."""
    block = evolve_block(code)
    return (code if block is None else block).rstrip("\n")


def _best(rows):
    return max(rows, key=lambda r: (r.scalar, -r.id), default=None)


def reference_for(parent_id: int | None, programs: Sequence, up_to_iteration: int | None = None) -> Reference | None:
    """The reference for a prompt on ``parent_id``; ``programs``: ProgramRows of the parent's problem in id order."""
    if parent_id is None:
        return None
    rows = [r for r in programs if up_to_iteration is None or r.iteration <= up_to_iteration]
    parent = next((r for r in rows if r.id == parent_id), None)
    if parent is None:
        return None
    family, desc = {parent_id}, []
    for r in rows:
        if r.id > parent_id and any(p in family for p in r.parent_ids):
            family.add(r.id)
            desc.append(r)
    best = _best([r for r in desc if r.scalar > parent.scalar])
    if best is not None:
        return Reference(best.id, "descendant", answer_text(best.code))
    solved = _best([r for r in rows if r.solved and r.id != parent_id])
    if solved is not None:
        return Reference(solved.id, "solved", answer_text(solved.code))
    return None
