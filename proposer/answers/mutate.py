"""Turning a parsed answer into a child program, and the dedupe key for candidates.

The EVOLVE-BLOCK markers are defined in ``problems/evolve_block.py``. A parent has either no markers (the whole
file is editable) or exactly one well-formed pair; anything else is malformed.

Rules for ``apply_answer`` (all failures are a one-line ``MutationError``):

* ``code``: replaces the inside of the block (markers kept). If the answer itself carries the markers, only its
  inside is used. Without markers in the parent the answer replaces the whole file. When the START marker is
  indented and the answer is not, the answer is indented to match.
* ``diff``: each SEARCH/REPLACE applies in order to the result of the previous one, at the first admissible
  line-aligned match: exact lines first, then a whitespace-tolerant match (stripped lines, blank lines at the
  ends of SEARCH ignored; REPLACE is re-indented by the indentation difference). Empty REPLACE deletes. With
  markers, the edited lines must lie inside the block ("markers enforced"); a SEARCH may still use a marker
  line as an anchor if REPLACE repeats it unchanged at the same end. Markers must survive exactly once each.
* ``empty`` / ``invalid``: always an error.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import textwrap

from problems.evolve_block import END, START, MarkerError, is_marker, markers, split_lines

from proposer.answers.parsing import Answer

class MutationError(ValueError):
    """An answer could not be applied; the message is one line (it goes into artifacts and logs)."""

    def __init__(self, msg: str) -> None:
        super().__init__(" ".join(str(msg).split())[:300])


def _markers(lines: list[str]) -> tuple[int, int] | None:
    try:
        return markers(lines)
    except MarkerError as e:
        raise MutationError(str(e)) from None


_lines = split_lines


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _first_nonblank(lines: list[str]) -> str | None:
    return next((ln for ln in lines if ln.strip()), None)


def _apply_code(lines: list[str], pair: tuple[int, int] | None, body: str) -> str:
    if pair is None:
        return body.rstrip("\n") + "\n"
    new = _lines(body)
    try:
        inner_pair = _markers(new)
    except MutationError as exc:
        raise MutationError(f"answer has {exc}") from None
    if inner_pair is not None:
        new = new[inner_pair[0] + 1 : inner_pair[1]]
    while new and not new[-1].strip():
        new.pop()
    indent = _indent_of(lines[pair[0]])
    first = _first_nonblank(new)
    if indent and first is not None and not _indent_of(first):
        new = textwrap.indent("\n".join(new), indent).split("\n")
    return "\n".join(lines[: pair[0] + 1] + new + lines[pair[1] :])


def _reindent(replace: list[str], parent_line: str, search_line: str) -> list[str]:
    """Shift REPLACE by the indentation difference between the matched parent line and the SEARCH line."""
    p, s = _indent_of(parent_line), _indent_of(search_line)
    if p == s:
        return replace
    if p.startswith(s):
        extra = p[len(s) :]
        return [extra + ln if ln.strip() else ln for ln in replace]
    if s.startswith(p):
        extra = s[len(p) :]
        return [ln[len(extra) :] if ln.startswith(extra) else ln for ln in replace]
    return replace


def _find(lines: list[str], search: list[str], key, admissible) -> int | None:
    target = [key(ln) for ln in search]
    keyed = [key(ln) for ln in lines]
    n = len(target)
    hit_outside = False
    for i in range(len(lines) - n + 1):
        if keyed[i : i + n] == target:
            if admissible(i):
                return i
            hit_outside = True
    return -1 if hit_outside else None


def _apply_block(lines: list[str], bounds: tuple[int, int] | None, k: int, search: str, replace: str) -> tuple[list[str], int]:
    """Apply SEARCH/REPLACE number k; returns the new lines and the change in line count."""
    exact = _lines(search)
    tolerant = list(exact)
    while tolerant and not tolerant[0].strip():
        tolerant.pop(0)
    while tolerant and not tolerant[-1].strip():
        tolerant.pop()
    if not tolerant:
        raise MutationError(f"SEARCH block {k} is empty")
    repl = _lines(replace) if replace.strip() else []
    outside = False
    for search_lines, key in ((exact, lambda s: s), (tolerant, str.strip)):
        lead = int(bool(bounds) and bool(repl) and is_marker(search_lines[0], START) and key(search_lines[0]) == key(repl[0]))
        trail = int(bool(bounds) and len(repl) > lead and is_marker(search_lines[-1], END) and key(search_lines[-1]) == key(repl[-1]))
        n = len(search_lines)

        def admissible(i: int) -> bool:
            return bounds is None or (bounds[0] <= i + lead and i + n - trail <= bounds[1])

        i = _find(lines, search_lines, key, admissible)
        if i is None:
            continue
        if i == -1:
            outside = True
            continue
        core = repl[lead : len(repl) - trail]
        if key is str.strip:
            core = _reindent(core, lines[i], search_lines[0])
        return lines[: i + lead] + core + lines[i + n - trail :], len(core) - (n - lead - trail)
    if outside:
        raise MutationError(f"SEARCH block {k} matches only outside the EVOLVE-BLOCK (markers enforced)")
    raise MutationError(f"SEARCH block {k} not found in parent: {tolerant[0].strip()[:60]!r}")


def _apply_diff(lines: list[str], pair: tuple[int, int] | None, blocks: tuple[tuple[str, str], ...]) -> str:
    if not blocks:
        raise MutationError("diff answer has no SEARCH/REPLACE blocks")
    bounds = (pair[0] + 1, pair[1]) if pair else None
    for k, (search, replace) in enumerate(blocks, 1):
        lines, delta = _apply_block(lines, bounds, k, search, replace)
        if bounds:
            bounds = (bounds[0], bounds[1] + delta)
    if pair is not None:
        try:
            after = _markers(lines)
        except MutationError:
            after = None
        if after != (bounds[0] - 1, bounds[1]):
            raise MutationError("diff would remove or duplicate EVOLVE-BLOCK markers (markers enforced)")
    return "\n".join(lines)


@functools.lru_cache(maxsize=64)
def _parent(code: str) -> tuple[tuple[str, ...], tuple[int, int] | None, str]:
    """A parent's lines and marker pair (or the error), once per parent: an iteration applies m x G answers to
    the same parent."""
    lines = _lines(code)
    try:
        return tuple(lines), _markers(lines), ""
    except MutationError as exc:
        return tuple(lines), None, str(exc)


def apply_answer(parent_code: str, answer: Answer) -> str:
    """The child program made by applying ``answer`` to ``parent_code``; MutationError when it cannot be."""
    if answer.kind == "empty":
        raise MutationError(f"answer {answer.index} is empty")
    if answer.kind == "invalid":
        raise MutationError(f"answer {answer.index} is invalid: {answer.error}")
    parent_lines, pair, error = _parent(parent_code)
    if error:
        raise MutationError(f"parent has {error}")
    lines = list(parent_lines)
    if answer.kind == "code":
        if not answer.body.strip():
            raise MutationError(f"answer {answer.index} has no code")
        return _apply_code(lines, pair, answer.body)
    if answer.kind == "diff":
        return _apply_diff(lines, pair, answer.blocks)
    raise MutationError(f"answer {answer.index} has unknown kind {answer.kind!r}")


# ---------------------------------------------------------------------------------------------------- dedupe


_SCOPES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCKS = ("body", "orelse", "finalbody", "handlers")


def _strip_docstrings(tree: ast.AST) -> None:
    """Docstrings sit only at the head of a scope's body: walk statement lists, never expressions (a full
    ast.walk was a third of the loop's own time in bench/perf/loop_overhead.py)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or ([] if isinstance(node, ast.Module) else [ast.Pass()])
        for field in _BLOCKS:
            stmts = getattr(node, field, None)
            if stmts:
                stack.extend(stmts)


def _dump(node: ast.AST, out: list[str]) -> None:
    """Prefix notation of an AST without positions: class name, each field, ")" closing the node, lists
    bracketed, leaves as repr (which never contains the NUL separator), so distinct trees give distinct
    strings. Twice as fast as ast.dump, which was a fifth of the loop's own time (bench/perf/loop_overhead.py)."""
    out.append(node.__class__.__name__)
    for name in node._fields:
        x = getattr(node, name, None)
        if isinstance(x, ast.AST):
            _dump(x, out)
        elif isinstance(x, list):
            out.append("[")
            for y in x:
                if isinstance(y, ast.AST):
                    _dump(y, out)
                else:
                    out.append(repr(y))
            out.append("]")
        else:
            out.append(repr(x))
    out.append(")")


def normalized_hash(code: str) -> str:
    """sha256 of the AST without positions or docstrings, so programs that differ only in formatting,
    comments or docstrings share a key. Unparseable code hashes its whitespace-collapsed text instead (the two
    domains are prefixed so they never collide). Stable within one Python version (the ast module can change)."""
    try:
        tree = ast.parse(code)
        if "'" in code or '"' in code:  # no quote character, no docstring to strip
            _strip_docstrings(tree)
        out = ["ast:"]
        _dump(tree, out)
        key = "\x00".join(out)
    except Exception:  # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        key = "txt:" + " ".join(code.split())
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
