"""The mutation prompt: content, ending, length bound, and the training target that matches it."""
from __future__ import annotations

import pytest

from proposer.answers.parsing import format_diff, parse_answers
from proposer.answers.prompting import PromptContext, build_prompt, completion_target

PARENT = ("import sys\n# EVOLVE-BLOCK-START\ndef add(a, b):\n    return a - b\n# EVOLVE-BLOCK-END\n"
          "print(add(*map(int, sys.argv[1:])))\n")
LABELS = ["add(1, 0) == 1", "add(2, 3) == 5", "add(0, 4) == 4", "add(-1, 1) == 0", "add(7, 7) == 14",
          "add(9, 1) == 10"]


def ctx(**kw) -> PromptContext:
    base = dict(problem_id="add", description="Return the sum of a and b.", parent_code=PARENT,
                parent_vector=[1.0, 0.0, 0.0, 0.0, 0.5, 0.0], test_labels=LABELS)
    base.update(kw)
    return PromptContext(**base)


@pytest.mark.parametrize("style", ["compact", "chat"])
def test_prompt_ends_with_answer_tag_and_no_newline(style):
    prompt = build_prompt(ctx(), style=style)
    assert prompt.endswith("\n<answer_1>")
    assert not prompt.endswith("\n")


@pytest.mark.parametrize("style", ["compact", "chat"])
def test_prompt_shows_block_tests_and_failing_labels(style):
    prompt = build_prompt(ctx(), style=style)
    assert "Return the sum of a and b." in prompt
    assert "def add(a, b):\n    return a - b" in prompt
    assert "import sys" not in prompt and "print(add" not in prompt  # only the EVOLVE-BLOCK is shown
    assert "EVOLVE-BLOCK" in prompt  # ... and the prompt says so
    assert ("1/6" in prompt) if style == "compact" else ("1 of 6" in prompt)
    for label in LABELS[1:5]:
        assert label in prompt
    assert "add(9, 1) == 10" not in prompt  # max_failing = 4
    assert "1 more failing" in prompt
    assert "add(1, 0) == 1" not in prompt  # passing tests are not listed
    assert "score 0.50" in prompt  # partial credit is shown


def test_whole_file_when_no_markers():
    plain = "def add(a, b):\n    return a - b\n"
    prompt = build_prompt(ctx(parent_code=plain))
    assert "whole file" in prompt and plain.rstrip() in prompt


def test_max_failing_and_missing_labels():
    prompt = build_prompt(ctx(test_labels=LABELS[:2]), max_failing=10)
    assert "FAIL add(2, 3) == 5" in prompt and "FAIL test 3" in prompt and "FAIL test 6" in prompt
    assert "more failing" not in prompt
    assert "FAIL" not in build_prompt(ctx(parent_vector=[1.0] * 6))


def test_stderr_tail_is_shown():
    err = "Traceback (most recent call last):\n" + "  frame\n" * 300 + "TypeError: unsupported operand"
    prompt = build_prompt(ctx(parent_stderr=err))
    assert "TypeError: unsupported operand" in prompt
    assert "Traceback (most recent call last)" not in prompt  # only the tail
    assert "stderr" not in build_prompt(ctx())


def test_inspirations_say_which_tests_they_pass():
    insp = ("# EVOLVE-BLOCK-START\ndef add(a, b):\n    return a + b if a else b\n# EVOLVE-BLOCK-END\n",
            [0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    prompt = build_prompt(ctx(inspirations=[insp]))
    assert "return a + b if a else b" in prompt
    assert "Inspiration 1, passes: add(2, 3) == 5, add(0, 4) == 4" in prompt
    assert "EVOLVE-BLOCK-START" not in prompt
    chat = build_prompt(ctx(inspirations=[insp]), style="chat")
    assert "passes tests the current program fails: add(2, 3) == 5, add(0, 4) == 4" in chat


@pytest.mark.parametrize("m", [1, 3, 8])
def test_instructions_ask_for_m_answers(m):
    assert f"Write {m} different" in build_prompt(ctx(m=m))
    assert f"Write {m} DIFFERENT" in build_prompt(ctx(m=m), style="chat")


def test_diff_mode_instructions():
    compact = build_prompt(ctx(mode="diff"))
    chat = build_prompt(ctx(mode="diff"), style="chat")
    assert "SEARCH/REPLACE" in compact and "```python code```" not in compact
    assert "<<<<<<< SEARCH" in chat and ">>>>>>> REPLACE" in chat


def test_compact_is_compact():
    compact, chat = build_prompt(ctx()), build_prompt(ctx(), style="chat")
    assert len(compact) < len(chat)
    assert len(compact) < 450


def test_bad_style_or_mode():
    with pytest.raises(ValueError):
        build_prompt(ctx(), style="verbose")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        build_prompt(ctx(mode="patch"))  # type: ignore[arg-type]


def _big_ctx(lines: int = 800) -> PromptContext:
    big_block = "\n".join(f"    x{i} = {i}" for i in range(lines))
    parent = f"# EVOLVE-BLOCK-START\ndef add(a, b):\n{big_block}\n    return a - b\n# EVOLVE-BLOCK-END\n"
    insp = [(f"def add(a, b):\n    return {k}\n" + "#" * 3000, [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]) for k in range(4)]
    return ctx(parent_code=parent, description="Sum. " * 2000, parent_stderr="E\n" * 3000, inspirations=insp)


@pytest.mark.parametrize("max_chars", [300, 800, 1500, 3000, 6000, 20000])
@pytest.mark.parametrize("style", ["compact", "chat"])
def test_max_chars_is_respected_and_ending_kept(max_chars, style):
    prompt = build_prompt(_big_ctx(), max_chars=max_chars, style=style)
    assert len(prompt) <= max_chars
    assert prompt.endswith("\n<answer_1>")


def test_truncation_is_deterministic_and_drops_inspirations_first():
    c = _big_ctx()
    a, b = build_prompt(c, max_chars=3000), build_prompt(c, max_chars=3000)
    assert a == b
    assert "Inspiration" not in a
    assert "def add(a, b):\n    x0 = 0" in a  # parent head survives
    assert "Sum. " in a and 2900 < len(a) <= 3000  # parent code outranks the description, which keeps its head
    roomy = build_prompt(_big_ctx(lines=100), max_chars=5000)
    assert "x99 = 99" in roomy and "E\nE\n" in roomy and "Inspiration 1" in roomy


def test_later_inspirations_go_first():
    insp = [("\n".join(f"def add{k}_{i}(a, b):  # variant" for i in range(12)), [0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
            for k in range(1, 5)]
    c = ctx(inspirations=insp)
    full = build_prompt(c, max_chars=100_000)
    assert "Inspiration 4" in full
    cut = build_prompt(c, max_chars=len(full) - 500)
    assert len(cut) <= len(full) - 500
    assert "Inspiration 4" not in cut and "def add4_0" not in cut
    assert insp[0][0] in cut and insp[1][0] in cut  # earlier ones untouched
    assert "Return the sum of a and b." in cut and "return a - b" in cut


def test_truncated_code_keeps_fences_closed_and_whole_lines():
    prompt = build_prompt(_big_ctx(), max_chars=1500)
    assert prompt.count("```") % 2 == 0
    assert "(truncated)" in prompt
    body = prompt.split("```python\n")[1].split("\n# ... (truncated)")[0]
    assert all(line.startswith("    x") and line.endswith(line.split()[0][1:]) for line in body.split("\n")[1:])


@pytest.mark.parametrize("style", ["compact", "chat"])
def test_sections_start_on_their_own_line_when_cut(style):
    for max_chars in range(700, 1600, 37):
        prompt = build_prompt(_big_ctx(), max_chars=max_chars, style=style)
        for header in ("### Tests", "### Write", "## Test results", "## Instructions"):
            if header in prompt:
                assert "\n" + header in prompt


def test_small_prompt_untouched_by_limit():
    assert build_prompt(ctx(), max_chars=100_000) == build_prompt(ctx())


@pytest.mark.parametrize("bodies, kind", [
    (["def add(a, b):\n    return a + b", "def add(a, b):\n    return sum((a, b))"], "code"),
    (["x = 1"], "code"),
    ([format_diff([("    return a - b", "    return a + b")]), format_diff([("a - b", "b + a")])], "diff"),
])
def test_completion_target_round_trips_after_prompt(bodies, kind):
    target = completion_target(bodies, kind)
    assert not target.startswith("<answer_1>")
    got = parse_answers("<answer_1>" + target, len(bodies))
    assert [a.body for a in got] == bodies
    assert {a.kind for a in got} == {kind}
    # the completion alone (what a backend returns after the prompt) parses too
    assert [a.body for a in parse_answers(target, len(bodies))] == bodies


def test_prompt_plus_target_parses_as_one_document():
    bodies = ["def add(a, b):\n    return a + b", "def add(a, b):\n    return b + a"]
    text = build_prompt(ctx(m=2)) + completion_target(bodies)
    tail = text[text.rindex("<answer_1>"):]
    assert [a.body for a in parse_answers(tail, 2)] == bodies


def test_completion_target_needs_bodies():
    with pytest.raises(ValueError):
        completion_target([])
