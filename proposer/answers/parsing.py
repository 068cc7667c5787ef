"""The multi-answer completion format: one LLM completion carries m candidate mutations.

Format (VPO reference style): answer i sits between ``<answer_i>`` and ``</answer_i>``; inside is either one
fenced code block (a full rewrite) or one or more OpenEvolve SEARCH/REPLACE diff blocks. Without any tags, code
answers may come as fenced blocks separated by ``---`` lines.

Decisions (documented because model output is messy and every choice changes what gets evaluated):

* ``parse_answers`` never raises and always returns exactly m answers; a missing answer is ``empty`` (score 0).
* Indices outside 1..m are ignored; a repeated index keeps the first occurrence in text order.
* The prompt ends with ``<answer_1>``, so a completion often starts with answer 1's body: when the first tag in
  the text is a closing tag ``</answer_k>``, the text before it is answer k.
* An answer ends at the first closing tag of any index, or at the next opening tag (model forgot to close it,
  the content is complete because it moved on).
* A *truncated* last answer (opening tag, no closing tag, end of text -- generation hit max tokens) is accepted
  only when its content is complete: a closed code fence, or balanced diff blocks. A fence cut off by the end of
  text is ``invalid`` ("truncated"): such code is almost always broken and would only waste an evaluation.
* Inside a closed answer, a fence whose closing line is missing runs to the closing tag (model forgot it).
* A closed answer with neither a fence nor diff markers is accepted as raw ``code`` when it parses as Python and
  has at least one statement that is not a bare expression (so prose like "hello" or "Sorry, I can't" is ``invalid``). Raw code in
  a truncated answer is rejected (cannot tell whether it is complete).
* A code answer with several fences uses the first one. Diff markers win over fences (diffs are often fenced).
* An optional short reasoning section may come before the answers: ``<reasoning>...</reasoning>`` (the opening
  tag may be the prompt's last words). A closing ``</reasoning>`` before any answer tag ends it; the reasoning is
  dropped before the answers are parsed (``split_reasoning``), so text with or without it parses the same.
  An unclosed reasoning is left in place (text before the first answer tag is ignored anyway).
* Untagged text: split on ``---`` lines outside fences/diff blocks; each segment with diff markers is one diff
  answer, each fenced block is one code answer, anything else (prose) is skipped. Raw unfenced code is not
  guessed at without tags.

Everything is line scanning plus two trivially linear regexes, so 1 MB of garbage parses in well under a second.
"""
from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from typing import Literal

Kind = Literal["code", "diff", "empty", "invalid"]

_OPEN = re.compile(r"<answer_(\d{1,9})>")
_CLOSE = re.compile(r"</answer_(\d{1,9})>")
_ANY_TAG = re.compile(r"</?answer_\d{1,9}>")
_REASON_OPEN = "<reasoning>"
_REASON_CLOSE = "</reasoning>"
_RAW_CODE_MAX_CHARS = 100_000  # ast.parse on pathological megabyte inputs is not worth it
_MAX_ERROR_CHARS = 200


@dataclass(frozen=True)
class Answer:
    """One parsed answer. ``body``: the code (fence removed) for ``code``, the stripped answer text for ``diff``
    and ``invalid``, "" for ``empty``. ``blocks``: (search, replace) pairs of a ``diff``."""

    index: int
    kind: Kind
    body: str
    blocks: tuple[tuple[str, str], ...] = ()
    error: str = ""


# ----------------------------------------------------------------------------------------------- line kinds


def _fence_open(line: str) -> int:
    """Length of the backtick run opening a fence on this line, 0 if it is not a fence line."""
    s = line.strip()
    if not s.startswith("```"):
        return 0
    n = len(s) - len(s.lstrip("`"))
    return 0 if "`" in s[n:] else n


def _fence_close(line: str, n: int) -> bool:
    s = line.strip()
    return len(s) >= n and s == "`" * len(s)


def _is_search(line: str) -> bool:
    s = line.strip()
    return s.startswith("<<<<<<<") and s.lstrip("<").strip() == "SEARCH"


def _is_divider(line: str) -> bool:
    s = line.strip()
    return len(s) >= 7 and s == "=" * len(s)


def _is_replace(line: str) -> bool:
    s = line.strip()
    return s.startswith(">>>>>>>") and s.lstrip(">").strip() == "REPLACE"


def _has_diff_markers(text: str) -> bool:
    if "<<<<<<<" not in text and ">>>>>>>" not in text:  # nearly always: no line-by-line scan
        return False
    return any(_is_search(ln) or _is_replace(ln) for ln in text.split("\n"))


# ------------------------------------------------------------------------------------------------- pieces


def _fenced_blocks(lines: list[str]) -> list[tuple[str, bool]]:
    """All fenced blocks as (content, closed); an unclosed fence runs to the end of ``lines``."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(lines)
    while i < n:
        width = _fence_open(lines[i])
        if not width:
            i += 1
            continue
        j = i + 1
        while j < n and not _fence_close(lines[j], width):
            j += 1
        out.append(("\n".join(lines[i + 1 : j]), j < n))
        i = j + 1
    return out


def _diff_blocks(lines: list[str]) -> tuple[tuple[tuple[str, str], ...], str]:
    """SEARCH/REPLACE pairs (text without trailing newline), or an error for unbalanced markers."""
    blocks: list[tuple[str, str]] = []
    search: list[str] = []
    replace: list[str] = []
    state = "out"
    for no, line in enumerate(lines, 1):
        if state == "out":
            if _is_search(line):
                state, search, replace = "search", [], []
            elif _is_divider(line) or _is_replace(line):
                return (), f"unbalanced diff markers: {line.strip()[:20]!r} outside a SEARCH block (line {no})"
        elif state == "search":
            if _is_divider(line):
                state = "replace"
            elif _is_search(line) or _is_replace(line):
                return (), f"unbalanced diff markers: SEARCH block without '=======' (line {no})"
            else:
                search.append(line)
        else:
            if _is_replace(line):
                blocks.append(("\n".join(search).rstrip(), "\n".join(replace).rstrip()))
                state = "out"
            elif _is_search(line) or _is_divider(line):
                return (), f"unbalanced diff markers: REPLACE section not closed (line {no})"
            else:
                replace.append(line)
    if state != "out":
        return (), "unbalanced diff markers: last block has no '>>>>>>> REPLACE' (truncated?)"
    if not blocks:
        return (), "no SEARCH/REPLACE block"
    return tuple(blocks), ""


def _trim(text: str) -> str:
    """Drop leading blank lines and trailing whitespace, keep the first line's indentation."""
    lines = text.split("\n")
    k = 0
    while k < len(lines) and not lines[k].strip():
        k += 1
    return "\n".join(lines[k:]).rstrip()


def _looks_like_code(text: str) -> bool:
    if not text.strip() or len(text) > _RAW_CODE_MAX_CHARS:
        return False
    try:
        tree = ast.parse(text)
    except Exception:  # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return False
    return any(not isinstance(stmt, ast.Expr) for stmt in tree.body)


def _invalid(index: int, body: str, error: str) -> Answer:
    return Answer(index, "invalid", body, error=error[:_MAX_ERROR_CHARS].replace("\n", " "))


def _classify(index: int, inner: str, truncated: bool) -> Answer:
    """Turn the text of one tagged answer into an Answer (see module docstring for the rules)."""
    if not inner.strip():
        return Answer(index, "empty", "")
    lines = inner.split("\n")
    if _has_diff_markers(inner):
        blocks, error = _diff_blocks(lines)
        if error:
            return _invalid(index, inner.strip(), error)
        return Answer(index, "diff", inner.strip(), blocks)
    fences = _fenced_blocks(lines)
    if fences:
        code, closed = fences[0]
        if truncated and not closed:
            return _invalid(index, inner.strip(), "truncated: code fence not closed at end of text")
        code = code.rstrip()
        return Answer(index, "code", code) if code.strip() else Answer(index, "empty", "")
    if truncated:
        return _invalid(index, inner.strip(), "truncated: answer has no closing tag and no code fence")
    raw = textwrap.dedent(_trim(inner))
    if _looks_like_code(raw):
        return Answer(index, "code", raw)
    return _invalid(index, inner.strip(), "no code fence, diff block or parseable code")


# ------------------------------------------------------------------------------------------------ parsers


def _tagged(text: str, m: int) -> dict[int, Answer]:
    opens = [(mt.start(), mt.end(), int(mt.group(1))) for mt in _OPEN.finditer(text)]
    closes = [(mt.start(), int(mt.group(1))) for mt in _CLOSE.finditer(text)]
    found: dict[int, Answer] = {}

    def keep(index: int, inner: str, truncated: bool) -> None:
        if 1 <= index <= m and index not in found:
            found[index] = _classify(index, inner, truncated)

    first_open = opens[0][0] if opens else len(text)
    if closes and closes[0][0] < first_open:  # completion continues a prompt that ended in <answer_k>
        keep(closes[0][1], text[: closes[0][0]], False)
    c = 0
    for k, (_, body_start, index) in enumerate(opens):
        limit = opens[k + 1][0] if k + 1 < len(opens) else len(text)
        while c < len(closes) and closes[c][0] < body_start:
            c += 1
        if c < len(closes) and closes[c][0] < limit:
            keep(index, text[body_start : closes[c][0]], False)
        else:
            keep(index, text[body_start:limit], limit == len(text))
    return found


def _untagged(text: str, m: int) -> dict[int, Answer]:
    lines = text.split("\n")
    segments: list[list[str]] = [[]]
    fence = 0
    in_diff = False
    for line in lines:
        if fence:
            fence = 0 if _fence_close(line, fence) else fence
        elif in_diff:
            in_diff = not _is_replace(line)
        elif _is_search(line):
            in_diff = True
        elif line.strip() == "---":
            segments.append([])
            continue
        else:
            fence = _fence_open(line)
        segments[-1].append(line)
    found: dict[int, Answer] = {}
    for s, seg in enumerate(segments):
        last_segment = s == len(segments) - 1
        text = "\n".join(seg)
        if _has_diff_markers(text):
            found[len(found) + 1] = _classify(len(found) + 1, text, last_segment)
            continue
        for code, closed in _fenced_blocks(seg):
            index = len(found) + 1
            if not closed:  # only possible at the very end of the text
                found[index] = _invalid(index, code.strip(), "truncated: code fence not closed at end of text")
            else:
                code = code.rstrip()
                found[index] = Answer(index, "code", code) if code.strip() else Answer(index, "empty", "")
        if len(found) >= m:
            break
    return {i: a for i, a in found.items() if i <= m}


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, the rest) when the text opens with a reasoning section closed before any answer tag,
    else ("", text)."""
    body = text.lstrip()
    body = body[len(_REASON_OPEN):] if body.startswith(_REASON_OPEN) else text
    end = body.find(_REASON_CLOSE)
    if end < 0:
        return "", text
    tag = _ANY_TAG.search(body, 0, end)
    if tag is not None:
        return "", text
    return body[:end].strip(), body[end + len(_REASON_CLOSE):]


def parse_answers(text: str, m: int) -> list[Answer]:
    """Exactly m answers (index 1..m) from one completion (an optional reasoning section first); never raises."""
    m = max(int(m), 0)
    try:
        text = text.replace("\r\n", "\n") if isinstance(text, str) else ""
        text = split_reasoning(text)[1]
        found = _tagged(text, m) if _ANY_TAG.search(text) else _untagged(text, m)
    except Exception as exc:  # defensive: a parser bug must not take a campaign down
        found = {i: _invalid(i, "", f"parser error: {type(exc).__name__}") for i in range(1, m + 1)}
    return [found.get(i) or Answer(i, "empty", "") for i in range(1, m + 1)]


# ----------------------------------------------------------------------------------------------- rendering


def fence_code(body: str, lang: str = "python") -> str:
    """``body`` in a fenced block whose backtick run is longer than any fence line inside, so it cannot close
    early (trailing whitespace of the body is dropped)."""
    longest = max((_fence_open(ln) for ln in body.split("\n")), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{body.rstrip()}\n{fence}"


def format_diff(blocks: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> str:
    """Render SEARCH/REPLACE pairs as the body of one diff answer."""
    return "\n".join(f"<<<<<<< SEARCH\n{s}\n=======\n{r}\n>>>>>>> REPLACE" for s, r in blocks)


def format_answers(bodies: list[str], kind: Literal["code", "diff"] = "code") -> str:
    """Render bodies in the tag format (training targets, replay files). Code bodies go in a python fence
    (trailing newlines are not part of a body); diff bodies are written as is. ``parse_answers`` of the result
    gives the bodies back (code: trailing whitespace dropped; diff: stripped). Raises ValueError for a body
    that could not round-trip (it contains an answer tag, or a code body contains a diff marker line)."""
    if kind not in ("code", "diff"):
        raise ValueError(f"format_answers: kind must be 'code' or 'diff', got {kind!r}")
    parts = []
    for i, body in enumerate(bodies, 1):
        if _ANY_TAG.search(body):
            raise ValueError(f"format_answers: body {i} contains an <answer_k> tag")
        if kind == "code":
            if _has_diff_markers(body):
                raise ValueError(f"format_answers: code body {i} contains a SEARCH/REPLACE marker line")
            inner = fence_code(body)
        else:
            inner = body.strip()
        parts.append(f"<answer_{i}>\n{inner}\n</answer_{i}>")
    return "\n".join(parts)
