"""The campaign loop: problems × islands → prompts → proposer → parse/apply/dedupe → evaluate → archive.

One iteration is one island step. With ``pipeline_depth=D`` up to D generated batches are in flight (being
evaluated, several at once) while the proposer generates the next, and the loop waits for the oldest to commit
before preparing another (back-pressure: never more than D batches of work queued). The fixed rule that keeps
runs reproducible for a given depth, whatever the timing and the executor:

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
and a checkpoint (islands, RNG streams, proposer cursor, and — when pipelined — the batches in flight). ``resume`` restores the last checkpoint and continues exactly where the uninterrupted run would.
"""
from __future__ import annotations

import json
import sys
import math
import time
import queue
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np

from evaluators.executor import Evaluator
from evaluators.types import Evaluation
from problems import metrics as metric_columns
from problems.errors import VevoError
from problems.model import Problem
from proposer.backends.base import CONCURRENT, STATE, VERSIONED, Backend, Completion, SamplingParams, has
from proposer.answers import naming
from proposer.answers.mutate import MutationError, apply_answer, normalized_hash
from proposer.answers.parsing import parse_answers
from proposer.answers.prompting import PromptContext, build_prompt

from . import feedback, health, selection
from .archive import Archive, CompletionRecord, GroupRecord, PortfolioRecord, ProgramRecord
from .config import CampaignConfig
from .islands import Island, Member
from .portfolio import Arm, Portfolio, batch_reward
from .progress import Rate, Reporter, as_reporter

MAX_FORMAT_ERROR_CODE = 100_000  # characters of a malformed answer kept in the archive


class ResumeError(VevoError, ValueError):
    """A run whose checkpoint cannot be continued here (one line for the CLI)."""


@dataclass
class Batch:
    """One iteration's prompt and (after generation) its group of completions."""
    iteration: int
    problem: str
    island: int
    parent_id: int
    inspiration_ids: list[int]
    prompt: str
    staleness: int
    completions: list[Completion] = field(default_factory=list)
    gen_seconds: float = 0.0
    known_limit: int | None = None  # programs with id <= this are the first dedupe's archive (set at submission)
    generated: bool = False         # completions are in (set after them, by the thread that generated them)
    member: str = ""                # the portfolio member that proposes it ("": the first, in old checkpoints)

    def to_dict(self) -> dict:
        generated = self.generated  # read first: when it is True the completions are already there
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**d, "inspiration_ids": list(self.inspiration_ids), "generated": generated,
                "completions": [asdict(c) for c in (self.completions if generated else [])]}

    @classmethod
    def from_dict(cls, d: dict) -> "Batch":
        d = dict(d)
        d.setdefault("known_limit", None)
        d.setdefault("generated", True)  # checkpoints before concurrent generation kept generated batches only
        d.setdefault("member", "")
        d["completions"] = [Completion(**c) for c in d["completions"]]
        return cls(**d)


@dataclass
class Candidate:
    completion: int
    answer: int
    code: str
    ast_hash: str


@dataclass
class Outcome:
    """What evaluation of a batch produced, ready to commit."""
    batch: Batch
    answers: list[list[str]]                 # per completion, m answer bodies
    answer_vectors: list[list[list[float]]]  # per completion, m vectors
    programs: list[ProgramRecord]
    hashes: list[str | None]                 # ast hash per program record (None for format errors)
    n_candidates: int
    n_dup: int
    n_format_error: int
    eval_seconds: float
    n_in_flight_dup: int = 0                 # evaluated, then found committed by an earlier in-flight batch


@dataclass(frozen=True)
class Slot:
    """Where one answer's test vector comes from: nowhere (empty or unusable: zeros), a program already in the
    archive (``ref`` = its id), or a fresh candidate of this batch (``ref`` = its index in ``Triage.fresh``)."""
    kind: Literal["zero", "known", "fresh"]
    ref: int = -1


@dataclass(frozen=True)
class FormatError:
    completion: int
    answer: int
    text: str
    error: str


@dataclass
class Triage:
    """A batch's answers sorted before evaluation: only ``fresh`` candidates go to the sandbox."""
    answers: list[list[str]]        # per completion, the m answer bodies
    slots: list[list[Slot]]         # per completion, per answer
    fresh: list[Candidate]
    format_errors: list[FormatError]
    n_dup: int


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


def triage(completions: list[Completion], parent_code: str, m: int, known: Any,
           renaming: naming.Renaming | None = None) -> Triage:
    """Parse each completion into m answers, apply each to the parent, and dedupe by normalised AST against the
    archive (``known.get(hash)`` -> program id or None: a dict or a `KnownBefore`) and within the batch. With a
    ``renaming`` the answers are in the model's names: applied to the renamed parent, then renamed back. Pure:
    the same inputs give the same triage."""
    tri = Triage([], [], [], [], 0)
    shown = renaming.to_model(parent_code) if renaming is not None else parent_code
    fresh_by_hash: dict[str, int] = {}
    for ci, comp in enumerate(completions):
        parsed = parse_answers(comp.text, m)
        tri.answers.append([a.body for a in parsed])
        if all(a.kind == "empty" for a in parsed):
            tri.format_errors.append(FormatError(ci, 0, comp.text, "no answers in the expected format"))
            tri.slots.append([Slot("zero")] * m)
            continue
        row: list[Slot] = []
        for ai, a in enumerate(parsed):
            if a.kind == "empty":
                row.append(Slot("zero"))
                continue
            try:
                code = apply_answer(shown, a)
                code = renaming.from_model(code) if renaming is not None else code
            except MutationError as e:
                tri.format_errors.append(FormatError(ci, ai, a.body, str(e)))
                row.append(Slot("zero"))
                continue
            h = normalized_hash(code)
            pid = known.get(h)
            if pid is not None:
                tri.n_dup += 1
                row.append(Slot("known", pid))
            elif h in fresh_by_hash:
                tri.n_dup += 1
                row.append(Slot("fresh", fresh_by_hash[h]))
            else:
                fresh_by_hash[h] = len(tri.fresh)
                row.append(Slot("fresh", len(tri.fresh)))
                tri.fresh.append(Candidate(ci, ai, code, h))
        tri.slots.append(row)
    return tri


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
    return Triage(tri.answers, slots, [tri.fresh[i] for i in keep], tri.format_errors, tri.n_dup + len(now)), keep


def answer_vectors(slots: list[list[Slot]], evs: list[Evaluation], known_vector: Callable[[int], Any],
                   d: int) -> list[list[list[float]]]:
    """Per completion, per answer, the test vector the trainer learns from (zeros for unusable answers)."""
    def one(s: Slot) -> list[float]:
        if s.kind == "known":
            return [float(x) for x in known_vector(s.ref)]
        if s.kind == "fresh":
            return [float(x) for x in evs[s.ref].vector]
        return [0.0] * d
    return [[one(s) for s in row] for row in slots]


class Campaign:
    def __init__(self, cfg: CampaignConfig, run_dir: str | Path, problems: list[Problem], backend: Backend,
                 evaluator: Evaluator, *, progress: bool | Reporter = False,
                 on_iteration: Callable[["Campaign", int], None] | None = None,
                 members: list[tuple[Arm, Backend]] | None = None):
        """``backend`` is the one the trainer and the checkpoint's policy version follow; ``members`` (a proposer
        portfolio, evolve/portfolio.py) the arms and their backends, ``backend`` among them; None: one member."""
        if not problems:
            raise ValueError("a campaign needs at least one problem")
        self.cfg, self.backend, self.evaluator = cfg, backend, evaluator
        if members is None:
            members = [(Arm(name=member_name(cfg.proposer), spec=cfg.proposer, train=cfg.train.algo != "none"),
                        backend)]
        self.portfolio = Portfolio([a for a, _ in members], cfg.portfolio, cfg.seed, cfg.pipeline_depth)
        self.members = {a.name: (a, b) for a, b in members}
        # instruct models (backend.chat: template in use) get the fuller English prompt; the tiny one compact
        self.prompt_style = "chat" if getattr(backend, "chat", False) is True else "compact"
        self.prompt_styles = {a.name: "chat" if getattr(b, "chat", False) is True else "compact" for a, b in members}
        self.baseline: dict[str, float] = {}  # problem -> its seed program's scalar (the bandit's reward baseline)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.problems = {p.id: p for p in problems}
        self.order = [p.id for p in problems]
        self.archive = Archive(self.run_dir / "archive.db", durable=cfg.archive_sync == "full")
        self.reporter = as_reporter(progress)  # the caller's: it outlives the campaign (seeds, summary)
        self.best: dict[str, float] = {}  # problem -> best scalar so far, for progress
        self.evals_run = 0  # sandbox evaluations this process ran, for the rate
        self.on_iteration = on_iteration
        self.keys = [(pid, k) for pid in self.order for k in range(cfg.islands)]
        seqs = np.random.SeedSequence(cfg.seed).spawn(len(self.keys))
        self.rngs = {key: np.random.default_rng(s) for key, s in zip(self.keys, seqs)}
        self.islands = {key: Island(key[0], key[1]) for key in self.keys}
        self.cache: dict[int, Member] = {}
        self.known: dict[str, dict[str, int]] = {pid: {} for pid in self.order}  # ast hash → program id
        self.solved: dict[str, int] = {}
        self.next_key = 0
        self.iteration = -1  # last committed
        self.labels = {pid: [p.test_label(i) for i in range(p.n_tests)] for pid, p in self.problems.items()}
        self.health = health.Health(stall=max(20, cfg.iterations // 4))
        self._pending: list[Batch] = []  # prepared, not yet committed, oldest first (kept in the checkpoint)
        self._generating: dict[int, Future] = {}  # iteration -> its generation in the pool (CONCURRENT proposers)
        self._dirty: set[tuple[str, int]] = set(self.keys)  # islands whose state the next commit must write
        self._clock = (time.monotonic(), 0.0)  # wall_seconds = now - [0] + [1]: the run's time before this start

    # ------------------------------------------------------------------ state
    def _restore(self) -> bool:
        self.n_programs = self.archive.count_programs()
        try:
            ck = self.archive.checkpoint()
        except ValueError as e:
            raise ResumeError(str(e)) from None
        if ck is None:
            return False
        it, st = ck
        loop = st["loop"]
        for pid in loop["problems"]:
            if pid not in self.problems:
                raise ResumeError(f"run was started with problem {pid!r}, which is not available now")
        outcomes: dict[int, list[health.Outcome]] = {}
        for row in self.archive.programs():
            if row.problem not in self.problems or row.iteration > it:
                continue
            outcomes.setdefault(row.iteration, []).append(_outcome(row.problem, row.evaluation))
            self._remember(row.id, row.problem, row.code, row.evaluation, row.artifacts.get("ast_hash"))
            if row.island == -1:
                self.baseline.setdefault(row.problem, float(row.scalar))
            if row.solved:
                self.solved.setdefault(row.problem, row.iteration)  # rows come in id order: the first is earliest
        for key in self.keys:
            entry = st.get(_state_key(key))
            if entry is None:
                raise ResumeError(f"the run's checkpoint has no state for island {key[1]} of {key[0]!r}")
            self.islands[key].members = [int(x) for x in entry["members"]]
            self.rngs[key].bit_generator.state = entry["rng"]
        self.next_key = loop["next_key"]
        self.iteration = it
        for m in self.archive.metrics_rows():  # the health monitor sees the same iterations again, silently
            if m.iteration <= it:
                self.health.observe(health.observation(m.iteration, m.data, self.cfg.answers,
                                                       outcomes.get(m.iteration, [])))
                if isinstance(m.data.get("wall_seconds"), (int, float)):  # the clock continues where it stopped
                    self._clock = (self._clock[0], float(m.data["wall_seconds"]))
        if loop.get("backend") is not None and has(self.backend, STATE):
            self.backend.load_state(loop["backend"])
        if loop.get("policy_version") is not None and has(self.backend, VERSIONED):
            self.backend.set_policy_version(int(loop["policy_version"]))
        for name, st in (loop.get("members") or {}).items():
            if name in self.members and st is not None and has(self.members[name][1], STATE):
                self.members[name][1].load_state(st)
        self.portfolio.restore([(r.iteration, r.member, r.reward) for r in self.archive.portfolio_rows()], it)
        pending = loop.get("pending") or []
        pending = [pending] if isinstance(pending, dict) else pending  # runs of depth <= 1 kept one batch
        self._pending = [Batch.from_dict(b) for b in pending]
        for b in self._pending:  # prepared, in generation when the run stopped: the same prompt and seed again,
            if not b.generated:  # before a training step due at this checkpoint publishes a newer policy
                self.generate(b)
        hook = getattr(self.on_iteration, "on_restore", None)
        if hook is not None:
            hook(self)
        return True

    def _checkpoint(self, pending: list[Batch]) -> dict:
        """The state entries to write with this iteration: the loop's cursor, and each island whose members or
        RNG moved since the last commit (usually one), so the cost does not grow with the number of problems."""
        st: dict[str, Any] = {_state_key(k): {"members": self.islands[k].members,
                                              "rng": self.rngs[k].bit_generator.state} for k in self._dirty}
        st["loop"] = {"problems": self.order, "next_key": self.next_key,
                      "backend": self.backend.state() if has(self.backend, STATE) else None,
                      "policy_version": getattr(self.backend, "policy_version", 0),
                      "pending": [b.to_dict() for b in pending]}
        if len(self.members) > 1:  # the other members' own state (a frozen view of the trained one has none)
            st["loop"]["members"] = {n: b.state() for n, (_, b) in self.members.items()
                                     if b is not self.backend and has(b, STATE)}
        return st

    def _record(self, iteration: int, groups: list[GroupRecord], programs: list[ProgramRecord], metrics: dict,
                pending: list[Batch], portfolio: PortfolioRecord | None = None) -> list[int]:
        metrics["wall_seconds"] = round(time.monotonic() - self._clock[0] + self._clock[1], 3)
        ids = self.archive.record_iteration(iteration, groups, programs, metrics, self._checkpoint(pending),
                                            portfolio)
        self._dirty.clear()
        return ids

    def _remember(self, pid: int, problem: str, code: str, ev: Evaluation, ast_hash: str | None) -> None:
        if ev.status == "format_error":
            return
        named = feedback.named_metrics(ev.artifacts)
        self.cache[pid] = Member(vector=np.asarray(ev.vector, dtype=float), scalar=float(ev.scalar),
                                 code_len=len(code), solved=ev.solved, code=code, status=ev.status,
                                 stderr=str(ev.artifacts.get("stderr", ""))[-400:],
                                 names=named[0] if named else None, metrics=named[1] if named else None,
                                 feedback=feedback.feedback(ev.artifacts) if named else None)
        self.known[problem].setdefault(ast_hash or normalized_hash(code), pid)
        self.best[problem] = max(self.best.get(problem, -math.inf), float(ev.scalar))

    def active(self, problem: str) -> bool:
        return not (self.cfg.retire_solved and problem in self.solved)

    # ------------------------------------------------------------------ iteration 0
    def _start(self) -> None:
        self.archive.set_meta("config", json.dumps(self.cfg.model_dump()))
        self.archive.set_meta("problems", json.dumps(self.order))
        t0 = time.perf_counter()
        self.reporter.phase(f"evaluating {len(self.order)} seed program{'s' * (len(self.order) != 1)}")
        evs = self.evaluator.evaluate_many([(self.problems[pid], self.problems[pid].seed_code) for pid in self.order])
        progs = []
        for pid, ev in zip(self.order, evs):
            ev.artifacts["ast_hash"] = normalized_hash(self.problems[pid].seed_code)
            progs.append(ProgramRecord(problem=pid, island=-1, code=self.problems[pid].seed_code, evaluation=ev))
        first = self.n_programs + 1
        for i, (pid, ev) in enumerate(zip(self.order, evs)):
            self._remember(first + i, pid, self.problems[pid].seed_code, ev, ev.artifacts["ast_hash"])
            self.baseline.setdefault(pid, float(ev.scalar))
            for k in range(self.cfg.islands):
                self.islands[(pid, k)].members.append(first + i)
            if ev.solved:
                self.solved.setdefault(pid, 0)
        metrics = {"seeds": len(evs), "eval_seconds": time.perf_counter() - t0, "solved": len(self.solved)}
        self.health.observe(health.observation(0, metrics, self.cfg.answers,
                                               [_outcome(p.problem, p.evaluation) for p in progs]))
        ids = self._record(0, [], progs, metrics, [])
        assert ids == list(range(first, first + len(progs))), "archive ids are not sequential"
        self.n_programs += len(ids)
        self.iteration = 0

    # ------------------------------------------------------------------ prepare / generate
    def _pick_island(self) -> tuple[str, int] | None:
        n = len(self.keys)
        for step in range(n):
            key = self.keys[(self.next_key + step) % n]
            if self.active(key[0]):
                self.next_key = (self.next_key + step + 1) % n
                return key
        return None

    def prepare(self, t: int) -> Batch | None:
        key = self._pick_island()
        if key is None:
            return None
        problem = self.problems[key[0]]
        arm = self.portfolio.choose(t)  # from the rewards committed through t-D-1, as the parent is
        island, rng = self.islands[key], self.rngs[key]
        self._dirty.add(key)
        members = island.members
        vecs = _stack([self.cache[p] for p in members])
        scalars = np.array([self.cache[p].scalar for p in members])
        pool = selection.Pool(vecs, scalars, np.array([self.cache[p].code_len for p in members]))
        i = selection.SELECTIONS[self.cfg.selection.method](pool, rng, self.cfg.selection)
        parent = members[i]
        insp = selection.inspirations(vecs[i], vecs, scalars, self.cfg.selection.inspirations, rng,
                                      exclude=i) if vecs.size else []
        insp_ids = [members[j] for j in insp]
        pm = self.cache[parent]
        labels = self.labels[problem.id] or pm.names or [f"metric {j}" for j in range(pm.vector.size)]
        ctx = PromptContext(problem_id=problem.id, description=problem.description, parent_code=pm.code,
                            parent_vector=[float(x) for x in pm.vector], test_labels=labels[: pm.vector.size],
                            parent_stderr=pm.stderr if pm.status not in ("ok", "wrong") else "",
                            inspirations=[(self.cache[j].code, [float(x) for x in self.cache[j].vector])
                                          for j in insp_ids],
                            m=arm.answers or self.cfg.answers, mode=self.cfg.sampling.answer_mode,
                            metrics=None if pm.metrics is None else {"score": pm.scalar, **pm.metrics},
                            feedback=pm.feedback or {},
                            inspiration_scores=[self.cache[j].scalar for j in insp_ids])
        stale = sum((b.problem, b.island) == key for b in self._pending)  # its island's batches in flight
        ctx = naming.present(ctx, self._renaming(problem.id, pm.code, self.members[arm.name][1]))
        return Batch(iteration=t, problem=key[0], island=key[1], parent_id=parent, inspiration_ids=insp_ids,
                     prompt=build_prompt(ctx, style=self.prompt_styles[arm.name],
                                         reasoning=self.cfg.sampling.reasoning),
                     staleness=stale, member=arm.name)

    def arm(self, batch: Batch) -> tuple[Arm, Backend]:
        """The member proposing ``batch`` and its backend."""
        return self.members.get(batch.member) or self.members[self.portfolio.arms[0].name]

    def generate(self, batch: Batch) -> None:
        t0 = time.perf_counter()
        s = self.cfg.sampling
        arm, backend = self.arm(batch)
        sp = SamplingParams(temperature=s.temperature if arm.temperature is None else arm.temperature, top_p=s.top_p,
                            max_tokens=s.max_tokens, seed=(self.cfg.seed * 1_000_003 + batch.iteration) % (2**31))
        out = backend.generate([batch.prompt], self.cfg.group, sp)
        batch.gen_seconds = time.perf_counter() - t0
        batch.completions = list(out[0]) if out else []
        batch.generated = True

    def _renaming(self, problem: str, parent_code: str, backend: Backend) -> naming.Renaming | None:
        """The problem's entry point shown under the proposing member's own name, when it declares one."""
        return naming.Renaming.make(self.problems[problem].entry_point, naming.entry_name(backend), parent_code)

    # ------------------------------------------------------------------ evaluate / commit
    def evaluate(self, batch: Batch) -> Outcome:
        """`screen` then `settle_outcome`: what one batch gives, evaluated now (the sequential loop)."""
        return self.settle_outcome(self.screen(batch))

    def screen(self, batch: Batch) -> Screened:
        """parse + apply + dedupe against the archive at submission (`triage`) -> evaluate the fresh programs.
        Runs in an evaluation thread: it reads only what was committed before the batch was submitted."""
        t0 = time.perf_counter()
        known: Any = self.known[batch.problem]
        if batch.known_limit is not None:
            known = KnownBefore(known, batch.known_limit)
        code = self.cache[batch.parent_id].code
        arm, backend = self.arm(batch)
        tri = triage(batch.completions, code, arm.answers or self.cfg.answers, known,
                     self._renaming(batch.problem, code, backend))
        evs = self.evaluator.evaluate_many([(self.problems[batch.problem], c.code) for c in tri.fresh],
                                           self.cfg.sandbox.eval_timeout) if tri.fresh else []
        return Screened(batch, tri, evs, time.perf_counter() - t0)

    def settle_outcome(self, s: Screened) -> Outcome:
        """At commit, in iteration order: dedupe again against everything committed since submission (`settle`),
        then the program records and answer vectors."""
        batch, tri, evs = s.batch, s.triage, s.evaluations
        n_first = len(tri.fresh)
        if batch.known_limit is not None and batch.known_limit < self.n_programs:
            tri, keep = settle(tri, self.known[batch.problem])
            evs = [evs[i] for i in keep]
        parent = self.cache[batch.parent_id]
        programs, hashes = self._records(batch, tri, evs, parent.vector.size)
        if parent.names is not None:  # named metrics: every answer on the same columns
            vectors = named_answer_vectors(parent, tri.slots, evs, self.cache)
        else:
            vectors = answer_vectors(tri.slots, evs, lambda pid: self.cache[pid].vector, parent.vector.size)
        return Outcome(batch=batch, answers=tri.answers, answer_vectors=vectors, programs=programs, hashes=hashes,
                       n_candidates=len(tri.fresh), n_dup=tri.n_dup, n_format_error=len(tri.format_errors),
                       eval_seconds=s.seconds, n_in_flight_dup=n_first - len(tri.fresh))

    def _records(self, batch: Batch, tri: Triage, evs: list[Evaluation],
                 d: int) -> tuple[list[ProgramRecord], list[str | None]]:
        """One program record per fresh candidate (with its evaluation), then one per format error."""
        programs: list[ProgramRecord] = []
        hashes: list[str | None] = []
        for c, ev in zip(tri.fresh, evs):
            ev.artifacts["ast_hash"] = c.ast_hash
            programs.append(ProgramRecord(problem=batch.problem, island=batch.island, code=c.code, evaluation=ev,
                                          parent_ids=[batch.parent_id] + batch.inspiration_ids,
                                          completion=(0, c.completion), answer_index=c.answer,
                                          staleness=batch.staleness))
            hashes.append(c.ast_hash)
        for f in tri.format_errors:
            programs.append(ProgramRecord(problem=batch.problem, island=batch.island,
                                          code=f.text[:MAX_FORMAT_ERROR_CODE],
                                          evaluation=Evaluation.failed("format_error", d, error=f.error),
                                          parent_ids=[batch.parent_id], completion=(0, f.completion),
                                          answer_index=f.answer, staleness=batch.staleness))
            hashes.append(None)
        return programs, hashes

    def commit(self, out: Outcome, pending: list[Batch]) -> None:
        b = out.batch
        arm = self.arm(b)[0]
        temp = self.cfg.sampling.temperature if arm.temperature is None else arm.temperature
        sp = SamplingParams(temperature=temp, top_p=self.cfg.sampling.top_p,
                            max_tokens=self.cfg.sampling.max_tokens).to_dict()
        comps = [CompletionRecord.from_completion(i, c, out.answers[i], out.answer_vectors[i], sp)
                 for i, c in enumerate(b.completions)]
        version = b.completions[0].policy_version if b.completions else 0
        group = GroupRecord(problem=b.problem, island=b.island, parent_id=b.parent_id, prompt=b.prompt,
                            m=arm.answers or self.cfg.answers, completions=comps, policy_version=version)
        first = self.n_programs + 1
        key = (b.problem, b.island)
        added = []
        for i, (p, h) in enumerate(zip(out.programs, out.hashes)):
            if h is None:
                continue
            self._remember(first + i, b.problem, p.code, p.evaluation, h)
            added.append(first + i)
            if p.evaluation.solved:
                self.solved.setdefault(b.problem, b.iteration)
        self.islands[key].add_many(added, self.cache, self.cfg.selection.island_capacity)
        self._dirty.add(key)
        migrated = self._maybe_migrate(b.iteration)
        best = max((self.cache[p].scalar for p in self.islands[key].members), default=0.0)
        metrics = {"problem": b.problem, "island": b.island, "parent": b.parent_id, "staleness": b.staleness,
                   "completions": len(b.completions), "candidates": out.n_candidates, "duplicates": out.n_dup,
                   "format_errors": out.n_format_error, "solved": len(self.solved), "best_scalar": best,
                   "gen_seconds": round(b.gen_seconds, 6), "eval_seconds": round(out.eval_seconds, 6),
                   "migrated": migrated, "policy_version": version, "in_flight_dups": out.n_in_flight_dup}
        parent = self.cache[b.parent_id]
        reward = batch_reward(parent.vector, parent.scalar, self.baseline.get(b.problem, 0.0),
                              [(p.evaluation.vector, p.evaluation.scalar, p.evaluation.status)
                               for p, h in zip(out.programs, out.hashes) if h is not None])
        self.portfolio.observe(b.iteration, arm.name, reward)
        record = PortfolioRecord(arm.name, version, reward, self.portfolio.state(b.iteration))
        warnings = self.health.observe(health.observation(b.iteration, metrics, arm.answers or self.cfg.answers,
                                                          [_outcome(p.problem, p.evaluation) for p in out.programs]))
        if warnings:
            metrics["warnings"] = warnings
        ids = self._record(b.iteration, [group], out.programs, metrics, pending, record)
        for w in warnings:  # once recorded: `runs show` lists them too
            print(health.PREFIX + w, file=sys.stderr, flush=True)
        if ids != list(range(first, first + len(out.programs))):
            raise RuntimeError("archive ids are not sequential: is another process writing this run?")
        self.n_programs += len(ids)
        self.evals_run += out.n_candidates + out.n_in_flight_dup
        self.iteration = b.iteration

    def _maybe_migrate(self, t: int) -> int:
        every = self.cfg.selection.migration_every
        if not every or t % every or self.cfg.islands < 2:
            return 0
        n = 0
        for pid in self.order:
            isl = [self.islands[(pid, k)] for k in range(self.cfg.islands)]
            for src, dst, prog in selection.ring_migration([i.ranked(self.cache) for i in isl],
                                                           self.cfg.selection.migration_count):
                isl[dst].add(prog, self.cache, self.cfg.selection.island_capacity)
                self._dirty.add((pid, dst))
                n += 1
        return n

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict:
        """Run (or continue) until cfg.iterations island steps are recorded or every problem is retired."""
        self._clock = (time.monotonic(), 0.0)
        if not self._restore():
            self._start()
        else:  # this start's config: `vevo resume --iterations` may have moved the budget (ui status, curves)
            self.archive.set_meta("config", json.dumps(self.cfg.model_dump()))
        total, depth = self.cfg.iterations, self.cfg.pipeline_depth
        rep, rate = self.reporter, Rate(self.evals_run)
        rep.begin(total, self.iteration)
        concurrent = depth > 1 and all(has(b, CONCURRENT) for _, b in self.members.values())  # generated at once
        gen_pool = ThreadPoolExecutor(depth + 1, thread_name_prefix="vevo-gen") if concurrent else None
        lanes = [_EvalThread(self._lane_work) for _ in range(depth)]  # batch t goes to lane t % depth
        flight: deque[tuple[Batch, _EvalThread | None]] = deque()
        self._generating = {}

        def submit(b: Batch) -> _EvalThread | None:
            if b.known_limit is None:  # set at submission: right after the commit that freed its place
                b.known_limit = self.n_programs
            return lanes[b.iteration % depth].submit(b) if lanes else None

        def commit_oldest(nxt: Batch | None) -> None:
            b, lane = flight.popleft()
            rep.phase(f"evaluating iteration {b.iteration}", log=False)
            screened = lane.result() if lane is not None else self.screen(b)
            rest = [x for x, _ in flight] + ([nxt] if nxt is not None else [])
            self.commit(self.settle_outcome(screened), rest)  # the checkpoint keeps every batch in flight
            self._after_commit(rate)

        try:
            for b in self._pending:  # generated before a crash, never committed: evaluated again, in order
                flight.append((b, submit(b)))
            while len(flight) > depth:  # a run resumed with a smaller depth (an edited config) drains down to it
                commit_oldest(None)
            t = self.iteration + 1 + len(flight)
            while True:
                self._pending = [x for x, _ in flight]
                nxt = self.prepare(t) if t <= total else None
                if nxt is not None:
                    rep.phase(f"generating iteration {t}", log=False)
                if nxt is not None and gen_pool is not None:
                    self._generating[nxt.iteration] = gen_pool.submit(self.generate, nxt)
                elif nxt is not None:
                    self.generate(nxt)
                if flight and (len(flight) >= depth or nxt is None):  # back-pressure: at most depth in flight
                    commit_oldest(nxt)
                if nxt is None:
                    if not flight:
                        break
                    continue
                flight.append((nxt, submit(nxt)))
                if not lanes:  # depth 0: the sequential loop
                    commit_oldest(None)
                t += 1
        finally:
            for lane in lanes:
                lane.close()
            if gen_pool is not None:
                gen_pool.shutdown(wait=True, cancel_futures=True)
            rep.end()
        self._pending = []
        return self.summary()

    def _lane_work(self, b: Batch) -> Screened:
        """In a lane: wait for the batch's generation if it runs in the generation pool, then screen it."""
        fut = self._generating.get(b.iteration)
        if fut is not None:
            fut.result()  # a generation error comes back with the lane's result
            self._generating.pop(b.iteration, None)
        return self.screen(b)

    def _after_commit(self, rate: Rate) -> None:
        due = getattr(self.on_iteration, "due", None)
        if self._generating and due is not None and due(self.iteration):
            # a new policy comes: the batches prepared before it are generated with the old one
            futures_wait(list(self._generating.values()))
        best = sum(self.best.values()) / len(self.best) if self.best else 0.0  # mean over problems
        self.reporter.update(self.iteration, solved=f"{len(self.solved)}/{len(self.order)}", best=round(best, 4),
                             evals_per_s=round(rate.add(self.evals_run), 2))
        if self.on_iteration is not None:
            self.on_iteration(self, self.iteration)

    def summary(self) -> dict:
        return summarize(self.archive)

    def close(self) -> None:
        self.archive.close()


class _EvalThread:
    """One thread evaluating one batch at a time, handed over through two C-level queues. A thread pool did
    the same with more Python on both sides of the hand-over, where the two threads contend for the GIL
    (measurably, at depth 1 in bench/loop_overhead.py)."""

    def __init__(self, fn: Callable[[Batch], Outcome]) -> None:
        self.fn = fn
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="vevo-eval", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        get, put, fn = self.inbox.get, self.outbox.put, self.fn
        while (batch := get()) is not None:
            try:
                put((True, fn(batch)))
            except BaseException as e:  # re-raised in the loop's thread
                put((False, e))

    def submit(self, batch: Batch) -> "_EvalThread":
        self.inbox.put(batch)
        return self

    def result(self) -> Outcome:
        ok, value = self.outbox.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Waits for a batch in flight (its outcome is dropped: it was never committed) and stops."""
        self.inbox.put(None)
        self.thread.join()


def summarize(archive: Archive) -> dict:
    probs = json.loads(archive.get_meta("problems", "[]") or "[]")
    solved = archive.solved_problems()
    return {"problems": len(probs), "solved": len(solved), "solved_problems": solved,
            "iterations": archive.last_iteration() or 0, "evaluations": archive.n_evaluations(),
            "status_counts": archive.status_counts(), "best": archive.best_programs(),
            "warnings": [{"iteration": it, "text": w} for it, w in archive.warnings()],
            "skipped_problems": json.loads(archive.get_meta("skipped_problems", "[]") or "[]")}


def _outcome(problem: str, ev: Evaluation) -> health.Outcome:
    return health.Outcome(problem, ev.status, float(ev.scalar), health.error_text(ev.artifacts))


def member_name(spec: str) -> str:
    """The member name of a run with one ``proposer:`` (its spec's kind: tiny, hf, openai, replay, ...)."""
    spec = spec.strip()
    return spec if ":" not in spec else spec.partition(":")[0]


def _state_key(key: tuple[str, int]) -> str:
    return f"island/{key[1]}/{key[0]}"


def named_answer_vectors(parent: Member, slots: list[list[Slot]], evs: list[Evaluation],
                         cache: dict[int, Member]) -> list[list[list[float]]]:
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


def _stack(members: list[Member]) -> np.ndarray:
    """The members' vectors as one matrix: named metrics on the union of their columns (by name), else padded."""
    if members and any(m.names is not None for m in members):
        _, rows = metric_columns.stack_named([(m.names or [], [float(x) for x in m.vector]) for m in members])
        return np.asarray(rows, dtype=float).reshape(len(members), -1)
    vectors = [m.vector for m in members]
    return _stack_vectors(vectors)


def _stack_vectors(vectors: list[np.ndarray]) -> np.ndarray:
    """Members of one problem share d; failed OpenEvolve runs may have fewer metrics: pad with 0."""
    if not vectors:
        return np.zeros((0, 0))
    d = max(v.size for v in vectors)
    out = np.zeros((len(vectors), d))
    for i, v in enumerate(vectors):
        out[i, : v.size] = v
    return out
