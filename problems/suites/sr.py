"""Symbolic regression suite: the classic GP benchmark formulas (Nguyen, Koza, Keijzer; the full DSO table of 268
when the shared data folder is present).

Each problem asks for ``f(x)`` (``f(x, y)``, ``f(x, y, z)``, or ``f(x1, ..., xn)`` beyond three variables) that
fits sampled data. Scoring: ``N_POINTS`` points are sampled (seeded, uniform in the benchmark's range), sorted by
the first variable and split into ``N_BUCKETS`` PointsCase buckets; one vector entry per bucket = the fraction of
its points where ``f`` is within ``rtol=1e-2`` / ``atol=1e-3`` of the target, so a formula right on part of the
domain earns partial credit on exactly those buckets. Solved = every bucket complete ("all").

The sampling ranges follow the literature (McDermott et al. 2012, "GP needs better benchmarks"); the point counts
there (e.g. 20 for Nguyen) are replaced by our 40 points, and evenly spaced ("E") grids are sampled uniformly over
the same interval. Points where the formula is undefined (log/sqrt of a negative, x ** y with a complex result,
overflow) are resampled. Descriptions show one sample point per bucket, never the formula; the formula is the
``reference_code``.
"""
from __future__ import annotations

import ast
import csv
import json
import logging
import math
import os
import random
from pathlib import Path
from typing import Any, Callable

from ..evolve_block import wrap_block
from ..model import PointsCase, Problem

log = logging.getLogger(__name__)

N_POINTS = 40
N_BUCKETS = 8
RTOL = 1e-2
ATOL = 1e-3

# name: (number of variables, Python expression over x1..xn (math names bare), ranges per variable (lo, hi))
# Facts from the papers (Uy et al. 2011 for Nguyen; Koza 1992; Keijzer 2003), as listed by McDermott et al. 2012.
_A = (-1.0, 1.0)
FORMULAS: dict[str, tuple[int, str, tuple[tuple[float, float], ...]]] = {
    "Nguyen-1": (1, "x1**3 + x1**2 + x1", (_A,)),
    "Nguyen-2": (1, "x1**4 + x1**3 + x1**2 + x1", (_A,)),
    "Nguyen-3": (1, "x1**5 + x1**4 + x1**3 + x1**2 + x1", (_A,)),
    "Nguyen-4": (1, "x1**6 + x1**5 + x1**4 + x1**3 + x1**2 + x1", (_A,)),
    "Nguyen-5": (1, "sin(x1**2) * cos(x1) - 1", (_A,)),
    "Nguyen-6": (1, "sin(x1) + sin(x1 + x1**2)", (_A,)),
    "Nguyen-7": (1, "log(x1 + 1) + log(x1**2 + 1)", ((0.0, 2.0),)),
    "Nguyen-8": (1, "sqrt(x1)", ((0.0, 4.0),)),
    "Nguyen-9": (2, "sin(x1) + sin(x2**2)", ((0.0, 1.0), (0.0, 1.0))),
    "Nguyen-10": (2, "2 * sin(x1) * cos(x2)", ((0.0, 1.0), (0.0, 1.0))),
    "Nguyen-11": (2, "x1**x2", ((0.0, 1.0), (0.0, 1.0))),
    "Nguyen-12": (2, "x1**4 - x1**3 + x2**2 / 2 - x2", ((0.0, 1.0), (0.0, 1.0))),
    "Koza-1": (1, "x1**4 + x1**3 + x1**2 + x1", (_A,)),
    "Koza-2": (1, "x1**5 - 2 * x1**3 + x1", (_A,)),
    "Koza-3": (1, "x1**6 - 2 * x1**4 + x1**2", (_A,)),
    "Keijzer-1": (1, "0.3 * x1 * sin(2 * pi * x1)", (_A,)),
    "Keijzer-4": (1, "x1**3 * exp(-x1) * cos(x1) * sin(x1) * (sin(x1)**2 * cos(x1) - 1)", ((0.0, 10.0),)),
    "Keijzer-7": (1, "log(x1)", ((1.0, 100.0),)),
    "Keijzer-8": (1, "sqrt(x1)", ((0.0, 100.0),)),
    "Keijzer-9": (1, "log(x1 + sqrt(x1**2 + 1))", ((0.0, 100.0),)),
    "Keijzer-11": (2, "x1 * x2 + sin((x1 - 1) * (x2 - 1))", ((-3.0, 3.0), (-3.0, 3.0))),
    "Keijzer-12": (2, "x1**4 - x1**3 + x2**2 / 2 - x2", ((-3.0, 3.0), (-3.0, 3.0))),
    "Keijzer-13": (2, "6 * sin(x1) * cos(x2)", ((-3.0, 3.0), (-3.0, 3.0))),
    "Keijzer-14": (2, "8 / (2 + x1**2 + x2**2)", ((-3.0, 3.0), (-3.0, 3.0))),
    "Keijzer-15": (2, "x1**3 / 5 + x2**3 / 2 - x2 - x1", ((-3.0, 3.0), (-3.0, 3.0))),
}

_MATH_FUNCS = {"sin", "cos", "tan", "exp", "log", "sqrt", "tanh", "sinh", "cosh", "asin", "acos", "atan"}
_MATH_CONSTS = {"pi", "e"}
_DSO_BINARY = {"pow": ast.Pow, "div": ast.Div}


def arg_names(n: int) -> list[str]:
    return ["x", "y", "z"][:n] if n <= 3 else [f"x{i}" for i in range(1, n + 1)]


class _Translate(ast.NodeTransformer):
    """DSO / table syntax -> Python with the math module: pow(a,b) -> a ** b, div(a,b) -> a / b, sin -> math.sin,
    pi -> math.pi, x1..xn -> the argument names. Anything else is untranslatable (ValueError)."""

    def __init__(self, n: int):
        self.names = {f"x{i}": a for i, a in enumerate(arg_names(n), 1)}

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise ValueError("unsupported call")
        fname = node.func.id
        args = [self.visit(a) for a in node.args]
        if fname in _DSO_BINARY and len(args) == 2:
            return ast.BinOp(left=args[0], op=_DSO_BINARY[fname](), right=args[1])
        if fname in _MATH_FUNCS and len(args) == 1:
            return ast.Call(func=ast.Attribute(value=ast.Name("math", ast.Load()), attr=fname, ctx=ast.Load()),
                            args=args, keywords=[])
        if fname == "abs" and len(args) == 1:
            return ast.Call(func=ast.Name("abs", ast.Load()), args=args, keywords=[])
        raise ValueError(f"unsupported function {fname!r}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            return ast.Name(self.names[node.id], ast.Load())
        if node.id in _MATH_CONSTS:
            return ast.Attribute(value=ast.Name("math", ast.Load()), attr=node.id, ctx=ast.Load())
        raise ValueError(f"unknown name {node.id!r}")

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop,
                                 ast.Load)):
            raise ValueError(f"unsupported syntax {type(node).__name__}")
        return super().generic_visit(node)


def translate(expr: str, n: int) -> str:
    """The table expression as Python source over the argument names (uses ``math.``). ValueError if it cannot."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"syntax error: {e.msg}") from None
    body = _Translate(n).visit(tree)
    return ast.unparse(ast.fix_missing_locations(body))


def _reference(py_expr: str, n: int) -> str:
    return f"import math\n\n\ndef f({', '.join(arg_names(n))}):\n    return {py_expr}\n"


def _seed(n: int) -> str:
    return wrap_block(f"def f({', '.join(arg_names(n))}):\n    return 0.0", before="import math\n\n")


def _compile(py_expr: str, n: int) -> Callable:
    ns: dict[str, Any] = {}
    exec(compile(_reference(py_expr, n), "<sr>", "exec"), ns)
    return ns["f"]


def _value(fn: Callable, x: tuple) -> float | None:
    try:
        y = fn(*x)
    except (ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None
    if type(y) is int:
        y = float(y)
    if type(y) is not float or not math.isfinite(y) or abs(y) > 1e12:
        return None
    return y


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def make_problem(name: str, n: int, py_expr: str, ranges: tuple, seed: int = 0, source: str = "builtin",
                 n_points: int = N_POINTS, n_buckets: int = N_BUCKETS) -> Problem:
    """One SR problem from a translated expression. ValueError when too few valid points can be sampled."""
    fn = _compile(py_expr, n)
    rng = random.Random(f"vevo-sr:{seed}:{name}")
    pts: list[tuple[tuple, float]] = []
    tries = 0
    while len(pts) < n_points:
        tries += 1
        if tries > 50 * n_points:
            raise ValueError(f"only {len(pts)} of {n_points} points are defined")
        x = tuple(round(rng.uniform(lo, hi), 6) for lo, hi in ranges)
        y = _value(fn, x)
        if y is not None:
            pts.append((x, y))
    pts.sort()
    size = n_points // n_buckets
    tests = []
    for b in range(n_buckets):
        chunk = pts[b * size:(b + 1) * size] if b < n_buckets - 1 else pts[b * size:]
        lo, hi = chunk[0][0][0], chunk[-1][0][0]
        tests.append(PointsCase(inputs=tuple(x for x, _ in chunk), outputs=tuple(y for _, y in chunk), rtol=RTOL,
                                atol=ATOL, label=f"bucket {b + 1}: {arg_names(n)[0]} in [{_fmt(lo)}, {_fmt(hi)}]"))
    args = arg_names(n)
    rng_txt = ", ".join(f"{a} in [{_fmt(lo)}, {_fmt(hi)}]" for a, (lo, hi) in zip(args, ranges))
    sample = [t.inputs[len(t.inputs) // 2] for t in tests]
    ys = [t.outputs[len(t.outputs) // 2] for t in tests]
    lines = [f"f({', '.join(_fmt(v) for v in x)}) ~= {_fmt(y)}" for x, y in zip(sample, ys)]
    sig = f"f({', '.join(args)})"
    desc = (f"Symbolic regression: find a formula for {sig} that fits the data, for {rng_txt}. A point counts when "
            f"f is within {RTOL:g} relative (or {ATOL:g} absolute) error of its value; the {n_points} data points "
            f"are split into {n_buckets} groups by {args[0]}, one score each. The math module is imported.\n"
            "Sample points:\n" + "\n".join(lines))
    family = name.split("-")[0]
    return Problem(id=f"sr/{name}", seed_code=_seed(n), tests=tests, title=f"{name} ({n} variable{'s' * (n > 1)})",
                   description=desc, entry_point="f", reference_code=_reference(py_expr, n), solved_rule="all",
                   time_limit=5.0, suite="sr", split=None,
                   meta={"family": family, "n_vars": n, "source": source, "sr_seed": seed,
                         "ranges": json.dumps([list(r) for r in ranges])})


def generate_sr(names: list[str] | None = None, seed: int = 0) -> list[Problem]:
    """Problems for the embedded formulas (all of them by default, in table order). A name missing from the
    embedded table is looked up in the shared sr_classic table when that folder exists."""
    names = list(FORMULAS) if names is None else list(names)
    out = []
    shared: dict[str, tuple] | None = None
    for name in names:
        if name in FORMULAS:
            n, expr, ranges = FORMULAS[name]
            out.append(make_problem(name, n, translate(expr, n), ranges, seed))
            continue
        if shared is None:
            folder = find_shared()
            shared = _read_table(folder / "benchmarks.csv") if folder else {}
        if name not in shared:
            raise KeyError(f"unknown SR benchmark {name!r} (embedded: {', '.join(FORMULAS)})")
        n, expr, ranges = shared[name]
        out.append(make_problem(name, n, translate(expr, n), ranges, seed, source="sr_classic"))
    return out


# ---------------------------------------------------------------------------------------------- shared table

def find_shared() -> Path | None:
    """The sr_classic folder: $VEVO_SR_CLASSIC, else <repo>/shared/data/sr_classic, else
    /work/shared/data/sr_classic (the first holding benchmarks.csv)."""
    cands = []
    if os.environ.get("VEVO_SR_CLASSIC"):
        cands.append(Path(os.environ["VEVO_SR_CLASSIC"]))
    root = Path(__file__).resolve().parents[2]
    cands += [root / "shared" / "data" / "sr_classic", Path("/work/shared/data/sr_classic")]
    return next((c for c in cands if (c / "benchmarks.csv").is_file()), None)


def _ranges(spec_text: str, n: int) -> tuple:
    spec = json.loads(spec_text)
    out = []
    for i in range(1, n + 1):
        s = spec.get(f"x{i}", spec.get("all"))
        if not isinstance(s, dict) or len(s) != 1:
            raise ValueError(f"no sampling spec for x{i}")
        (kind, vals), = s.items()
        if kind not in ("U", "E") or len(vals) < 2:
            raise ValueError(f"unsupported sampling spec {kind!r}")
        lo, hi = float(vals[0]), float(vals[1])
        if not lo < hi:
            raise ValueError("empty range")
        out.append((lo, hi))
    return tuple(out)


def _read_table(path: Path) -> dict[str, tuple]:
    """name -> (n, raw expression, ranges); rows whose spec cannot be read are left out here (and reported by
    sr_from_shared)."""
    out = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            try:
                n = int(row["variables"])
                out[row["name"]] = (n, row["expression"], _ranges(row["train_spec"], n))
            except (ValueError, KeyError, TypeError):
                continue
    return out


def sr_from_shared(path: str | Path | None = None, seed: int = 0,
                   skipped: list[tuple[str, str]] | None = None) -> list[Problem]:
    """Every formula of the shared sr_classic table (``benchmarks.csv`` in ``path``, default ``find_shared()``)
    that translates to Python and samples enough defined points. Skipped rows go to ``skipped`` as
    (name, reason) when given, and their count is logged."""
    folder = Path(path) if path is not None else find_shared()
    if folder is None:
        raise FileNotFoundError("sr_classic data not found (set VEVO_SR_CLASSIC or add shared/data/sr_classic)")
    csv_path = folder / "benchmarks.csv" if folder.is_dir() else folder
    out: list[Problem] = []
    bad: list[tuple[str, str]] = []
    with open(csv_path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            name = row.get("name", "?")
            try:
                n = int(row["variables"])
                p = make_problem(name, n, translate(row["expression"], n), _ranges(row["train_spec"], n), seed,
                                 source="sr_classic")
                p.suite = "sr-classic"
                out.append(p)
            except (ValueError, KeyError, TypeError) as e:
                bad.append((name, str(e)))
    if bad:
        log.info("sr_classic: %d of %d formulas skipped (%s)", len(bad), len(bad) + len(out),
                 "; ".join(f"{n}: {r}" for n, r in bad[:5]))
    if skipped is not None:
        skipped.extend(bad)
    return out
