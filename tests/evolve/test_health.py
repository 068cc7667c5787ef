"""Run health: the pure detector on hand-made iterations, then a real campaign whose answers all fail alike."""
from __future__ import annotations

import json

from evolve.health import Health, Observation, Outcome
from proposer.answers.parsing import format_answers
from tests.campaign_helpers import tail, vevo

NAME_ERROR = "solve([1, 2, 3]) == 14: NameError: entry point 'solve' is not defined"


def seeds(score: float = 0.25) -> Observation:
    return Observation(0, 0, 0, (Outcome("p", "wrong", score, "p(1) == 2: got 0"),))


def it(i: int, programs, answers: int = 8, dups: int = 0) -> Observation:
    return Observation(i, answers, dups, tuple(programs))


def test_same_failure_warns_once_naming_status_message_and_share():
    h = Health(window=20, min_candidates=10, stall=0)
    h.observe(seeds())
    said = []
    for i in range(1, 6):
        progs = [Outcome("p", "wrong", 0.0, NAME_ERROR)] * 3 + [Outcome("p", "wrong", 0.0, "")]
        said += [(i, w) for w in h.observe(it(i, progs, answers=4))]
    # 75% alike from iteration 3 on: warned once, naming status, message and share
    assert said == [(3, f"75% of the last 12 candidates failed the same way: wrong: {NAME_ERROR}")]
    h2 = Health(window=20, min_candidates=10, stall=0)
    h2.observe(seeds())
    mixed = [Outcome("p", "crash", 0.0, "ImportError: numpy")] * 2 + [Outcome("p", "wrong", 0.5, "p(1) == 2: got 3"),
                                                                       Outcome("p", "wrong", 0.0, "")]
    out = [w for i in range(1, 8) for w in h2.observe(it(i, mixed))]
    assert out == []  # half alike is not "most"; a plain wrong answer (no message) is search, not a failure
    out = [w for i in range(8, 12) for w in h2.observe(it(i, [Outcome("p", "crash", 0.0, "ImportError: numpy")] * 4))]
    assert out == ["60% of the last 20 candidates failed the same way: crash: ImportError: numpy"]


def test_duplicates_unusable_and_stall():
    h = Health(min_answers=40, stall=5)
    h.observe(seeds(0.25))
    out = []
    for i in range(1, 7):  # 8 answers: 7 duplicates, 1 new candidate that scores no better
        out += h.observe(it(i, [Outcome("p", "wrong", 0.25, "")], dups=7))
    assert out[0].startswith("88% of the last 40 answers repeat programs already evaluated")
    assert out[1].startswith("no improvement for 5 iterations (best so far: p 0.25)")
    assert len(out) == 2
    h = Health(min_answers=16, stall=0)
    h.observe(seeds())
    bad = Outcome("p", "format_error", 0.0, "answer 1 is invalid: truncated: code fence not closed at end of text")
    got = [w for i in range(1, 4) for w in h.observe(it(i, [bad] * 7, answers=8, dups=1))]
    assert got == ["88% of the last 16 answers were empty, unparseable or did not apply to their parent; most "
                   "often: answer 1 is invalid: truncated: code fence not closed at end of text"]


def test_a_healthy_stream_says_nothing():
    h = Health(window=20, min_candidates=5, min_answers=8, stall=4)
    h.observe(seeds(0.0))
    out = []
    for i in range(1, 30):  # varied outcomes, an improvement every third iteration
        progs = [Outcome("p", "wrong", i / 100 if i % 3 == 0 else 0.0, f"p(1) == 2: got {i}"),
                 Outcome("p", "crash", 0.0, f"ValueError: {i}"), Outcome("p", "ok", 1.0 if i == 29 else 0.0)]
        out += h.observe(it(i, progs, answers=4, dups=1))
    assert out == []


def failing_replay(path, n: int = 40) -> None:
    """Every answer defines a function, none of them the entry point: all fail with the same NameError."""
    lines = [tail(format_answers([f"def helper(xs):\n    return {4 * k + j}\n" for j in range(4)]))
             for k in range(n)]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))


def test_campaign_warns_on_its_output_names_the_error_and_keeps_it(tmp_path):
    vevo("problems", "new", "mine", "--kind", "io", "--dir", str(tmp_path / "probs"))
    failing_replay(tmp_path / "r.jsonl")
    run = tmp_path / "run"
    common = ("--problems-dir", str(tmp_path / "probs"), "--proposer", f"replay:{tmp_path / 'r.jsonl'}",
              "--answers", "4", "--group", "2", "--out", str(run), "--quiet")
    r = vevo("run", *common, "--iterations", "4")
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("warning: 100% of the last 24 candidates failed the same way: wrong: ")
    assert NAME_ERROR in lines[0]
    shown = vevo("runs", "show", str(run))
    assert "warning at iteration 3: 100% of the last 24 candidates failed the same way" in shown.stdout
    assert NAME_ERROR in shown.stdout
    data = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert len(data["warnings"]) == 1 and NAME_ERROR in data["warnings"][0]["text"]
    # once per cause, across a resume too: the detector replays the archive silently
    r = vevo("resume", str(run), "--iterations", "8", "--quiet")
    assert not [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("warning:")]
    assert len(json.loads(vevo("runs", "show", str(run), "--json").stdout)["warnings"]) == 1
