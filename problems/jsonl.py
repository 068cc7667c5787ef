"""Reading JSON-lines files (plain or gzip) with errors that name the file and the line."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from .errors import ProblemError


def open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else open(path, encoding="utf-8")


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a ProblemError naming the file and line otherwise."""
    if not path.is_file():
        raise ProblemError(path, "", "file not found")
    out: list[tuple[int, dict]] = []
    try:
        with open_text(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ProblemError(path, f"line {n}", f"invalid JSON: {e.msg} (column {e.colno})") from None
                except RecursionError:
                    raise ProblemError(path, f"line {n}", "invalid JSON: nested too deeply") from None
                if not isinstance(obj, dict):
                    raise ProblemError(path, f"line {n}", f"expected a JSON object, got {type(obj).__name__}")
                out.append((n, obj))
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as e:
        raise ProblemError(path, "", f"cannot read: {type(e).__name__}: {e}") from None
    return out
