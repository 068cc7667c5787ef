"""The multi-answer format: tags, fences, diffs, and everything a model gets wrong."""
from __future__ import annotations

import random
import time

import pytest

from proposer.answers.parsing import Answer, fence_code, format_answers, format_diff, parse_answers

CODE_A = "def f(x):\n    return x + 1"
CODE_B = "def f(x):\n    return x - 1"
DIFF = "<<<<<<< SEARCH\n    return x\n=======\n    return x * 2\n>>>>>>> REPLACE"


def kinds(answers: list[Answer]) -> list[str]:
    return [a.kind for a in answers]


def test_tagged_code_answers_in_order():
    text = format_answers([CODE_A, CODE_B])
    got = parse_answers(text, 2)
    assert [a.index for a in got] == [1, 2]
    assert kinds(got) == ["code", "code"]
    assert [a.body for a in got] == [CODE_A, CODE_B]


def test_missing_answers_are_empty_and_extra_ignored():
    text = format_answers([CODE_A, CODE_B, "x = 3"])
    got = parse_answers(text, 5)
    assert kinds(got) == ["code", "code", "code", "empty", "empty"]
    assert got[4] == Answer(5, "empty", "")
    got2 = parse_answers(text, 2)
    assert len(got2) == 2 and got2[1].body == CODE_B


def test_index_out_of_range_and_zero_m():
    text = "<answer_7>\n```python\nx = 1\n```\n</answer_7>\n<answer_0>\n```\ny = 1\n```\n</answer_0>"
    assert kinds(parse_answers(text, 3)) == ["empty"] * 3
    assert parse_answers(text, 0) == []


def test_duplicate_index_first_wins():
    text = ("<answer_1>\n```python\nfirst = 1\n```\n</answer_1>\n"
            "<answer_1>\n```python\nsecond = 2\n```\n</answer_1>")
    got = parse_answers(text, 2)
    assert got[0].body == "first = 1"
    assert got[1].kind == "empty"


def test_out_of_order_tags_land_at_their_index():
    text = "<answer_2>\n```\nb = 2\n```\n</answer_2>\n<answer_1>\n```\na = 1\n```\n</answer_1>"
    got = parse_answers(text, 2)
    assert [a.body for a in got] == ["a = 1", "b = 2"]


def test_completion_continuing_the_prompt_tag():
    """The prompt ends with <answer_1>, so the completion starts inside answer 1."""
    text = "\n```python\na = 1\n```\n</answer_1>\n<answer_2>\n```python\nb = 2\n```\n</answer_2>"
    got = parse_answers(text, 2)
    assert [a.body for a in got] == ["a = 1", "b = 2"]


def test_truncated_last_answer_with_closed_fence_is_accepted():
    text = "<answer_1>\n```python\na = 1\n```\n</answer_1>\n<answer_2>\n```python\nb = 2\n```\nand some ta"
    got = parse_answers(text, 2)
    assert kinds(got) == ["code", "code"]
    assert got[1].body == "b = 2"


def test_truncated_last_answer_with_open_fence_is_invalid():
    text = "<answer_1>\n```python\na = 1\n```\n</answer_1>\n<answer_2>\n```python\ndef f(x):\n    retu"
    got = parse_answers(text, 3)
    assert kinds(got) == ["code", "invalid", "empty"]
    assert "truncated" in got[1].error


def test_truncated_raw_answer_is_invalid_but_closed_raw_code_accepted():
    truncated = "<answer_1>\ndef f(x):\n    return x"
    assert parse_answers(truncated, 1)[0].kind == "invalid"
    closed = "<answer_1>\n    def f(x):\n        return x\n</answer_1>"
    got = parse_answers(closed, 1)[0]
    assert got.kind == "code" and got.body == "def f(x):\n    return x"


@pytest.mark.parametrize("prose", ["Sorry, I cannot do that.", "hello", "improve_it", "42"])
def test_prose_or_bare_expression_is_invalid(prose):
    got = parse_answers(f"<answer_1>\n{prose}\n</answer_1>", 1)[0]
    assert got.kind == "invalid" and got.error


def test_unclosed_answer_followed_by_next_tag_is_complete():
    text = "<answer_1>\n```python\na = 1\n```\n<answer_2>\n```python\nb = 2\n```\n</answer_2>"
    got = parse_answers(text, 2)
    assert [a.body for a in got] == ["a = 1", "b = 2"]


def test_missing_closing_fence_inside_closed_answer():
    got = parse_answers("<answer_1>\n```python\na = 1\n</answer_1>", 1)[0]
    assert got.kind == "code" and got.body == "a = 1"


def test_first_fence_wins_and_prose_around_is_ignored():
    text = "<answer_1>\nHere you go:\n```python\na = 1\n```\nAlso:\n```\nprint(a)\n```\n</answer_1>"
    assert parse_answers(text, 1)[0].body == "a = 1"


def test_fence_and_tags_on_same_lines():
    got = parse_answers("<answer_1>```python\na = 1\n```</answer_1>", 1)[0]
    assert got.kind == "code" and got.body == "a = 1"


def test_blank_fence_is_empty():
    assert parse_answers("<answer_1>\n```python\n\n   \n```\n</answer_1>", 1)[0].kind == "empty"
    assert parse_answers("<answer_1>\n  \n</answer_1>", 1)[0].kind == "empty"


def test_diff_answer_blocks():
    body = DIFF + "\n" + "<<<<<<< SEARCH\ndef f(x):\n=======\ndef f(x, y=0):\n>>>>>>> REPLACE"
    got = parse_answers(f"<answer_1>\n{body}\n</answer_1>", 1)[0]
    assert got.kind == "diff"
    assert got.blocks == (("    return x", "    return x * 2"), ("def f(x):", "def f(x, y=0):"))
    assert got.body == body


def test_fenced_diff_is_a_diff_and_empty_replace_allowed():
    text = "<answer_1>\n```\n<<<<<<< SEARCH\nx = 1\ny = 2\n=======\n>>>>>>> REPLACE\n```\n</answer_1>"
    got = parse_answers(text, 1)[0]
    assert got.kind == "diff" and got.blocks == (("x = 1\ny = 2", ""),)


@pytest.mark.parametrize("body", [
    "<<<<<<< SEARCH\nx = 1\n>>>>>>> REPLACE",                          # no divider
    "<<<<<<< SEARCH\nx = 1\n=======\nx = 2",                             # no REPLACE (truncated)
    "=======\nx = 2\n>>>>>>> REPLACE",                                   # no SEARCH
    "<<<<<<< SEARCH\na\n=======\nb\n=======\nc\n>>>>>>> REPLACE",        # two dividers
    "<<<<<<< SEARCH\na\n<<<<<<< SEARCH\nb\n=======\nc\n>>>>>>> REPLACE",  # nested
])
def test_broken_diff_is_invalid_with_error(body):
    got = parse_answers(f"<answer_1>\n{body}\n</answer_1>", 1)[0]
    assert got.kind == "invalid"
    assert "diff" in got.error and "\n" not in got.error


def test_truncated_diff_with_complete_blocks_is_accepted():
    got = parse_answers("<answer_1>\n" + DIFF + "\nexplana", 1)[0]
    assert got.kind == "diff" and len(got.blocks) == 1


def test_untagged_dash_separated_code_blocks():
    text = "```python\na = 1\n```\n---\n```python\nb = 2\n```\n---\n```\nc = 3\n```"
    got = parse_answers(text, 4)
    assert [a.body for a in got] == ["a = 1", "b = 2", "c = 3", ""]
    assert kinds(got) == ["code", "code", "code", "empty"]


def test_untagged_dashes_inside_fence_do_not_split_and_prose_is_skipped():
    text = "Here are two:\n```python\ns = '''\n---\n'''\n```\n---\nNote: second is faster\n```\nb = 2\n```"
    got = parse_answers(text, 3)
    assert got[0].body == "s = '''\n---\n'''"
    assert got[1].body == "b = 2"
    assert got[2].kind == "empty"


def test_untagged_truncated_fence_is_invalid():
    got = parse_answers("```python\na = 1\n```\n---\n```python\ndef g(", 2)
    assert kinds(got) == ["code", "invalid"]


def test_untagged_diff_segments():
    text = DIFF + "\n---\n" + DIFF.replace("x * 2", "x * 3")
    got = parse_answers(text, 2)
    assert kinds(got) == ["diff", "diff"]
    assert got[1].blocks[0][1] == "    return x * 3"


def test_no_tags_no_fences_means_nothing():
    assert kinds(parse_answers("x = 1\nprint(x)\n", 2)) == ["empty", "empty"]


def test_crlf_is_normalised():
    text = format_answers([CODE_A]).replace("\n", "\r\n")
    assert parse_answers(text, 1)[0].body == CODE_A


@pytest.mark.parametrize("bodies", [
    [CODE_A, CODE_B, "import math\nprint(math.pi)"],
    ["  x = 1", "s = '''\n```\n'''", "def g():\n\n    return 2"],
    [""],
])
def test_format_parse_round_trip_code(bodies):
    got = parse_answers(format_answers(bodies), len(bodies))
    for body, ans in zip(bodies, got):
        assert ans.body == body
        assert ans.kind == ("code" if body.strip() else "empty")


def test_format_parse_round_trip_diff():
    bodies = [DIFF, format_diff([("a = 1", "a = 2"), ("b", "")])]
    got = parse_answers(format_answers(bodies, kind="diff"), 2)
    assert kinds(got) == ["diff", "diff"]
    assert [a.body for a in got] == bodies
    assert got[1].blocks == (("a = 1", "a = 2"), ("b", ""))


def test_format_rejects_bodies_that_cannot_round_trip():
    with pytest.raises(ValueError):
        format_answers(["x = '</answer_1>'"])
    with pytest.raises(ValueError):
        format_answers([DIFF], kind="code")
    with pytest.raises(ValueError):
        format_answers(["x"], kind="patch")  # type: ignore[arg-type]


def test_fence_code_outlasts_inner_fences():
    fenced = fence_code("a\n````\nb")
    assert fenced.startswith("`````python\n") and fenced.endswith("\n`````")


@pytest.mark.parametrize("text", [
    "", "<answer_", "<answer_1>", "</answer_1>", "<answer_99999999999>", "```", "<<<<<<< SEARCH",
    "<answer_1>\x00\ud800</answer_1>", "<answer_1>\n" + "(" * 5000 + "\n</answer_1>",
    "<answer_1>\n" + "if x:\n " * 3000 + "\n</answer_1>",
])
def test_never_raises_on_odd_input(text):
    got = parse_answers(text, 3)
    assert len(got) == 3 and all(isinstance(a, Answer) for a in got)


def test_never_raises_on_non_str():
    assert kinds(parse_answers(None, 2)) == ["empty", "empty"]  # type: ignore[arg-type]


def test_random_fuzz_never_raises():
    rng = random.Random(0)
    atoms = ["<answer_1>", "</answer_1>", "<answer_2>", "</answer_3>", "```", "```python", "\n", "---",
             "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "x = 1", "def f(", "    ", "'''"]
    for _ in range(300):
        text = "".join(rng.choice(atoms) + rng.choice(["", "\n"]) for _ in range(rng.randrange(40)))
        got = parse_answers(text, 3)
        assert [a.index for a in got] == [1, 2, 3]


@pytest.mark.parametrize("make", [
    lambda rng: "".join(rng.choice("<>/_answer1234567890`=\n -SEARCHREPLACE") for _ in range(1_000_000)),
    lambda rng: "<answer_1>" * 100_000,
    lambda rng: "</answer_2>" * 90_000,
    lambda rng: "<answer_1>\n" + "```\n" * 250_000,
    lambda rng: "<<<<<<< SEARCH\n=======\n" * 50_000,
    lambda rng: "<answer_" + "9" * 1_000_000,
    lambda rng: "a" * 1_000_000,
])
def test_huge_input_is_fast(make):
    text = make(random.Random(1))
    t0 = time.perf_counter()
    got = parse_answers(text, 8)
    assert time.perf_counter() - t0 < 2.0
    assert len(got) == 8


def test_huge_valid_completion_still_parses():
    big = "\n".join(f"v{i} = {i}" for i in range(60_000))  # ~700 kB program
    got = parse_answers(format_answers([big, "y = 1"]), 2)
    assert got[0].body == big and got[1].body == "y = 1"
