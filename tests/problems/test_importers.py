"""Dataset importers (problems/importers): conversion rules, counts and structure of the real datasets in
/work/shared/data (skipped when absent), a sample of references solved and seeds not solved in the
sandbox, and one-line errors for malformed files. The full acceptance run is bench/checks/import_check.py."""
from __future__ import annotations

import dataclasses
import gzip
import json
import warnings
from pathlib import Path

import pytest

from problems.check import check_many, check_problem
from problems.importers import IMPORTERS, import_problems
from problems.importers.apps import decode_mapcoder_args, import_apps
from problems.evolve_block import END_LINE as EVOLVE_END, START_LINE as EVOLVE_START
from problems.importers.common import WRAPPER, NotLiteral, convert_assert, literal
from problems.importers.evalplus import import_evalplus, mbpp_deserialize_inputs, reference_outputs, spread
from problems.importers.humaneval import import_humaneval
from problems.importers.mbpp import import_mbpp
from problems.model import AssertCase, CallCase, Problem, ProblemError, StdioCase

from tests.conftest import DATA

MBPP = DATA / "mbpp"
HUMANEVAL = DATA / "humaneval"
EVALPLUS = DATA / "evalplus"
APPS = DATA / "apps_mapcoder150"


def need(folder: Path) -> None:
    if not folder.is_dir():
        pytest.skip(f"dataset folder {folder} is absent")


def assert_healthy(problems: list[Problem], pool) -> None:
    """Every reference solved, no seed solved (reasons in the message)."""
    bad = []
    for p, r in zip(problems, check_many(problems, pool)):
        ref = r["reference"]
        if ref is not None and not ref["solved"]:
            bad.append(f"{p.id}: reference {ref['status']} {ref['artifacts'].get('first_error', '')}")
        if r["seed"]["solved"]:
            bad.append(f"{p.id}: seed solved")
    assert not bad, "\n".join(bad)


def well_formed(p: Problem) -> None:
    assert p.tests and p.seed_code.count(EVOLVE_START) == 1 and p.seed_code.count(EVOLVE_END) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MBPP references have invalid escapes such as '\d'
        for code in (p.seed_code, p.reference_code or "", p.setup_code):
            compile(code, p.id, "exec")
    if any(isinstance(t, CallCase) for t in p.tests):
        assert p.entry_point
    assert p.memory_limit_mb == 1024 and 0 < p.time_limit <= 60


# ---------------------------------------------------------------- conversion rules (no data needed)

def test_convert_assert_call_forms():
    names = {"f"}
    c = convert_assert("assert f(-1, (2, 3), [[4]], k=-2.5) == (-1, [2])", names).case
    assert isinstance(c, CallCase) and c.args == (-1, (2, 3), [[4]]) and c.kwargs == {"k": -2.5}
    assert c.expected == (-1, [2]) and type(c.expected) is tuple
    assert convert_assert("assert (-3, 'x') == f({1: 'a'}, {1, 2})", names).case.expected == (-3, "x")
    c = convert_assert("assert f(10, 5, 1.0/3) == 3 * 19", names).case
    assert isinstance(c, CallCase) and abs(c.args[2] - 1 / 3) < 1e-15 and c.expected == 57
    assert convert_assert("assert f([1]) is False", names).case.expected is False
    conv = convert_assert("assert math.isclose(f(2), 0.5, rel_tol=0.001)", names)
    assert isinstance(conv.case, CallCase) and conv.case.expected == 0.5 and conv.rel_tol == 0.001
    conv = convert_assert("assert abs(f(1.33) - 0.33) < 1e-06", names)
    assert isinstance(conv.case, CallCase) and conv.rel_tol == pytest.approx(1e-6 / 0.33)
    conv = convert_assert("assert not f('x')", names)
    assert conv.truthy and conv.case.expected is False
    for src in ("assert set(f(1)) == {1}", "assert f(root) == 3", "assert f(1) == g(2)", "assert f(1) != 2",
                "assert f(*xs) == 1", "assert abs(f(1) - 0) < 1e-6", "x = f(1)", "assert f(1) == float('nan')"):
        case = convert_assert(src, names).case
        assert isinstance(case, AssertCase) and case.code == src, src


def test_literal_folding_is_bounded():
    import ast

    assert literal(ast.parse("-(2 ** 10) + 0 ** 0", mode="eval").body) == -1023
    assert literal(ast.parse("'ab' + 'c'", mode="eval").body) == "abc"
    for src in ("2 ** 100000", "'a' * 10 ** 9", "x + 1", "f(1)", "1 / 0"):
        with pytest.raises(NotLiteral):
            literal(ast.parse(src, mode="eval").body)


def test_mapcoder_argument_decoding():
    import ast

    fn = ast.parse("def solution(string, markers):\n    pass").body[0]
    args = decode_mapcoder_args(["a #b\nc\nd $e f g\n['#', '$']", "x\n['!']"], fn, Path("f"), "line 1")
    assert args == [("a #b\nc\nd $e f g", ["#", "$"]), ("x", ["!"])]
    fn = ast.parse("def is_lucky(ticket):\n    pass").body[0]
    # one value is not a literal, so the parameter is a string in every test
    assert decode_mapcoder_args(["123321", "12a12a", ""], fn, Path("f"), "l") == [("123321",), ("12a12a",), ("",)]
    fn = ast.parse("def f(n, k=2, base=3):\n    pass").body[0]
    assert decode_mapcoder_args(["4.5", "[1, 2]\nTrue"], fn, Path("f"), "l") == [(4.5,), ([1, 2], True)]


def test_evalplus_input_helpers():
    assert spread(list(range(10)), 4) == [0, 3, 6, 9] and spread([1, 2], 5) == [1, 2] and spread([1], 0) == []
    assert mbpp_deserialize_inputs("Mbpp/2", [[[1, 2], [3]]]) == [[(1, 2), (3,)]]
    assert mbpp_deserialize_inputs("Mbpp/124", [["1", "2j"]]) == [(1.0, 2j)]
    assert mbpp_deserialize_inputs("Mbpp/3", [[[1, 2]]]) == [[[1, 2]]]


def test_reference_outputs_drops_raising_and_hanging_inputs(pool):
    code = ("def f(x):\n    if x == 2:\n        raise ValueError('no')\n    while x == 3:\n        pass\n"
            "    return [x, x]\n")
    outs, wall = reference_outputs(pool, code, "f", [(1,), (2,), (3,), (4,)], time_limit=1.0)
    assert [s for s, _ in outs] == ["ok", "error", "timeout", "ok"]
    assert outs[0][1] == [1, 1] and outs[3][1] == [4, 4] and "ValueError" in outs[1][1] and wall >= 1.0


def test_check_problem_shape(pool):
    p = Problem(id="t/double", seed_code="def f(x):\n    return None\n", entry_point="f",
                reference_code="def f(x):\n    return 2 * x\n", tests=[CallCase(args=(2,), expected=4)])
    res = check_problem(p, pool)
    assert set(res) == {"id", "seed", "reference"} and res["id"] == "t/double"
    assert res["reference"]["solved"] and not res["seed"]["solved"] and res["seed"]["status"] == "wrong"
    p.reference_code = None
    assert check_problem(p, pool)["reference"] is None


# ---------------------------------------------------------------- MBPP

def test_mbpp_full_structure():
    need(MBPP)
    probs = import_mbpp(MBPP / "mbpp.jsonl")
    assert len(probs) == 974 and len({p.id for p in probs}) == 974
    assert [p.id for p in probs[:2]] == ["mbpp/1", "mbpp/2"]
    splits = {}
    for p in probs:
        splits[p.split] = splits.get(p.split, 0) + 1
        assert p.suite == "mbpp" and p.n_tests == 3 and p.time_limit == 10.0
        well_formed(p)
    assert splits == {"prompt": 10, "test": 500, "validation": 90, "train": 374}
    n_call = sum(isinstance(t, CallCase) for p in probs for t in p.tests)
    assert n_call >= 2850  # nearly every MBPP assert is ENTRY(literals) == literal
    by = {p.id: p for p in probs}
    p = by["mbpp/2"]
    assert p.entry_point == "similar_elements" and "similar_elements" in p.description
    assert "def similar_elements(test_tup1, test_tup2):\n    return None" in p.seed_code
    tree = by["mbpp/367"]  # tests use objects built by test_setup_code, from a class the seed provides
    assert "root = Node(1)" in tree.setup_code and "class Node" in tree.seed_code
    assert all(isinstance(t, AssertCase) for t in tree.tests)
    assert by["mbpp/40"].entry_point == WRAPPER and by["mbpp/40"].meta["entry_function"] == "freq_element"
    assert sum("challenge_tests" in p.meta for p in probs) == 11


def test_mbpp_sanitized_structure():
    need(MBPP)
    probs = import_mbpp(MBPP / "sanitized-mbpp.json")
    assert len(probs) == 427 and sum(p.n_tests for p in probs) >= 427 * 3
    for p in probs:
        well_formed(p)
    by = {p.id: p for p in probs}
    assert sum(p.setup_code.startswith("import math") for p in probs) == 13  # test_imports go to setup
    check = by["mbpp/737"]  # `assert check_str(...)` / `assert not check_str(...)`: compared as bool
    assert check.meta["compare"] == "truthy" and all(isinstance(t, CallCase) for t in check.tests)


def test_mbpp_sample_references_solved(pool):
    need(MBPP)
    by = {p.id: p for p in import_mbpp(MBPP / "mbpp.jsonl")}
    ids = [f"mbpp/{i}" for i in range(1, 975, 45)] + ["mbpp/40", "mbpp/367", "mbpp/596", "mbpp/642", "mbpp/17"]
    assert_healthy([by[i] for i in ids], pool)
    san = {p.id: p for p in import_mbpp(MBPP / "sanitized-mbpp.json")}
    assert_healthy([san[i] for i in ("mbpp/2", "mbpp/737", "mbpp/787", "mbpp/88")], pool)


def test_bool_and_int_compare_as_python_does_unless_the_problem_is_strict(pool):
    """mbpp/414's reference returns 0 where the assert says ``== False``: Python's == passes it, so must vevo;
    ``strict_bool`` keeps the stricter rule for problems that ask for it."""
    from problems import values

    assert values.values_equal(0, False) and values.values_equal([1, (0,)], [True, (False,)])
    assert not values.values_equal(0, False, strict_bool=True) and not values.values_equal("", False)
    need(MBPP)
    p = {q.id: q for q in import_mbpp(MBPP / "mbpp.jsonl")}["mbpp/414"]
    assert pool.evaluate(p, p.reference_code).solved
    strict = dataclasses.replace(p, strict_bool=True)
    assert not pool.evaluate(strict, p.reference_code).solved


# ---------------------------------------------------------------- HumanEval

def test_humaneval_structure():
    need(HUMANEVAL)
    probs = import_humaneval(HUMANEVAL)
    assert len(probs) == 164 and probs[0].id == "humaneval/0" and probs[-1].id == "humaneval/163"
    for p in probs:
        assert p.suite == "humaneval"
        well_formed(p)
    assert sum(p.n_tests for p in probs) >= 1100
    assert sum(isinstance(t, CallCase) for p in probs for t in p.tests) >= 1050
    by = {p.id: p for p in probs}
    p = by["humaneval/0"]
    assert p.entry_point == "has_close_elements" and p.description.startswith("Check if in given list")
    assert p.reference_code.startswith("from typing import List") and "return None" in p.seed_code
    assert "candidate = has_close_elements" in p.setup_code and "METADATA" in p.setup_code
    assert by["humaneval/2"].float_tol > 1e-6 and all(isinstance(t, CallCase) for t in by["humaneval/2"].tests)
    find_zero = by["humaneval/32"]  # imports and the seeded rng move to setup, the loop is one case
    assert find_zero.n_tests == 1 and "rng = random.Random(42)" in find_zero.setup_code
    assert "def poly" in find_zero.seed_code.split(EVOLVE_START)[0]
    dd = by["humaneval/151"]  # assignments after some asserts move to setup when no earlier test reads them
    assert dd.n_tests == 7 and "odd_sum = " in dd.setup_code
    assert by["humaneval/52"].meta["compare"] == "truthy"


def test_humaneval_sample_references_solved(pool):
    need(HUMANEVAL)
    by = {p.id: p for p in import_humaneval(HUMANEVAL)}
    ids = [f"humaneval/{i}" for i in range(0, 164, 9)] + [f"humaneval/{i}" for i in (2, 32, 38, 52, 151, 163)]
    assert_healthy([by[i] for i in ids], pool)


# ---------------------------------------------------------------- EvalPlus

def _subset(src: Path, dst: Path, task_ids: set[str]) -> Path:
    with gzip.open(src, "rt", encoding="utf-8") as f, gzip.open(dst, "wt", encoding="utf-8") as g:
        for line in f:
            if json.loads(line)["task_id"] in task_ids:
                g.write(line)
    return dst


def test_evalplus_subset_import_and_check(pool, tmp_path):
    need(EVALPLUS)
    mb = _subset(EVALPLUS / "MbppPlus.jsonl.gz", tmp_path / "MbppPlus.jsonl.gz",
                 {"Mbpp/2", "Mbpp/88", "Mbpp/124", "Mbpp/737", "Mbpp/793", "Mbpp/3"})
    _subset(EVALPLUS / "HumanEvalPlus.jsonl.gz", tmp_path / "HumanEvalPlus.jsonl.gz",
                 {"HumanEval/0", "HumanEval/32", "HumanEval/53"})
    report: dict = {}
    probs = import_problems("evalplus", tmp_path, pool=pool, max_plus=6, report=report)
    by = {p.id: p for p in probs}
    assert sorted(by) == sorted(["humanevalplus/0", "humanevalplus/32", "humanevalplus/53", "mbppplus/2",
                                 "mbppplus/3", "mbppplus/88", "mbppplus/124", "mbppplus/737", "mbppplus/793"])
    for p in probs:
        well_formed(p)
        assert p.suite == "evalplus" and all(isinstance(t, CallCase) for t in p.tests)
        assert p.meta["plus_inputs"] <= 6 and report[p.id]["kept"] == p.n_tests
    assert by["mbppplus/793"].n_tests == 3 and by["mbppplus/793"].meta["plus_inputs"] == 0  # plus_input is {}
    assert by["mbppplus/2"].meta["compare"] == "set" and by["mbppplus/2"].tests[0].args == ((3, 4, 5, 6), (5, 7, 4, 10))
    # Counter results cross the pipe as plain dicts (problems.values), so 88 needs no wrapper any more
    assert by["mbppplus/737"].meta["compare"] == "not_none" and by["mbppplus/88"].meta.get("compare") is None
    assert isinstance(by["mbppplus/124"].tests[0].args[1], complex)
    assert by["humanevalplus/32"].meta["compare"] == "poly_root" and by["humanevalplus/32"].float_tol == 1e-4
    assert by["humanevalplus/0"].meta["base_inputs"] == 7
    assert_healthy(probs, pool)
    assert [p.id for p in import_evalplus(mb, pool=pool, max_plus=0)][0].startswith("mbppplus/")
    with pytest.raises(ProblemError, match="OriginFmt"):
        import_evalplus(EVALPLUS / "MbppPlus-OriginFmt.jsonl.gz", pool=pool)


# ---------------------------------------------------------------- APPS

def test_apps_structure_and_hand_solutions(pool):
    need(APPS)
    probs = import_apps(APPS)
    assert len(probs) == 128 and len({p.id for p in probs}) == 128
    stdio = [p for p in probs if isinstance(p.tests[0], StdioCase)]
    calls = [p for p in probs if isinstance(p.tests[0], CallCase)]
    assert len(stdio) + len(calls) == 128 and len(stdio) >= 45 and len(calls) >= 75
    for p in probs:
        well_formed(p)
        assert p.suite == "apps" and p.time_limit == 20.0 and p.reference_code is None
        assert all(type(t) is type(p.tests[0]) for t in p.tests)
    by = {p.id: p for p in probs}
    lucky = by["apps/3569"]
    assert lucky.tests[0].args == ("123321",) and "is_lucky('123321') == True" in lucky.description
    sols = {
        "apps/4465": "def super_size(n):\n    return int(''.join(sorted(str(n), reverse=True)))\n",
        "apps/3569": ("def is_lucky(ticket):\n    if len(ticket) != 6 or not ticket.isdigit():\n        return False\n"
                      "    d = [int(c) for c in ticket]\n    return sum(d[:3]) == sum(d[3:])\n"),
        "apps/1607": ("s = input().strip()\nn = 0\nfor i in range(len(s)):\n    for j in range(i + 1, len(s)):\n"
                      "        for k in range(j + 1, len(s)):\n"
                      "            n += s[i] + s[j] + s[k] == 'QAQ'\nprint(n)\n"),
    }
    items = [(by[k], code) for k, code in sols.items()] + [(by[k], by[k].seed_code) for k in sols]
    evs = pool.evaluate_many(items)
    assert [e.solved for e in evs] == [True] * len(sols) + [False] * len(sols), [e.artifacts for e in evs]


# ---------------------------------------------------------------- malformed input

def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


MBPP_ROW = {"task_id": 1, "text": "Add.", "code": "def add(a, b):\n    return a + b",
            "test_list": ["assert add(1, 2) == 3"], "test_setup_code": "", "challenge_test_list": []}
HE_ROW = {"task_id": "HumanEval/0", "prompt": "def inc(x):\n    \"\"\"x + 1\"\"\"\n",
          "canonical_solution": "    return x + 1\n",
          "test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"}


@pytest.mark.parametrize("source,row,bad,field_", [
    ("mbpp", MBPP_ROW, {"test_list": "assert add(1, 2) == 3"}, "test_list"),
    ("mbpp", MBPP_ROW, {"task_id": None}, "task_id"),
    ("mbpp", MBPP_ROW, {"code": "def add(a, b) return"}, "code"),
    ("humaneval", HE_ROW, {"test": "assert True"}, "check"),
    ("humaneval", HE_ROW, {"entry_point": "nope"}, "nope"),
    ("humaneval", HE_ROW, {"task_id": 7}, "task_id"),
    ("apps", {"id": 5, "description": "d", "starter_code": "", "test_list": [{"input": "1\n", "output": ["1\n"]}]},
     {"id": 6, "test_list": [{"input": "1\n"}]}, "test_list"),
])
def test_malformed_rows_name_file_and_line(tmp_path, source, row, bad, field_):
    f = _write(tmp_path / "data.jsonl", [json.dumps(row), json.dumps({**row, **bad})])
    if source == "mbpp":
        assert len(import_problems(source, _write(tmp_path / "ok.jsonl", [json.dumps(row)]))) == 1
    with pytest.raises(ProblemError) as ei:
        import_problems(source, f)
    msg = str(ei.value)
    assert "\n" not in msg and str(f) in msg and "line 2" in msg and field_ in msg, msg


@pytest.mark.parametrize("source", ["mbpp", "humaneval", "apps", "evalplus"])
def test_broken_json_line(tmp_path, source, pool):
    f = _write(tmp_path / "data.jsonl", ['{"task_id": 1}', '{"task_id": 2, "text": "x"'])
    with pytest.raises(ProblemError) as ei:
        import_problems(source, f, **({"pool": pool} if source == "evalplus" else {}))
    msg = str(ei.value)
    assert "\n" not in msg and str(f) in msg and ("line 1" in msg or "line 2" in msg), msg


def test_other_malformed_inputs(tmp_path, pool):
    with pytest.raises(ProblemError, match="JSON array"):
        import_mbpp(_write(tmp_path / "sanitized-mbpp.json", ['{"a": 1}']))
    with pytest.raises(ProblemError, match="x.json: line 2: invalid JSON"):
        import_mbpp(_write(tmp_path / "x.json", ["[", "{]"]))
    row = {"id": 5, "description": "d", "starter_code": "", "test_list": [{"input": "1\n", "output": ["1\n"]}]}
    f = _write(tmp_path / "apps.jsonl", [json.dumps(row), json.dumps(row), json.dumps({**row, "description": "e"})])
    with pytest.raises(ProblemError, match="line 3.*different content"):
        import_apps(f)
    assert len(import_apps(_write(tmp_path / "apps2.jsonl", [json.dumps(row)] * 3))) == 1
    ep = {"task_id": "Mbpp/1", "prompt": "", "entry_point": "f", "canonical_solution": "def f(x):\n    return x\n",
          "base_input": [1, 2], "plus_input": [], "atol": 0}
    with pytest.raises(ProblemError, match=r"line 1 \(Mbpp/1\).*base_input"):
        import_evalplus(_write(tmp_path / "ep.jsonl", [json.dumps(ep)]), pool=pool)
    with pytest.raises(ProblemError, match="not a gzip|cannot read"):
        import_humaneval(_write(tmp_path / "HumanEval.jsonl.gz", ["not gzip"]))
    with pytest.raises(ProblemError, match="no such file"):
        import_problems("mbpp", tmp_path / "missing.jsonl")
    with pytest.raises(ProblemError, match="unknown source 'nope'"):
        import_problems("nope", tmp_path)
    with pytest.raises(ProblemError, match="no OpenEvolve folders"):
        import_problems("openevolve", tmp_path)
    assert list(IMPORTERS) == ["mbpp", "humaneval", "evalplus", "apps", "openevolve"]


def test_synthetic_rows_other_paths(tmp_path, pool):
    """HumanEval check() that cannot be split (nested def) is one case; APPS rows in APPS's own format
    (input_output JSON, solutions) for both call-based and stdin problems."""
    he = {**HE_ROW, "test": "def check(candidate):\n    def twice(x):\n        return candidate(candidate(x))\n"
                            "    assert twice(1) == 3\n    assert candidate(5) == 6\n"}
    (p,) = import_humaneval(_write(tmp_path / "he.jsonl", [json.dumps(he)]))
    assert [t.code for t in p.tests] == ["check(inc)"] and "def check(candidate)" in p.setup_code
    rows = [
        {"problem_id": 9, "question": "Add two numbers.", "starter_code": "def add(a, b):\n",
         "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [[3], [7]]}),
         "solutions": json.dumps(["def add(a, b):\n    return a + b\n"])},
        {"problem_id": 10, "question": "Print the sum.", "starter_code": "",
         "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}),
         "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"])},
    ]
    add, total = import_apps(_write(tmp_path / "apps.jsonl", [json.dumps(r) for r in rows]))
    assert add.id == "apps/9" and [t.args for t in add.tests] == [(1, 2), (3, 4)] and add.tests[1].expected == 7
    assert isinstance(total.tests[0], StdioCase) and total.tests[1].stdout == "10\n"
    assert_healthy([p, add, total], pool)


def test_evalplus_drops_raising_inputs_and_skips_broken_references(tmp_path, pool):
    good = {"task_id": "Mbpp/1", "prompt": '"""Double it."""', "entry_point": "f", "atol": 0,
            "canonical_solution": "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return x * 2\n",
            "base_input": [[1], [-1]], "plus_input": [[2], [3], [-5]]}
    broken = {**good, "task_id": "Mbpp/5", "canonical_solution": "def f(x):\n    raise ValueError(x)\n"}
    report: dict = {}
    probs = import_evalplus(_write(tmp_path / "MbppPlus.jsonl", [json.dumps(good), json.dumps(broken)]),
                            pool=pool, report=report)
    assert [p.id for p in probs] == ["mbppplus/1"] and "skipped" in report["mbppplus/5"]
    (p,) = probs
    assert [(t.args, t.expected) for t in p.tests] == [((1,), 2), ((2,), 4), ((3,), 6)]
    assert report["mbppplus/1"]["dropped"] == {"error": 2} and p.meta["dropped_inputs"] == 2
    assert p.meta["base_inputs"] == 1 and p.meta["plus_inputs"] == 2 and p.description == "Double it."
    assert_healthy(probs, pool)
    with pytest.raises(ProblemError, match="needs a sandbox"):  # problems/ cannot build one: the caller gives it
        import_problems("evalplus", tmp_path / "MbppPlus.jsonl")
    shape = {**good, "task_id": "Mbpp/2"}  # EvalPlus turns Mbpp/2's arguments into tuples: ints do not fit
    with pytest.raises(ProblemError, match=r"line 1 \(Mbpp/2\).*argument shapes"):
        import_evalplus(_write(tmp_path / "shape.jsonl", [json.dumps(shape)]), pool=pool)
