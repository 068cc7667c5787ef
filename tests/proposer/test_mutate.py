"""Applying answers to parents (full rewrites and SEARCH/REPLACE diffs, markers enforced) and AST dedupe."""
from __future__ import annotations

import pytest

from problems.evolve_block import evolve_block
from proposer.answers.mutate import MutationError, apply_answer, normalized_hash
from proposer.answers.parsing import Answer, format_diff, parse_answers

PARENT = """import math

# EVOLVE-BLOCK-START
def f(x):
    return x


def g(y):
    return y
# EVOLVE-BLOCK-END

if __name__ == "__main__":
    print(f(2))
"""

PLAIN = "def f(x):\n    return x\n"


def code(body: str) -> Answer:
    return Answer(1, "code", body)


def diff(*blocks: tuple[str, str]) -> Answer:
    return Answer(1, "diff", format_diff(list(blocks)), tuple(blocks))


def outside(child: str) -> tuple[str, str]:
    head, rest = child.split("# EVOLVE-BLOCK-START\n")
    return head, rest.split("# EVOLVE-BLOCK-END\n")[1]


def test_evolve_block_region_and_absence():
    assert evolve_block(PARENT) == "def f(x):\n    return x\n\n\ndef g(y):\n    return y\n"
    assert evolve_block(PLAIN) is None
    assert evolve_block("# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n") == ""
    assert evolve_block("# EVOLVE-BLOCK-START\nx = 1\n") is None  # lone marker is not a region
    assert evolve_block("# EVOLVE-BLOCK-END\nx\n# EVOLVE-BLOCK-START\n") is None


def test_code_replaces_block_and_keeps_outside():
    child = apply_answer(PARENT, code("def f(x):\n    return x + 1"))
    assert evolve_block(child) == "def f(x):\n    return x + 1\n"
    assert outside(child) == outside(PARENT)
    assert "# EVOLVE-BLOCK-START" in child and "# EVOLVE-BLOCK-END" in child


def test_code_with_markers_uses_only_inside():
    answer = code("import os\n# EVOLVE-BLOCK-START\ndef f(x):\n    return 7\n# EVOLVE-BLOCK-END\nprint('junk')")
    child = apply_answer(PARENT, answer)
    assert evolve_block(child) == "def f(x):\n    return 7\n"
    assert "import os" not in child and "junk" not in child
    assert outside(child) == outside(PARENT)


def test_code_with_lone_marker_is_an_error():
    with pytest.raises(MutationError, match="answer has malformed"):
        apply_answer(PARENT, code("# EVOLVE-BLOCK-START\ndef f(x):\n    return 7"))


def test_code_without_parent_markers_replaces_file():
    assert apply_answer(PLAIN, code("def f(x):\n    return 3")) == "def f(x):\n    return 3\n"


def test_code_is_indented_to_an_indented_block():
    parent = "class A:\n    # EVOLVE-BLOCK-START\n    def f(self):\n        return 1\n    # EVOLVE-BLOCK-END\n"
    child = apply_answer(parent, code("def f(self):\n    return 2"))
    assert child == "class A:\n    # EVOLVE-BLOCK-START\n    def f(self):\n        return 2\n    # EVOLVE-BLOCK-END\n"


def test_diff_exact_match_applies_in_order():
    answer = diff(("def f(x):\n    return x", "def f(x):\n    return x * 2"),
                  ("    return x * 2", "    return x * 3"),   # sees the result of the first block
                  ("def g(y):\n    return y", ""))          # empty REPLACE deletes
    child = apply_answer(PARENT, answer)
    assert "return x * 3" in child and "def g" not in child
    assert outside(child) == outside(PARENT)
    compile(child, "child", "exec")


def test_diff_whitespace_tolerant_match_reindents():
    # model dropped the indentation, added trailing spaces and blank lines around SEARCH
    answer = diff(("\nreturn y  \n", "if y:\n    return -y\nreturn y"))
    child = apply_answer(PARENT, answer)
    assert "def g(y):\n    if y:\n        return -y\n    return y\n" in child
    compile(child, "child", "exec")


def test_diff_tolerant_dedent_when_model_over_indents():
    answer = diff(("        return x", "        return x - 1"))
    child = apply_answer(PARENT, answer)
    assert "def f(x):\n    return x - 1\n" in child


def test_diff_first_occurrence_inside_block_wins():
    parent = "x = 1\n# EVOLVE-BLOCK-START\nx = 1\nx = 1\n# EVOLVE-BLOCK-END\nx = 1\n"
    child = apply_answer(parent, diff(("x = 1", "x = 2")))
    assert child == "x = 1\n# EVOLVE-BLOCK-START\nx = 2\nx = 1\n# EVOLVE-BLOCK-END\nx = 1\n"


def test_diff_outside_block_is_rejected():
    with pytest.raises(MutationError, match="outside the EVOLVE-BLOCK"):
        apply_answer(PARENT, diff(("import math", "import numpy")))


def test_diff_removing_markers_is_rejected():
    removes_start = diff(("# EVOLVE-BLOCK-START\ndef f(x):", "def f(x):"))
    removes_end = diff(("    return y\n# EVOLVE-BLOCK-END", "    return y"))
    for answer in (removes_start, removes_end):
        with pytest.raises(MutationError, match="EVOLVE-BLOCK"):
            apply_answer(PARENT, answer)


def test_diff_duplicating_markers_is_rejected():
    with pytest.raises(MutationError, match="markers"):
        apply_answer(PARENT, diff(("def g(y):", "# EVOLVE-BLOCK-END\ndef g(y):")))


def test_diff_may_anchor_on_a_kept_marker():
    answer = diff(("# EVOLVE-BLOCK-START\ndef f(x):", "# EVOLVE-BLOCK-START\nimport cmath\ndef f(x):"),
                  ("    return y\n# EVOLVE-BLOCK-END", "    return -y\n# EVOLVE-BLOCK-END"))
    child = apply_answer(PARENT, answer)
    assert evolve_block(child).startswith("import cmath\ndef f(x):")
    assert evolve_block(child).endswith("    return -y\n")
    assert outside(child) == outside(PARENT)


def test_diff_without_parent_markers_edits_anywhere():
    child = apply_answer(PLAIN, diff(("def f(x):", "def f(x, y=1):")))
    assert child == "def f(x, y=1):\n    return x\n"


@pytest.mark.parametrize("blocks, msg", [
    ((("def h(z):", "def h(w):"),), "not found"),
    ((("", "x = 1"),), "empty"),
    ((("\n  \n", "x = 1"),), "empty"),
])
def test_diff_failures(blocks, msg):
    with pytest.raises(MutationError, match=msg) as info:
        apply_answer(PARENT, diff(*blocks))
    assert "\n" not in str(info.value)


def test_failed_later_block_fails_whole_answer():
    with pytest.raises(MutationError, match="block 2"):
        apply_answer(PARENT, diff(("def f(x):", "def f(x, k=0):"), ("nope", "x")))


@pytest.mark.parametrize("answer", [Answer(1, "empty", ""), Answer(2, "invalid", "zz", error="bad\nthing"),
                                    Answer(1, "code", "  \n"), Answer(1, "diff", "", ())])
def test_unusable_answers(answer):
    with pytest.raises(MutationError) as info:
        apply_answer(PARENT, answer)
    assert "\n" not in str(info.value)


def test_malformed_parent_markers():
    parent = "# EVOLVE-BLOCK-START\nx = 1\n"
    with pytest.raises(MutationError, match="parent has malformed"):
        apply_answer(parent, code("x = 2"))
    with pytest.raises(MutationError, match="parent"):
        apply_answer(parent + "# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n", code("x = 2"))


def test_end_to_end_from_completion_text():
    completion = ("\n```python\ndef f(x):\n    return abs(x)\n```\n</answer_1>\n<answer_2>\n"
                  + format_diff([("    return y", "    return 2 * y")]) + "\n</answer_2>\n<answer_3>\n```python\ndef")
    a1, a2, a3 = parse_answers(completion, 3)
    with pytest.raises(MutationError, match="invalid"):
        apply_answer(PARENT, a3)
    assert a1.kind == "code" and a2.kind == "diff"
    assert "abs(x)" in apply_answer(PARENT, a1)
    assert "2 * y" in apply_answer(PARENT, a2)


def test_normalized_hash_ignores_format_comments_docstrings():
    a = "def f(x):\n    '''Doc.'''\n    return x+1  # add\n"
    b = "# header\n\ndef f( x ):\n    return (x + 1)\n"
    c = 'def f(x):\n    """Other doc."""\n    return x + 1\n'
    assert normalized_hash(a) == normalized_hash(b) == normalized_hash(c)
    assert normalized_hash(PARENT) == normalized_hash(PARENT.replace("# EVOLVE-BLOCK-START\n", ""))


def test_normalized_hash_sees_real_changes():
    base = "def f(x):\n    return x + 1\n"
    for other in ("def f(x):\n    return x + 2\n", "def f(y):\n    return y + 1\n",
                  "def f(x):\n    return x + 1.0\n", "def f(x):\n    return 1 + x\n",
                  "def f(x):\n    s = 'doc'\n    return x + 1\n"):
        assert normalized_hash(other) != normalized_hash(base)


def test_normalized_hash_agrees_with_ast_dump():
    """The fast serialisation separates exactly the programs ast.dump separates."""
    import ast
    import itertools

    from problems.suites import SUITES

    progs = [p.reference_code or p.seed_code for p in SUITES["pbe"]()][:60]
    progs += ["x = True", "x = 1", "x = 1.0", "x = -0.0", "x = 0.0", "x = 'a)'", "x = ('a', ')')", "x = []",
              "x = [[]]", "x = [[], []]", "x = [[[]]]", "def f():\n    return\n", "def f():\n    return None\n",
              "x = b'\\x00'", "x = '\\x00'", "f(a, *b)", "f(a, b)", "f(*a, b)", "x = ...", "x = 'Ellipsis'",
              "x = u'a'", "x = 'a'", "a.b = 1", "a = b = 1", "a, b = 1", "lambda: (yield)"]
    dumps = [ast.dump(ast.parse(p)) for p in progs]
    hashes = [normalized_hash(p) for p in progs]
    for i, j in itertools.combinations(range(len(progs)), 2):
        assert (dumps[i] == dumps[j]) == (hashes[i] == hashes[j]), (progs[i], progs[j])


def test_normalized_hash_docstring_only_body_equals_pass():
    assert normalized_hash("def f():\n    'doc'\n") == normalized_hash("def f():\n    pass\n")


def test_normalized_hash_unparseable_falls_back_to_text():
    a = "def f(:\n    return 1\n"
    assert normalized_hash(a) == normalized_hash("def  f(:\n\n\treturn   1")
    assert normalized_hash(a) != normalized_hash("def f(:\n    return 2\n")
    assert normalized_hash("x = 1\x00") != normalized_hash("x = 1")  # NUL bytes: fallback, no crash
    assert len(normalized_hash("")) == 64
