"""Learning diagnostics: the reward of a fixed probe set, sampled with a fixed seed, as training goes on.

The reward of the batch a step trains on cannot tell learning from drift: in a campaign the batches move to
harder problems as easy ones get solved, so a falling batch reward can hide learning and a rising one can be
selection. A probe holds the problems, the prompts (built from each problem's seed program, as `vevo train`
builds them) and the sampling seed fixed, so two probes differ only by the policy (common random numbers:
the same seed at every probe). Two probe sets are kept apart:

* ``own``: problems the run trains on (a campaign's own problems; `vevo train`'s training problems);
* ``heldout``: problems it never sees, from the first suite of ``PROBE_SUITES`` that has enough problems
  outside the run (generic drift or transfer, not the search's own progress).

The value is ``mean_set_reward`` (proposer/training/rewards.py: fixed Dirichlet weights, the same for every algorithm).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from problems.model import Problem
from proposer.answers import naming
from proposer.backends.base import SamplingParams
from proposer.training.rewards import comparable_reward
from proposer.answers.scoring import score_completions, seed_prompt

# where held-out probe problems come from: the first suite with enough problems the run does not use
PROBE_SUITES = ("pbe-hard-train", "pbe-train", "pbe-heldout")
PROBE_SEED = 0x5EED  # mixed with the run's seed; the same at every probe of a run


@dataclass(frozen=True)
class Probe:
    name: str  # "own" | "heldout"
    problems: tuple[Problem, ...]
    prompts: tuple[str, ...]
    dims: tuple[int, ...]  # each problem's score-vector length (from its seed program's evaluation)


def pick(ids: Sequence[str], k: int, seed: int) -> list[str]:
    """k of the ids, drawn once from the run's seed (sorted first, so the pick does not depend on order)."""
    ids = sorted(set(ids))
    if k >= len(ids):
        return ids
    rng = np.random.default_rng([seed, PROBE_SEED])
    return sorted(rng.choice(ids, size=k, replace=False).tolist())


def heldout_problems(used: set[str], k: int, seed: int) -> list[Problem]:
    """k problems of the first PROBE_SUITES suite that has at least k problems outside ``used``; [] if none."""
    from problems.suites import SUITES

    for suite in PROBE_SUITES:
        free = {p.id: p for p in SUITES[suite]() if p.id not in used}
        if len(free) >= k:
            return [free[i] for i in pick(list(free), k, seed)]
    return []


def build(name: str, problems: Sequence[Problem], evaluator, m: int, style: str,
          alias: str | None = None) -> Probe | None:
    """The probe's prompts, from each problem's seed program and its evaluation (one evaluator call)."""
    if not problems:
        return None
    seeds = evaluator.evaluate_many([(p, p.seed_code) for p in problems])
    prompts = tuple(seed_prompt(p, s, m, style, alias) for p, s in zip(problems, seeds))
    return Probe(name, tuple(problems), prompts, tuple(max(1, len(s.vector)) for s in seeds))


def sampling(seed: int, temperature: float, max_tokens: int) -> SamplingParams:
    """A probe's sampling: every set's rows in one call, with the probes' fixed seed."""
    return SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)


def scores(probes: Sequence[Probe], groups: Sequence[Sequence[Any]], evaluator, *, m: int,
           alias: str | None = None) -> list[float]:
    """Each probe set's mean_set_reward, from the completions of its prompts (``groups``: one per prompt, the
    sets' prompts in order), scored in the sandbox."""
    it = iter(groups)
    out = []
    for probe in probes:
        mats: list[np.ndarray] = []
        for p, d in zip(probe.problems, probe.dims):
            mats += score_completions(p, [c.text for c in next(it)], m, evaluator, d=d, alias=alias).matrices
        out.append(comparable_reward(mats)["mean_set_reward"])
    return out


class Prober:
    """The probes of one run, built on first use (they need the evaluator) and run on demand."""

    def __init__(self, own: Sequence[Problem], *, seed: int, k: int, group: int, m: int, temperature: float,
                 max_tokens: int, style: str):
        self.own_pool, self.seed, self.k, self.group, self.m = list(own), seed, k, group, m
        self.temperature, self.max_tokens, self.style = temperature, max_tokens, style
        self.probes: list[Probe] | None = None

    def _build(self, evaluator, alias: str | None) -> list[Probe]:
        by_id = {p.id: p for p in self.own_pool}
        own = [by_id[i] for i in pick(list(by_id), self.k, self.seed)]
        held = heldout_problems(set(by_id), self.k, self.seed)
        return [p for p in (build("own", own, evaluator, self.m, self.style, alias),
                            build("heldout", held, evaluator, self.m, self.style, alias)) if p is not None]

    def run(self, backend, evaluator, suffix: str = "") -> dict[str, Any]:
        """{probe_own, probe_heldout, probe_seconds} (each key + suffix); the heldout key is missing when no
        suite had enough problems outside the run."""
        start = time.perf_counter()
        prompts, n, params = self.request(backend, evaluator)
        out = self.score(backend.generate(prompts, n, params), backend, evaluator, suffix)
        out[f"probe_seconds{suffix}"] = time.perf_counter() - start
        return out

    def request(self, backend, evaluator) -> tuple[list[str], int, SamplingParams]:
        """The one sampling call a probe makes, ``backend.generate``'s arguments: its prompts, the completions per
        prompt and the sampling (with the probes' fixed seed). Apart from `score`, so that the call may run
        elsewhere and later (the learner process's idle time: evolve/training/campaign.py)."""
        if self.probes is None:
            self.probes = self._build(evaluator, naming.entry_name(backend))
        return ([q for probe in self.probes for q in probe.prompts], self.group,
                sampling(self.seed * 1_000_003 + PROBE_SEED, self.temperature, self.max_tokens))

    def score(self, groups: Sequence[Sequence[Any]], backend, evaluator, suffix: str = "") -> dict[str, Any]:
        """{probe_own, probe_heldout} (each key + suffix) from the completions of `request`'s call."""
        alias = naming.entry_name(backend)  # the function name the model writes (proposer/answers/naming.py)
        values = scores(self.probes or [], groups, evaluator, m=self.m, alias=alias)
        return {f"probe_{probe.name}{suffix}": v for probe, v in zip(self.probes or [], values)}


def learning(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """`runs show --json`'s ``learning``: one entry per training step (``step`` = the policy version after it,
    ``batch_reward`` = mean_set_reward of the groups it trained on), probe values where a probe ran (None
    between probe points), and a step-0 entry with the probes taken before the first update."""
    out: list[dict[str, Any]] = []
    for r in rows:  # archive TrainingRow: step (the campaign iteration), policy_version, data
        d = r.data
        if "probe_own_before" in d or "probe_heldout_before" in d:
            out.append({"step": 0, "iteration": r.step, "batch_reward": None,
                        "probe_own": d.get("probe_own_before"), "probe_heldout": d.get("probe_heldout_before")})
        out.append({"step": r.policy_version, "iteration": r.step, "batch_reward": d.get("mean_set_reward"),
                    "probe_own": d.get("probe_own"), "probe_heldout": d.get("probe_heldout")})
    return out
