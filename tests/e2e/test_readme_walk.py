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
