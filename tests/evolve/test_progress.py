"""Progress for people and for logs (evolve/progress.py): plain lines off a terminal, written while the run
goes, --quiet, --log-json, and the honest summary of `vevo train`."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from evolve.progress import Rate, Reporter
from evolve.training.study import trend
from proposer.answers.parsing import format_answers
from tests.campaign_helpers import ROOT, interruptible, tail, vevo

PID = "pbe/list-1001"


def test_plain_reporter_lines_and_json(tmp_path):
    out = io.StringIO()
    log = tmp_path / "p.jsonl"
    rep = Reporter(mode="auto", stream=out, every=0, json_path=log, phase_delay=0)  # StringIO is no tty: plain
    assert rep.mode == "plain"
    rep.phase("loading proposer tiny")
    rep.begin(3, 0)
    rep.phase("generating iteration 1", log=False)  # routine: no line of its own, no record
    rep.update(1, solved="0/2", best=0.25, evals_per_s=4.0)
    rep.event("trained step 1:", kind="training", data={"loss": 0.1, "step": 1}, mean_set_reward=0.5)
    rep.update(2, solved="1/2", best=0.5, evals_per_s=5.0)
    rep.end()
    rep.close()
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("loading proposer tiny")
    assert "iteration 1/3  solved 0/2  best 0.25  evals/s 4" in lines[1]
    assert "trained step 1:  mean set reward 0.5" in lines[2]
    assert "iteration 2/3  solved 1/2" in lines[3] and len(lines) == 4
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["event"] for r in recs] == ["phase", "begin", "update", "training", "update", "end"]
    assert recs[3]["loss"] == 0.1 and recs[3]["mean_set_reward"] == 0.5
    assert recs[2]["solved"] == "0/2" and recs[2]["done"] == 1 and recs[2]["total"] == 3


def test_plain_reporter_rate_limits_lines_but_says_the_last():
    out = io.StringIO()
    rep = Reporter(mode="plain", stream=out, every=3600)
    rep.begin(10)
    for i in range(1, 6):
        rep.update(i, solved="0/1")
    rep.end()  # stopped early (problems retired): the newest status is said once more
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "iteration 1/10" in lines[0] and "iteration 5/10" in lines[1]


def test_a_phase_gets_its_line_once_it_lasts():
    out = io.StringIO()
    rep = Reporter(mode="plain", stream=out, phase_delay=0.2)
    rep.phase("reading the config")  # quick: superseded before its line is due
    rep.phase("loading proposer tiny")
    time.sleep(0.6)
    rep.phase("failing at once")
    rep.close()  # an error now stays the only line after the slow phase's
    assert [x.split("] ")[1] for x in out.getvalue().splitlines()] == ["loading proposer tiny"]


def test_quiet_reporter_prints_nothing_but_logs(tmp_path):
    out = io.StringIO()
    rep = Reporter(mode="quiet", stream=out, json_path=tmp_path / "q.jsonl")
    rep.phase("x")
    rep.begin(2)
    rep.update(1)
    rep.close()
    assert out.getvalue() == "" and len((tmp_path / "q.jsonl").read_text().splitlines()) == 3


def test_rate_is_not_zero_after_the_first_update():
    r = Rate(0, now=100.0)
    assert r.add(8, now=102.0) == pytest.approx(4.0)  # the bar once showed 0.0 evals/s after iteration 1
    assert r.add(16, now=104.0) == pytest.approx(4.0)


def test_trend_says_noise_when_the_interval_holds_zero():
    noisy = [0.52, 0.40, 0.55, 0.45, 0.50, 0.39, 0.56, 0.41, 0.48, 0.393]
    text = trend(noisy)
    assert text.endswith("within the step-to-step noise") and "95% CI" in text and "/step" in text
    assert trend([0.1, 0.11, 0.12, 0.2, 0.21, 0.3, 0.31, 0.4, 0.41, 0.5]).endswith(": rose")
    assert "too few" in trend([0.5, 0.4])


def _slow_replay(path, n: int = 80) -> str:
    """Distinct programs that each sleep, so a run lasts long enough to be read while it goes."""
    lines = [tail(format_answers([f"def f(xs):\n    import time\n    time.sleep(0.15)\n    return xs[:{i}]\n"]))
             for i in range(n)]
    path.write_text("\n".join(json.dumps({"text": t}) for t in lines) + "\n")
    return str(path)


def test_run_to_a_file_shows_progress_before_the_end(tmp_path):
    """As under nohup or a cluster job: stdout and stderr to one file, read while the process still runs."""
    replay = _slow_replay(tmp_path / "slow.jsonl")
    log, js = tmp_path / "run.log", tmp_path / "run.jsonl"
    cmd = [sys.executable, "-m", "evolve.cli", "run", "--problem", PID, "--proposer", f"replay:{replay}",
           "--iterations", "60", "--islands", "1", "--answers", "1", "--group", "1", "--out", str(tmp_path / "run"),
           "--log-every", "0", "--log-json", str(js)]
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=str(ROOT),
                             env=dict(os.environ, PYTHONPATH=str(ROOT)), preexec_fn=interruptible)
    try:
        seen, deadline = "", time.monotonic() + 120
        while time.monotonic() < deadline and "iteration 3/60" not in seen and p.poll() is None:
            time.sleep(0.1)
            seen = log.read_text()
        running = p.poll() is None
        assert running, f"the run ended before its progress could be read:\n{seen}"
        assert "iteration 1/60  solved 0/1  best" in seen and "evals/s" in seen
        assert " 0.0 evals/s" not in seen and "evals/s 0 " not in seen
        recs = [json.loads(x) for x in js.read_text().splitlines()]
        assert any(r["event"] == "update" and r["done"] >= 1 for r in recs)
        phases = [r["phase"] for r in recs if r["event"] == "phase"]  # each phase is in the JSON log at once
        assert phases[:2] == ["reading the config", "loading problems"] and "evaluating 1 seed program" in phases
        assert any(p.startswith("loading proposer replay:") for p in phases)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        p.wait(timeout=60)


def test_quiet_run_prints_only_the_summary(tmp_path):
    replay = _slow_replay(tmp_path / "r.jsonl", 4)
    js = tmp_path / "q.jsonl"
    r = vevo("run", "--problem", PID, "--proposer", f"replay:{replay}", "--iterations", "3", "--islands", "1",
             "--answers", "1", "--group", "1", "--out", str(tmp_path / "run"), "--quiet", "--log-json", str(js))
    assert r.stderr == "" and r.stdout.startswith(f"run {tmp_path / 'run'}: 3 iterations")
    events = [json.loads(x)["event"] for x in js.read_text().splitlines()]
    assert events[0] == "phase" and events.count("update") == 3 and events[-1] == "summary"
