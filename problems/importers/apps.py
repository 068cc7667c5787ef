"""APPS-style JSON Lines (Hendrycks et al., 2021): id ``apps/<id>``, suite ``apps``.

Two row formats are read:

- MapCoder's ``selected150.jsonl`` (``id``, ``description``, ``difficulty``, ``starter_code``, ``sample_io``,
  ``test_list`` of ``{input, output}``): 150 rows, 128 unique; repeated rows (same id, same content) are
  dropped, a repeated id with different content is an error.
- APPS's own rows (``problem_id``/``id``, ``question``, ``input_output`` JSON with ``inputs``, ``outputs`` and
  ``fn_name`` for call-based problems, optional ``solutions``, ``starter_code``).

Stdin/stdout problems become StdioCases (stdout compared whitespace-normalised). Call-based problems
become CallCases. MapCoder flattened each argument list to ``"\\n".join(str(arg))``, which loses types;
it is decoded per parameter: the lines are split into the starter code's parameters (when there are more
lines than parameters, the extra lines belong to a multi-line string argument, placed where the other
arguments still parse as literals), and a parameter is a string in every test when its text is not a
Python literal in any one test (``'12a12a'``), otherwise the literal (``[1, 2]``, ``4.2``, ``True``). The
description shows the first calls as decoded, so a candidate sees the types the tests use. Expected
values are ``output[0]``. As in APPS's checker, a returned tuple is compared as a list (via the entry
wrapper, mode ``apps``). Reference solution: the first of ``solutions`` when present (MapCoder's file has
none). Time limit 20 s for the whole test set, 1024 MB.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from problems.model import CallCase, Problem, ProblemError, StdioCase

from ..jsonl import read_jsonl
from .common import (WRAPPER, _encodable, entry_wrapper, evolve_block, field, first_sentence, parse, stub_from_arity, wrapped_label)

DEFAULT_FILES = ("selected150.jsonl", "apps.jsonl", "test.jsonl")
TIME_LIMIT = 20.0
MEMORY_MB = 1024

STDIO_SEED = '''import sys


def main():
    data = sys.stdin.read().split()
    # read the input, solve the problem, print the answer


if __name__ == "__main__":
    main()
'''


def import_apps(path: str | Path) -> list[Problem]:
    """path: an APPS-style ``.jsonl`` file, or a folder holding ``selected150.jsonl``."""
    path = Path(path)
    if path.is_dir():
        hits = [path / n for n in DEFAULT_FILES if (path / n).is_file()]
        if not hits:
            raise ProblemError(path, "", f"none of {', '.join(DEFAULT_FILES)} here")
        path = hits[0]
    out: list[Problem] = []
    seen: dict[int, dict] = {}
    for n, row in read_jsonl(path):
        where = f"line {n}"
        pid = row.get("id", row.get("problem_id"))
        if isinstance(pid, str) and pid.strip().isdigit():
            pid = int(pid)
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise ProblemError(path, where, "field 'id' (or 'problem_id') missing or not an integer")
        if pid in seen:
            if seen[pid] != row:
                raise ProblemError(path, where, f"id {pid} repeats with different content")
            continue
        seen[pid] = row
        out.append(convert_row(row, pid, path, f"{where} (id {pid})"))
    return out


def convert_row(row: dict, pid: int, path: Path, where: str) -> Problem:
    statement = row.get("description", row.get("question"))
    if not isinstance(statement, str):
        raise ProblemError(path, where, "field 'description' (or 'question') missing or not a string")
    starter = field(row, "starter_code", str, path, where, default="")
    difficulty = field(row, "difficulty", str, path, where, default="")
    reference = _first_solution(row, path, where)
    if "input_output" in row:
        raw_cases, fn_name = _apps_cases(row, path, where)
        decoded = fn_name is not None
    else:
        raw_cases, fn_name = _mapcoder_cases(row, path, where), None
        decoded = False
    meta: dict[str, Any] = {"source_id": pid}
    if difficulty:
        meta["difficulty"] = difficulty
    if not starter.strip() and fn_name is None:
        tests = []
        for i, (inp, outs) in enumerate(raw_cases):
            if not isinstance(inp, str):
                raise ProblemError(path, where, f"test {i}: stdin must be a string")
            out = outs[0] if isinstance(outs, list) and outs else outs
            if isinstance(out, list):
                out = "\n".join(str(x) for x in out)
            if not isinstance(out, str):
                raise ProblemError(path, where, f"test {i}: expected stdout must be a string")
            tests.append(StdioCase(stdin=inp, stdout=out))
        description = (statement.strip()
                       + "\n\nRead the input from standard input and print the answer to standard output.")
        samples = row.get("sample_io") or []
        if samples and isinstance(samples[0], dict) and str(samples[0].get("input", "")).strip() not in statement:
            s0 = samples[0]
            o0 = s0.get("output", [""])
            o0 = o0[0] if isinstance(o0, list) and o0 else o0
            description += f"\n\nSample input:\n{s0.get('input', '')}\nSample output:\n{o0}"
        return Problem(id=f"apps/{pid}", seed_code=evolve_block(STDIO_SEED), tests=tests,
                       title=first_sentence(statement), description=description, reference_code=reference,
                       time_limit=TIME_LIMIT, memory_limit_mb=MEMORY_MB, suite="apps", meta=meta)
    # call-based
    fn = _starter_def(starter, fn_name, path, where)
    name = fn_name or (fn.name if fn is not None else None)
    if name is None:
        raise ProblemError(path, where, "call-based problem without a function name (starter_code/fn_name)")
    if decoded:
        calls = [(tuple(inp) if isinstance(inp, list) else (inp,), outs) for inp, outs in raw_cases]
    else:
        calls = decode_mapcoder_args([inp for inp, _ in raw_cases], fn, path, where)
        calls = [(args, outs) for args, (_, outs) in zip(calls, raw_cases)]
    tests: list[CallCase] = []
    for i, (args, outs) in enumerate(calls):
        expected = outs[0] if isinstance(outs, list) and len(outs) == 1 else outs
        if not _encodable(list(args)) or not _encodable(expected):
            raise ProblemError(path, where, f"test {i}: arguments or expected value are not plain data")
        tests.append(CallCase(args=args, expected=expected,
                              label=wrapped_label(name, "apps", args, {}, expected)))
    if not tests:
        raise ProblemError(path, where, "no tests")
    if fn is not None:
        stub = _stub_from_starter(starter.strip("\n"))
        seed = _default_imports(fn) + evolve_block(stub)
    else:
        seed = evolve_block(stub_from_arity(name, len(tests[0].args)))
    examples = "\n".join(f"    {t.label}" for t in tests[:3])
    description = (statement.strip() + f"\n\nImplement the function `{name}`. The tests call it like this:\n"
                   + examples)
    meta["entry_function"] = name
    return Problem(id=f"apps/{pid}", seed_code=seed, tests=tests, title=first_sentence(statement),
                   description=description, entry_point=WRAPPER, setup_code=entry_wrapper(name, "apps"),
                   reference_code=reference, time_limit=TIME_LIMIT, memory_limit_mb=MEMORY_MB, suite="apps",
                   meta=meta)


# ---------------------------------------------------------------- formats

def _mapcoder_cases(row: dict, path: Path, where: str) -> list[tuple[Any, Any]]:
    tl = field(row, "test_list", list, path, where)
    out = []
    for i, t in enumerate(tl):
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise ProblemError(path, where, f"test_list[{i}]: expected an object with input and output")
        out.append((t["input"], t["output"]))
    if not out:
        raise ProblemError(path, where, "field 'test_list' is empty")
    return out


def _apps_cases(row: dict, path: Path, where: str) -> tuple[list[tuple[Any, Any]], str | None]:
    io = row["input_output"]
    if isinstance(io, str):
        try:
            io = json.loads(io) if io.strip() else {}
        except json.JSONDecodeError as e:
            raise ProblemError(path, where, f"field 'input_output': invalid JSON: {e.msg}") from None
    if not isinstance(io, dict) or not isinstance(io.get("inputs"), list) or not isinstance(io.get("outputs"), list):
        raise ProblemError(path, where, "field 'input_output': expected inputs and outputs lists")
    if len(io["inputs"]) != len(io["outputs"]) or not io["inputs"]:
        raise ProblemError(path, where, "field 'input_output': inputs and outputs differ in length or are empty")
    fn_name = io.get("fn_name")
    if fn_name is not None and not isinstance(fn_name, str):
        raise ProblemError(path, where, "field 'input_output.fn_name' must be a string")
    outs = [o if fn_name else ([o] if not isinstance(o, list) else o) for o in io["outputs"]]
    return list(zip(io["inputs"], outs)), fn_name


def _first_solution(row: dict, path: Path, where: str) -> str | None:
    sols = row.get("solutions")
    if sols is None or sols == "":
        return None
    if isinstance(sols, str):
        try:
            sols = json.loads(sols)
        except json.JSONDecodeError as e:
            raise ProblemError(path, where, f"field 'solutions': invalid JSON: {e.msg}") from None
    if not isinstance(sols, list) or not all(isinstance(s, str) for s in sols):
        raise ProblemError(path, where, "field 'solutions' must be a list of strings")
    return sols[0] if sols else None


def _starter_def(starter: str, fn_name: str | None, path: Path, where: str) -> ast.FunctionDef | None:
    if not starter.strip():
        return None
    try:
        mod = parse(starter.strip("\n").rstrip() + "\n    pass\n")
    except SyntaxError:
        try:
            mod = parse(starter)
        except SyntaxError as e:
            raise ProblemError(path, where, f"field 'starter_code': syntax error: {e.msg}") from None
    defs = [n for n in ast.walk(mod) if isinstance(n, ast.FunctionDef)]
    if fn_name:
        defs = [d for d in defs if d.name == fn_name] or defs
    return defs[0] if defs else None


def _default_imports(fn: ast.FunctionDef) -> str:
    """Codewars starters may use names such as ``pi`` in defaults; import them from math above the block."""
    import builtins
    import math

    names = sorted({n.id for d in fn.args.defaults + fn.args.kw_defaults if d is not None for n in ast.walk(d)
                    if isinstance(n, ast.Name) and not hasattr(builtins, n.id) and hasattr(math, n.id)})
    return f"from math import {', '.join(names)}\n\n\n" if names else ""


def _stub_from_starter(starter: str) -> str:
    """The starter code (``def f(a, b):``) completed with ``return None`` at the right indentation."""
    lines = [ln.replace("\t", "    ") for ln in starter.rstrip().split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    last = lines[-1] if lines else ""
    indent = len(last) - len(last.lstrip()) + 4 if last.rstrip().endswith(":") else len(last) - len(last.lstrip())
    return "\n".join(lines) + "\n" + " " * indent + "return None\n"


# ---------------------------------------------------------------- MapCoder argument decoding

def _lit(text: str) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def decode_mapcoder_args(inputs: list[str], fn: ast.FunctionDef | None, path: Path, where: str) -> list[tuple]:
    """Undo ``"\\n".join(str(arg) for arg in args)`` for each test, as described in the module docstring."""
    if fn is not None:
        n_all = len(fn.args.args)
        n_req = n_all - len(fn.args.defaults)
    else:
        n_all = n_req = None
    split: list[list[str]] = []
    for i, text in enumerate(inputs):
        if not isinstance(text, str):
            raise ProblemError(path, where, f"test {i}: input must be a string")
        lines = text.split("\n")
        if n_all is None or n_req <= len(lines) <= n_all:
            split.append(lines)
        elif len(lines) > n_all:
            split.append(_group(lines, n_all))
        elif n_all == 1 or n_req == 1 and len(lines) == 0:
            split.append([text])
        else:
            raise ProblemError(path, where, f"test {i}: {len(lines)} input lines for {n_req}-{n_all} parameters")
    width = max(len(s) for s in split)
    is_str = [False] * width
    for toks in split:
        for j, tok in enumerate(toks):
            ok, _ = _lit(tok)
            if not ok:
                is_str[j] = True
    out = []
    for toks in split:
        args = []
        for j, tok in enumerate(toks):
            args.append(tok if is_str[j] else _lit(tok)[1])
        out.append(tuple(args))
    return out


def _group(lines: list[str], k: int) -> list[str]:
    """k groups of consecutive lines, one of which holds the extra lines (a multi-line string): the
    placement where the most other groups parse as literals and the long group does not."""
    extra = len(lines) - k
    best, best_score = None, -1
    for j in range(k):
        groups = lines[:j] + ["\n".join(lines[j:j + extra + 1])] + lines[j + extra + 1:]
        score = sum(1 for g_i, g in enumerate(groups) if g_i != j and _lit(g)[0] and not isinstance(_lit(g)[1], str))
        score += 0 if _lit(groups[j])[0] else 1
        if score > best_score:
            best, best_score = groups, score
    return best  # type: ignore[return-value]
