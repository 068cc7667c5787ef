"""Read-only views of one run folder for `vevo ui`: what its pages show, cached where it is costly, never a write.

Each run is one `Archive(readonly=True)` (a `mode=ro` SQLite connection, `query_only`, autocommit, so every query
sees the latest committed iteration of a live WAL archive and no read transaction is held open between requests:
a long reader would stop the campaign's WAL checkpoints). The queries are the archive's `browse` facet
(evolve/archive/browse.py: bounded, paged, incremental); here they are shaped for pages and the search curves are
folded in incrementally (only programs newer than the last look are read). A database error is a `UIError`.
"""
from __future__ import annotations

import functools
import json
import math
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from problems.errors import VevoError

from .. import liveness
from ..analysis.account import account
from ..analysis.curves import CurveFold
from ..analysis.portfolio_stats import member_stats
from ..archive import ARCHIVE_NAME, Archive, ArchiveError, CompletionRow, GroupRow, ProgramRow, TrainingRow, archive_path
from ..config.legacy import upgrade

IDLE_SECONDS = liveness.IDLE_SECONDS
TOP_PROGRAMS = 20  # rows of a problem's heatmap
LINEAGE_PAGE = 400  # nodes of one lineage page
CURVE_POINTS = 600  # points a curve is thinned to


class UIError(VevoError):
    """A run folder `vevo ui` cannot serve (no archive.db, not a vevo archive): one line naming it."""


F = TypeVar("F", bound=Callable[..., Any])


def _readable(fn: F) -> F:
    """A database error while reading (a damaged or foreign file) is a UIError naming the archive; an
    interrupted query (the render's deadline, `budget.watch`) stays SQLite's, for the deadline to catch."""
    @functools.wraps(fn)
    def read(self: "RunStore", *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except (sqlite3.DatabaseError, ArchiveError) as e:
            if "interrupted" in str(e):
                raise
            raise UIError(f"{self.db}: cannot read archive: {e}") from None
    return read  # type: ignore[return-value]


def runs_under(root: str | Path) -> list[tuple[str, Path]]:
    """(name, folder) of every run folder (one holding archive.db) at most two levels below root, named by its
    path below root, sorted. A root that does not exist or holds no runs is a UIError."""
    base = Path(root)
    if not base.is_dir():
        raise UIError(f"--root {root}: not a folder")
    found = sorted({p.parent for pattern in (f"*/{ARCHIVE_NAME}", f"*/*/{ARCHIVE_NAME}") for p in base.glob(pattern)})
    if not found:
        raise UIError(f"--root {root}: no run folders (with an {ARCHIVE_NAME}) in it or one level down")
    return [(p.relative_to(base).as_posix(), p) for p in found]


@dataclass
class _Curve:
    """Running state of one run's curves, advanced by the programs committed since the last look."""

    last_id: int = 0
    fold: CurveFold = field(default_factory=CurveFold)  # pass@t and best@t, as `vevo curves` folds them
    # one point per iteration: (iteration, evaluations, seconds, solved, mean best, busy seconds)
    points: list[tuple[int, int, float, int, float, float]] = field(default_factory=list)
    seconds: float = 0.0
    busy: float = 0.0
    last_iteration: int = -1
    summed: bool = False  # some iteration had no wall clock (an archive from before it was recorded)


class RunStore:
    """One run folder opened read-only. Thread-safe: a lock around the one connection."""

    def __init__(self, name: str, run_dir: str | Path):
        self.name = name
        self.dir = Path(run_dir).resolve()
        self.db = archive_path(self.dir)
        if not self.db.is_file():
            raise UIError(f"{run_dir}: not a run directory (no {ARCHIVE_NAME})")
        try:
            self.archive = Archive(self.db, readonly=True)  # opened mode=ro / query_only
        except (ArchiveError, FileNotFoundError) as e:
            raise UIError(str(e)) from None
        self._fold_lock = threading.Lock()
        self._curve = _Curve()
        self._meta: dict[str, Any] | None = None
        self._members: tuple[str, dict[str, dict[str, Any]]] | None = None  # (version, member_stats)
        self._members_lock = threading.Lock()

    def close(self) -> None:
        self.archive.close()

    # ------------------------------------------------------------------ cheap, polled
    @_readable
    def version(self) -> str:
        """Changes whenever the run commits a program or a training step, or adds a probe to a step: the live
        pages' signal."""
        n, steps, rev = self.archive.head()
        return f"{n}.{steps}.{rev}"

    @_readable
    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            rows = self.archive.meta()
            config = upgrade(json.loads(rows.get("config") or "{}"))
            self._meta = {"problems": [str(p) for p in json.loads(rows.get("problems") or "[]")],
                          "config": config}
        return self._meta

    # ------------------------------------------------------------------ overview
    @_readable
    def overview(self) -> dict[str, Any]:
        """The runs table's row: status, counts and rates, all from aggregate queries."""
        meta = self.meta()
        t = self.archive.totals()
        n_programs, max_eval, last_it, solved, steps = (t["programs"], t["evaluations"], t["last_iteration"],
                                                        t["solved"], t["training_steps"])
        problems = set(meta["problems"]) | t["problems"]
        curve = self.curve_points()
        best = curve[-1][4] if curve else 0.0
        seconds = curve[-1][2] if curve else 0.0
        return {"name": self.name, "path": str(self.dir), "status": self.status(last_it, solved, len(problems)),
                "programs": int(n_programs), "solved": int(solved), "problems": len(problems),
                "best": float(best), "iterations": int(last_it or 0), "evaluations": int(max_eval),
                "evals_per_s": (max_eval / seconds) if seconds > 0 else None,
                "training_steps": int(steps), "train": meta["config"].get("train", {}).get("algo", "none"),
                "version": self.version()}

    def status(self, last_it: int | None, solved: int, n_problems: int) -> str:
        """running, crashed, finished or stopped: `liveness.run_status`, finished when the iteration budget is
        spent or every problem solved."""
        search = self.meta()["config"].get("search", {})
        budget = search.get("iterations")
        finished = (budget is not None and last_it is not None and last_it >= int(budget)) or \
            bool(n_problems and solved >= n_problems) or self._budget_spent(search.get("budget") or {})
        return liveness.run_status(self.dir, finished)

    def _budget_spent(self, budget: dict) -> bool:
        """Whether a stop rule (search.budget, evolve/search/budget.py) is reached by what the archive holds."""
        from ..search.budget import Spent, limits, reached

        if not limits(budget):
            return False
        return reached(budget, Spent(*self.archive.spent_totals())) is not None

    # ------------------------------------------------------------------ curves
    @_readable
    def curve_points(self) -> list[tuple[int, int, float, int, float, float]]:
        """(iteration, evaluations, seconds, solved, mean best, busy seconds) after each iteration, folded by
        `curves.CurveFold` as `vevo curves` folds them (a listed problem counts 0 until it has a program).
        Seconds: the wall clock the campaign records per iteration (`wall_seconds`, since the run's first start,
        across resumes), or busy seconds for an archive without it (`wall_clock()` is then False). Busy seconds:
        the cumulative generation + evaluation time the loop logged."""
        with self._fold_lock:  # one fold at a time; the queries take the connection lock themselves
            return list(self._fold())

    def _fold(self) -> list[tuple[int, int, float, int, float, float]]:
        c = self._curve
        listed = self.meta()["problems"]
        rows = self.archive.program_scores_since(c.last_id)
        secs = self.archive.metrics_since(c.last_iteration)
        c.fold.expect(set(listed) | {r[1] for r in rows})
        by_it: dict[int, tuple[float | None, float]] = {}  # iteration -> (its wall clock, its busy seconds)
        for it, d in secs:
            wall = d.get("wall_seconds")
            wall = float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) else None
            c.summed = c.summed or wall is None
            by_it[it] = (wall, float(d.get("gen_seconds") or 0.0) + float(d.get("eval_seconds") or 0.0))
        points = c.points
        i = 0
        its = sorted(set(by_it) | {r[2] for r in rows})
        for it in its:
            while i < len(rows) and rows[i][2] <= it:
                _, pr, _, ev, sc, sv = rows[i]
                c.fold.add(pr, float(sc), bool(sv))
                c.last_id = rows[i][0]
                i += 1
            wall, busy = by_it.get(it, (None, 0.0))
            c.busy += busy
            c.seconds = wall if wall is not None else c.busy
            evals = rows[i - 1][3] if i else (points[-1][1] if points else 0)
            point = (it, int(evals), c.seconds, c.fold.n_solved, c.fold.mean_best, c.busy)
            if points and points[-1][0] == it:
                points[-1] = point
            else:
                points.append(point)
        if secs:
            c.last_iteration = max(c.last_iteration, secs[-1][0])
        return points

    @_readable
    def wall_clock(self) -> bool:
        """Whether the curves' seconds are the recorded wall clock (else summed generation + evaluation)."""
        with self._fold_lock:
            self._fold()
            return not self._curve.summed

    # ------------------------------------------------------------------ problems
    @_readable
    def problems(self) -> list[dict[str, Any]]:
        """Per problem: programs, best scalar, first solve (iteration, policy version, program, by a seed)."""
        listed = self.meta()["problems"]
        agg = self.archive.problem_counts()
        firsts = self.archive.first_solves()
        out = []
        for p in listed + sorted(set(agg) - set(listed)):
            n, best = agg.get(p, (0, None))
            out.append({"problem": p, "programs": n, "best": best, "solve": firsts.get(p)})
        return out

    @_readable
    def best_program(self, pid: str) -> ProgramRow | None:
        """The problem's highest-scoring program (format errors aside), the earliest on ties: its page's top."""
        top = self.archive.top_program_ids(pid, 1)
        return self.archive.program(top[0]) if top else None

    @_readable
    def has_problem(self, pid: str) -> bool:
        return pid in self.meta()["problems"] or self.archive.has_programs_of(pid)

    @_readable
    def problem(self, pid: str) -> dict[str, Any]:
        first = self.archive.first_solve_id(pid)
        return {"first_solve": self.archive.program(first) if first is not None else None,
                "top": [self.archive.program(i) for i in self.archive.top_program_ids(pid, TOP_PROGRAMS)],
                "statuses": self.archive.status_counts(pid), "islands": self.archive.islands_of(pid)}

    # ------------------------------------------------------------------ lineage
    @_readable
    def lineage(self, pid: str, island: int, page: int) -> dict[str, Any]:
        """One page of an island's programs, newest page first (page 0), with their first parents (which may
        lie on an earlier page or, after a migration, on another island)."""
        total = self.archive.island_size(pid, island)
        pages = max(1, math.ceil(total / LINEAGE_PAGE))
        page = min(max(page, 0), pages - 1)
        nodes = self.archive.lineage_page(pid, island, LINEAGE_PAGE, page * LINEAGE_PAGE)[::-1]
        ids = {n["id"] for n in nodes}
        outside = sorted({n["parent"] for n in nodes if n["parent"] is not None and n["parent"] not in ids})
        parents = self.archive.program_places(outside)
        return {"nodes": nodes, "outside": parents, "total": total, "page": page, "pages": pages}

    # ------------------------------------------------------------------ one program
    @_readable
    def program(self, program_id: int) -> ProgramRow | None:
        return self.archive.program(program_id)

    @_readable
    def completion(self, completion_id: int) -> tuple[GroupRow, CompletionRow] | None:
        gid = self.archive.group_of_completion(completion_id)
        if gid is None:
            return None
        groups = self.archive.groups_by_id([gid])
        comp = next((c for c in groups[0].completions if c.id == completion_id), None) if groups else None
        return (groups[0], comp) if comp is not None else None

    @_readable
    def answer_fates(self, completion: CompletionRow) -> list[dict[str, Any]]:
        """What became of each of a completion's m answers: evaluated (its program), malformed (the parse or
        edit error), duplicate (it reproduced an archived program or an earlier answer), or empty."""
        rows = self.archive.answer_programs(completion.id)
        out = []
        for i, text in enumerate(completion.answers):
            r = rows.get(i)
            if r is not None and r[1] == "format_error":
                err = r[3].get("error") or r[3].get("first_error") or ""
                out.append({"fate": "malformed", "program_id": r[0], "detail": str(err)})
            elif r is not None:
                out.append({"fate": "evaluated", "program_id": r[0], "detail": f"{r[1]}, score {r[2]:.3g}"})
            elif not str(text).strip():
                out.append({"fate": "empty", "program_id": None, "detail": ""})
            else:
                out.append({"fate": "duplicate", "program_id": None,
                            "detail": "same program (normalised AST) as one already archived or an earlier answer"})
        return out

    # ------------------------------------------------------------------ proposers
    @_readable
    def members(self) -> dict[str, dict[str, Any]]:
        """Per portfolio member (evolve/analysis/portfolio_stats.py: iterations, programs, improvements, solved first,
        tokens, generation time); it reads every program, so it is recomputed only when the run committed since."""
        v = self.version()
        with self._members_lock:
            if self._members is None or self._members[0] != v:
                self._members = (v, member_stats(self.archive))
            return self._members[1]

    @_readable
    def member_at(self, iteration: int) -> str | None:
        """The portfolio member that proposed iteration ``iteration`` (None: a seed, or no portfolio table)."""
        return self.archive.member_at(iteration)

    # ------------------------------------------------------------------ training
    @_readable
    def training(self) -> list[TrainingRow]:
        return self.archive.training_rows()

    @_readable
    def policy_versions(self) -> list[tuple[int, int]]:
        """(iteration, policy version the proposer sampled with) of each iteration that records one."""
        return self.archive.policy_versions()

    @_readable
    def compute(self) -> dict[str, float]:
        """Where the run's time went (evolve/analysis/account.py)."""
        return account(self.archive.metrics_rows(), self.training())
