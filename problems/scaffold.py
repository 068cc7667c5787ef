"""`vevo problems new`: a problem folder that passes `vevo problems check` at once, to edit from there."""
from __future__ import annotations

import re
from pathlib import Path

from .model import ProblemError

KINDS = ("io", "asserts", "stdio", "openevolve")

_SEED_FN = '''"""Seed program: evolution edits the region between the markers."""
# EVOLVE-BLOCK-START
def solve(xs):
    return 0
# EVOLVE-BLOCK-END
'''
_REF_FN = "def solve(xs):\n    return sum(x * x for x in xs)\n"

_TOML_IO = '''id = "{id}"
title = "{name}"
# worded as the bundled tiny proposer's training tasks are, so `--proposer tiny` can solve it (README)
description = "Write solve(xs) for a list of integers xs: square each element, then take the sum of the elements. Return that number."
entry_point = "solve"
seed = "seed.py"
reference = "reference.py"
solved = "all"          # or "scalar >= 0.9"
time_limit = 5.0        # seconds for the whole test set
memory_limit_mb = 512

[[tests]]
args = [[1, 2, 3]]
expected = 14

[[tests]]
args = [[]]
expected = 0

[[tests]]
args_py = "([-2, 5],)"   # Python literals for tuples / None
expected_py = "29"
'''
_TOML_ASSERTS = '''id = "{id}"
title = "{name}"
description = "Return the sum of squares of the integers in xs."
entry_point = "solve"
seed = "seed.py"
reference = "reference.py"
setup = "import math"

[[tests]]
assert = "assert solve([1, 2, 3]) == 14"

[[tests]]
assert = "assert math.isclose(solve([0.5]), 0.25)"
'''
_SEED_STDIO = '''"""Read two integers from stdin, print their sum."""
# EVOLVE-BLOCK-START
a, b = map(int, input().split())
print(a)
# EVOLVE-BLOCK-END
'''
_REF_STDIO = "a, b = map(int, input().split())\nprint(a + b)\n"
_TOML_STDIO = '''id = "{id}"
title = "{name}"
description = "Read two integers a and b from one line of stdin and print a + b."
seed = "seed.py"
reference = "reference.py"
time_limit = 5.0

[[tests]]
stdin = "1 2\\n"
stdout = "3\\n"

[[tests]]
stdin = "-5 5\\n"
stdout = "0\\n"
'''
_OE_INITIAL = '''"""Maximise the sum of squares of a list of 5 numbers in [0, 1]."""
# EVOLVE-BLOCK-START
def make_list():
    return [0.5] * 5
# EVOLVE-BLOCK-END


def run():
    return make_list()
'''
_OE_EVALUATOR = '''"""OpenEvolve evaluator contract: evaluate(program_path) -> dict or EvaluationResult."""
import importlib.util

from openevolve.evaluation_result import EvaluationResult


def _load(path):
    spec = importlib.util.spec_from_file_location("program", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def evaluate_stage1(program_path):
    xs = _load(program_path).run()
    valid = float(len(xs) == 5 and all(0 <= x <= 1 for x in xs))
    return EvaluationResult(metrics={"valid": valid, "combined_score": valid * 0.5},
                            artifacts={"stage": "1", "n": str(len(xs))})


def evaluate_stage2(program_path):
    xs = _load(program_path).run()
    score = sum(x * x for x in xs) / 5 if all(0 <= x <= 1 for x in xs) else 0.0
    return {"sum_squares": score, "combined_score": score}


def evaluate(program_path):
    m = evaluate_stage1(program_path).metrics
    return {**m, **evaluate_stage2(program_path)} if m["valid"] else m
'''
_OE_CONFIG = '''prompt:
  system_message: "Improve make_list() so the sum of squares of its 5 numbers in [0, 1] is as large as possible."
evaluator:
  cascade_evaluation: true
  cascade_thresholds: [0.5]
  timeout: 30
'''


def new_problem(name: str, kind: str, parent: str | Path = ".") -> Path:
    if kind not in KINDS:
        raise ProblemError("problems new", "--kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise ProblemError("problems new", "NAME", f"{name!r}: use letters, digits, '_', '-', '.'")
    folder = Path(parent) / name
    if folder.exists():
        raise ProblemError(folder, "", "already exists (choose another name or --dir)")
    folder.mkdir(parents=True)
    files: dict[str, str]
    if kind == "openevolve":
        files = {"initial_program.py": _OE_INITIAL, "evaluator.py": _OE_EVALUATOR, "config.yaml": _OE_CONFIG}
    elif kind == "stdio":
        files = {"problem.toml": _TOML_STDIO, "seed.py": _SEED_STDIO, "reference.py": _REF_STDIO}
    else:
        files = {"problem.toml": (_TOML_IO if kind == "io" else _TOML_ASSERTS), "seed.py": _SEED_FN,
                 "reference.py": _REF_FN}
    for fname, text in files.items():
        (folder / fname).write_text(text.format(id=name, name=name) if fname.endswith(".toml") else text,
                                    encoding="utf-8")
    return folder
