"""Run health: the pure detector on hand-made iterations, then a real campaign whose answers all fail alike."""
from __future__ import annotations

import json

from evolve.search.health import Health, Observation, ProgramOutcome
from proposer.answers.parsing import format_answers
from tests.campaign_helpers import tail, vevo

NAME_ERROR = "solve([1, 2, 3]) == 14: NameError: entry point 'solve' is not defined"
NAMED = "NameError: entry point 'solve' is not defined (wrong, e.g. at solve([1, 2, 3]) == 14)"


def seeds(score: float = 0.25) -> Observation:
    return Observation(0, 0, 0, (ProgramOutcome("p", "wrong", score, "p(1) == 2: got 0"),))


def it(i: int, programs, answers: int = 8, dups: int = 0) -> Observation:
    return Observation(i, answers, dups, tuple(programs))


def test_same_failure_warns_once_naming_status_message_and_share():
    h = Health(window=20, min_candidates=10, stall=0)
    h.observe(seeds())
    said = []
    for i in range(1, 6):
        progs = [ProgramOutcome("p", "wrong", 0.0, NAME_ERROR)] * 3 + [ProgramOutcome("p", "wrong", 0.0, "")]
        said += [(i, w) for w in h.observe(it(i, progs, answers=4))]
    # 75% alike from iteration 3 on: warned once, naming status, message and share
    assert said == [(3, f"75% of the last 12 candidates failed the same way: {NAMED}")]
    h2 = Health(window=20, min_candidates=10, stall=0)
    h2.observe(seeds())
    mixed = [ProgramOutcome("p", "crash", 0.0, "ImportError: numpy")] * 2 + [ProgramOutcome("p", "wrong", 0.5, "p(1) == 2: got 3"),
                                                                       ProgramOutcome("p", "wrong", 0.0, "")]
    out = [w for i in range(1, 8) for w in h2.observe(it(i, mixed))]
    assert out == []  # half alike is not "most"; a plain wrong answer (no message) is search, not a failure
    out = [w for i in range(8, 12) for w in h2.observe(it(i, [ProgramOutcome("p", "crash", 0.0, "ImportError: numpy")] * 4))]
    assert out == ["60% of the last 20 candidates failed the same way: ImportError: numpy (crash)"]


def test_one_exception_is_one_cause_across_test_cases_and_problems():
    """The failing case heads the error line; the cause is the exception and its message, numbers blurred."""
    from evolve.search.health import failure_cause

    assert failure_cause("wrong", "f(25) == 226: ValueError: broken 25") == ("ValueError", "broken N")
    assert failure_cause("wrong", "g([1, 2]) == [3]: ValueError: broken 7") == ("ValueError", "broken N")
    assert failure_cause("crash", "mod.CustomError: x") == ("mod.CustomError", "x")
    assert failure_cause("wrong", "f(1) == 2: got 3") == ("wrong", "f(1) == 2: got 3")  # no exception: as is
    h = Health(window=50, min_candidates=20, stall=0)
    h.observe(seeds())
    out = []
    for i in range(1, 30):  # a different problem and failing case every time, the same exception
        out += h.observe(it(i, [ProgramOutcome(f"p{i % 24}", "wrong", 0.0, f"f({i}) == {i * i}: ValueError: broken {i}")],
                                answers=1))
    assert out == ["100% of the last 20 candidates failed the same way: ValueError: broken 1 (wrong, e.g. at "
                   "f(1) == 1)"]


def test_varying_messages_of_one_exception_type_warn_by_type():
    """Four TypeErrors at 25% each: no message is most, the type is; said once, not again per message."""
    msgs = ["unsupported operand type(s) for +: 'int' and 'list'", "'int' object is not iterable",
            "'NoneType' object is not subscriptable", "object of type 'int' has no len()"]
    h = Health(window=40, min_candidates=20, stall=0)
    h.observe(seeds())
    out = []
    for i in range(1, 12):
        out += h.observe(it(i, [ProgramOutcome("p", "wrong", 0.0, f"f({i}) == 1: TypeError: {m}") for m in msgs], answers=4))
    assert out == ["100% of the last 20 candidates raised TypeError, with 4 different messages (most often, wrong: "
                   f"f(1) == 1: TypeError: {msgs[0]})"]


def test_duplicates_unusable_and_stall():
    h = Health(min_answers=40, stall=5)
    h.observe(seeds(0.25))
    out = []
    for i in range(1, 7):  # 8 answers: 7 duplicates, 1 new candidate that scores no better
        out += h.observe(it(i, [ProgramOutcome("p", "wrong", 0.25, "")], dups=7))
    assert out[0].startswith("88% of the last 40 answers repeat programs already evaluated")
    assert out[1].startswith("no improvement for 5 iterations (best so far: p 0.25)")
    assert len(out) == 2
    h = Health(min_answers=16, stall=0)
    h.observe(seeds())
    bad = ProgramOutcome("p", "format_error", 0.0, "answer 1 is invalid: truncated: code fence not closed at end of text")
    got = [w for i in range(1, 4) for w in h.observe(it(i, [bad] * 7, answers=8, dups=1))]
    assert got == ["88% of the last 16 answers were empty, unparseable or did not apply to their parent; most "
                   "often: answer 1 is invalid: truncated: code fence not closed at end of text"]


def test_a_healthy_stream_says_nothing():
    h = Health(window=20, min_candidates=5, min_answers=8, stall=4)
    h.observe(seeds(0.0))
    out = []
    for i in range(1, 30):  # varied outcomes, an improvement every third iteration
        progs = [ProgramOutcome("p", "wrong", i / 100 if i % 3 == 0 else 0.0, f"p(1) == 2: got {i}"),
                 ProgramOutcome("p", "crash", 0.0, f"ValueError: {i}"), ProgramOutcome("p", "ok", 1.0 if i == 29 else 0.0)]
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
    assert lines[0] == f"warning: 100% of the last 24 candidates failed the same way: {NAMED}"
    shown = vevo("runs", "show", str(run))
    assert f"warning at iteration 3: 100% of the last 24 candidates failed the same way: {NAMED}" in shown.stdout
    data = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert len(data["warnings"]) == 1 and NAMED in data["warnings"][0]["text"]
    # once per cause, across a resume too: the detector replays the archive silently
    r = vevo("resume", str(run), "--iterations", "8", "--quiet")
    assert not [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("warning:")]
    assert len(json.loads(vevo("runs", "show", str(run), "--json").stdout)["warnings"]) == 1


def test_pbe_campaign_whose_every_candidate_raises_the_same_exception_warns(tmp_path):
    """25 iterations over the 24 pbe problems, every answer raising ValueError: each error line starts with its
    own problem's failing case, and still one warning names the exception."""
    from problems.suites import SUITES

    assert len(SUITES["pbe"]()) == 24
    raising = [f"def f(x):\n    raise ValueError('broken {k}')\n" for k in range(4)]
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": tail(format_answers(raising))}) + "\n")
    r = vevo("run", "--suite", "pbe", "--proposer", f"replay:{tmp_path / 'r.jsonl'}", "--answers", "4",
             "--group", "1", "--iterations", "25", "--out", str(tmp_path / "run"), "--quiet")
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    same = [ln for ln in lines if "candidates failed the same way: ValueError: broken " in ln]
    assert len(same) == 1 and "(wrong, e.g. at f(" in same[0], lines
    assert any("ValueError" in w["text"] for w in
               json.loads(vevo("runs", "show", str(tmp_path / "run"), "--json").stdout)["warnings"])


def test_stall_names_the_likely_cause_it_was_given():
    h = Health(stall=3, stall_hint="1 of 1 problems are out of the bundled tiny proposer's reach (p: str inputs)")
    h.observe(seeds())
    out = [w for i in range(1, 4) for w in h.observe(it(i, [ProgramOutcome("p", "wrong", 0.0, "")]))]
    assert out == ["no improvement for 3 iterations (best so far: p 0.25); likely cause: 1 of 1 problems are out of "
                   "the bundled tiny proposer's reach (p: str inputs)"]
