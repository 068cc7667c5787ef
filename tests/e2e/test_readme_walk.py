"""What a new user trips over walking the README on a fresh clone (issue 36, second pass), one test each."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.campaign_helpers import ROOT


def test_output_piped_into_head_ends_quietly():
    """`vevo defaults | head -2` and the like: a reader that goes away is not an error; no `vevo: error:
    [Errno 32] Broken pipe` line, exit status 128 + SIGPIPE as a shell tool killed by it."""
    for args in (["defaults"], ["problems", "list", "--json"]):
        p = subprocess.Popen([sys.executable, "-m", "evolve.cli", *args], cwd=str(ROOT), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        p.stdout.close()  # before the interpreter has started: its first write finds no reader
        err = p.stderr.read().decode()
        assert p.wait(timeout=120) == 128 + signal.SIGPIPE and err == "", (args, err)


def test_reach_note_for_a_large_imported_suite_stays_readable():
    """`vevo run --problems-dir problems_mbpp --proposer tiny` (974 problems, ~100 distinct reasons) printed a
    5,700-character warning line; it names the commonest reasons and counts the rest."""
    from problems.model import CallCase, Problem
    from proposer.tiny.reach import reach_note

    def prob(i: int, n_args: int) -> Problem:
        return Problem(id=f"p{i}", seed_code="", tests=[CallCase(args=tuple([1] * n_args), expected=1)])

    probs = [prob(i, 2) for i in range(5)] + [prob(10 + n, n) for n in range(3, 12)] + [prob(99, 1)]
    note = reach_note(["tiny"], probs, reasons=2)
    assert note.startswith("14 of 15 problems are out of the bundled tiny proposer's reach (p0, p1 +3 more: 2 "
                           "arguments; p13: 3 arguments; 8 other reasons, 8 problems); it was pretrained on"), note
    assert len(reach_note(["tiny"], probs)) < 400
    assert "; 1 other reason, 1 problem)" in reach_note(["tiny"], probs[:6], reasons=1)
