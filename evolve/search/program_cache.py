"""What the loop keeps in memory about archived programs: sized by the population it works on, not the archive.

* `FactsCache`: program id -> `ProgramFacts`, the facts selection, prompts and answer vectors read. It holds island
  members, the parents and inspirations of batches in flight, and what was added or read since its last prune; a
  program it no longer holds is read back from the archive (`load_facts`), built as the restore builds it, so
  what it holds changes memory, never behaviour.
* `HashIndex`: one problem's dedupe map (normalised-AST hash -> the first program id with it), keyed by the
  hash's 32 bytes instead of its 64-character text.
* `replay`: the restore's one pass over the archive (dedupe index, best scores, seed baselines, first solves, the
  health monitor fed every committed iteration again), reading pages of a few columns: no program's code, and
  never every row at once.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from evaluators.types import Evaluation
from proposer.answers.mutate import normalized_hash

from proposer.answers import feedback

from ..archive import Archive
from . import health
from .islands import Island, ProgramFacts

CACHE_FLOOR = 16_384  # the cache never prunes below this many members (a few MB)


def facts_of(code: str, ev: Evaluation) -> ProgramFacts:
    """The `ProgramFacts` of an evaluated program (its archived row's `evaluation` gives the same one)."""
    named = feedback.named_metrics(ev.artifacts)
    return ProgramFacts(vector=np.asarray(ev.vector, dtype=float), scalar=float(ev.scalar), code_len=len(code),
                  solved=ev.solved, code=code, status=ev.status, stderr=str(ev.artifacts.get("stderr", ""))[-400:],
                  names=named[0] if named else None, metrics=named[1] if named else None,
                  feedback=feedback.feedback(ev.artifacts) if named else None)


def load_facts(archive: Archive, pid: int) -> ProgramFacts | None:
    """The member of archived program ``pid``; None for an unknown id or a format error (never a member)."""
    row = archive.program(pid)
    if row is None or row.status == "format_error":
        return None
    return facts_of(row.code, row.evaluation)


def live_ids(islands: Iterable[Island], batches: Iterable[Any]) -> set[int]:
    """The programs the loop works with: island members, and each batch's parent and inspirations."""
    out = {p for isl in islands for p in isl.members}
    for b in batches:
        out.add(b.parent_id)
        out.update(b.inspiration_ids)
    return out


class FactsCache(dict):
    """A dict of program id -> ProgramFacts that reads a missing id back with ``load`` and, once it has grown to twice
    what its last prune left (and at least ``floor``), drops what ``live()`` no longer names.

    A prune only drops entries that were there at the previous prune: whatever was added since (a batch's
    programs between being remembered and being recorded in the archive) stays one more round. Only the thread
    that made the cache prunes (evaluation threads read it)."""

    def __init__(self, load: Callable[[int], ProgramFacts | None], live: Callable[[], set[int]],
                 floor: int | None = None) -> None:
        super().__init__()
        self._load, self._live = load, live
        self._floor = self._limit = CACHE_FLOOR if floor is None else floor
        self._kept = 0  # entries left by the last prune: the first _kept keys in insertion order
        self._owner = threading.get_ident()

    def __missing__(self, pid: int) -> ProgramFacts:
        m = self._load(pid)
        if m is None:
            raise KeyError(pid)
        self[pid] = m
        return m

    def __setitem__(self, pid: int, member: ProgramFacts) -> None:
        super().__setitem__(pid, member)
        if len(self) > self._limit and threading.get_ident() == self._owner:
            self.prune()

    def load_many(self, ids: Iterable[int], archive: Archive) -> None:
        """Read these programs' members in a few queries (the restore's island members)."""
        want = sorted({int(i) for i in ids} - self.keys())
        for row in archive.programs_by_id(want):
            if row.status != "format_error":
                self[row.id] = facts_of(row.code, row.evaluation)

    def prune(self) -> None:
        keep = self._live()
        keys = list(self)
        for pid in keys[: self._kept]:
            if pid not in keep:
                self.pop(pid, None)
        self._kept = len(self)
        self._limit = max(self._floor, 2 * self._kept)


class HashIndex:
    """hash -> first program id, with `get` and `setdefault` as a dict's. A 64-hex-digit hash (sha256, what
    `normalized_hash` gives) is kept as its 32 bytes; any other text as itself."""

    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d: dict[bytes | str, int] = {}

    @staticmethod
    def _key(h: str) -> bytes | str:
        if len(h) == 64:
            try:
                return bytes.fromhex(h)
            except ValueError:
                pass
        return h

    def get(self, h: str, default: int | None = None) -> int | None:
        return self._d.get(self._key(h), default)

    def __getitem__(self, h: str) -> int:
        return self._d[self._key(h)]

    def setdefault(self, h: str, pid: int) -> int:
        return self._d.setdefault(self._key(h), pid)

    def __contains__(self, h: object) -> bool:
        return isinstance(h, str) and self._key(h) in self._d

    def __len__(self) -> int:
        return len(self._d)


@dataclass
class Restored:
    best: dict[str, float]      # problem -> best scalar of its evaluated programs
    baseline: dict[str, float]  # problem -> its seed program's scalar
    solved: dict[str, int]      # problem -> the first iteration that solved it
    wall_seconds: float | None  # the last committed iteration's clock, if it recorded one
    seeds: dict[str, int] = field(default_factory=dict)  # problem -> its seed program's id


def replay(archive: Archive, through: int, problems: Iterable[str], known: dict[str, HashIndex],
           monitor: health.Health, m: int) -> Restored:
    """The archive's programs and metrics of iterations <= ``through`` again, in commit order: fills ``known``
    (problems outside ``problems`` are skipped) and feeds ``monitor`` each iteration's observation silently, as
    the uninterrupted run did. Programs come in id order, so their iterations never decrease."""
    wanted = set(problems)
    out = Restored({}, {}, {}, None)
    rows = archive.restore_rows(through)
    row = next(rows, None)
    for it, data in archive.metrics_pages(through):
        outcomes: list[health.ProgramOutcome] = []
        while row is not None and row[3] <= it:
            if row[1] in wanted:
                o = _take(row, known, out)
                if row[3] == it:
                    outcomes.append(o)
            row = next(rows, None)
        monitor.observe(health.observation(it, data, m, outcomes))
        if isinstance(data.get("wall_seconds"), (int, float)):
            out.wall_seconds = float(data["wall_seconds"])
    while row is not None:  # programs of iterations without a metrics row (none in an archive this code wrote)
        if row[1] in wanted:
            _take(row, known, out)
        row = next(rows, None)
    return out


def _take(row: tuple, known: dict[str, HashIndex], out: Restored) -> health.ProgramOutcome:
    """One archived program into the restored state; its health outcome."""
    pid, problem, island, iteration, scalar, solved, status, artifacts, ast_hash, code = row
    scalar = float(scalar)
    if status != "format_error":
        known[problem].setdefault(ast_hash or normalized_hash(code), pid)
        out.best[problem] = max(out.best.get(problem, -math.inf), scalar)
    if island == -1:
        out.baseline.setdefault(problem, scalar)
        out.seeds.setdefault(problem, pid)
    if solved:
        out.solved.setdefault(problem, iteration)  # rows come in id order: the first is the earliest
    return health.ProgramOutcome(problem, status, scalar, health.error_text(artifacts))
