"""`vevo runs show RUN --program ID`: one archived program as people read it, with its diff against its parent."""
from __future__ import annotations

import difflib
from typing import Any

from evaluators.types import error_text

from ..archive import Archive, ProgramRow


def parent_of(row: ProgramRow) -> int | None:
    """The program an answer was applied to (its inspirations follow it in ``parent_ids``); None for seeds."""
    return row.parent_ids[0] if row.parent_ids else None


def diff(parent_code: str, code: str, parent_id: int, program_id: int) -> str:
    """Unified diff from the parent to the program ("" when they are equal)."""
    lines = difflib.unified_diff(parent_code.splitlines(keepends=True), code.splitlines(keepends=True),
                                 fromfile=f"program {parent_id} (parent)", tofile=f"program {program_id}")
    return "".join(x if x.endswith("\n") else x + "\n" for x in lines)


def program_view(archive: Archive, program_id: int) -> dict[str, Any] | None:
    """Everything `runs show --program` prints, as plain data (None for an unknown id)."""
    row = archive.program(program_id)
    if row is None:
        return None
    pid = parent_of(row)
    parent = archive.program(pid) if pid is not None else None
    return {"id": row.id, "problem": row.problem, "island": row.island, "iteration": row.iteration,
            "status": row.status, "scalar": row.scalar, "solved": row.solved, "vector": row.vector,
            "error": error_text(row.artifacts), "parent_id": pid, "inspiration_ids": row.parent_ids[1:],
            "policy_version": row.policy_version, "code": row.code,
            "diff": diff(parent.code, row.code, parent.id, row.id) if parent is not None else None}


def render(view: dict[str, Any]) -> str:
    """The text form: a header, the code, then the diff against the parent."""
    vec = " ".join(f"{v + 0.0:.2f}" for v in view["vector"])  # + 0.0: -0.0 (a negated metric of 0) reads 0.00
    head = [f"program {view['id']} of {view['problem']} (iteration {view['iteration']}, island {view['island']}, "
            f"policy version {view['policy_version']})",
            f"status: {view['status']}  scalar {view['scalar']:.6g}" + ("  solved" if view["solved"] else ""),
            f"vector: {vec}" if vec else "vector: (none)"]
    if view["error"]:
        head.append(f"error: {view['error']}")
    if view["parent_id"] is None:
        head.append("parent: none (a seed program)")
    else:
        insp = ", ".join(map(str, view["inspiration_ids"]))
        head.append(f"parent: {view['parent_id']}" + (f" (inspirations: {insp})" if insp else ""))
    out = "\n".join(head) + "\n\n# ---- code\n" + view["code"].rstrip("\n") + "\n"
    if view["diff"] is not None:
        out += f"\n# ---- diff against parent {view['parent_id']}\n" + (view["diff"] or "(identical)\n")
    return out
