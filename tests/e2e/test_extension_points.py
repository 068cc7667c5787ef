"""Each extension point is one function plus one registry entry: a dummy importer, proposer backend, selection
method and advantage estimator are registered here and driven through the `vevo` command line (in process, so
the registrations are seen), and each one demonstrably runs."""
from __future__ import annotations

import json

import numpy as np
import pytest

from evaluators import executor
from evaluators.pool import SandboxPool
from evolve import cli
from evolve.policies import portfolio, selection, strategies
from evolve.archive import Archive
from problems import importers
from problems.evolve_block import wrap_block
from problems.model import CallCase, Problem
from proposer import backends
from proposer.answers.parsing import format_answers
from proposer.backends.base import Completion
from proposer.training import estimators


def import_pairs(path) -> list[Problem]:
    """A new importer: a JSON file {"name": ..., "pairs": [[x, y], ...]} -> one problem f(x) == y."""
    data = json.loads(path.read_text())
    return [Problem(id=f"pairs/{data['name']}", seed_code=wrap_block("def f(x):\n    return 0"), entry_point="f",
                    tests=[CallCase(args=(x,), expected=y) for x, y in data["pairs"]],
                    description="return y for x")]


class EchoBackend:
    """A new backend: always proposes a wrong answer and the doubling function (no model, no capabilities)."""

    name, policy_version, capabilities = "echo", 0, frozenset()
    calls = 0

    def generate(self, prompts, n, sampling):
        EchoBackend.calls += len(prompts)
        text = format_answers(["def f(x):\n    return x + 1\n", "def f(x):\n    return 2 * x\n"])
        return [[Completion(text=text[len("<answer_1>"):]) for _ in range(n)] for _ in prompts]

    def close(self):
        pass


picked: list[int] = []


def select_first(pool: selection.Pool, rng, params) -> int:
    """A new selection method: the island's first member."""
    picked.append(len(pool.scalars))
    return 0


estimated: list[int] = []


def flat(score_matrices, group_ids, *, rng=None):
    """A new estimator: every completion gets advantage 0."""
    estimated.append(len(score_matrices))
    return np.zeros(len(score_matrices)), {"raw_scores": np.zeros(len(score_matrices))}


evaluated: list[int] = []


chosen: list[int] = []


started: list[int] = []


def from_newest(parents: strategies.Parents, rng, search) -> tuple[int, list[int]]:
    """A new search strategy: always the island's newest member, alone."""
    started.append(parents.members[-1])
    return parents.members[-1], []


def choose_last(history: portfolio.History, rng, params) -> int:
    """A new portfolio choice policy: always the last member."""
    chosen.append(history.t)
    return len(history.arms) - 1



class CountingExecutor:
    """A new executor: the local sandbox pool, counting the candidates it is given."""

    def __init__(self, spec, hide):
        self.pool = SandboxPool(workers=spec.workers, hide=hide)

    def evaluate_many(self, items, time_limit=None):
        evaluated.append(len(items))
        return self.pool.evaluate_many(items, time_limit)

    def close(self):
        self.pool.close()


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(executor.EXECUTORS, "counting", CountingExecutor)
    monkeypatch.setitem(importers.IMPORTERS, "pairs", import_pairs)
    monkeypatch.setitem(backends.BACKENDS, "echo", lambda arg, spec, kw: EchoBackend())
    monkeypatch.setattr(backends, "NO_ARGUMENT", backends.NO_ARGUMENT | {"echo"})
    monkeypatch.setitem(selection.SELECTIONS, "first", select_first)
    monkeypatch.setitem(estimators.ESTIMATORS, "flat", flat)
    monkeypatch.setitem(portfolio.CHOICES, "last", choose_last)
    monkeypatch.setitem(strategies.STRATEGIES, "newest", from_newest)


def test_importer_backend_selection_and_executor_through_the_cli(registered, tmp_path, capsys):
    src = tmp_path / "double.json"
    src.write_text(json.dumps({"name": "double", "pairs": [[1, 2], [2, 4], [5, 10]]}))
    assert cli.main(["problems", "import", "pairs", str(src), "--out", str(tmp_path / "probs")]) == 0
    run = tmp_path / "run"
    picked.clear()
    evaluated.clear()
    rc = cli.main(["run", "--problems-dir", str(tmp_path / "probs"), "--proposer", "echo", "--selection", "first",
                   "--executor", "counting",
                   "--iterations", "3", "--islands", "1", "--answers", "2", "--group", "2", "--workers", "1",
                   "--out", str(run), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert picked and EchoBackend.calls >= 1  # the campaign chose parents with the new method
    assert sum(evaluated) == 3  # the seed, then 2 fresh answers: every evaluation went through the new executor
    with Archive(run / "archive.db", readonly=True) as a:
        solved = [p for p in a.programs() if p.solved]
    assert [p.problem for p in solved] == ["pairs/double"] and "2 * x" in solved[0].code


def test_estimator_is_a_training_algorithm_everywhere(registered, tmp_path, capsys):
    estimated.clear()
    from problems.suites import SUITES

    pid = SUITES["pbe"]()[0].id
    rc = cli.main(["train", "--proposer", "tiny", "--problem", pid, "--algo", "flat", "--steps", "1", "--batch", "1",
                   "--group", "2", "--answers", "2", "--max-tokens", "48", "--workers", "1", "--out",
                   str(tmp_path / "m")])
    assert rc == 0, capsys.readouterr().err
    assert estimated == [2]  # one step, one problem, G = 2 completions
    capsys.readouterr()  # train's progress lines (stderr is no terminal here)
    # the run config accepts it too, and a backend that cannot train gets a one-line error, not a traceback
    rc = cli.main(["run", "--problem", pid, "--proposer", "echo", "--train", "flat", "--iterations", "1",
                   "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--train flat needs" in err


def test_unregistered_names_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--selection", "first"])  # argparse: not a registered choice
    assert "invalid choice: 'first'" in capsys.readouterr().err
    from evolve.config.schema import ConfigError, load_config

    with pytest.raises(ConfigError, match="unknown selection method 'first'"):
        load_config(None, {"search": {"selection": {"method": "first"}}})
    with pytest.raises(backends.BackendError, match="unknown proposer spec 'echo'"):
        backends.make_backend("echo")


def test_first_use_without_problems_runs_the_builtin_suite(tmp_path, capsys):
    """`vevo run --proposer tiny` with nothing to solve used to fail with 'no problems given'."""
    rc = cli.main(["run", "--proposer", "tiny", "--iterations", "0", "--workers", "1", "--out",
                   str(tmp_path / "r"), "--quiet"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "running the built-in suite 'pbe'" in out.err and "solved 0/24 problems" in out.out


def test_choice_policy_picks_the_member_through_the_cli(registered, tmp_path, capsys):
    from problems.suites import SUITES

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"problems: [{SUITES['pbe']()[0].id}]\nproposers:\n  - {{name: one, spec: echo}}\n"
                   "  - {name: two, spec: echo}\n")
    chosen.clear()
    rc = cli.main(["run", str(cfg), "--portfolio", "last", "--iterations", "3", "--islands", "1", "--answers", "2",
                   "--group", "2", "--workers", "1", "--out", str(tmp_path / "run"), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert chosen  # the campaign asked the new policy
    with Archive(tmp_path / "run" / "archive.db", readonly=True) as a:
        assert {r.member for r in a.portfolio_rows()} == {"two"}


def test_search_strategy_chooses_every_parent_through_the_cli(registered, tmp_path, capsys):
    from problems.suites import SUITES

    started.clear()
    run = tmp_path / "run"
    rc = cli.main(["run", "--problem", SUITES["pbe"]()[0].id, "--proposer", "echo", "--strategy", "newest",
                   "--iterations", "3", "--islands", "1", "--answers", "2", "--group", "2", "--workers", "1",
                   "--out", str(run), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    with Archive(run / "archive.db", readonly=True) as a:
        parents = [g.parent_id for g in sorted(a.recent_groups(10), key=lambda g: g.iteration)]
    assert parents == started and len(started) == 3  # every parent was the new strategy's
    with pytest.raises(SystemExit):
        cli.main(["run", "--strategy", "nosuch"])
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err
