"""Shared pieces of the dataset importers: reading JSON Lines with one-line errors, turning an assert into
a CallCase when it is ``ENTRY(literal args) == literal``, and building seed stubs.

Converting an assert to a CallCase moves the comparison into the parent (unforgeable, see evaluators/);
anything that is not a plain call-and-compare stays an AssertCase and runs in the candidate's namespace.
"""
from __future__ import annotations

import ast
import math
import operator
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from problems.errors import ProblemError
from problems.evolve_block import wrap_block
from problems.model import AssertCase, CallCase, TestCase


# ---------------------------------------------------------------- reading


def field(obj: dict, key: str, typ, path: Path, where: str, default: Any = ...) -> Any:
    """obj[key] checked against typ; ProblemError '<file>: <where>: field <key>: ...' otherwise."""
    if key not in obj or obj[key] is None:
        if default is ...:
            raise ProblemError(path, where, f"field {key!r} missing")
        return default
    v = obj[key]
    if not isinstance(v, typ) or (isinstance(v, bool) and typ in (int, (int, float))):
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise ProblemError(path, where, f"field {key!r}: expected {names}, got {type(v).__name__}")
    return v


def str_list(obj: dict, key: str, path: Path, where: str, default: Any = ...) -> list[str]:
    v = field(obj, key, list, path, where, default)
    if not all(isinstance(s, str) for s in v):
        raise ProblemError(path, where, f"field {key!r}: expected a list of strings")
    return v


def parse(code: str) -> ast.Module:
    """ast.parse without the warnings dataset code triggers (invalid escapes such as '\\d' in MBPP)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(code)


def parse_code(code: str, path: Path, where: str, what: str) -> ast.Module:
    try:
        return parse(code)
    except (SyntaxError, ValueError) as e:
        raise ProblemError(path, where, f"{what}: syntax error: {getattr(e, 'msg', e)}") from None


# ---------------------------------------------------------------- literals

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


class NotLiteral(Exception):
    pass


def literal(node: ast.AST) -> Any:
    """ast.literal_eval plus constant arithmetic on numbers (``1.0/3``, ``3 * 19``, ``0 ** 0``) and
    ``set()``; anything else raises NotLiteral."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return _fold(node)
    except NotLiteral:
        raise
    except Exception as e:  # ZeroDivisionError, OverflowError, ...
        raise NotLiteral(f"{type(e).__name__}") from None


def _fold(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _fold(node.left), _fold(node.right)
        if not all(isinstance(x, (int, float, complex, str)) and not isinstance(x, bool) for x in (a, b)):
            raise NotLiteral("operand")
        if isinstance(node.op, ast.Pow) and (abs(b) > 256 if isinstance(b, (int, float)) else True):
            raise NotLiteral("power too large")
        if isinstance(node.op, ast.Mult) and (isinstance(a, str) or isinstance(b, str)):
            raise NotLiteral("string repeat")
        if isinstance(node.op, (ast.Add,)) and isinstance(a, str) != isinstance(b, str):
            raise NotLiteral("mixed add")
        return _BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _fold(node.operand)
        if not isinstance(v, (int, float, complex)) or isinstance(v, bool):
            raise NotLiteral("operand")
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_fold(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else (items if isinstance(node, ast.List) else set(items))
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise NotLiteral("dict unpacking")
        return {_fold(k): _fold(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "set" \
            and not node.args and not node.keywords:
        return set()
    raise NotLiteral(type(node).__name__)


def _encodable(v: Any) -> bool:
    from problems import values

    try:
        values.encode(v)
        return True
    except (values.ValueCodecError, RecursionError):
        return False


# ---------------------------------------------------------------- asserts → cases

@dataclass
class Converted:
    case: TestCase
    rel_tol: float | None = None  # a float tolerance the original test allowed (relative, for problem.float_tol)
    truthy: bool = False          # `assert ENTRY(...)` / `assert not ENTRY(...)`: expected is bool(result)
    src: str = ""


def _call_of(node: ast.AST, names: set[str]) -> tuple[tuple, dict] | None:
    """(args, kwargs) when node is NAME(literal, ..., k=literal) with NAME in names."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names):
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return None
    try:
        args = tuple(literal(a) for a in node.args)
        kwargs = {k.arg: literal(k.value) for k in node.keywords}
    except NotLiteral:
        return None
    if not _encodable(list(args)) or not _encodable(kwargs):
        return None
    return args, kwargs


def convert_assert(src: str, names: set[str], label: str = "") -> Converted:
    """One assert statement → a CallCase when it compares a call of an entry-point name with literal
    arguments to a literal (``==``, ``is True/False/None``, ``math.isclose``, ``abs(call - y) < tol``);
    otherwise an AssertCase holding the source."""
    src = textwrap.dedent(src).strip()
    fallback = Converted(AssertCase(code=src, label=label), src=src)
    try:
        mod = parse(src)
    except SyntaxError:
        return fallback
    if len(mod.body) != 1 or not isinstance(mod.body[0], ast.Assert):
        return fallback
    test = mod.body[0].test
    neg = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    call = _call_of(test.operand if neg else test, names)
    if call is not None:
        return Converted(CallCase(args=call[0], expected=not neg, kwargs=call[1], label=label), truthy=True, src=src)
    got = _match(test, names)
    if got is None:
        return fallback
    (args, kwargs), expected, tol = got
    if not _encodable(expected):
        return fallback
    return Converted(CallCase(args=args, expected=expected, kwargs=kwargs, label=label), tol, src=src)


def settle_truthy(convs: list[Converted], entry: str) -> tuple[list[TestCase], str | None]:
    """Truthiness asserts become CallCases of ``bool(ENTRY(...))`` (wrapper mode 'truthy') only when every
    test of the problem is one (the wrapper reshapes every call); otherwise they stay AssertCases.
    Returns the cases and the wrapper mode needed (None or 'truthy')."""
    if convs and all(c.truthy for c in convs):
        cases = [CallCase(args=c.case.args, expected=c.case.expected, kwargs=c.case.kwargs,
                          label=c.case.label or wrapped_label(entry, "truthy", c.case.args, c.case.kwargs,
                                                              c.case.expected))
                 for c in convs if isinstance(c.case, CallCase)]
        return cases, "truthy"
    return [AssertCase(code=c.src, label=c.case.label) if c.truthy else c.case for c in convs], None


def _match(test: ast.expr, names: set[str]):
    # ENTRY(...) == LIT   /   LIT == ENTRY(...)   /   ENTRY(...) is True|False|None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, ast.Eq):
            for a, b in ((left, right), (right, left)):
                call = _call_of(a, names)
                if call is not None:
                    try:
                        exp = literal(b)
                    except NotLiteral:
                        return None
                    if isinstance(exp, float) and math.isnan(exp):
                        return None  # x == nan is always False in Python
                    return call, exp, None
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value in (True, False, None) \
                and type(right.value) in (bool, type(None)):
            call = _call_of(left, names)
            if call is not None:
                return call, right.value, None
        # abs(ENTRY(...) - y) < tol
        if isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call) and isinstance(left.func, ast.Name) \
                and left.func.id == "abs" and len(left.args) == 1 and isinstance(left.args[0], ast.BinOp) \
                and isinstance(left.args[0].op, ast.Sub):
            diff = left.args[0]
            call = _call_of(diff.left, names)
            try:
                y, tol = literal(diff.right), literal(right)
            except NotLiteral:
                return None
            if call is None or not _is_num(y) or not _is_num(tol) or y == 0 or tol <= 0:
                return None
            rel = float(tol) / abs(float(y))
            if rel > 1e-3:
                return None
            return call, float(y), rel
    # math.isclose(ENTRY(...), y, rel_tol=..., abs_tol=...)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "isclose" \
            and isinstance(test.func.value, ast.Name) and test.func.value.id == "math" and len(test.args) == 2:
        call = _call_of(test.args[0], names)
        try:
            y = literal(test.args[1])
            kw = {k.arg: literal(k.value) for k in test.keywords}
        except NotLiteral:
            return None
        if call is None or not _is_num(y) or set(kw) - {"rel_tol", "abs_tol"}:
            return None
        rel = float(kw.get("rel_tol", 1e-9))
        abs_tol = float(kw.get("abs_tol", 0.0))
        if abs_tol > 0:
            if y == 0:
                return None
            rel = max(rel, abs_tol / abs(float(y)))
        if rel > 1e-3:
            return None
        return call, float(y), rel
    return None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def apply_tolerances(convs: Iterable[Converted], default: float = 1e-6) -> float:
    """The problem's float tolerance: the default, widened to the loosest tolerance a test allowed."""
    tol = default
    for c in convs:
        if c.rel_tol is not None:
            tol = max(tol, c.rel_tol)
    return tol


# ---------------------------------------------------------------- seeds

def evolve_block(body: str) -> str:
    return wrap_block(body)


def stub_from_def(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, name: str) -> str:
    """``def name(<the reference's parameters>):\\n    return None``."""
    args = ast.unparse(fn.args)
    ret = ""
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.returns is not None:
        ret = " -> " + ast.unparse(fn.returns)
    return f"def {name}({args}){ret}:\n    return None\n"


def stub_from_arity(name: str, n_args: int, kwargs: Iterable[str] = ()) -> str:
    params = [f"arg{i}" for i in range(n_args)] + [f"{k}=None" for k in kwargs]
    return f"def {name}({', '.join(params)}):\n    return None\n"


def find_def(mod: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
    """The top-level definition of name (last one wins, as at run time): a def, or ``name = lambda ...``."""
    found = None
    for node in mod.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda) and \
                any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = node.value
    return found


def names_used(code: str) -> set[str]:
    try:
        mod = parse(code)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(mod) if isinstance(n, ast.Name)}


def called_names(code: str) -> list[str]:
    """Names called as functions, in source order (outermost first)."""
    try:
        mod = parse(code)
    except SyntaxError:
        return []
    out: list[str] = []
    for n in ast.walk(mod):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in out:
            out.append(n.func.id)
    return out


def first_sentence(text: str, n: int = 80) -> str:
    t = " ".join(text.strip().split())
    for stop in (". ", "? ", "! "):
        i = t.find(stop)
        if 0 < i < n:
            return t[: i + 1]
    return t if len(t) <= n else t[: n - 3].rstrip() + "..."


# ---------------------------------------------------------------- entry-point wrappers

WRAPPER = "_vevo_entry"

_NORMALISE = '''
def _vevo_norm(v, depth=0):
    """Builtin copies of builtin subclasses (Counter, defaultdict, OrderedDict, namedtuple, IntEnum...),
    which compare equal to their base type in Python but do not cross the sandbox pipe."""
    t = type(v)
    if t in (int, float, str, bool, complex, bytes) or v is None or depth > 150:
        return v
    d = depth + 1
    if isinstance(v, dict):
        return {_vevo_norm(k, d): _vevo_norm(x, d) for k, x in dict.items(v)}
    if isinstance(v, list):
        return [_vevo_norm(x, d) for x in list.__iter__(v)]
    if isinstance(v, tuple):
        return tuple(_vevo_norm(x, d) for x in tuple.__iter__(v))
    if isinstance(v, frozenset):
        return frozenset(_vevo_norm(x, d) for x in frozenset.__iter__(v))
    if isinstance(v, set):
        return {_vevo_norm(x, d) for x in set.__iter__(v)}
    for base in (bool, int, float, str, complex, bytes):
        if isinstance(v, base):
            return base(v)
    return v
'''

_POLY = '''
def _vevo_poly(xs, x):
    import math
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])
'''


def entry_wrapper(entry: str, mode: str = "normalise", atol: float = 1e-4) -> str:
    """Setup code defining ``_vevo_entry``, called by the harness instead of the candidate's function
    (which keeps its own name, so recursion is untouched). It only reshapes the returned value, and the
    comparison stays in the parent: a candidate that subverts the wrapper can do no more than return a
    chosen value, which it could anyway.

    normalise  builtin subclasses → builtins (a Counter equals a dict in Python)
    set        ``set(result)`` (order-free list outputs; EvalPlus MBPP_OUTPUT_SET_EQ_TASKS)
    not_none   ``result is not None`` (re.Match outputs; EvalPlus MBPP_OUTPUT_NOT_NONE_TASKS)
    truthy     ``bool(result)`` (MBPP/HumanEval tests that are all ``assert f(x)`` / ``assert not f(x)``)
    poly_root  ``abs(poly(xs, result)) <= atol`` (HumanEval/32 find_zero: any root is right)
    apps       normalise, and a returned tuple compares as a list (APPS's checker; its outputs are JSON)
    """
    if mode == "normalise":
        body = f"    return _vevo_norm({entry}(*args, **kwargs))\n"
    elif mode == "apps":
        body = (f"    r = _vevo_norm({entry}(*args, **kwargs))\n"
                f"    return list(r) if type(r) is tuple else r\n")
    elif mode == "truthy":
        body = f"    return bool({entry}(*args, **kwargs))\n"
    elif mode == "set":
        body = f"    return _vevo_norm(set({entry}(*args, **kwargs)))\n"
    elif mode == "not_none":
        body = f"    return {entry}(*args, **kwargs) is not None\n"
    elif mode == "poly_root":
        body = (f"    xs = list(args[0])\n    x = {entry}(list(xs))\n"
                f"    return abs(_vevo_poly(xs, x)) <= {float(atol)!r}\n")
    else:
        raise ValueError(f"unknown wrapper mode {mode!r}")
    extra = _POLY if mode == "poly_root" else ""
    return f"{_NORMALISE.strip()}\n{extra}\n\ndef {WRAPPER}(*args, **kwargs):\n{body}"


def wrapped_label(entry: str, mode: str, args: tuple, kwargs: dict, expected: Any, atol: float = 1e-4) -> str:
    parts = [_short(repr(a)) for a in args] + [f"{k}={_short(repr(v))}" for k, v in kwargs.items()]
    call = f"{entry}({', '.join(parts)})"
    if mode == "set":
        return f"set({call}) == {_short(repr(expected))}"
    if mode == "not_none":
        return f"{call} is {'not ' if expected else ''}None"
    if mode == "truthy":
        return f"{'' if expected else 'not '}{call}"
    if mode == "poly_root":
        return f"abs(poly(xs, {call})) <= {atol}"
    return f"{call} == {_short(repr(expected))}"


def _short(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def contains_dict(v: Any, depth: int = 0) -> bool:
    if depth > 50:
        return False
    if isinstance(v, dict):
        return True
    if isinstance(v, (list, tuple, set, frozenset)):
        return any(contains_dict(x, depth + 1) for x in v)
    return False


def wrap_problem_cases(cases: list[TestCase], entry: str, mode: str = "normalise") -> list[TestCase]:
    """CallCases relabelled to show the candidate's function (the harness calls the wrapper)."""
    out: list[TestCase] = []
    for c in cases:
        if isinstance(c, CallCase) and not c.label:
            c = CallCase(args=c.args, expected=c.expected, kwargs=c.kwargs,
                         label=wrapped_label(entry, mode, c.args, c.kwargs, c.expected))
        out.append(c)
    return out


def finish_cases(convs: list[Converted], entry: str, setup: str) -> tuple[list[TestCase], str, str, dict]:
    """(cases, entry_point, setup_code, meta) for converted asserts: settles truthiness asserts, and puts
    a wrapper in front of the candidate's function when the comparison needs one (all-truthiness tests,
    or dict results, which are often Counter/defaultdict: equal to a dict in Python, not over the pipe)."""
    cases, mode = settle_truthy(convs, entry)
    if mode is None and any(isinstance(c, CallCase) and contains_dict(c.expected) for c in cases):
        mode = "normalise"
        cases = wrap_problem_cases(cases, entry, mode)
    if mode is None:
        return cases, entry, setup, {}
    setup = (setup.rstrip() + "\n\n" if setup.strip() else "") + entry_wrapper(entry, mode)
    return cases, WRAPPER, setup, {"entry_function": entry, "compare": mode}
