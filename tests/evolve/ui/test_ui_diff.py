"""The program page's diff is bounded (evolve/ui/diffs.py): exact where small, truncated and said so where large."""
from __future__ import annotations

import difflib
import json
import random

from evaluators.types import Evaluation
from evolve.ui.components import diff_html
from evolve.ui.diffs import unified


def _sides(lines: list[str]) -> tuple[list[str], list[str]]:
    old = [ln[1:] for ln in lines if ln[:1] in (" ", "-")]
    new = [ln[1:] for ln in lines if ln[:1] in (" ", "+")]
    return old, new


def test_small_diffs_are_difflibs_and_reconstruct_both_programs():
    a = "def f(x):\n    y = x + 1\n    return y\n\nprint(f(2))\n"
    b = "def f(x):\n    y = x + 2\n    return y\n\nprint(f(3))\n"
    got, note = unified(a, b, "old", "new")
    assert note == "" and got == list(difflib.unified_diff(a.splitlines(), b.splitlines(), "old", "new", lineterm=""))
    rng = random.Random(0)
    for _ in range(200):
        base = [f"line {rng.randrange(30)}" for _ in range(rng.randrange(0, 40))]
        other = [ln if rng.random() < 0.7 else f"line {rng.randrange(30)}" for ln in base]
        other[rng.randrange(len(other) + 1):0] = [f"new {rng.randrange(5)}"] * rng.randrange(3)
        lines, note = unified("\n".join(base), "\n".join(other), "a", "b", context=10 ** 9)
        if base == other:
            assert lines == []
            continue
        assert lines[:2] == ["--- a", "+++ b"] and _sides(lines[3:]) == (base, other), (base, other)


def test_a_large_child_of_a_large_parent_renders_and_says_truncated():
    """Issue 34: a 0.86 MB child of a 0.43 MB parent gave no answer in 20 s; now the changed region is over the
    budget, shown as one replacement, and both the page and the note say the diff was truncated."""
    parent = "".join(f"value_{i:06d} = {i} * 1234567 + 89  # parent\n" for i in range(10000))
    child = "".join(f"value_{i:06d} = {i} * 7654321 + 98  # child line\n"
                    f"other_{i:06d} = value_{i:06d} - {i} # the twin\n" for i in range(10000))
    assert 0.4e6 < len(parent) < 0.5e6 and 0.8e6 < len(child) < 0.95e6
    html = diff_html(parent, child, "program 1", "program 2")
    assert "diff truncated: the changed region (10000 and 20000 lines" in html
    assert "diff truncated: " in html and "more lines</span>" in html  # and the shown lines are capped
    assert html.count("<span class='del'>") + html.count("<span class='add'>") <= 4000


def test_program_page_of_a_large_child_says_its_diff_was_truncated(tmp_path):
    from evolve.archive import Archive, ProgramRecord
    from evolve.ui.server import App

    parent = "".join(f"a{i} = {i}\n" for i in range(30000))
    child = "".join(f"b{i} = {i}\n" for i in range(60000))
    ev = Evaluation(vector=[0.0], scalar=0.0, solved=False, status="wrong")
    run = tmp_path / "run"
    run.mkdir()
    with Archive(run / "archive.db") as a:
        a.set_meta("problems", json.dumps(["p"]))
        a.set_meta("config", json.dumps({"search": {"iterations": 1, "islands": 1, "answers": 1, "group": 1}}))
        (seed,) = a.record_iteration(0, [], [ProgramRecord(problem="p", island=-1, code=parent, evaluation=ev)],
                                     {"seeds": 1})
        (kid,) = a.record_iteration(1, [], [ProgramRecord(problem="p", island=0, code=child, evaluation=ev,
                                                         parent_ids=[seed])], {"problem": "p", "island": 0})
    app = App({"run": [run]})
    try:
        page = app.route(f"/run/run/program/{kid}", {})[1]
    finally:
        app.close()
    assert "Diff against its parent" in page and "diff truncated" in page
