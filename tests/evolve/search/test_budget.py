"""Budgets as stop rules (search.budget, evolve/search/budget.py), through the real CLI: a replay proposer, the real
sandbox and archive; tokens with the tiny proposer (replay completions carry no token ids)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.archive import Archive
from evolve.search.budget import Spent, limits, reached
from problems.suites import SUITES
from tests.campaign_helpers import ROOT, pbe_replay, vevo, wait_for_iteration

PBE = SUITES["pbe"]()
PROBS = [p for p in PBE if p.split == "heldout"][:3] + [p for p in PBE if p.split == "train"][:2]
IDS = [a for p in PROBS for a in ("--problem", p.id)]
BASE = ["--answers", "3", "--group", "2", "--workers", "2", "--seed", "3", "--quiet", "--set",
        "search.retire_solved=false"]


def show(run: Path) -> dict:
    return json.loads(vevo("runs", "show", str(run), "--json").stdout)


def per_iteration(run: Path) -> list[tuple[int, int, int, float]]:
    """(iteration, evaluations, tokens, wall seconds) after each committed iteration."""
    out, evs, tok = [], 0, 0
    with Archive(run / "archive.db", readonly=True) as a:
        counts: dict[int, int] = {}
        for p in a.programs():
            counts[p.iteration] = counts.get(p.iteration, 0) + 1
        for m in a.metrics_rows():
            evs += counts.get(m.iteration, 0)
            tok += int(m.data.get("gen_tokens") or 0)
            out.append((m.iteration, evs, tok, float(m.data["wall_seconds"])))
    return out


def test_reached_names_the_first_budget_in_order():
    assert reached({}, Spent(10**9, 1e9, 10**9)) is None
    assert reached({"evaluations": 10, "tokens": None}, Spent(9, 0, 0)) is None
    assert reached({"evaluations": 10}, Spent(10, 0, 0)) == "budget.evaluations"
    assert reached({"evaluations": 10, "seconds": 1.0}, Spent(3, 1.5, 0)) == "budget.seconds"
    assert reached({"evaluations": 10, "seconds": 1.0, "tokens": 5}, Spent(11, 2.0, 6)) == "budget.evaluations"
    assert limits({"evaluations": None, "seconds": 2.5}) == {"seconds": 2.5}


def replay_run_with_budget(tmp_path: Path, iterations: int, *budget: str) -> tuple[Path, dict, list]:
    """A replay campaign over PROBS stopped by ``budget`` (flags): its folder, `runs show --json`, its iterations."""
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    run = tmp_path / "run"
    vevo("run", *IDS, "--proposer", f"replay:{replay}", "--iterations", str(iterations), *BASE, *budget,
         "--out", str(run))
    return run, show(run), per_iteration(run)


def test_budget_evaluations_stops_at_first_commit_reaching_it(tmp_path):
    run, s, rows = replay_run_with_budget(tmp_path, 5000, "--budget-evaluations", "60")
    assert s["stopped_by"] == "budget.evaluations" and s["status"] == "finished"
    assert rows[-1][1] >= 60 and rows[-2][1] < 60  # stopped at the first commit that reached it
    assert s["evaluations"] == rows[-1][1] and s["iterations"] == rows[-1][0] < 5000
    from evolve.ui.store import RunStore

    store = RunStore("run", run)  # the UI tells a budget stop from an interruption too
    try:
        assert store.overview()["status"] == "finished"
        assert store._budget_spent({"evaluations": 60}) and not store._budget_spent({"evaluations": 10**6})
        assert not store._budget_spent({})
    finally:
        store.close()
    # resuming a run whose budget is spent does nothing; a raised budget continues it to the new one
    vevo("resume", str(run), "--quiet")
    assert per_iteration(run) == rows
    vevo("resume", str(run), "--quiet", "--budget-evaluations", "90")
    more = per_iteration(run)
    assert more[: len(rows)] == rows and more[-1][1] >= 90 > more[-2][1]
    assert show(run)["budgets"] == {"evaluations": 90}
    # the report names the stop for each run
    r = vevo("report", str(run), "--out", str(tmp_path / "rep"))
    assert "stopped by budget.evaluations" in r.stdout
    assert "budget.evaluations" in (tmp_path / "rep" / "index.html").read_text()


@pytest.mark.parametrize("depth", [1, 3])
def test_budget_survives_kill_nine_and_resume(tmp_path, depth):
    """The count comes from the archive: killed twice and resumed, the run stops where an uninterrupted one
    with the same seed stops (at depth 3 the stop drops batches in flight; the checkpoint still lists them)."""
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    args = [*IDS, "--proposer", f"replay:{replay}", "--iterations", "5000", *BASE, "--budget-evaluations", "250",
            "--pipeline-depth", str(depth)]
    ref, run = tmp_path / "ref", tmp_path / "killed"
    vevo("run", *args, "--out", str(ref))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for k, cmd in enumerate((["run", *args, "--out", str(run)], ["resume", str(run), "--quiet"])):
        p = subprocess.Popen([sys.executable, "-m", "evolve.cli", *cmd], cwd=str(ROOT), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        reached_it = wait_for_iteration(run, 8 * (k + 1), timeout=120, poll=0.005)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        assert reached_it
    assert show(run)["status"] == "crashed"
    vevo("resume", str(run), "--quiet")
    a, b = show(ref), show(run)
    assert b["stopped_by"] == a["stopped_by"] == "budget.evaluations"
    assert (b["evaluations"], b["iterations"]) == (a["evaluations"], a["iterations"])
    assert [r[:2] for r in per_iteration(run)] == [r[:2] for r in per_iteration(ref)]


def test_budget_seconds_stops_on_the_run_clock(tmp_path):
    run, s, rows = replay_run_with_budget(tmp_path, 1000000, "--budget-seconds", "1.5")
    assert s["stopped_by"] == "budget.seconds"
    assert rows[-1][3] >= 1.5 > rows[-2][3]
    assert s["compute"]["wall_seconds"] == pytest.approx(rows[-1][3])


def test_budget_tokens_with_the_tiny_proposer_and_seeds(tmp_path):
    """--seeds: every seed stops at its budget; each seed's result.json names it and keeps per-problem results."""
    out = tmp_path / "arm"
    r = vevo("run", "--problem", PROBS[0].id, "--problem", PROBS[1].id, "--proposer", "tiny", "--iterations", "500",
             "--group", "2", "--answers", "2", "--max-tokens", "48", "--budget-tokens", "300", "--seeds", "0-1",
             "--set", "search.retire_solved=false", "--out", str(out), "--quiet", timeout=600)
    assert "stopped by budget.tokens" in r.stdout
    for seed in (0, 1):
        run = out / f"seed-{seed}"
        assert show(run)["stopped_by"] == "budget.tokens"
        rows = per_iteration(run)
        assert rows[-1][2] >= 300 > rows[-2][2]
        res = json.loads((run / "result.json").read_text())
        assert res["seed"] == seed and res["stopped_by"] == "budget.tokens" and res["spent"]["tokens"] == rows[-1][2]
        assert set(res["per_problem"]) == {PROBS[0].id, PROBS[1].id}
        assert all(set(v) == {"first_solve", "best"} and isinstance(v["best"], float)
                   for v in res["per_problem"].values())
    agg = json.loads(vevo("runs", "show", str(out), "--json").stdout)
    assert [x["stopped_by"] for x in agg["seeds"]] == ["budget.tokens"] * 2


def test_bad_budget_is_one_line(tmp_path):
    r = vevo("run", *IDS[:2], "--budget-evaluations", "0", "--out", str(tmp_path / "x"), check=False)
    assert r.returncode == 2 and "search.budget.evaluations" in r.stderr and len(r.stderr.strip().splitlines()) == 1
