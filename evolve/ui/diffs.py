"""A unified diff whose cost is bounded, whatever the programs: a page view must not take minutes.

difflib's matcher is quadratic in the lines it compares (0.1, 0.4, 1.6 s at 1k, 2k, 4k lines, and no answer in
20 s for a 0.86 MB child of a 0.43 MB parent). Here the common first and last lines are set aside in linear time,
and only the changed region between them goes to difflib, when it is within ``MAX_LINES`` lines and ``MAX_CHARS``
characters; a larger region is shown as one replacement and the diff says it was truncated. The output is what
``difflib.unified_diff`` would print for those opcodes (same headers, hunks and line numbers).
"""
from __future__ import annotations

import difflib

MAX_LINES = 2000     # lines of the changed region (old + new) difflib may compare
MAX_CHARS = 200_000  # characters of the changed region difflib may compare


def _range(start: int, stop: int) -> str:
    """difflib's unified range: 'start,length' (1-based; an empty range names the line before it)."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return f"{beginning}"
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def opcodes(a: list[str], b: list[str], max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS
            ) -> tuple[list[tuple[str, int, int, int, int]], str]:
    """(opcodes of a → b, '' or why the changed region was not line-diffed)."""
    n = min(len(a), len(b))
    p = 0
    while p < n and a[p] == b[p]:
        p += 1
    s = 0
    while s < n - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    ea, eb = len(a) - s, len(b) - s
    mid_a, mid_b = a[p:ea], b[p:eb]
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, p, 0, p)] if p else []
    note = ""
    size = sum(map(len, mid_a)) + sum(map(len, mid_b))
    if not mid_a and not mid_b:
        pass
    elif len(mid_a) + len(mid_b) <= max_lines and size <= max_chars:
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False).get_opcodes():
            ops.append((tag, i1 + p, i2 + p, j1 + p, j2 + p))
    else:
        tag = "replace" if mid_a and mid_b else ("delete" if mid_a else "insert")
        ops.append((tag, p, ea, p, eb))
        note = (f"diff truncated: the changed region ({len(mid_a)} and {len(mid_b)} lines, {size} characters) is "
                f"over the line-diff budget ({max_lines} lines, {max_chars} characters); shown as one replacement")
    if s:
        ops.append(("equal", ea, len(a), eb, len(b)))
    return ops, note


def unified(old: str, new: str, old_name: str, new_name: str, context: int = 3) -> tuple[list[str], str]:
    """(unified diff lines, '' or the truncation note)."""
    a, b = old.splitlines(), new.splitlines()
    ops, note = opcodes(a, b)
    if all(op[0] == "equal" for op in ops):
        return [], note
    sm = difflib.SequenceMatcher(None, [], [])
    sm.opcodes = ops  # get_grouped_opcodes reads the opcodes computed above, nothing else
    out = [f"--- {old_name}", f"+++ {new_name}"]
    for group in sm.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                out += ["-" + line for line in a[i1:i2]]
            if tag in ("replace", "insert"):
                out += ["+" + line for line in b[j1:j2]]
    return out, note
