"""OpenAI HumanEval (``HumanEval.jsonl[.gz]``, 164 problems): id ``humaneval/<n>``.

- seed: the prompt (imports, helper functions, the entry point's signature and docstring) with the body
  ``return None``; the entry point's definition sits between EVOLVE markers, the prompt's helpers above.
- reference: prompt + canonical_solution. description: the entry point's docstring.
- tests: ``check(candidate)`` is split into one case per top-level statement of its body.
  ``assert candidate(literal args) == literal`` (also ``is True``, ``abs(candidate(x) - y) < tol``,
  ``math.isclose``, constant arithmetic such as ``3 * 19``) becomes a CallCase compared in the parent;
  other asserts, and compound statements (loops), become AssertCases. Imports and assignments that come
  before the first test (or that no earlier test reads) move to ``setup_code`` with the rest of the test
  file (``METADATA``, helper functions), followed by ``candidate = ENTRY`` (guarded: the parent runs setup
  code too, to judge split asserts); ``assert True`` lines are dropped (they test nothing). When every
  test is ``assert candidate(x)`` / ``assert not candidate(x)`` they become CallCases of ``bool(...)``.
  When the body cannot be split that way (a ``return``, a nested def, an assignment after the first
  test) the whole ``check(ENTRY)`` call is kept as a single AssertCase.
"""
from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

from problems.model import AssertCase, Problem, ProblemError

from ..jsonl import read_jsonl
from .common import (Converted, apply_tolerances, convert_assert, evolve_block, field, finish_cases, parse,
                     parse_code)

DEFAULT_FILES = ("HumanEval.jsonl.gz", "HumanEval.jsonl")
TIME_LIMIT = 10.0
MEMORY_MB = 1024
_SIMPLE = (ast.Import, ast.ImportFrom, ast.Assign, ast.AugAssign, ast.AnnAssign)
_COMPOUND = (ast.For, ast.While, ast.If, ast.With, ast.Try)


def import_humaneval(path: str | Path) -> list[Problem]:
    """path: ``HumanEval.jsonl[.gz]`` or a folder holding it."""
    path = resolve(Path(path), DEFAULT_FILES)
    out, seen = [], set()
    for n, row in read_jsonl(path):
        p = convert_row(row, path, f"line {n}")
        if p.id in seen:
            raise ProblemError(path, f"line {n}", f"duplicate task_id ({p.id})")
        seen.add(p.id)
        out.append(p)
    return out


def resolve(path: Path, names: tuple[str, ...]) -> Path:
    if path.is_dir():
        for name in names:
            if (path / name).is_file():
                return path / name
        raise ProblemError(path, "", f"none of {', '.join(names)} here")
    return path


def task_number(task_id: str, path: Path, where: str) -> str:
    m = re.fullmatch(r"[A-Za-z+]+/(\d+)", task_id.strip())
    if not m:
        raise ProblemError(path, where, f"field 'task_id': {task_id!r} is not '<Name>/<number>'")
    return m.group(1)


def convert_row(row: dict, path: Path, where: str) -> Problem:
    task_id = field(row, "task_id", str, path, where)
    num = task_number(task_id, path, where)
    where = f"{where} ({task_id})"
    prompt = field(row, "prompt", str, path, where)
    solution = field(row, "canonical_solution", str, path, where)
    test = field(row, "test", str, path, where)
    entry = field(row, "entry_point", str, path, where)
    seed, description = seed_and_description(prompt, entry, path, where)
    setup, convs = split_check(test, entry, path, where)
    cases, call_entry, setup, extra = finish_cases(convs, entry, setup)
    return Problem(id=f"humaneval/{num}", seed_code=seed, tests=cases, title=entry,
                   description=description, entry_point=call_entry, setup_code=setup,
                   reference_code=prompt + solution, time_limit=TIME_LIMIT, memory_limit_mb=MEMORY_MB,
                   float_tol=apply_tolerances(convs), suite="humaneval",
                   meta={"source_task_id": task_id, **extra})


def seed_and_description(prompt: str, entry: str, path: Path, where: str) -> tuple[str, str]:
    """The prompt with the entry point's body completed by ``return None`` and the entry point's
    definition between EVOLVE markers; and its docstring."""
    mod = parse_code(prompt, path, where, "field 'prompt'")
    fns = [n for n in mod.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry]
    if not fns:
        raise ProblemError(path, where, f"field 'prompt' does not define entry point {entry!r}")
    fn = fns[-1]
    doc = ast.get_docstring(fn)
    if doc is None:  # HumanEval/115 puts an import before the docstring
        doc = next((s.value.value for s in fn.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                    and isinstance(s.value.value, str)), None)
    lines = prompt.rstrip().split("\n")
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list]) - 1
    end = fn.end_lineno or len(lines)
    indent = " " * (fn.body[0].col_offset if fn.body else 4)
    block = "\n".join(lines[start:end]) + f"\n{indent}return None"
    head = "\n".join(lines[:start]).rstrip()
    tail = "\n".join(lines[end:]).strip()
    seed = (head + "\n\n\n" if head else "") + evolve_block(block) + ("\n\n" + tail + "\n" if tail else "")
    description = (doc or prompt).strip("\n")
    description = textwrap.dedent(description).strip()
    return seed, description


def split_check(test: str, entry: str, path: Path, where: str) -> tuple[str, list[Converted]]:
    """(setup_code, cases) for a HumanEval test file that defines ``check(candidate)``."""
    mod = parse_code(test, path, where, "field 'test'")
    checks = [n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        raise ProblemError(path, where, "field 'test' does not define check(candidate)")
    check = checks[-1]
    prelude = [seg(test, n) for n in mod.body if n is not check]
    param = check.args.args[0].arg if check.args.args else "candidate"
    body = list(check.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # docstring
    moved: list[str] = []
    cases: list[Converted] = []
    splittable = True
    for stmt in body:
        if isinstance(stmt, ast.Assert):
            if not _mentions(stmt, param) and _constant_true(stmt.test):
                continue  # `assert True, "..."`
            cases.append(convert_assert(seg(test, stmt), {param, entry}))
        elif isinstance(stmt, _COMPOUND):
            code = seg(test, stmt)
            lines = [ln.strip() for ln in code.strip().splitlines()]
            cases.append(Converted(AssertCase(code=code, label=f"{lines[0]} ... {lines[-1]}"[:120])))
        elif isinstance(stmt, _SIMPLE):
            # moving it before the tests is safe when no earlier test reads what it assigns
            if _mentions(stmt, param) or (cases and _assigned(stmt) & _read_by(cases)):
                splittable = False  # state set between tests: keep the order, keep check() whole
                break
            moved.append(seg(test, stmt))
        elif isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr)
                                            and isinstance(stmt.value, (ast.Name, ast.Constant))):
            continue  # `print`, `pass`: no effect
        else:
            splittable = False
            break
    setup_parts = [p for p in prelude if p.strip()]
    if not splittable or not cases:
        setup_parts.append(seg(test, check))
        setup = "\n\n".join(setup_parts) + "\n"
        return setup, [Converted(AssertCase(code=f"check({entry})", label=f"check({entry})"))]
    setup_parts += moved
    # last, and tolerant of a missing function: the parent also runs setup code (to judge split asserts)
    setup_parts.append(f"try:\n    {param} = {entry}\nexcept NameError:\n    pass")
    return "\n".join(setup_parts) + "\n", cases


def seg(src: str, node: ast.AST) -> str:
    s = ast.get_source_segment(src, node, padded=True)
    return textwrap.dedent(s) if s is not None else ast.unparse(node)


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _constant_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and bool(node.value)


def _assigned(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _read_by(cases: list[Converted]) -> set[str]:
    names: set[str] = set()
    for c in cases:
        if isinstance(c.case, AssertCase):
            try:
                names |= {n.id for n in ast.walk(parse(c.case.code)) if isinstance(n, ast.Name)}
            except SyntaxError:
                names.add("*")
    return names
