"""Two `vllm serve` replicas of the bundled tiny model (the vLLM CI stage's server, started twice on different
ports) serve one campaign through `--proposer openai:URL1,URL2`; one is killed mid-run and no iteration is lost.
Runs in the vllm venv (scripts/vllm_ci.sh); skipped elsewhere."""
from __future__ import annotations

import contextlib
import json
import threading

import pytest

pytest.importorskip("vllm")

from evolve.archive import Archive  # noqa: E402
from proposer.backends import TINY_CHECKPOINT  # noqa: E402
from tests.campaign_helpers import vevo, wait_for_iteration  # noqa: E402


def test_two_vllm_replicas_one_killed_mid_run(tmp_path):
    from proposer.backends.vllm import _cpu_defaults
    from tests.vllm_helpers import vllm_server

    _cpu_defaults()
    args = ["--max-model-len", "1024"]
    with contextlib.ExitStack() as keep, contextlib.ExitStack() as doomed:
        url_a = keep.enter_context(vllm_server(TINY_CHECKPOINT, tmp_path / "a.log", args))
        url_b = doomed.enter_context(vllm_server(TINY_CHECKPOINT, tmp_path / "b.log", args))
        run = tmp_path / "run"
        cfg = tmp_path / "c.yaml"
        cfg.write_text("sampling: {max_tokens: 128}\nsearch: {retire_solved: false}\n")
        killed = threading.Event()

        def kill_b():
            wait_for_iteration(run, 3, timeout=600, poll=0.05)
            doomed.close()  # terminates replica b's server process
            killed.set()

        t = threading.Thread(target=kill_b, daemon=True)
        t.start()
        vevo("run", str(cfg), "--suite", "pbe-heldout", "--proposer", f"openai:{url_a},{url_b}", "--iterations",
             "8", "--islands", "1", "--answers", "4", "--group", "2", "--out", str(run), "--quiet", timeout=900)
        t.join(60)
        assert killed.is_set()
    show = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert show["iterations"] == 8
    with Archive(run / "archive.db", readonly=True) as a:
        its = [r.iteration for r in a.metrics_rows()]
        groups = a.recent_groups(100)
    assert its == list(range(9)) and len(groups) == 8 and all(len(g.completions) == 2 for g in groups)
