"""One proposal round on a parent program: the prompt a proposer sees, and the scores of the completions it returns.

    problem + parent ──`parent_prompt`──▶ prompt ──proposer──▶ completion texts
        ──`triage` (parse, apply, rename back, dedupe)──▶ fresh candidates ──`evaluate` (sandbox)──▶ evaluations
        ──`answer_vectors`──▶ per completion, per answer, a test vector ──`score_matrices`──▶ (m × d) matrices

Every user goes this one way: campaigns (evolve/search/campaign.py calls the stages, with its pipelined evaluation and
the second dedupe of in-flight batches between `evaluate` and `answer_vectors`), `vevo train` / `vevo eval` and
the learning probes (`score_completions`), the veRL reward and problem export (proposer/integrations/verl_plugin.py) and the
tiny model's quality check (proposer/tiny/quality.py). So a model trained anywhere is shown the prompts a
campaign shows it, and its answers are scored as a campaign scores them:

* an answer that is empty scores 0 on every test; one that does not parse or apply (``invalid``, a SEARCH block
  that matches nothing, ...) scores 0 too and is a format error; a completion with no answer at all is one
  format error (answer 0);
* each applied answer is deduplicated by normalised AST against ``known`` (hash → program id: the archive) and
  against the earlier answers of the same call; a duplicate takes the vector of the program it repeats, so each
  distinct program runs once;
* with an ``alias`` (the function name the model was trained to write, `naming.entry_name`) the prompt shows the
  problem under that name and answers are renamed back before they run;
* a matrix has m rows (missing answers are zero rows) and as many columns as the widest vector of the call (at
  least ``d``), shorter vectors padded with zeros.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol, Sequence

import numpy as np

from evaluators.types import Evaluation
from problems.model import Problem
from proposer.answers import feedback, naming
from proposer.answers.mutate import MutationError, apply_answer, normalized_hash
from proposer.answers.parsing import parse_answers
from proposer.answers.prompting import PromptContext, build_prompt

STDERR_CHARS = 400  # of a failed parent's stderr, shown in its prompt


# ----------------------------------------------------------------------------------------------------- prompt
class ParentView(Protocol):
    """What a prompt may say about a program (a campaign's island member, or `Parent`)."""
    code: str
    vector: Any          # one score per test (or named metric column)
    scalar: float
    status: str
    stderr: str
    names: list[str] | None      # score column names, when the evaluator reports metrics by name
    metrics: dict | None         # everything it reported, by name
    feedback: dict | None        # its artifacts, bounded


@dataclass(frozen=True)
class Parent:
    """A program and its evaluation as a prompt shows them (`ParentView`)."""
    code: str
    vector: list[float]
    scalar: float = 0.0
    status: str = "ok"
    stderr: str = ""
    names: list[str] | None = None
    metrics: dict | None = None
    feedback: dict | None = None

    @classmethod
    def of(cls, code: str, ev: Evaluation) -> "Parent":
        """The view of ``code`` evaluated as ``ev``: a campaign keeps the same of each archived program."""
        named = feedback.named_metrics(ev.artifacts)
        return cls(code=code, vector=[float(x) for x in ev.vector], scalar=float(ev.scalar), status=ev.status,
                   stderr=str(ev.artifacts.get("stderr", ""))[-STDERR_CHARS:],
                   names=named[0] if named else None, metrics=named[1] if named else None,
                   feedback=feedback.feedback(ev.artifacts) if named else None)


def problem_labels(problem: Problem) -> list[str]:
    """One label per test case of the problem ([] for evaluators that report metrics)."""
    return [problem.test_label(i) for i in range(problem.n_tests)]


def parent_prompt(problem: Problem, parent: ParentView, m: int, *, inspirations: Sequence[ParentView] = (),
                  style: str = "compact", reasoning: bool = False, mode: Literal["full", "diff"] = "full",
                  alias: str | None = None, labels: list[str] | None = None) -> str:
    """The prompt asking for m answers that improve ``parent`` on ``problem``: the one builder of campaign,
    `vevo train` / `eval`, probe and veRL prompts. ``labels``: the problem's `problem_labels`, when the caller
    keeps them (computed otherwise); ``alias``: the function name the model writes."""
    vec = [float(x) for x in parent.vector]
    labels = (problem_labels(problem) if labels is None else labels) or parent.names or \
        [f"metric {j}" for j in range(len(vec))]
    ctx = PromptContext(problem_id=problem.id, description=problem.description, parent_code=parent.code,
                        parent_vector=vec, test_labels=labels[: len(vec)],
                        parent_stderr=parent.stderr if parent.status not in ("ok", "wrong") else "",
                        inspirations=[(p.code, [float(x) for x in p.vector]) for p in inspirations],
                        m=m, mode=mode,
                        metrics=None if parent.metrics is None else {"score": parent.scalar, **parent.metrics},
                        feedback=parent.feedback or {},
                        inspiration_scores=[p.scalar for p in inspirations])
    ctx = naming.present(ctx, naming.Renaming.make(problem.entry_point, alias, parent.code))
    return build_prompt(ctx, style=style, reasoning=reasoning)


def seed_prompt(problem: Problem, seed_eval: Evaluation, m: int, style: str = "compact",
                alias: str | None = None) -> str:
    """The prompt for a problem's seed program: a campaign's first prompt on it (evaluated as ``seed_eval``)."""
    return parent_prompt(problem, Parent.of(problem.seed_code, seed_eval), m, style=style, alias=alias)


# ----------------------------------------------------------------------------------------------------- triage
@dataclass
class Candidate:
    completion: int
    answer: int
    code: str
    ast_hash: str


@dataclass(frozen=True)
class Slot:
    """Where one answer's test vector comes from: nowhere (empty or unusable: zeros), a program already known
    (``ref`` = its id), or a fresh candidate of this call (``ref`` = its index in ``Triage.fresh``)."""
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
    """A call's answers sorted before evaluation: only ``fresh`` candidates go to the sandbox."""
    answers: list[list[str]]        # per completion, the m answer bodies
    slots: list[list[Slot]]         # per completion, per answer
    fresh: list[Candidate]
    format_errors: list[FormatError]
    n_dup: int
    kinds: list[list[str]] | None = None  # per completion, per answer: code, diff, empty or invalid


def triage(texts: Sequence[str], parent_code: str, m: int, known: Any = None,
           renaming: naming.Renaming | None = None) -> Triage:
    """Parse each completion text into m answers, apply each to the parent, and dedupe by normalised AST against
    ``known`` (``known.get(hash)`` -> program id or None: a dict, a campaign's `KnownBefore`, or None for
    nothing) and within the call. With a ``renaming`` the answers are in the model's names: applied to the
    renamed parent, then renamed back. Pure: the same inputs give the same triage."""
    tri = Triage([], [], [], [], 0, [])
    known = {} if known is None else known
    shown = renaming.to_model(parent_code) if renaming is not None else parent_code
    fresh_by_hash: dict[str, int] = {}
    for ci, text in enumerate(texts):
        parsed = parse_answers(text, m)
        tri.answers.append([a.body for a in parsed])
        tri.kinds.append([a.kind for a in parsed])
        if all(a.kind == "empty" for a in parsed):
            tri.format_errors.append(FormatError(ci, 0, text, "no answers in the expected format"))
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


def evaluate(tri: Triage, problem: Problem, evaluator: Any, time_limit: float | None = None) -> list[Evaluation]:
    """The fresh candidates' evaluations, in order (one ``evaluate_many`` call; none without candidates)."""
    if not tri.fresh:
        return []
    items = [(problem, c.code) for c in tri.fresh]
    return evaluator.evaluate_many(items) if time_limit is None else evaluator.evaluate_many(items, time_limit)


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


def score_matrices(vectors: list[list[list[float]]], d: int = 0) -> list[np.ndarray]:
    """Per completion, its (m × w) matrix: w = the widest vector of the call, at least d; short rows zero-padded."""
    w = max([d] + [len(v) for row in vectors for v in row])
    out = []
    for row in vectors:
        mat = np.zeros((len(row), w))
        for i, v in enumerate(row):
            mat[i, : len(v)] = v
        out.append(mat)
    return out


# ---------------------------------------------------------------------------------------------- whole round
@dataclass
class Scores:
    """What `score_completions` found for one call's completions."""
    triage: Triage
    evaluations: list[Evaluation]          # one per triage.fresh
    vectors: list[list[list[float]]]       # per completion, per answer
    matrices: list[np.ndarray]             # per completion, (m × w)
    known_evaluation: Callable[[int], Evaluation | None] | None = None

    def slot_evaluations(self) -> list[list[Evaluation | None]]:
        """Per completion, per answer, the evaluation of the program it made (None for zero slots, and for known
        programs without ``known_evaluation``): a duplicate answer shares the evaluation of what it repeats."""
        def one(s: Slot) -> Evaluation | None:
            if s.kind == "fresh":
                return self.evaluations[s.ref]
            if s.kind == "known" and self.known_evaluation is not None:
                return self.known_evaluation(s.ref)
            return None
        return [[one(s) for s in row] for row in self.triage.slots]


def score_completions(problem: Problem, texts: Sequence[str], m: int, evaluator: Any, *, d: int | None = None,
                      parent_code: str | None = None, alias: str | None = None, known: Any = None,
                      known_evaluation: Callable[[int], Evaluation] | None = None,
                      time_limit: float | None = None) -> Scores:
    """Each completion of a call → its answers' programs (applied to ``parent_code``, the seed by default) →
    their evaluations → its (m × d) score matrix, as a campaign scores a batch (module docstring). ``d``: the
    score-vector length of an unusable answer (default: the problem's test count, at least 1); ``known`` /
    ``known_evaluation``: programs that need no new run (hash → id, id → evaluation)."""
    if known and known_evaluation is None:
        raise ValueError("score_completions: known programs need known_evaluation (their vectors)")
    parent = problem.seed_code if parent_code is None else parent_code
    d = max(1, problem.n_tests) if d is None else d
    tri = triage(texts, parent, m, known, naming.Renaming.make(problem.entry_point, alias, parent))
    evs = evaluate(tri, problem, evaluator, time_limit)
    vectors = answer_vectors(tri.slots, evs, lambda pid: known_evaluation(pid).vector, d)
    return Scores(tri, evs, vectors, score_matrices(vectors, d), known_evaluation)
