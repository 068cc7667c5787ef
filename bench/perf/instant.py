"""An instant proposer and an instant evaluator, so that a bench times the campaign loop's own work: the backend
returns G completions of m programs never seen before (``def f(x): return x + k``, k from a counter), the
evaluator a d-entry vector from a hash of the code at once (never solved, so no problem is retired). Used by
bench/perf/loop_overhead.py, archive_scale.py, ui_overhead.py and the tests that check them.
"""
from __future__ import annotations

PROGRAM = "def f(x):\n    return x + {k}\n"


class FreshBackend:
    """Backend protocol: every completion carries m programs never handed out before (a counter)."""

    name = "fresh"

    def __init__(self, m: int, policy_version: int = 0) -> None:
        self.m = m
        self.policy_version = policy_version
        self.counter = 0

    def generate(self, prompts, n, sampling):
        from proposer.backends.base import Completion
        from proposer.answers.parsing import format_answers

        groups = []
        for _ in prompts:
            group = []
            for _ in range(n):
                bodies = [PROGRAM.format(k=self.counter + i) for i in range(self.m)]
                self.counter += self.m
                group.append(Completion(text=format_answers(bodies), policy_version=self.policy_version))
            groups.append(group)
        return groups

    def set_policy_version(self, v: int) -> None:
        self.policy_version = int(v)

    def state(self) -> dict:
        return {"counter": self.counter}

    def load_state(self, state: dict) -> None:
        self.counter = int(state["counter"])

    def close(self) -> None:
        pass


def hash_vector(code: str, d: int) -> list[float]:
    """d scores in [0, 1) from a hash of the code: instant, deterministic, varied (so selection has work to do)."""
    import hashlib

    raw = hashlib.blake2b(code.encode("utf-8"), digest_size=64).digest()
    return [raw[j % 64] / 256.0 for j in range(d)]


class HashEvaluator:
    """evaluate_many returning a fixed-size vector per item at once; status 'wrong', never solved."""

    def __init__(self) -> None:
        self.calls = 0
        self.items = 0

    def evaluate_many(self, items, time_limit=None):
        from evaluators.types import Evaluation

        self.calls += 1
        self.items += len(items)
        out = []
        for problem, code in items:
            v = hash_vector(code, max(problem.n_tests, 1))
            out.append(Evaluation(vector=v, scalar=sum(v) / len(v), solved=False, status="wrong"))
        return out


def bench_problem():
    from problems.suites import SUITES

    return SUITES["pbe"]()[0]


class ResumableFreshBackend(FreshBackend):
    """FreshBackend whose counter is part of the checkpoint (STATE), so a resumed campaign keeps proposing
    programs the archive has never seen."""

    capabilities = frozenset({"state"})
