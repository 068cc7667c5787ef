"""The campaign loop: problems × islands → prompts → proposer → parse/apply/dedupe → evaluate → archive.

`Campaign` composes the parts: a `Population` (evolve/search/population.py: islands, RNG streams, the program cache,
the dedupe map, what is solved), the proposers (one backend, or a `Portfolio` of members), the evaluator, the
`Archive`, an optional `TrainerHook` (evolve/search/hooks.py), and a `Pipeline` (evolve/search/pipeline.py) that orders the
work. Its stages for one iteration t — one island step — are `prepare` (pick the island, select a parent and
inspirations, build the prompt), `generate`, `screen` (`triage`, then evaluate the fresh candidates) and
`commit` (`settle`, program records, answer vectors, one archive transaction, the trainer).

With ``pipeline_depth=D`` up to D generated batches are in flight (being evaluated, several at once) while the
proposer generates the next, and the loop waits for the oldest to commit before preparing another
(back-pressure). The fixed rule that keeps runs reproducible for a given depth, whatever the timing and the
executor:

* iteration t is prepared (island, parent, inspirations) from the state committed through t-D-1; its
  staleness is the number of batches of the same island still in flight then;
* its candidates are first deduplicated against the programs committed when it was submitted (``known_limit``),
  and evaluated; at commit, in order, those that an earlier in-flight batch committed meanwhile become
  duplicates of it (``settle``), so the archive holds each program once and is the same at every depth's
  commit points. The evaluations dropped that way are counted (``in_flight_dups``).

``pipeline_depth=0`` is the sequential loop. A proposer that declares CONCURRENT (``openai:`` servers, replicas,
``vllm-ray:``) also generates the batches in flight at once (t's generation starts as soon as t is prepared): t's
completions depend only on its prompt, seed and policy version, and before a training step publishes a new
policy the loop waits until every batch already prepared has its completions, so which policy made a batch is
fixed too. A checkpoint keeps the batches generated so far; one prepared but not generated is generated again
on resume (same prompt, same seed) before anything else.

Crash safety: each iteration is one SQLite transaction holding its groups, completions, programs, metrics
and a checkpoint (islands, RNG streams, proposer cursor, and — when pipelined — the batches in flight). ``resume``
restores the last checkpoint and continues exactly where the uninterrupted run would.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from evaluators.executor import Evaluator
from evaluators.types import Evaluation
from problems import metrics as metric_columns
from problems.model import Problem
from proposer.backends.base import CONCURRENT, STATE, VERSIONED, Backend, SamplingParams, has, method, optional
from proposer.answers import naming
from proposer.answers import feedback, scoring
from proposer.answers.mutate import normalized_hash
from proposer.answers.scoring import Slot, Triage, answer_vectors, triage
from proposer.tiny.reach import reach_note

from ..archive import Archive, CompletionRecord, GroupRecord, PortfolioRecord, ProgramRecord, archive_path
from ..config.schema import CampaignConfig
from ..policies.portfolio import Member, Portfolio, batch_reward
from ..progress import Rate, Reporter, as_reporter
from . import budget, health
from .hooks import TrainerHook
from .islands import ProgramFacts
from .pipeline import Batch, Pipeline
from .population import Population, ResumeError
from .program_cache import live_ids, replay

MAX_FORMAT_ERROR_CODE = 100_000  # characters of a malformed answer kept in the archive


@dataclass
class Settled:
    """What evaluation of a batch produced, ready to commit."""
    batch: Batch
    answers: list[list[str]]                 # per completion, m answer bodies
    answer_vectors: list[list[list[float]]]  # per completion, m vectors
    programs: list[ProgramRecord]            # fresh candidates (with their ast_hash), then format errors (None)
    n_candidates: int
    n_dup: int
    n_format_error: int
    eval_seconds: float
    n_in_flight_dup: int = 0                 # evaluated, then found committed by an earlier in-flight batch


@dataclass
class Screened:
    """A batch after its first dedupe (against the archive at submission) and the evaluation of what was fresh."""
    batch: Batch
    triage: Triage
    evaluations: list[Evaluation]   # one per triage.fresh
    seconds: float


class KnownBefore:
    """The dedupe map as it was when a batch was submitted: hashes first archived with an id <= limit. The map
    only grows (the first id of a hash never changes), so this view is fixed while later commits add to it."""

    def __init__(self, known: dict[str, int], limit: int):
        self.known, self.limit = known, limit

    def get(self, h: str) -> int | None:
        pid = self.known.get(h)
        return pid if pid is not None and pid <= self.limit else None


def settle(tri: Triage, known: Any) -> tuple[Triage, list[int]]:
    """The triage of the same answers against a larger archive (``known`` ⊇ the one ``tri`` was made with): fresh
    candidates archived meanwhile become duplicates of the archived program. Returns it and the indices of the
    old ``fresh`` that stay fresh, in order. Equal to re-running `triage` with ``known``, without re-parsing."""
    now = {}
    for i, c in enumerate(tri.fresh):
        pid = known.get(c.ast_hash)
        if pid is not None:
            now[i] = pid
    keep = [i for i in range(len(tri.fresh)) if i not in now]
    if not now:
        return tri, keep
    index = {old: new for new, old in enumerate(keep)}
    slots = [[Slot("known", now[s.ref]) if s.kind == "fresh" and s.ref in now else
              Slot("fresh", index[s.ref]) if s.kind == "fresh" else s for s in row] for row in tri.slots]
    # each fresh candidate had one first occurrence (its later ones were counted as duplicates already)
    return Triage(tri.answers, slots, [tri.fresh[i] for i in keep], tri.format_errors, tri.n_dup + len(now),
                  tri.kinds), keep


class Campaign:
    """One run. `run` restores the last checkpoint (or evaluates the seeds) and hands the stages below
    (`prepare`, `generate`, `submitted`, `screen`, `commit`) to the pipeline."""

    def __init__(self, cfg: CampaignConfig, run_dir: str | Path, problems: list[Problem], backend: Backend,
                 evaluator: Evaluator, *, progress: bool | Reporter = False, trainer: TrainerHook | None = None,
                 on_iteration: Callable[["Campaign", int], None] | None = None,
                 on_restored: Callable[["Campaign"], None] | None = None,
                 members: list[tuple[Member, Backend]] | None = None):
        """``backend`` is the one the trainer and the checkpoint's policy version follow; ``members`` (a proposer
        portfolio, evolve/policies/portfolio.py) the arms and their backends, ``backend`` among them; None: one member.
        ``trainer`` trains ``backend`` between iterations; ``on_iteration(campaign, t)`` is called after each
        commit, after the trainer; ``on_restored(campaign)`` once per start, when the run's state is in memory
        (read back from the archive, or the seeds recorded) and before its first new iteration."""
        if not problems:
            raise ValueError("a campaign needs at least one problem")
        if trainer is not None and not isinstance(trainer, TrainerHook):
            raise TypeError(f"{type(trainer).__name__} is not a TrainerHook (evolve/search/hooks.py)")
        self.cfg, self.backend, self.evaluator = cfg, backend, evaluator
        self.trainer, self.on_iteration, self.on_restored = trainer, on_iteration, on_restored
        if members is None:
            spec = cfg.proposer.spec
            members = [(Member(name=member_name(spec), spec=spec, train=cfg.train.algo != "none"), backend)]
        self.portfolio = Portfolio([a for a, _ in members], cfg.portfolio, cfg.seed, cfg.search.pipeline_depth)
        self.members = {a.name: (a, b) for a, b in members}
        # instruct models (backend.chat: template in use) get the fuller English prompt; the tiny one compact
        self.prompt_style = "chat" if optional(backend, "chat") is True else "compact"
        self.prompt_styles = {a.name: "chat" if optional(b, "chat") is True else "compact" for a, b in members}
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.problems = {p.id: p for p in problems}
        self.order = [p.id for p in problems]
        self.labels = {pid: [p.test_label(i) for i in range(p.n_tests)] for pid, p in self.problems.items()}
        self.archive = Archive(archive_path(self.run_dir), durable=cfg.archive_sync == "full")
        self.reporter = as_reporter(progress)  # the caller's: it outlives the campaign (seeds, summary)
        self.population = Population(self.order, cfg.search, cfg.seed, archive=self.archive)
        # a proposer out of its problems' reach (the tiny one on strings, floats): said at the start and by a stall
        self.reach = reach_note([a.spec for a, _ in members], problems)
        self.health = health.Health(stall=max(20, cfg.search.iterations // 4), stall_hint=self.reach or "")
        self.pipeline: Pipeline[Screened] = Pipeline(
            cfg.search.pipeline_depth, all(has(b, CONCURRENT) for _, b in members), self.reporter)  # generated at once
        self.iteration = -1  # last committed
        self.evals_run = 0  # sandbox evaluations this process ran, for the rate
        self._rate = Rate(0)
        self._clock = (time.monotonic(), 0.0)  # wall_seconds = now - [0] + [1]: the run's time before this start
        self.spent = budget.Spent()  # committed totals (evolve/search/budget.py), read back from the archive on resume

    # ------------------------------------------------------------------ the run
    def run(self) -> dict:
        """Run (or continue) until cfg.search.iterations island steps are recorded, every problem is retired, or
        a budget (search.budget) is reached."""
        self._clock = (time.monotonic(), 0.0)
        self.spent = budget.Spent()
        pending = self._restore()
        if pending is None:
            self._start()
            pending = []
        else:  # this start's config: `vevo resume --iterations` may have moved the budget (ui status, curves)
            self.archive.set_meta("config", json.dumps(self.cfg.model_dump()))
        if self.on_restored is not None:
            self.on_restored(self)
        if self.trainer is not None:
            self.trainer.begin(self)
        self._rate = Rate(self.evals_run)
        self.reporter.begin(self.cfg.search.iterations, self.iteration)
        pinned = self._pin_fixed_policy()
        try:
            if not self.stopped():  # a budget spent before a kill: nothing more to do
                self.pipeline.run(self, pending, self.iteration + 1 + len(pending), self.cfg.search.iterations)
            if self.trainer is not None:
                self.trainer.drain(self)  # a step still on the learner thread is published with the run's end
        finally:
            if pinned:
                self.backend.unpin_sampling()
            self.reporter.end()
        return self.summary()

    def _pin_fixed_policy(self) -> bool:
        """Without a trainer the policy never changes, so the backend samples one snapshot of its weights for the
        whole start instead of taking one per call (the fast sampler's per-call snapshot: ~13 ms of the tiny
        model's ~0.3 s calls; the same draws). Not for a portfolio (a frozen view samples the same backend with its
        adapter switched off, which a snapshot would not see) nor beside an ``on_iteration`` hook (it may change
        the weights)."""
        pin, unpin = method(self.backend, "pin_sampling"), method(self.backend, "unpin_sampling")
        if self.trainer is not None or self.on_iteration is not None or len(self.members) != 1 or not (pin and unpin):
            return False
        return bool(pin())

    def stop_reason(self) -> str | None:
        """The budget the committed totals have reached (``budget.evaluations`` ...), None while none is."""
        return budget.reached(self.cfg.search.budget, self.spent)

    def stopped(self) -> bool:
        """Asked by the pipeline after every commit: a budget is reached, so nothing more is prepared or
        committed."""
        return self.stop_reason() is not None

    def summary(self) -> dict:
        return summarize(self.archive)

    def wall_seconds(self) -> float:
        """The run's clock now: this start's time plus the earlier starts' (what each record stamps)."""
        return round(time.monotonic() - self._clock[0] + self._clock[1], 3)

    def close(self) -> None:
        self.archive.close()

    # ------------------------------------------------------------------ checkpoint
    def _restore(self) -> list[Batch] | None:
        """Continue from the archive's last checkpoint: the population, run health, wall clock, the proposers'
        and the portfolio's state, then the trainer's. Returns the batches in flight at the checkpoint, each
        generated (None: no checkpoint, a new run)."""
        pop = self.population
        pop.n_programs = self.archive.count_programs()
        try:
            ck = self.archive.checkpoint()
        except ValueError as e:
            raise ResumeError(str(e)) from None
        if ck is None:
            return None
        it, st = ck
        loop = st["loop"]
        for pid in loop["problems"]:
            if pid not in self.problems:
                raise ResumeError(f"run was started with problem {pid!r}, which is not available now")
        # dedupe index, best scores, baselines, first solves; the health monitor sees the same iterations again
        done = replay(self.archive, it, self.problems, pop.known, self.health, self.cfg.search.answers)
        pop.best, pop.baseline, pop.solved, pop.seeds = done.best, done.baseline, done.solved, done.seeds
        self.spent = budget.spent(self.archive.n_evaluations(), self.archive.metrics_rows())
        # the clock continues where it stopped: the last record's stamp, or a step published after it
        stamps = [done.wall_seconds] + [r.data.get("wall_seconds") for r in self.archive.training_rows()
                                        if r.step <= it]
        stamps = [float(w) for w in stamps if isinstance(w, (int, float))]
        if stamps:
            self._clock = (self._clock[0], max(stamps))
        pop.restore(st, loop["next_key"])
        self.iteration = it
        if loop.get("backend") is not None and has(self.backend, STATE):
            self.backend.load_state(loop["backend"])
        if loop.get("policy_version") is not None and has(self.backend, VERSIONED):
            self.backend.set_policy_version(int(loop["policy_version"]))
        for name, state in (loop.get("members") or {}).items():
            if name in self.members and state is not None and has(self.members[name][1], STATE):
                self.members[name][1].load_state(state)
        self.portfolio.restore(self.archive.portfolio_rewards(it), it)
        pending = loop.get("pending") or []
        pending = [pending] if isinstance(pending, dict) else pending  # runs of depth <= 1 kept one batch
        batches = [Batch.from_dict(b) for b in pending]
        pop.in_flight = batches
        pop.cache.load_many(live_ids(pop.islands.values(), batches), self.archive)  # members in use, in a few reads
        for b in batches:  # prepared, in generation when the run stopped: the same prompt and seed again,
            if not b.generated and not self.stopped():  # before a training step due at this checkpoint publishes a newer policy
                self.generate(b)
        if self.trainer is not None:
            self.trainer.on_restore(self)
        return batches

    def _checkpoint(self, pending: list[Batch]) -> dict:
        """The state entries to write with this iteration: the islands that moved (`Population.state_entries`)
        and the loop's cursor: the proposers' state and the batches in flight."""
        st = self.population.state_entries()
        st["loop"] = {"problems": self.order, "next_key": self.population.next_key,
                      "backend": self.backend.state() if has(self.backend, STATE) else None,
                      "policy_version": getattr(self.backend, "policy_version", 0),
                      "pending": [b.to_dict() for b in pending]}
        if len(self.members) > 1:  # the other members' own state (a frozen view of the trained one has none)
            st["loop"]["members"] = {n: b.state() for n, (_, b) in self.members.items()
                                     if b is not self.backend and has(b, STATE)}
        return st

    def _record(self, iteration: int, groups: list[GroupRecord], programs: list[ProgramRecord], metrics: dict,
                pending: list[Batch], portfolio: PortfolioRecord | None = None) -> list[int]:
        metrics["wall_seconds"] = self.wall_seconds()
        ids = self.archive.record_iteration(iteration, groups, programs, metrics, self._checkpoint(pending),
                                            portfolio)
        self.spent.add(len(ids), metrics)
        self.population.saved()
        return ids

    # ------------------------------------------------------------------ iteration 0
    def _start(self) -> None:
        self.archive.set_meta("config", json.dumps(self.cfg.model_dump()))
        self.archive.set_meta("problems", json.dumps(self.order))
        t0 = time.perf_counter()
        self.reporter.phase(f"evaluating {len(self.order)} seed program{'s' * (len(self.order) != 1)}")
        evs = self.evaluator.evaluate_many([(self.problems[pid], self.problems[pid].seed_code) for pid in self.order])
        progs = [ProgramRecord(problem=pid, island=-1, code=self.problems[pid].seed_code, evaluation=ev,
                               ast_hash=normalized_hash(self.problems[pid].seed_code)) for pid, ev in zip(self.order, evs)]
        pop = self.population
        first = pop.n_programs + 1
        for i, (pid, ev, p) in enumerate(zip(self.order, evs, progs)):
            pop.add_seed(first + i, pid, p.code, ev, p.ast_hash)
        metrics = {"seeds": len(evs), "eval_seconds": time.perf_counter() - t0, "solved": len(pop.solved)}
        self.health.observe(health.observation(0, metrics, self.cfg.search.answers,
                                               [_outcome(p.problem, p.evaluation) for p in progs]))
        ids = self._record(0, [], progs, metrics, [])
        assert ids == list(range(first, first + len(progs))), "archive ids are not sequential"
        pop.n_programs += len(ids)
        self.iteration = 0

    # ------------------------------------------------------------------ stages: prepare / generate
    def prepare(self, t: int, in_flight: list[Batch]) -> Batch | None:
        """Iteration t's island, member, parent and inspirations, and its prompt; None: every problem retired."""
        key = self.population.pick_island()
        if key is None:
            return None
        arm = self.portfolio.choose(t)  # from the rewards committed through t-D-1, as the parent is
        parent, insp_ids = self.population.select(key)
        stale = sum((b.problem, b.island) == key for b in in_flight)  # its island's batches in flight
        problem, cache = self.problems[key[0]], self.population.cache
        prompt = scoring.parent_prompt(problem, cache[parent], arm.answers or self.cfg.search.answers,
                                       inspirations=[cache[j] for j in insp_ids],
                                       style=self.prompt_styles[arm.name], reasoning=self.cfg.sampling.reasoning,
                                       mode=self.cfg.sampling.answer_mode, labels=self.labels[problem.id],
                                       alias=naming.entry_name(self.members[arm.name][1]))
        batch = Batch(iteration=t, problem=key[0], island=key[1], parent_id=parent, inspiration_ids=insp_ids,
                      prompt=prompt, staleness=stale, member=arm.name)
        self.population.in_flight = [*in_flight, batch]  # their parents stay in the member cache
        return batch

    def member(self, batch: Batch) -> tuple[Member, Backend]:
        """The member proposing ``batch`` and its backend."""
        return self.members.get(batch.member) or self.members[self.portfolio.arms[0].name]

    def generate(self, batch: Batch) -> None:
        t0 = time.perf_counter()
        s = self.cfg.sampling
        arm, backend = self.member(batch)
        sp = SamplingParams(temperature=s.temperature if arm.temperature is None else arm.temperature, top_p=s.top_p,
                            max_tokens=s.max_tokens, seed=(self.cfg.seed * 1_000_003 + batch.iteration) % (2**31))
        out = backend.generate([batch.prompt], self.cfg.trained_group if arm.train else self.cfg.search.group, sp)
        batch.gen_seconds = time.perf_counter() - t0
        batch.completions = list(out[0]) if out else []
        batch.generated = True

    def _renaming(self, problem: str, parent_code: str, backend: Backend) -> naming.Renaming | None:
        """The problem's entry point shown under the proposing member's own name, when it declares one."""
        return naming.Renaming.make(self.problems[problem].entry_point, naming.entry_name(backend), parent_code)

    # ------------------------------------------------------------------ stages: screen / commit
    def submitted(self, batch: Batch) -> None:
        if batch.known_limit is None:  # set at submission: right after the commit that freed its place
            batch.known_limit = self.population.n_programs

    def screen(self, batch: Batch) -> Screened:
        """parse + apply + dedupe against the archive at submission (`triage`) -> evaluate the fresh programs.
        Runs in an evaluation thread: it reads only what was committed before the batch was submitted."""
        t0 = time.perf_counter()
        known: Any = self.population.known[batch.problem]
        if batch.known_limit is not None:
            known = KnownBefore(known, batch.known_limit)
        code = self.population.cache[batch.parent_id].code
        arm, backend = self.member(batch)
        tri = triage([c.text for c in batch.completions], code, arm.answers or self.cfg.search.answers, known,
                     self._renaming(batch.problem, code, backend))
        evs = scoring.evaluate(tri, self.problems[batch.problem], self.evaluator, self.cfg.executor.eval_timeout)
        return Screened(batch, tri, evs, time.perf_counter() - t0)

    def commit(self, screened: Screened, in_flight: list[Batch]) -> None:
        """The batch's archive transaction (its checkpoint keeps ``in_flight``), then progress and the trainer."""
        self.population.in_flight = in_flight
        self._archive(self.settle_outcome(screened), in_flight)
        self._after_commit()

    def settle_outcome(self, s: Screened) -> Settled:
        """At commit, in iteration order: dedupe again against everything committed since submission (`settle`),
        then the program records and answer vectors."""
        pop = self.population
        batch, tri, evs = s.batch, s.triage, s.evaluations
        n_first = len(tri.fresh)
        if batch.known_limit is not None and batch.known_limit < pop.n_programs:
            tri, keep = settle(tri, pop.known[batch.problem])
            evs = [evs[i] for i in keep]
        parent = pop.cache[batch.parent_id]
        programs = self._records(batch, tri, evs, parent.vector.size)
        if parent.names is not None:  # named metrics: every answer on the same columns
            vectors = named_answer_vectors(parent, tri.slots, evs, pop.cache)
        else:
            vectors = answer_vectors(tri.slots, evs, lambda pid: pop.cache[pid].vector, parent.vector.size)
        return Settled(batch=batch, answers=tri.answers, answer_vectors=vectors, programs=programs,
                       n_candidates=len(tri.fresh), n_dup=tri.n_dup, n_format_error=len(tri.format_errors),
                       eval_seconds=s.seconds, n_in_flight_dup=n_first - len(tri.fresh))

    def _records(self, batch: Batch, tri: Triage, evs: list[Evaluation],
                 d: int) -> list[ProgramRecord]:
        """One program record per fresh candidate (with its evaluation), then one per format error."""
        programs: list[ProgramRecord] = []
        for c, ev in zip(tri.fresh, evs):
            programs.append(ProgramRecord(problem=batch.problem, island=batch.island, code=c.code, evaluation=ev,
                                          parent_ids=[batch.parent_id] + batch.inspiration_ids,
                                          completion=(0, c.completion), answer_index=c.answer,
                                          staleness=batch.staleness, ast_hash=c.ast_hash))
        for f in tri.format_errors:
            programs.append(ProgramRecord(problem=batch.problem, island=batch.island,
                                          code=f.text[:MAX_FORMAT_ERROR_CODE],
                                          evaluation=Evaluation.failed("format_error", d, error=f.error),
                                          parent_ids=[batch.parent_id], completion=(0, f.completion),
                                          answer_index=f.answer, staleness=batch.staleness))
        return programs

    def _archive(self, out: Settled, pending: list[Batch]) -> None:
        """The population takes the batch's programs, then one archive transaction: group, completions,
        programs, metrics, the portfolio's reward and the checkpoint."""
        b, pop = out.batch, self.population
        arm = self.member(b)[0]
        temp = self.cfg.sampling.temperature if arm.temperature is None else arm.temperature
        sp = SamplingParams(temperature=temp, top_p=self.cfg.sampling.top_p,
                            max_tokens=self.cfg.sampling.max_tokens).to_dict()
        comps = [CompletionRecord.from_completion(i, c, out.answers[i], out.answer_vectors[i], sp)
                 for i, c in enumerate(b.completions)]
        version = b.completions[0].policy_version if b.completions else 0
        group = GroupRecord(problem=b.problem, island=b.island, parent_id=b.parent_id, prompt=b.prompt,
                            m=arm.answers or self.cfg.search.answers, completions=comps, policy_version=version)
        first = pop.n_programs + 1
        key = (b.problem, b.island)
        pop.add(key, first, out.programs, b.iteration)
        migrated = pop.migrate(b.iteration)
        metrics = {"problem": b.problem, "island": b.island, "parent": b.parent_id, "staleness": b.staleness,
                   "completions": len(b.completions), "candidates": out.n_candidates, "duplicates": out.n_dup,
                   "format_errors": out.n_format_error, "solved": len(pop.solved), "best_scalar": pop.best_of(key),
                   "gen_seconds": round(b.gen_seconds, 6), "eval_seconds": round(out.eval_seconds, 6),
                   "gen_tokens": sum(len(c.token_ids or ()) for c in b.completions),
                   "migrated": migrated, "policy_version": version, "in_flight_dups": out.n_in_flight_dup}
        parent = pop.cache[b.parent_id]
        reward = batch_reward(parent.vector, parent.scalar, pop.baseline.get(b.problem, 0.0),
                              [(p.evaluation.vector, p.evaluation.scalar, p.evaluation.status)
                               for p in out.programs if p.ast_hash is not None])
        self.portfolio.observe(b.iteration, arm.name, reward)
        record = PortfolioRecord(arm.name, version, reward, self.portfolio.state(b.iteration))
        warnings = self.health.observe(health.observation(b.iteration, metrics, arm.answers or self.cfg.search.answers,
                                                          [_outcome(p.problem, p.evaluation) for p in out.programs]))
        if warnings:
            metrics["warnings"] = warnings
        ids = self._record(b.iteration, [group], out.programs, metrics, pending, record)
        for w in warnings:  # once recorded: `runs show` lists them too
            print(health.PREFIX + w, file=sys.stderr, flush=True)
        if ids != list(range(first, first + len(out.programs))):
            raise RuntimeError("archive ids are not sequential: is another process writing this run?")
        pop.n_programs += len(ids)
        self.evals_run += out.n_candidates + out.n_in_flight_dup
        self.iteration = b.iteration

    def _after_commit(self) -> None:
        t = self.iteration
        if self.trainer is not None and self.trainer.due(t):
            self.pipeline.wait_generated()  # a new policy comes: the batches prepared before it use the old one
        best = self.population.best
        self.reporter.update(t, solved=f"{len(self.population.solved)}/{len(self.order)}",
                             best=round(sum(best.values()) / len(best) if best else 0.0, 4),  # mean over problems
                             evals_per_s=round(self._rate.add(self.evals_run), 2))
        if self.trainer is not None:
            self.trainer(self, t)
        if self.on_iteration is not None:
            self.on_iteration(self, t)


def summarize(archive: Archive) -> dict:
    """A run's summary from its archive; ``stopped_by``: what ended it (evolve/search/budget.py: a budget,
    ``iterations``, ``solved``, or None while it runs or after an interruption)."""
    probs = json.loads(archive.get_meta("problems", "[]") or "[]")
    solved = archive.solved_problems()
    why, spent, limits = budget.run_state(archive)
    return {"problems": len(probs), "solved": len(solved), "solved_problems": solved,
            "stopped_by": why, "spent": dataclasses.asdict(spent), "budgets": limits,
            "iterations": archive.last_iteration() or 0, "evaluations": archive.n_evaluations(),
            "status_counts": archive.status_counts(), "best": archive.best_programs(),
            "warnings": [{"iteration": it, "text": w} for it, w in archive.warnings()],
            "skipped_problems": json.loads(archive.get_meta("skipped_problems", "[]") or "[]")}


def _outcome(problem: str, ev: Evaluation) -> health.ProgramOutcome:
    return health.ProgramOutcome(problem, ev.status, float(ev.scalar), health.error_text(ev.artifacts))


def member_name(spec: str) -> str:
    """The member name of a run with one ``proposer:`` (its spec's kind: tiny, hf, openai, replay, ...)."""
    spec = spec.strip()
    return spec if ":" not in spec else spec.partition(":")[0]


def named_answer_vectors(parent: ProgramFacts, slots: list[list[Slot]], evs: list[Evaluation],
                         cache: dict[int, ProgramFacts]) -> list[list[list[float]]]:
    """answer_vectors for evaluators that report metrics by name: every answer of the group laid on the same
    columns, the union of the parent's and the answers' (by name); a column an answer lacks, or an answer
    without a program, gets the group's worst value there."""
    def named(s: Slot) -> tuple[list[str], list[float]]:
        if s.kind == "known":
            m = cache[s.ref]
            return list(m.names or []), [float(x) for x in m.vector]
        if s.kind == "fresh":
            got = feedback.named_metrics(evs[s.ref].artifacts)
            return (got[0] if got else []), [float(x) for x in evs[s.ref].vector]
        return [], []
    flat = [(parent.names or [], [float(x) for x in parent.vector])] + [named(s) for row in slots for s in row]
    _, rows = metric_columns.stack_named(flat)
    it = iter(rows[1:])
    return [[next(it) for _ in row] for row in slots]

