"""The problem format: what a problem is, and how a native folder (problem.toml + seed) reads and writes.

A native folder::

    problem.toml   id, title, description, entry_point, tests as data, limits, solved rule
    seed.py        the starting program; the editable part sits between EVOLVE-BLOCK-START/END lines
    reference.py   optional known solution, run by ``vevo problems check``
    tests.jsonl    optional, more tests in tagged JSON (one object a line), for large imported suites

Each test case is one entry of the score vector. Expected values stay in the parent process: the
sandbox receives inputs only (see evaluators/).
"""
from __future__ import annotations

import ast
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from . import values
from .errors import ProblemError
from .metrics import check_directions
from .resources import NATIVE, Resources, resources_from_dict, resources_to_dict

LANGUAGES = ("python",)
MAX_TIME_LIMIT = 86_400.0  # a day: past this a limit is a typo, and the sandbox's timers need finite values
MAX_MEMORY_MB = 1 << 20
_SOLVED_RE = re.compile(r"^\s*(all|none|scalar\s*>=\s*([0-9.eE+-]+))\s*$")


@dataclass(frozen=True)
class CallCase:
    """Call the entry point with args/kwargs; compare the returned value with expected (in the parent)."""
    args: tuple
    expected: Any
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    kind: str = "call"


@dataclass(frozen=True)
class StdioCase:
    """Run the program as __main__ with stdin; compare stdout (trailing whitespace per line ignored)."""
    stdin: str
    stdout: str
    label: str = ""
    kind: str = "stdio"


@dataclass(frozen=True)
class AssertCase:
    """Run assert code in the candidate's namespace; passes when it raises nothing. Used only for tests that
    cannot be split into a call and an expected value (they run inside the sandbox)."""
    code: str
    label: str = ""
    kind: str = "assert"


@dataclass(frozen=True)
class PointsCase:
    """A bucket of data points (symbolic regression): score = fraction of points where f(*x) is within
    tolerance of y, so one entry is fractional in [0, 1]."""
    inputs: tuple
    outputs: tuple
    rtol: float = 1e-3
    atol: float = 1e-6
    label: str = ""
    kind: str = "points"


TestCase = Union[CallCase, StdioCase, AssertCase, PointsCase]


@dataclass
class OpenEvolveSpec:
    evaluator: Path
    cascade: bool = True
    thresholds: tuple[float, ...] = (0.5, 0.75, 0.9)
    feature_dims: tuple[str, ...] = ("complexity", "diversity")  # left out of the fitness, as OpenEvolve does


@dataclass
class Problem:
    id: str
    seed_code: str
    tests: list[TestCase] = field(default_factory=list)
    title: str = ""
    description: str = ""
    language: str = "python"
    entry_point: str | None = None
    setup_code: str = ""
    reference_code: str | None = None
    weights: list[float] | None = None
    solved_rule: str = "all"
    time_limit: float = 10.0
    memory_limit_mb: int = 1024
    float_tol: float = 1e-6
    suite: str | None = None
    split: str | None = None
    source: Path | None = None
    openevolve: OpenEvolveSpec | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    resources: Resources = NATIVE  # its memory_mb is ignored: memory_limit_mb is the one memory setting
    metric_directions: dict[str, str] = field(default_factory=dict)  # name → higher | lower | ignore
    strict_bool: bool = False  # True: a bool result never equals an int (Python's == says 0 == False)

    @property
    def open_ended(self) -> bool:
        """No solved rule: the problem is never retired; a campaign runs its budget and keeps the best."""
        return self.solved_rule.strip() == "none"

    def limits(self) -> Resources:
        from dataclasses import replace

        return replace(self.resources, memory_mb=int(self.memory_limit_mb))

    @property
    def n_tests(self) -> int:
        return len(self.tests)

    def weight_vector(self, d: int | None = None) -> list[float]:
        d = self.n_tests if d is None else d
        if self.weights and len(self.weights) == d:
            s = sum(self.weights)
            return [w / s for w in self.weights] if s > 0 else [1.0 / d] * d
        return [1.0 / d] * d if d else []

    def is_solved(self, vector: list[float], scalar: float) -> bool:
        m = _SOLVED_RE.match(self.solved_rule)
        if m and m.group(1) == "none":
            return False
        if m and m.group(2) is not None:
            return scalar >= float(m.group(2)) - 1e-12
        return bool(vector) and all(v >= 1.0 - 1e-9 for v in vector)

    def test_label(self, i: int) -> str:
        t = self.tests[i]
        if t.label:
            return t.label
        if isinstance(t, CallCase):
            args = ", ".join([values.safe_repr(a, 60) for a in t.args] +
                             [f"{k}={values.safe_repr(v, 60)}" for k, v in t.kwargs.items()])
            return f"{self.entry_point}({args}) == {values.safe_repr(t.expected, 60)}"
        if isinstance(t, StdioCase):
            return f"stdin {_short(repr(t.stdin))} -> stdout {_short(repr(t.stdout))}"
        if isinstance(t, AssertCase):
            return _short(t.code.strip().splitlines()[-1] if t.code.strip() else "", 120)
        return f"{len(t.inputs)} points"


def short_title(title: str, n: int = 50) -> str:
    """``title`` in at most n characters, cut where a reader expects a cut: after a whole step of a pbe
    composition (" -> "), else after a comma or a word, never inside a token; "..." marks the cut."""
    t = " ".join(title.split())
    if len(t) <= n:
        return t
    room = t[: n - 3]
    for sep in (" -> ", ", ", " "):
        k = room.rfind(sep)
        if k >= n // 3:
            return room[:k].rstrip(" ,") + " ..."
    return room + "..."


def _short(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


# ---------------------------------------------------------------- reading

def load_native(folder: str | Path) -> Problem:
    """Read a native problem folder. Every error is a ProblemError naming the file and field."""
    folder = Path(folder)
    toml_path = folder / "problem.toml"
    if not toml_path.is_file():
        raise ProblemError(folder, "", "no problem.toml (and no initial_program.py + evaluator.py)")
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ProblemError(toml_path, "", f"invalid TOML: {e}") from None
    except RecursionError:
        raise ProblemError(toml_path, "", "invalid TOML: nested too deeply") from None
    return problem_from_dict(data, folder, toml_path)


_KNOWN_KEYS = {"id", "title", "description", "language", "entry_point", "seed", "reference", "solved", "time_limit",
               "memory_limit_mb", "float_tol", "weights", "tests", "tests_file", "setup", "suite", "split", "meta",
               "resources", "metrics", "strict_bool"}


def problem_from_dict(data: dict, folder: Path, where: Path) -> Problem:
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise ProblemError(where, unknown[0], "unknown key")
    pid = _get(data, "id", str, where, default=folder.name)
    if not re.fullmatch(r"[A-Za-z0-9_.\-/]+", pid):
        raise ProblemError(where, "id", f"{pid!r} must be letters, digits, '_', '-', '.', '/'")
    language = _get(data, "language", str, where, default="python")
    if language not in LANGUAGES:
        raise ProblemError(where, "language", f"{language!r} is not supported (supported: {', '.join(LANGUAGES)})")
    seed_name = _get(data, "seed", str, where, default="seed.py")
    seed_path = folder / seed_name
    if not seed_path.is_file():
        raise ProblemError(where, "seed", f"seed program {seed_name!r} not found")
    seed_code = seed_path.read_text(encoding="utf-8")
    ref_name = _get(data, "reference", str, where, default=None)
    reference = None
    if ref_name is not None:
        if not (folder / ref_name).is_file():
            raise ProblemError(where, "reference", f"{ref_name!r} not found")
        reference = (folder / ref_name).read_text(encoding="utf-8")
    elif (folder / "reference.py").is_file():
        reference = (folder / "reference.py").read_text(encoding="utf-8")
    entry = _get(data, "entry_point", str, where, default=None)
    tests_raw = data.get("tests", [])
    if not isinstance(tests_raw, list):
        raise ProblemError(where, "tests", "must be an array of tables ([[tests]])")
    tests = [_case_from_dict(t, where, f"tests[{i}]") for i, t in enumerate(tests_raw)]
    tf = _get(data, "tests_file", str, where, default=None)
    if tf is not None:
        tests += read_tests_file(folder / tf)
    if not tests:
        raise ProblemError(where, "tests", "a problem needs at least one test case")
    if entry is None and any(isinstance(t, (CallCase, PointsCase)) for t in tests):
        raise ProblemError(where, "entry_point", "required by function-call and points tests")
    solved = _get(data, "solved", str, where, default="all")
    if not _SOLVED_RE.match(solved):
        raise ProblemError(where, "solved", f"{solved!r}: expected 'all', 'none' or 'scalar >= X'")
    weights = data.get("weights")
    if weights is not None:
        if not isinstance(weights, list) or not all(isinstance(w, (int, float)) and w >= 0 for w in weights):
            raise ProblemError(where, "weights", "must be a list of non-negative numbers")
        if len(weights) != len(tests):
            raise ProblemError(where, "weights", f"has {len(weights)} entries for {len(tests)} tests")
        weights = [float(w) for w in weights]
    time_limit = float(_get(data, "time_limit", (int, float), where, default=10.0))
    mem = int(_get(data, "memory_limit_mb", int, where, default=1024))
    res = resources_from_dict(data.get("resources", {}), NATIVE, where)
    if not 0 < time_limit <= MAX_TIME_LIMIT:  # also refuses nan and inf, which TOML can spell
        raise ProblemError(where, "time_limit", f"must be seconds in (0, {MAX_TIME_LIMIT:g}], got {time_limit}")
    if not 64 <= mem <= MAX_MEMORY_MB:
        raise ProblemError(where, "memory_limit_mb", f"must be in [64, {MAX_MEMORY_MB}], got {mem}")
    return Problem(
        id=pid, seed_code=seed_code, tests=tests, title=_get(data, "title", str, where, default=pid),
        description=_get(data, "description", str, where, default=""), language=language, entry_point=entry,
        setup_code=_get(data, "setup", str, where, default=""), reference_code=reference, weights=weights,
        solved_rule=solved, time_limit=time_limit, memory_limit_mb=mem,
        float_tol=float(_get(data, "float_tol", (int, float), where, default=1e-6)),
        suite=_get(data, "suite", str, where, default=None), split=_get(data, "split", str, where, default=None),
        source=folder, meta=dict(data.get("meta", {}) or {}),
        resources=res,
        metric_directions=check_directions(data.get("metrics", {}), where),
        strict_bool=_get(data, "strict_bool", bool, where, default=False))


def _get(data: dict, key: str, typ, where: Path, default: Any = ...) -> Any:
    if key not in data:
        if default is ...:
            raise ProblemError(where, key, "missing")
        return default
    v = data[key]
    if not isinstance(v, typ) or (typ in (int, (int, float)) and isinstance(v, bool)):
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise ProblemError(where, key, f"expected {names}, got {type(v).__name__}")
    return v


def _py_literal(text: Any, where: Path, fld: str) -> Any:
    if not isinstance(text, str):
        raise ProblemError(where, fld, "must be a string holding a Python literal")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise ProblemError(where, fld, f"not a Python literal: {type(e).__name__}") from None


def _case_from_dict(t: Any, where: Path, fld: str) -> TestCase:
    if not isinstance(t, dict):
        raise ProblemError(where, fld, "must be a table")
    label = str(t.get("label", ""))
    keys = set(t) - {"label"}
    allowed = {"args", "args_py", "expected", "expected_py", "kwargs", "stdin", "stdout", "assert", "inputs",
               "outputs", "rtol", "atol"}
    if keys - allowed:
        raise ProblemError(where, f"{fld}.{sorted(keys - allowed)[0]}", "unknown key")
    if keys & {"args", "args_py", "expected", "expected_py", "kwargs"}:
        if "args_py" in t:
            args = _py_literal(t["args_py"], where, fld + ".args_py")
            args = args if isinstance(args, tuple) else (args,)
        else:
            args = t.get("args", [])
            if not isinstance(args, list):
                raise ProblemError(where, fld + ".args", "must be an array of arguments")
            args = tuple(args)
        if "expected_py" in t:
            expected = _py_literal(t["expected_py"], where, fld + ".expected_py")
        elif "expected" in t:
            expected = t["expected"]
        else:
            raise ProblemError(where, fld + ".expected", "missing (give expected or expected_py)")
        kwargs = t.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise ProblemError(where, fld + ".kwargs", "must be a table")
        return CallCase(args=args, expected=expected, kwargs=dict(kwargs), label=label)
    if "stdin" in keys or "stdout" in keys:
        if not isinstance(t.get("stdin", ""), str) or not isinstance(t.get("stdout"), str):
            raise ProblemError(where, fld, "stdio tests need string stdin and stdout")
        return StdioCase(stdin=t.get("stdin", ""), stdout=t["stdout"], label=label)
    if "assert" in keys:
        code = t["assert"]
        if not isinstance(code, str) or not code.strip():
            raise ProblemError(where, fld + ".assert", "must be a non-empty string")
        try:
            compile(code, "<assert>", "exec")
        except SyntaxError as e:
            raise ProblemError(where, fld + ".assert", f"syntax error: {e.msg}") from None
        return AssertCase(code=code, label=label)
    if "inputs" in keys:
        ins, outs = t.get("inputs"), t.get("outputs")
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs) or not ins:
            raise ProblemError(where, fld, "points tests need equal-length non-empty inputs and outputs")
        return PointsCase(inputs=tuple(tuple(x) if isinstance(x, list) else (x,) for x in ins),
                          outputs=tuple(float(y) for y in outs), rtol=float(t.get("rtol", 1e-3)),
                          atol=float(t.get("atol", 1e-6)), label=label)
    raise ProblemError(where, fld, "unknown test kind (expected args/expected, stdin/stdout, assert, or inputs/outputs)")


def read_tests_file(path: Path) -> list[TestCase]:
    from .jsonl import read_jsonl

    if not path.is_file():
        raise ProblemError(path, "", "tests file not found")
    return [case_from_json(obj, path, f"line {n}") for n, obj in read_jsonl(path)]


def case_from_json(obj: Any, where: Path, fld: str) -> TestCase:
    if not isinstance(obj, dict) or "kind" not in obj:
        raise ProblemError(where, fld, "expected an object with a 'kind'")
    kind, label = obj["kind"], str(obj.get("label", ""))
    try:
        if kind == "call":
            args = values.decode(obj.get("args", []))
            return CallCase(args=tuple(args), expected=values.decode(obj["expected"]),
                            kwargs=values.decode(obj.get("kwargs", {})), label=label)
        if kind == "stdio":
            return StdioCase(stdin=str(obj.get("stdin", "")), stdout=str(obj["stdout"]), label=label)
        if kind == "assert":
            return AssertCase(code=str(obj["code"]), label=label)
        if kind == "points":
            return PointsCase(inputs=tuple(tuple(x) for x in obj["inputs"]), outputs=tuple(float(y) for y in obj["outputs"]),
                              rtol=float(obj.get("rtol", 1e-3)), atol=float(obj.get("atol", 1e-6)), label=label)
    except (KeyError, TypeError, ValueError) as e:
        raise ProblemError(where, fld, f"bad {kind} test: {type(e).__name__}: {e}") from None
    raise ProblemError(where, fld, f"unknown test kind {kind!r}")


def case_to_json(t: TestCase) -> dict:
    d: dict[str, Any] = {"kind": t.kind}
    if t.label:
        d["label"] = t.label
    if isinstance(t, CallCase):
        d["args"] = values.encode(list(t.args))
        if t.kwargs:
            d["kwargs"] = values.encode(dict(t.kwargs))
        d["expected"] = values.encode(t.expected)
    elif isinstance(t, StdioCase):
        d.update(stdin=t.stdin, stdout=t.stdout)
    elif isinstance(t, AssertCase):
        d["code"] = t.code
    else:
        d.update(inputs=[list(x) for x in t.inputs], outputs=list(t.outputs), rtol=t.rtol, atol=t.atol)
    return d


# ---------------------------------------------------------------- writing

def write_native(problem: Problem, folder: str | Path) -> Path:
    """Write a native folder; tests go to tests.jsonl (tagged JSON keeps tuples, None and big ints)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "seed.py").write_text(problem.seed_code, encoding="utf-8")
    if problem.reference_code is not None:
        (folder / "reference.py").write_text(problem.reference_code, encoding="utf-8")
    with open(folder / "tests.jsonl", "w", encoding="utf-8") as f:
        for t in problem.tests:
            f.write(json.dumps(case_to_json(t), separators=(",", ":")) + "\n")
    lines = [f"id = {_toml_str(problem.id)}", f"title = {_toml_str(problem.title or problem.id)}",
             f"description = {_toml_str(problem.description)}", f"language = {_toml_str(problem.language)}"]
    if problem.entry_point:
        lines.append(f"entry_point = {_toml_str(problem.entry_point)}")
    lines += ['seed = "seed.py"', 'tests_file = "tests.jsonl"', f"solved = {_toml_str(problem.solved_rule)}",
              f"time_limit = {float(problem.time_limit)}", f"memory_limit_mb = {int(problem.memory_limit_mb)}",
              f"float_tol = {float(problem.float_tol)}"]
    if problem.reference_code is not None:
        lines.append('reference = "reference.py"')
    if problem.setup_code:
        lines.append(f"setup = {_toml_str(problem.setup_code)}")
    if problem.strict_bool:
        lines.append("strict_bool = true")
    if problem.weights:
        lines.append("weights = [" + ", ".join(repr(float(w)) for w in problem.weights) + "]")
    if problem.suite:
        lines.append(f"suite = {_toml_str(problem.suite)}")
    if problem.split:
        lines.append(f"split = {_toml_str(problem.split)}")
    res = resources_to_dict(problem.resources)
    res.pop("memory_mb", None)
    if res:
        lines.append("[resources]")
        lines += [f"{k} = {v}" for k, v in res.items()]
    if problem.metric_directions:
        lines.append("[metrics]")
        lines += [f"{_toml_key(k)} = {_toml_str(v)}" for k, v in problem.metric_directions.items()]
    if problem.meta:
        lines.append("[meta]")
        lines += [f"{_toml_key(k)} = {_toml_str(str(v))}" for k, v in problem.meta.items()]
    (folder / "problem.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_str(k)
