"""`vevo eval --run RUN [--version V]`: a campaign's trained policy loaded back (evolve/launch/policy.py) and read at
best@k / pass@k for k = 1..K per problem, through the real CLI on a tiny trained run."""
from __future__ import annotations

import json

import pytest

from tests.campaign_helpers import vevo

PROBLEM = "pbe/int-0"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("evalrun") / "run"
    vevo("run", "--problem", PROBLEM, "--proposer", "tiny", "--train", "vpo", "--iterations", "2", "--group", "2",
         "--answers", "2", "--max-tokens", "32", "--set", "train.probe_every=0", "--set", "search.retire_solved=false",
         "--out", str(run), "--quiet")
    return run


def rows(*args: str) -> list[dict]:
    out = vevo("eval", *args, "--k", "3", "--n", "4", "--json", "--quiet").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_eval_run_final_policy_per_problem(trained):
    final = rows("--run", str(trained))
    assert [r["problem"] for r in final] == [PROBLEM] and final[0]["own"] is True
    r = final[0]
    assert r["policy_version"] == 2 and r["k"] == 3 and r["n"] == 4 and r["m"] == 2  # the run's m
    for key in ("best@k", "pass@k"):
        assert len(r[key]) == 3 and all(0.0 <= v <= 1.0 for v in r[key])
        assert r[key] == sorted(r[key])  # read on the same samples at every k: non-decreasing


def test_eval_run_version_zero_on_a_problem_the_run_never_saw(trained):
    other = rows("--run", str(trained), "--version", "0", "--problem", "pbe/list-1")
    assert [(x["problem"], x["own"], x["policy_version"]) for x in other] == [("pbe/list-1", False, 0)]


def test_loaded_policy_holds_the_saved_weights(trained):
    import torch

    from evolve.launch.policy import load_policy, snapshots

    backend, cfg, version = load_policy(trained)
    assert version == 2 and backend.policy_version == 2 and cfg.train.algo == "vpo"
    saved = torch.load(snapshots(trained)[2] / "weights.pt", map_location="cpu", weights_only=True)
    got = {n: p for n, p in backend.model.named_parameters() if p.requires_grad}
    assert got and set(got) == set(saved)
    assert all(torch.equal(got[n].detach().cpu(), saved[n]) for n in got)
    assert any(float(saved[n].abs().sum()) > 0 for n in saved if "lora_B" in n)  # trained: B moved from 0


def test_eval_run_errors_are_one_line(trained):
    for args, text in ((["--run", str(trained), "--version", "7"], "policy version 7 is not kept"),
                       (["--version", "1", "--proposer", "tiny", "--problem", PROBLEM], "--version needs --run")):
        r = vevo("eval", *args, "--k", "2", "--quiet", check=False)
        assert r.returncode == 2 and text in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
