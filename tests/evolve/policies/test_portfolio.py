"""Proposer portfolios: the choice policies as pure functions, the config, and campaigns of two replay members
(one always improves its parent, the other never does) driven through the CLI: ucb's share, exact attribution,
fixed weights within a binomial bound, kill -9 + resume, and which members' policy version moves."""
from __future__ import annotations

import csv
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from evolve.archive import Archive
from evolve.config.schema import ConfigError, load_config
from evolve.policies.portfolio import CHOICES, Member, History, Portfolio, batch_reward, improvement
from problems.evolve_block import wrap_block
from problems.model import CallCase, Problem, write_native
from proposer.answers.parsing import format_answers
from tests.campaign_helpers import ROOT, last_iteration, tail, vevo

N_TESTS = 200
PARAMS = SimpleNamespace(policy="ucb", ucb_c=0.2, decay=0.98, epsilon=0.05, cost_weight=0.0)


def history(t, chosen, rewards, k=2, depth=1, arms=None):
    arms = arms or [Member(f"a{i}") for i in range(k)]
    its = np.arange(1, len(chosen) + 1)
    return History(t, t - depth - 1, arms, its, np.asarray(chosen, dtype=np.int64), np.asarray(rewards, float))


# ------------------------------------------------------------------------------------------------ pure parts
def test_round_robin_gives_each_arm_one_turn_per_round_in_a_shuffled_order():
    arms = [Member(n) for n in "abc"]
    picks = [CHOICES["round_robin"](History(t, t - 2, arms, *(np.zeros(0, int),) * 2, np.zeros(0), seed=5),
                                    np.random.default_rng(0), PARAMS) for t in range(1, 61)]
    for r in range(20):
        assert sorted(picks[3 * r: 3 * r + 3]) == [0, 1, 2]
    assert len({tuple(picks[3 * r: 3 * r + 3]) for r in range(20)}) > 1  # not the same order every round


def test_fixed_weights_are_drawn_in_proportion():
    arms = [Member("a", weight=3.0), Member("b", weight=1.0)]
    n = 4000
    picks = [CHOICES["fixed"](history(t, [], [], arms=arms), np.random.default_rng([0, t]), PARAMS)
             for t in range(1, n + 1)]
    share = picks.count(0) / n
    assert abs(share - 0.75) < 4 * math.sqrt(0.75 * 0.25 / n)


def test_ucb_tries_untried_arms_first_then_exploits_and_thompson_prefers_the_better_arm():
    assert CHOICES["ucb"](history(3, [0], [0.0], k=3), np.random.default_rng(0), PARAMS) == 1
    chosen = [0, 1] * 20
    rewards = [0.01 if c == 0 else 0.0 for c in chosen]  # small rewards: the scale-free normalisation matters
    for name in ("ucb", "thompson"):
        picks = [CHOICES[name](history(42, chosen, rewards), np.random.default_rng([1, s]), PARAMS)
                 for s in range(200)]
        assert picks.count(0) > 150, name


def test_the_choice_sees_only_iterations_committed_through_t_minus_depth_minus_one():
    p = Portfolio([Member("a"), Member("b")], PARAMS, seed=0, depth=3)
    for t, name, r in [(1, "a", 0.0), (2, "b", 0.0), (3, "a", 1.0), (4, "b", 1.0)]:
        p.observe(t, name, r)
    h = p.history(6)
    assert h.cutoff == 2 and list(h.iterations) == [1, 2]
    assert list(p.history(8).iterations) == [1, 2, 3, 4]


def test_reward_is_per_test_aware_and_zero_for_failures():
    parent = [1, 1, 0, 0]
    assert improvement(parent, 0.5, 0.0, [0, 1, 1, 0], 0.5) == 0.25  # same score, one new test solved
    assert improvement(parent, 0.5, 0.0, [1, 1, 1, 1], 1.0) == 0.5
    assert improvement(parent, 0.5, 0.9, [1, 1, 1, 0], 0.75) == 0.25  # below the baseline: only the new test
    assert improvement(parent, 0.5, 0.0, [1, 0, 0, 0], 0.25) == 0.0
    assert batch_reward(parent, 0.5, 0.0, [([1, 1, 1, 1], 1.0, "timeout"), ([0] * 4, 0.0, "error")]) == 0.0
    assert batch_reward(parent, 0.5, 0.0, []) == 0.0


def test_config_rules_are_one_line_errors(tmp_path):
    base = {"proposers": [{"name": "a", "spec": "tiny", "train": True}, {"name": "b", "spec": "tiny"}]}
    cfg = load_config(None, {**base, "train": {"algo": "vpo"}, "portfolio": {"policy": "thompson"}})
    assert [m.name for m in cfg.proposers] == ["a", "b"] and cfg.portfolio.policy == "thompson"
    assert load_config(None, {"portfolio.policy": "fixed"}).portfolio.policy == "fixed"  # the flat (CLI) spelling
    for bad, msg in [({**base}, "train.algo is none"),
                     ({**base, "train": {"algo": "vpo"}, "portfolio": {"policy": "greedy"}}, "unknown portfolio"),
                     ({"proposers": [{"name": "a", "spec": "tiny"}, {"name": "a", "spec": "tiny"}]}, "more than once"),
                     ({"proposers": [{"name": "a b", "spec": "tiny"}]}, "member name"),
                     ({"proposers": [{"name": "a", "spec": "tiny", "wieght": 2}]}, "unknown key"),
                     ({"proposers": [{"name": "a", "spec": "tiny", "train": True},
                                     {"name": "b", "spec": "tiny", "train": True}], "train": {"algo": "vpo"}},
                      "at most one")]:
        with pytest.raises(ConfigError, match=msg) as e:
            load_config(None, bad)
        assert "\n" not in str(e.value)
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("proposers:\n  - {name: a, spec: tiny}\nportfolio: {policy: nope}\n")
    r = vevo("run", str(cfg_file), "--iterations", "1", "--out", str(tmp_path / "r"), check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown portfolio policy 'nope'" in r.stderr


# ------------------------------------------------------------------------------------------------ campaigns
def squares_problem(folder: Path) -> Path:
    """f(x) == x*x on x = 1..200; the seed returns 0 and passes none."""
    p = Problem(id="squares", seed_code=wrap_block("def f(x):\n    return 0"), entry_point="f",
                tests=[CallCase(args=(i,), expected=i * i) for i in range(1, N_TESTS + 1)],
                description="square x")
    write_native(p, folder / "squares")
    return folder


def replay_members(tmp: Path) -> tuple[Path, Path]:
    """good: answer k passes tests 1..k+1, k growing along the file, so every answer passes more tests than any
    program before it (it always improves its parent); bad: fresh programs that pass nothing (never improve)."""
    good, bad = tmp / "good.jsonl", tmp / "bad.jsonl"
    good.write_text("".join(json.dumps({"text": tail(format_answers(
        [f"def f(x):\n    return x * x if x <= {k + 1} else 0\n"]))}) + "\n" for k in range(400)))
    bad.write_text("".join(json.dumps({"text": tail(format_answers(
        [f"def f(x):\n    _ = {k}\n    return 0\n"]))}) + "\n" for k in range(400)))
    return good, bad


def portfolio_config(tmp: Path, policy: str, iterations: int, depth: int = 1, weights=(1.0, 1.0),
                     members=("good", "bad")) -> Path:
    good, bad = replay_members(tmp)
    files = {"good": good, "bad": bad}
    lines = [f"problems_dir: [{squares_problem(tmp / 'probs')}]", "seed: 3", "executor: {workers: 2}",
             f"search: {{iterations: {iterations}, islands: 1, answers: 1, group: 2, pipeline_depth: {depth}}}",
             f"portfolio: {{policy: {policy}}}", "proposers:"]
    for name, w in zip(members, weights):
        lines.append(f"  - {{name: {name}, spec: 'replay:{files[name.rstrip('0123456789')]}', weight: {w}}}")
    cfg = tmp / "c.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def export(run: Path, tmp: Path) -> list[dict]:
    out = tmp / f"{run.name}.csv"
    vevo("export", str(run), "--format", "csv", "--out", str(out))
    return list(csv.DictReader(open(out, encoding="utf-8")))


def test_ucb_gives_the_improving_member_most_iterations_and_attribution_is_exact(tmp_path):
    run = tmp_path / "run"
    vevo("run", str(portfolio_config(tmp_path, "ucb", 60)), "--out", str(run), "--quiet")
    with Archive(run / "archive.db", readonly=True) as a:
        rows = a.portfolio_rows()
        groups = a.groups_by_id(a.group_ids())
    assert [r.iteration for r in rows] == list(range(1, 61))
    later = [r.member for r in rows if r.iteration > 10]
    assert later.count("good") >= 0.8 * len(later), later
    assert all(r.reward > 0 for r in rows if r.member == "good") and all(r.reward == 0 for r in rows if r.member == "bad")
    member = {r.iteration: r.member for r in rows}
    # each group's completions came from the member's own replay file
    for g in groups:
        assert all(("x * x" in c.text) == (member[g.iteration] == "good") for c in g.completions)
    prog = export(run, tmp_path)
    assert [r["proposer"] for r in prog if r["iteration"] == "0"] == [""]
    for r in prog[1:]:
        assert r["proposer"] == member[int(r["iteration"])]
    with Archive(run / "archive.db", readonly=True) as a:
        codes = {p.id: p.code for p in a.programs()}
    assert all(("x * x" in codes[i + 1]) == (r["proposer"] == "good") for i, r in enumerate(prog) if i)
    shown = json.loads(vevo("runs", "show", str(run), "--json").stdout)["proposers"]
    assert shown["good"]["iterations"] == later.count("good") + [r.member for r in rows[:10]].count("good")
    assert shown["good"]["improvements"] == shown["good"]["programs"] > 0 and shown["bad"]["improvements"] == 0
    assert shown["good"]["iterations"] + shown["bad"]["iterations"] == 60
    # curves split by member: each member's own programs on the campaign's iterations
    vevo("curves", str(run), "--by", "proposer", "--out", str(tmp_path / "c.png"), "--csv")
    curves = list(csv.DictReader(open(tmp_path / "c.csv")))
    assert {r["label"] for r in curves} == {"run/good", "run/bad"}
    assert max(float(r["best_mean"]) for r in curves if r["label"] == "run/bad") == 0.0  # the seed's 0, never better
    assert max(float(r["best_mean"]) for r in curves if r["label"] == "run/good") > 0.1
    vevo("report", str(run), "--out", str(tmp_path / "rep"))
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "<table id='proposers'>" in page and "<td>good</td>" in page and "<td>bad</td>" in page
    # the live UI splits the run by member too (the run's page), and names who solved a problem first
    from evolve.ui.server import App

    app = App({"run": [run]})
    try:
        _, body = app.route("/run/run/", {})
        assert "<table id='proposers'>" in body and "data-member='good'" in body and "data-member='bad'" in body
        solved = [r for r in prog if r["solved"] == "True" and r["proposer"]]
        _, body = app.route("/run/run/problem", {"id": [prog[0]["problem"]]})
        assert (f"from proposer {solved[0]['proposer']}" in body) if solved else "Not solved yet" in body
    finally:
        app.close()


def test_fixed_weights_are_honoured_within_a_binomial_bound(tmp_path):
    run = tmp_path / "run"
    n = 80
    vevo("run", str(portfolio_config(tmp_path, "fixed", n, weights=(3.0, 1.0), members=("bad1", "bad2"))),
         "--out", str(run), "--quiet")
    with Archive(run / "archive.db", readonly=True) as a:
        members = [r.member for r in a.portfolio_rows()]
    assert len(members) == n
    k = members.count("bad1")
    assert abs(k - 0.75 * n) <= 3.5 * math.sqrt(n * 0.75 * 0.25), k  # two-sided p < 0.001


@pytest.mark.parametrize("depth,n_kills", [(1, 6), (3, 4)])
def test_kill_nine_and_resume_of_a_ucb_campaign_equals_the_uninterrupted_run(tmp_path, depth, n_kills):
    cfg = portfolio_config(tmp_path, "ucb", 70, depth=depth)
    ref = tmp_path / "ref"
    vevo("run", str(cfg), "--out", str(ref), "--quiet")
    run = tmp_path / "killed"
    rng = random.Random(depth)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    kills, last = 0, -1
    while kills < n_kills:
        cmd = ["resume", str(run), "--quiet"] if (run / "config.yaml").exists() else \
            ["run", str(cfg), "--out", str(run), "--quiet"]
        p = subprocess.Popen([sys.executable, "-m", "evolve.cli", *cmd], cwd=str(ROOT), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        target = max(last, 0) + rng.randint(2, 12)
        end = time.time() + 60
        while p.poll() is None and last_iteration(run) < target and time.time() < end:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.02))
        if p.poll() is not None:
            assert p.returncode == 0, p.stderr.read().decode()[-3000:]
            break
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
        last = max(last, last_iteration(run))
    vevo("resume", str(run), "--quiet")
    assert kills >= 2
    assert export(ref, tmp_path) == export(run, tmp_path)
    rows = []
    for r in (ref, run):
        with Archive(r / "archive.db", readonly=True) as a:
            rows.append([(x.iteration, x.member, x.reward, x.data) for x in a.portfolio_rows()])
    assert rows[0] == rows[1] and {m for _, m, _, _ in rows[0]} == {"good", "bad"}


def test_only_the_trained_member_changes_policy_version_and_shares_the_weights(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("suite: pbe\nsearch: {iterations: 8, islands: 1, answers: 2, group: 2}\nseed: 1\n"
                   "sampling: {max_tokens: 96}\n"
                   "train: {algo: vpo, every: 3, batch: 2, group: 2}\nportfolio: {policy: round_robin}\nproposers:\n"
                   "  - {name: policy, spec: tiny, train: true}\n  - {name: base, spec: tiny}\n")
    run = tmp_path / "run"
    vevo("run", str(cfg), "--out", str(run), "--quiet")
    with Archive(run / "archive.db", readonly=True) as a:
        rows = a.portfolio_rows()
        member = {r.iteration: r.member for r in rows}
        comps = [(member[g.iteration], c.policy_version) for g in a.groups_by_id(a.group_ids()) for c in g.completions]
        progs = [(member[p.iteration], p.policy_version) for p in a.programs() if p.iteration > 0]
        steps = a.training_rows()
    assert {m for m, _ in comps} == {"policy", "base"} and len(steps) >= 2
    assert all(v == 0 for m, v in comps + progs if m == "base")
    assert max(v for m, v in comps if m == "policy") >= 1
    assert all(r.policy_version == 0 for r in rows if r.member == "base")
    # the trainer learned from its own member's groups only
    with Archive(run / "archive.db", readonly=True) as a:
        own = set(a.group_ids("policy"))
        assert own and own.isdisjoint(a.group_ids("base"))
    # `vevo eval --run` on a portfolio loads its trained member's final policy
    import torch

    from evolve.launch.policy import final_version, load_policy, snapshots

    backend, _, version = load_policy(run)
    assert version == final_version(run) == len(steps) >= 2 and backend.policy_version == version
    saved = torch.load(snapshots(run)[version] / "weights.pt", map_location="cpu", weights_only=True)
    got = {n: p for n, p in backend.model.named_parameters() if p.requires_grad}
    assert got and set(got) == set(saved) and all(torch.equal(got[n].detach().cpu(), saved[n]) for n in got)


def test_one_proposer_run_is_a_one_member_portfolio(tmp_path):
    good, _ = replay_members(tmp_path)
    run = tmp_path / "run"
    vevo("run", "--problems-dir", str(squares_problem(tmp_path / "probs")), "--proposer", f"replay:{good}",
         "--iterations", "5", "--islands", "1", "--answers", "1", "--group", "2", "--out", str(run), "--quiet")
    rows = export(run, tmp_path)
    assert {r["proposer"] for r in rows[1:]} == {"replay"} and rows[0]["proposer"] == ""
    shown = json.loads(vevo("runs", "show", str(run), "--json").stdout)["proposers"]
    assert shown["replay"]["iterations"] == 5 and shown["replay"]["solved_first"] == 0


def test_archives_before_portfolios_read_and_gain_the_table(tmp_path):
    """An archive written before the portfolio table existed: read-only, every row's proposer is "" and there
    are no member stats; opened for writing (a resume), the table is added."""
    import sqlite3

    from evolve.archive import PortfolioRecord, ProgramRecord
    from evaluators.types import Evaluation

    db = tmp_path / "archive.db"
    with Archive(db) as a:
        a.record_iteration(0, [], [ProgramRecord("p", -1, "x = 1", Evaluation([0.0], 0.0, False, "wrong"))], {}, {})
        a.record_iteration(1, [], [], {}, {}, PortfolioRecord("m", 0, 0.5, {"m": {"n": 1.0, "mean": 0.5}}))
        assert [(r.iteration, r.member, r.reward) for r in a.portfolio_rows()] == [(1, "m", 0.5)]
    con = sqlite3.connect(db)
    con.execute("DROP TABLE portfolio")
    con.commit()
    con.close()
    with Archive(db, readonly=True) as a:
        assert not a.has_portfolio() and a.portfolio_rows() == []
        assert [r["proposer"] for r in a.export_rows()] == [""]
        from evolve.analysis.portfolio_stats import member_stats

        assert member_stats(a) == {}
    with Archive(db) as a:
        assert a.has_portfolio() and a.portfolio_rows() == []


def test_the_iteration_stream_is_fixed_by_seed_and_t_and_uniform():
    p = Portfolio([Member("a"), Member("b")], PARAMS, seed=7, depth=1)
    assert [p.rng(t).random() for t in range(5)] == [p.rng(t).random() for t in range(5)]
    assert p.rng(3).random() != Portfolio([Member("a")], PARAMS, seed=8, depth=1).rng(3).random()
    u = np.array([p.rng(t).random() for t in range(20000)])
    assert ((u >= 0) & (u < 1)).all() and abs(u.mean() - 0.5) < 0.01
    assert (np.histogram(u, bins=10)[0] > 1800).all()
    g = p.rng(3)
    assert 0 < g.beta(1.0, 1.0) < 1 and g.choice(3) in (0, 1, 2)  # the rest of numpy's Generator, made on use


def test_the_frozen_member_is_the_trained_backend_with_its_adapter_off(tmp_path):
    """One copy of the weights: the frozen member of the same tiny spec is a view of the trained member's backend,
    and after the adapter has moved it still samples exactly what a fresh, untrained tiny proposer samples."""
    import torch

    from evolve.launch.members import build_members
    from proposer.backends import make_backend
    from proposer.backends.base import SamplingParams
    from proposer.backends.frozen import FrozenAdapterView
    from proposer.training.lora import wrap_lora

    cfg = load_config(None, {"suite": "pbe", "train": {"algo": "vpo"}, "proposers": [
        {"name": "policy", "spec": "tiny", "train": True}, {"name": "base", "spec": "tiny"}]})
    built = []
    primary, members = build_members(cfg, lambda spec, options: built.append(spec) or make_backend(spec, **options))
    assert built == ["tiny"] and isinstance(members[1][1], FrozenAdapterView) and members[1][1].inner is primary
    torch.manual_seed(0)
    primary.model = wrap_lora(primary.model, 8, None, None)
    with torch.no_grad():
        for name, p in primary.model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.5)  # a trained adapter
    primary.set_policy_version(3)
    sp = SamplingParams(temperature=1.0, max_tokens=48, seed=123)
    prompt = "Write f(x) that doubles x.\n"
    frozen = members[1][1].generate([prompt], 2, sp)[0]
    fresh = make_backend("tiny").generate([prompt], 2, sp)[0]
    trained = primary.generate([prompt], 2, sp)[0]
    assert [c.token_ids for c in frozen] == [c.token_ids for c in fresh] != [c.token_ids for c in trained]
    assert [c.logprobs for c in frozen] == [c.logprobs for c in fresh]
    assert {c.policy_version for c in frozen} == {0} and {c.policy_version for c in trained} == {3}
