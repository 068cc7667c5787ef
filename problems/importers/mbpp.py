"""MBPP (Austin et al., 2021): ``mbpp.jsonl`` (974 problems) and ``sanitized-mbpp.json`` (427).

One problem per task, id ``mbpp/<task_id>``:

- tests: one case per assert of ``test_list``. ``assert ENTRY(literal args) == literal`` (also ``is``,
  ``math.isclose``, constant arithmetic such as ``1.0/3``) becomes a CallCase compared in the parent; any
  other assert (``set(f(x)) == ...``, calls on objects built in ``test_setup_code``) stays an AssertCase.
  ``challenge_test_list`` is *not* included: upstream treats it as a separate harder set, and mixing it
  in would change the benchmark; its size is kept in ``meta['challenge_tests']``.
- setup: ``test_setup_code`` (full file) or the ``test_imports`` lines (sanitized file).
- entry point: the function, defined in the reference code, that the tests call most.
- description: the statement plus the first assert, which is how MBPP prompts show the signature.
- seed: the entry point's signature (from the reference's def) returning None, inside EVOLVE markers,
  after any classes the tests construct (``Pair``, ``Node``), which are interface rather than solution.
- split: test 11-510, prompt 1-10, validation 511-600, train 601-974 (the upstream README).
"""
from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path

from problems.model import Problem, ProblemError

from ..jsonl import read_jsonl
from .common import (apply_tolerances, called_names, convert_assert, evolve_block, field, find_def, finish_cases,
                     first_sentence, names_used, parse, parse_code, str_list, stub_from_arity,
                     stub_from_def)

FULL_FILE = "mbpp.jsonl"
SANITIZED_FILE = "sanitized-mbpp.json"
TIME_LIMIT = 10.0
MEMORY_MB = 1024


def import_mbpp(path: str | Path) -> list[Problem]:
    """path: ``mbpp.jsonl``, ``sanitized-mbpp.json``, or a folder holding ``mbpp.jsonl``."""
    path = Path(path)
    if path.is_dir():
        if (path / FULL_FILE).is_file():
            path = path / FULL_FILE
        elif (path / SANITIZED_FILE).is_file():
            path = path / SANITIZED_FILE
        else:
            raise ProblemError(path, "", f"no {FULL_FILE} or {SANITIZED_FILE} here")
    if path.name.endswith(".json"):
        rows = _read_json_array(path)
        variant = "sanitized"
    else:
        rows = read_jsonl(path)
        variant = "full"
    out, seen = [], set()
    for where, row in rows:
        p = convert_row(row, path, where, variant)
        if p.id in seen:
            raise ProblemError(path, where, f"duplicate task_id ({p.id})")
        seen.add(p.id)
        out.append(p)
    return out


def _read_json_array(path: Path) -> list[tuple[str, dict]]:
    if not path.is_file():
        raise ProblemError(path, "", "file not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ProblemError(path, f"line {e.lineno}", f"invalid JSON: {e.msg} (column {e.colno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(path, "", f"cannot read: {e}") from None
    if not isinstance(data, list):
        raise ProblemError(path, "", "expected a JSON array of problems")
    out = []
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise ProblemError(path, f"item {i}", "expected an object")
        out.append((f"item {i}", row))
    return out


def split_of(task_id: int) -> str:
    if 1 <= task_id <= 10:
        return "prompt"
    if 11 <= task_id <= 510:
        return "test"
    if 511 <= task_id <= 600:
        return "validation"
    return "train"


def convert_row(row: dict, path: Path, where: str | int, variant: str = "full") -> Problem:
    where = where if isinstance(where, str) else f"line {where}"
    task_id = field(row, "task_id", int, path, where)
    where = f"{where} (task_id {task_id})"
    text = field(row, "text", str, path, where, default=None)
    if text is None:
        text = field(row, "prompt", str, path, where)
    code = field(row, "code", str, path, where).replace("\r\n", "\n")
    tests = [t.replace("\r\n", "\n") for t in str_list(row, "test_list", path, where)]
    if not tests:
        raise ProblemError(path, where, "field 'test_list' is empty")
    setup = field(row, "test_setup_code", str, path, where, default="").replace("\r\n", "\n")
    imports = str_list(row, "test_imports", path, where, default=[])
    if imports:
        setup = "\n".join(imports) + ("\n" + setup if setup.strip() else "")
    challenge = str_list(row, "challenge_test_list", path, where, default=[])
    ref_mod = parse_code(code, path, where, "field 'code'")
    for i, t in enumerate(tests):
        parse_code(t, path, where, f"test_list[{i}]")
    entry = entry_point_of(tests, ref_mod)
    if entry is None:
        raise ProblemError(path, where, "cannot find the function the tests call")
    convs = [convert_assert(t, {entry}) for t in tests]
    seed = seed_program(entry, ref_mod, code, tests, setup)
    description = text.strip() + "\nYour code should pass tests like this:\n" + tests[0].strip()
    meta = {"source_task_id": task_id, "variant": variant}
    if challenge:
        meta["challenge_tests"] = len(challenge)
    setup = _imports_for_tests(ref_mod, code, tests, setup)
    cases, call_entry, setup, extra = finish_cases(convs, entry, setup)
    meta.update(extra)
    return Problem(id=f"mbpp/{task_id}", seed_code=seed, tests=cases,
                   title=first_sentence(text), description=description, entry_point=call_entry,
                   setup_code=setup.strip() + "\n" if setup.strip() else "", reference_code=code.rstrip() + "\n",
                   time_limit=TIME_LIMIT, memory_limit_mb=MEMORY_MB, float_tol=apply_tolerances(convs),
                   suite="mbpp", split=split_of(task_id), meta=meta)


_BUILTINS = set(dir(builtins))


def entry_point_of(tests: list[str], ref_mod: ast.Module) -> str | None:
    """The function the tests call that the reference defines (called in most tests; first called wins a
    tie); failing that, the first non-builtin name the first test calls."""
    defined = [n.name for n in ref_mod.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    defined += [t.id for n in ref_mod.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda)
                for t in n.targets if isinstance(t, ast.Name)]
    counts: dict[str, int] = {}
    order: list[str] = []
    for t in tests:
        for name in called_names(t):
            if name in defined:
                counts[name] = counts.get(name, 0) + 1
                if name not in order:
                    order.append(name)
    if order:
        return max(order, key=lambda n: (counts[n], -order.index(n)))
    for name in called_names(tests[0]):
        if name not in _BUILTINS:
            return name
    return None


def seed_program(entry: str, ref_mod: ast.Module, code: str, tests: list[str], setup: str) -> str:
    fn = find_def(ref_mod, entry)
    if fn is not None:
        stub = stub_from_def(fn, entry)
    else:  # infer the arity from the first call in the tests
        stub = stub_from_arity(entry, *_arity(tests[0], entry))
    used = set().union(*(names_used(t) for t in tests), names_used(setup))
    classes = [ast.get_source_segment(code, n) or ast.unparse(n) for n in ref_mod.body
               if isinstance(n, ast.ClassDef) and n.name in used]
    head = ""
    if classes:
        imports = [ast.get_source_segment(code, n) or ast.unparse(n) for n in ref_mod.body
                   if isinstance(n, (ast.Import, ast.ImportFrom))]
        head = "\n".join(imports + classes) + "\n\n\n"
    return head + evolve_block(stub)


def _imports_for_tests(ref_mod: ast.Module, code: str, tests: list[str], setup: str) -> str:
    """Imports of the reference that the tests use themselves (``sys.getsizeof`` in mbpp/596) go first
    in setup, so the tests do not depend on what the candidate happens to import."""
    used = set().union(*(names_used(t) for t in tests))
    lines = []
    for node in ref_mod.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = {(a.asname or a.name).split(".")[0] for a in node.names}
            if bound & used and not bound & {"*"}:
                lines.append(ast.get_source_segment(code, node) or ast.unparse(node))
    if not lines:
        return setup
    return "\n".join(lines) + ("\n" + setup if setup.strip() else "")


def _arity(test: str, entry: str) -> tuple[int, list[str]]:
    for n in ast.walk(parse(test)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == entry:
            return len(n.args), [k.arg for k in n.keywords if k.arg]
    return 0, []
