"""The replay backend: file order, cycling, resumable cursor, loud errors for bad files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from proposer.backends.base import Backend, SamplingParams
from proposer.backends.replay import ReplayBackend

SP = SamplingParams()


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "replay.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def replay_file(tmp_path: Path) -> Path:
    return write(tmp_path, [json.dumps({"text": f"c{i}", "extra": i}) for i in range(5)])


def texts(groups) -> list[list[str]]:
    return [[c.text for c in g] for g in groups]


def test_file_order_and_cycling(replay_file):
    b = ReplayBackend(replay_file)
    assert texts(b.generate(["p1", "p2"], 2, SP)) == [["c0", "c1"], ["c2", "c3"]]
    assert texts(b.generate(["p3"], 3, SP)) == [["c4", "c0", "c1"]]
    assert texts(b.generate([], 3, SP)) == []
    assert texts(b.generate(["p"], 0, SP)) == [[]]


def test_completion_fields(replay_file):
    b = ReplayBackend(replay_file)
    b.set_policy_version(3)
    (c,), = b.generate(["p"], 1, SP)
    assert (c.text, c.policy_version, c.token_ids, c.logprobs, c.finish_reason) == ("c0", 3, None, None, "stop")
    assert c.meta["replay_line"] == 1


def test_protocol_name_and_len(replay_file):
    b: Backend = ReplayBackend(replay_file)
    assert b.name == f"replay:{replay_file}"
    assert b.policy_version == 0
    assert len(b) == 5  # type: ignore[arg-type]
    b.close()


def test_state_round_trip_resumes_exactly(replay_file):
    a = ReplayBackend(replay_file)
    a.generate(["p"] * 3, 2, SP)
    a.set_policy_version(7)
    saved = json.loads(json.dumps(a.state()))  # checkpoints go through JSON
    expected = texts(a.generate(["q", "r"], 3, SP))
    b = ReplayBackend(replay_file)
    b.load_state(saved)
    assert b.policy_version == 7
    assert texts(b.generate(["q", "r"], 3, SP)) == expected
    assert b.state() == a.state()


@pytest.mark.parametrize("state", [{}, {"cursor": -1}, {"cursor": "3"}, {"cursor": 1.5}, {"cursor": True},
                                   {"cursor": 0, "records": 4}])
def test_bad_state_is_rejected(replay_file, state):
    with pytest.raises(ValueError):
        ReplayBackend(replay_file).load_state(state)


def test_blank_lines_skipped_and_line_numbers_kept(tmp_path):
    path = write(tmp_path, ["", json.dumps({"text": "a"}), "   ", json.dumps({"text": "b\n<answer_1>"}), ""])
    b = ReplayBackend(path)
    got = b.generate(["p"], 2, SP)[0]
    assert [c.text for c in got] == ["a", "b\n<answer_1>"]
    assert [c.meta["replay_line"] for c in got] == [2, 4]


@pytest.mark.parametrize("bad, why", [
    ("{not json", "malformed"),
    ("[1, 2]", "JSON object"),
    ('{"txt": "x"}', "text"),
    ('{"text": 5}', "text"),
])
def test_malformed_line_names_file_and_line(tmp_path, bad, why):
    path = write(tmp_path, [json.dumps({"text": "ok"}), "", bad])
    with pytest.raises(ValueError, match=why) as info:
        ReplayBackend(path)
    msg = str(info.value)
    assert f"{path}:3:" in msg and "\n" not in msg


def test_empty_file_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no completions"):
        ReplayBackend(write(tmp_path, ["", "  "]))


def test_negative_n(replay_file):
    with pytest.raises(ValueError):
        ReplayBackend(replay_file).generate(["p"], -1, SP)
