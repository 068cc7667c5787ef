"""Splitting an assert test so its verdict is computed in the parent, not by the candidate.

``assert math.isclose(f(2.0), 4.0)`` becomes: the sandbox calls ``f(2.0)`` and reports the value; the parent
evaluates ``math.isclose(_vevo_v0, 4.0)``. Expected values never reach the candidate, and nothing the
candidate does can turn a wrong value into a pass. Asserts that cannot be split (loops, comprehension
variables in the call's arguments, helpers the candidate defines) still run in the sandbox and are
reported as unverified.
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from functools import lru_cache

PLACEHOLDER = "_vevo_v{}"


@dataclass(frozen=True)
class SplitAssert:
    calls: tuple[str, ...]   # per candidate call: source of `_vevo_pack(<args>)`, evaluated in the sandbox
    expr: str                # the assert's test with each call replaced by its placeholder


@lru_cache(maxsize=4096)
def setup_names(setup: str) -> frozenset[str]:
    """Names a setup snippet binds at top level (imports, defs, classes, assignments)."""
    try:
        tree = ast.parse(setup or "")
    except SyntaxError:
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return frozenset(names)


def _bound_inside(expr: ast.AST) -> set[str]:
    """Names bound within the expression itself (comprehension targets, lambda args, walrus)."""
    out: set[str] = set()
    for n in ast.walk(expr):
        if isinstance(n, ast.comprehension):
            out.update(x.id for x in ast.walk(n.target) if isinstance(x, ast.Name))
        elif isinstance(n, ast.Lambda):
            out.update(a.arg for a in n.args.args + n.args.kwonlyargs)
        elif isinstance(n, ast.NamedExpr):
            out.add(n.target.id)
    return out


class _Rewriter(ast.NodeTransformer):
    def __init__(self, callees: frozenset[str]):
        self.callees, self.calls, self.bad = callees, [], False

    def visit_Call(self, node: ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in self.callees:
            inner = [n for a in node.args + [k.value for k in node.keywords] for n in ast.walk(a)
                     if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.callees]
            if inner:
                self.bad = True
                return node
            pack = ast.Call(func=ast.Name("_vevo_pack", ast.Load()), args=node.args, keywords=node.keywords)
            self.calls.append((ast.unparse(pack), node))
            return ast.Name(PLACEHOLDER.format(len(self.calls) - 1), ast.Load())
        return self.generic_visit(node)


@lru_cache(maxsize=65536)
def split_assert(code: str, callees: frozenset[str], known: frozenset[str]) -> SplitAssert | None:
    """callees: names that mean the candidate's function; known: names the parent can resolve (setup)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    test = tree.body[0].test
    bound = _bound_inside(test)
    rw = _Rewriter(callees)
    new = rw.visit(test)
    if rw.bad or not rw.calls:
        return None
    for _, call in rw.calls:
        used = {n.id for a in call.args + [k.value for k in call.keywords] for n in ast.walk(a)
                if isinstance(n, ast.Name)}
        if used & bound:
            return None
    free = {n.id for n in ast.walk(new) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    free -= {PLACEHOLDER.format(i) for i in range(len(rw.calls))} | bound
    if not free <= (known | set(dir(builtins))):
        return None
    return SplitAssert(calls=tuple(src for src, _ in rw.calls), expr=ast.unparse(new))


_NS_CACHE: dict[str, dict] = {}


def parent_namespace(setup: str) -> dict:
    """The namespace the parent evaluates split asserts in: the problem's own setup (trusted problem
    code, like an OpenEvolve evaluator), built once per setup text."""
    ns = _NS_CACHE.get(setup)
    if ns is None:
        ns = {"__builtins__": builtins}
        try:
            exec(compile(setup, "<setup>", "exec"), ns)
        except Exception:
            pass
        _NS_CACHE[setup] = ns
    return ns


@lru_cache(maxsize=65536)
def _compiled(expr: str):
    return compile(expr, "<assert>", "eval")


def verdict(split: SplitAssert, values: list, setup: str) -> bool:
    ns = dict(parent_namespace(setup))
    for i, v in enumerate(values):
        ns[PLACEHOLDER.format(i)] = v
    try:
        return bool(eval(_compiled(split.expr), ns))
    except Exception:
        return False
