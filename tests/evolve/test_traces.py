"""Campaigns as training data: `vevo export --format traces` of a real tiny trained campaign (two seeds) round-trips
through `datasets.load_dataset` with every group's vectors, tokens and behaviour log-probs equal to the archive's,
names no path of the machine, and `vevo train --traces` learns from it (tests/evolve/test_traces_training.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.archive import Archive
from proposer.backends import TINY_CHECKPOINT
from tests.campaign_helpers import vevo

pytestmark = pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled tiny checkpoint")

CAMPAIGN = ("--problem", "pbe/hard-list-7", "--problem", "pbe/list-4", "--proposer", "tiny", "--train", "vpo",
            "--iterations", "4", "--group", "4", "--answers", "2", "--max-tokens", "96", "--train-probe-every", "0",
            "--seeds", "0-1", "--quiet")


@pytest.fixture(scope="package")
def campaign(tmp_path_factory) -> Path:
    """A seeds folder of two tiny VPO campaigns (~12 s): groups recorded under policy versions 0, 1, 2."""
    out = tmp_path_factory.mktemp("traces") / "camp"
    vevo("run", *CAMPAIGN, "--out", str(out), timeout=600)
    return out


@pytest.fixture(scope="package")
def traces(campaign) -> Path:
    out = campaign.parent / "traces"
    vevo("export", str(campaign), "--format", "traces", "--out", str(out))
    return out


def _archive_groups(campaign: Path) -> dict[tuple[int, int], tuple]:
    out = {}
    for seed in (0, 1):
        with Archive(campaign / f"seed-{seed}" / "archive.db", readonly=True) as a:
            groups = a.groups_by_id(a.group_ids())
            new = a.new_answers([c.id for g in groups for c in g.completions])
            for g in groups:
                out[(seed, g.id)] = (g, new)
    return out


def test_round_trip_through_datasets_equals_the_archive(campaign, traces):
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset("parquet", data_files=str(traces / "traces.parquet"), split="train")
    js = datasets.load_dataset("json", data_files=str(traces / "traces.jsonl"), split="train")
    want = _archive_groups(campaign)
    assert len(ds) == len(js) == len(want) > 0
    assert {r["policy_version"] for r in ds} >= {0, 1}  # groups of the untrained and of trained policies
    for row, jrow in zip(ds, js):
        assert row["schema_version"] == 1 and row["run"] == "camp"
        assert (row["seed"], row["group_id"]) == (jrow["seed"], jrow["group_id"])
        g, new = want[(row["seed"], row["group_id"])]
        assert (row["problem"], row["iteration"], row["policy_version"], row["prompt"], row["m"]) == \
            (g.problem, g.iteration, g.policy_version, g.prompt, g.m)
        assert row["split"] == "train"
        assert len(row["completions"]) == len(g.completions)
        for rc, jc, c in zip(row["completions"], jrow["completions"], g.completions):
            for got in (rc, jc):
                assert got["text"] == c.text and got["policy_version"] == c.policy_version
                assert got["token_ids"] == c.token_ids and got["prompt_token_ids"] == c.prompt_token_ids
                assert got["logprobs"] == c.logprobs  # exactly: float64 both ways
                assert [a["vector"] for a in got["answers"]] == c.answer_vectors
                assert [a["answer"] for a in got["answers"]] == c.answers
                assert {a["index"] for a in got["answers"] if a["outcome"] in ("new", "format_error")} == new[c.id]


def test_answers_carry_their_programs_and_duplicates_are_named(campaign, traces):
    rows = [json.loads(line) for line in (traces / "traces.jsonl").read_text().splitlines()]
    with Archive(campaign / "seed-0" / "archive.db", readonly=True) as a:
        programs = {p.id: p for p in a.programs()}
    outcomes = set()
    for r in rows:
        for c in r["completions"]:
            for ans in c["answers"]:
                outcomes.add(ans["outcome"])
                if ans["outcome"] == "new" and r["seed"] == 0:
                    p = programs[ans["program_id"]]
                    assert (ans["code"], ans["status"], ans["scalar"], ans["vector"]) == \
                        (p.code, p.status, p.scalar, p.vector)
                if ans["outcome"] == "empty":
                    assert ans["program_id"] is None and not ans["answer"].strip()
    assert "new" in outcomes and outcomes <= {"new", "format_error", "duplicate", "empty"}


def test_traces_name_no_path_of_the_machine(campaign, traces):
    manifest = json.loads((traces / "manifest.json").read_text())
    assert manifest["schema_version"] == 1 and manifest["groups"] == sum(r["groups"] for r in manifest["runs"])
    assert [(r["run"], r["seed"]) for r in manifest["runs"]] == [("camp", 0), ("camp", 1)]
    for f in ("traces.jsonl", "traces.parquet", "manifest.json"):
        data = (traces / f).read_bytes()
        assert str(campaign.parent).encode() not in data and str(Path.home()).encode() not in data, f


def test_several_runs_make_one_dataset_and_bad_input_is_one_line(campaign, tmp_path):
    out = tmp_path / "two"
    r = vevo("export", str(campaign), str(campaign / "seed-1"), "--format", "traces", "--out", str(out))
    assert "of 3 runs" in r.stdout
    runs = [(x["run"], x["seed"]) for x in json.loads((out / "manifest.json").read_text())["runs"]]
    assert runs == [("camp", 0), ("camp", 1), ("seed-1", 1)]
    bad = vevo("export", str(tmp_path / "nope"), "--format", "traces", "--out", str(out), check=False)
    assert bad.returncode == 2 and "not a run directory" in bad.stderr and "Traceback" not in bad.stderr
    two = vevo("export", str(campaign / "seed-0"), str(campaign / "seed-1"), "--out", str(tmp_path / "x.csv"),
               check=False)
    assert two.returncode == 2 and "--format traces" in two.stderr
