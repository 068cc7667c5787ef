"""The EVOLVE-BLOCK (OpenEvolve's convention): the editable region of a program, between the comment lines
``# EVOLVE-BLOCK-START`` and ``# EVOLVE-BLOCK-END``; everything outside it (harness, imports the evaluator relies
on) is fixed. A program has either no markers (the whole file is editable) or exactly one well-formed pair.

The one definition of the markers: suites and importers write them with `wrap_block`, the prompt shows the
region from `evolve_block`, and mutations (proposer/answers/mutate.py) keep edits inside `markers`.
"""
from __future__ import annotations

START = "EVOLVE-BLOCK-START"
END = "EVOLVE-BLOCK-END"
START_LINE = f"# {START}"
END_LINE = f"# {END}"


class MarkerError(ValueError):
    """Malformed markers; the message is one line."""


def is_marker(line: str, word: str) -> bool:
    if word not in line:  # the common case, and cheap
        return False
    s = line.strip()
    return s.startswith("#") and s.lstrip("#").strip().startswith(word)


def markers(lines: list[str]) -> tuple[int, int] | None:
    """(start, end) line indices of the one well-formed marker pair, None without markers; MarkerError when
    malformed (a lone marker, several, or END before START)."""
    starts = [i for i, ln in enumerate(lines) if is_marker(ln, START)]
    ends = [i for i, ln in enumerate(lines) if is_marker(ln, END)]
    if not starts and not ends:
        return None
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise MarkerError(f"malformed EVOLVE-BLOCK markers ({len(starts)} START, {len(ends)} END)")
    return starts[0], ends[0]


def split_lines(code: str) -> list[str]:
    return code.replace("\r\n", "\n").split("\n")


def evolve_block(code: str) -> str | None:
    """The editable region (text between the marker lines, exclusive), or None when there is no well-formed
    marker pair."""
    lines = split_lines(code)
    try:
        pair = markers(lines)
    except MarkerError:
        return None
    if pair is None:
        return None
    inner = lines[pair[0] + 1 : pair[1]]
    return "\n".join(inner) + "\n" if inner else ""


def wrap_block(body: str, before: str = "", after: str = "") -> str:
    """``before`` + the marked block holding ``body`` + ``after``: how suites and importers write seeds."""
    return f"{before}{START_LINE}\n{body.rstrip()}\n{END_LINE}\n{after}"
