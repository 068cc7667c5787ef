"""What `vevo ui` reads: bounded queries for pages that are polled while the campaign writes. Aggregates are
computed in SQL, lists are paged, and curves are read incrementally (only rows newer than the last look), so a
page costs the same on a run of a hundred programs and of a million."""
from __future__ import annotations

import json
from typing import Any

from .base import ArchiveBase


class Browse(ArchiveBase):
    """`Archive`'s reads for the UI (``_query`` and ``n_evaluations`` from `ArchiveBase`)."""

    def head(self) -> tuple[int, int, int]:
        """(the newest program id, the newest training step; -1 before any, the training rows' later additions):
        changes whenever the run commits, or a probe's values come after its step's row. Three primary-key
        lookups (MAX of an INTEGER PRIMARY KEY reads one b-tree edge)."""
        n = self._query("SELECT COALESCE(MAX(id), 0) FROM programs")[0][0]
        steps = self._query("SELECT COALESCE(MAX(step), -1) FROM training")[0][0]
        rev = self._query("SELECT value FROM meta WHERE key = 'training_revision'")
        return int(n), int(steps), int(rev[0][0]) if rev else 0

    def meta(self) -> dict[str, str]:
        """Every meta key with its value."""
        return dict(self._query("SELECT key, value FROM meta"))

    def totals(self) -> dict[str, Any]:
        """The runs table's counts: programs, evaluations, the last iteration (None before any), problems with
        a program, problems solved, training steps."""
        n_programs, evaluations = self._query("SELECT COUNT(*), COALESCE(MAX(eval_index), 0) FROM programs")[0]
        last_it = self._query("SELECT MAX(iteration) FROM metrics")[0][0]
        solved = self._query("SELECT COUNT(DISTINCT problem) FROM programs WHERE solved = 1")[0][0]
        problems = {r[0] for r in self._query("SELECT DISTINCT problem FROM programs")}
        steps = self._query("SELECT COUNT(*) FROM training")[0][0]
        return {"programs": int(n_programs), "evaluations": int(evaluations), "last_iteration": last_it,
                "solved": int(solved), "problems": problems, "training_steps": int(steps)}

    def spent_totals(self) -> tuple[int, float, int]:
        """(evaluations, wall clock at the last commit, generated tokens) in SQL aggregates: what the budgets
        (evolve/search/budget.py) count, without decoding every metrics row."""
        evs = self.n_evaluations()
        tok, wall = self._query("SELECT COALESCE(SUM(json_extract(data, '$.gen_tokens')), 0), "
                                "COALESCE(MAX(json_extract(data, '$.wall_seconds')), 0) FROM metrics")[0]
        return int(evs), float(wall), int(tok)

    def program_scores_since(self, last_id: int) -> list[tuple[int, str, int, int, float, int]]:
        """(id, problem, iteration, eval_index, scalar, solved) of every program with id > last_id, in id order."""
        return self._query("SELECT id, problem, iteration, eval_index, scalar, solved FROM programs WHERE id > ? "
                           "ORDER BY id", (last_id,))

    def metrics_since(self, iteration: int) -> list[tuple[int, dict[str, Any]]]:
        """(iteration, metrics) of every iteration after ``iteration``, in order."""
        return [(it, json.loads(d)) for it, d in self._query(
            "SELECT iteration, data FROM metrics WHERE iteration > ? ORDER BY iteration", (iteration,))]

    def problem_counts(self) -> dict[str, tuple[int, float | None]]:
        """problem -> (programs, best scalar of its programs other than format errors; None: none)."""
        return {p: (n, best) for p, n, best in self._query(
            "SELECT problem, COUNT(*), MAX(CASE WHEN status != 'format_error' THEN scalar END) FROM programs "
            "GROUP BY problem")}

    def first_solves(self) -> dict[str, dict[str, Any]]:
        """problem -> its first solving program (the lowest id): program_id, iteration, policy_version, and
        whether it was a seed (no completion)."""
        return {p: {"program_id": pid, "iteration": it, "policy_version": v, "seed": cid is None}
                for p, pid, it, v, cid in self._query(
                    "SELECT problem, id, iteration, policy_version, completion_id FROM programs p WHERE solved = 1 "
                    "AND id = (SELECT MIN(id) FROM programs q WHERE q.problem = p.problem AND q.solved = 1)")}

    def top_program_ids(self, problem: str, limit: int) -> list[int]:
        """The problem's highest-scoring programs (format errors aside), the earliest first on ties."""
        return [r[0] for r in self._query("SELECT id FROM programs WHERE problem = ? AND status != 'format_error' "
                                          "ORDER BY scalar DESC, id LIMIT ?", (problem, limit))]

    def first_solve_id(self, problem: str) -> int | None:
        """The problem's first solving program by iteration (the lowest id within it)."""
        rows = self._query("SELECT id FROM programs WHERE problem = ? AND solved = 1 ORDER BY iteration, id "
                           "LIMIT 1", (problem,))
        return rows[0][0] if rows else None

    def has_programs_of(self, problem: str) -> bool:
        return bool(self._query("SELECT 1 FROM programs WHERE problem = ? LIMIT 1", (problem,)))

    def islands_of(self, problem: str) -> list[int]:
        return [r[0] for r in self._query("SELECT DISTINCT island FROM programs WHERE problem = ? ORDER BY island",
                                          (problem,))]

    def island_size(self, problem: str, island: int) -> int:
        return int(self._query("SELECT COUNT(*) FROM programs WHERE problem = ? AND island = ?",
                               (problem, island))[0][0])

    def lineage_page(self, problem: str, island: int, limit: int, offset: int) -> list[dict[str, Any]]:
        """One page of the island's programs, newest first: id, iteration, first parent, scalar, solved, status,
        policy version."""
        rows = self._query("SELECT id, iteration, parent_ids, scalar, solved, status, policy_version FROM programs "
                           "WHERE problem = ? AND island = ? ORDER BY id DESC LIMIT ? OFFSET ?",
                           (problem, island, limit, offset))
        return [{"id": r[0], "iteration": r[1], "parent": (json.loads(r[2]) or [None])[0], "scalar": float(r[3]),
                 "solved": bool(r[4]), "status": r[5], "version": r[6]} for r in rows]

    def program_places(self, ids: list[int], chunk: int = 500) -> dict[int, dict[str, Any]]:
        """id -> (id, iteration, island, scalar) of each of these programs (unknown ids are skipped)."""
        out = {}
        for i in range(0, len(ids), chunk):
            part = ids[i:i + chunk]
            for r in self._query(f"SELECT id, iteration, island, scalar FROM programs WHERE id IN "
                                 f"({','.join('?' * len(part))})", part):
                out[r[0]] = {"id": r[0], "iteration": r[1], "island": r[2], "scalar": float(r[3])}
        return out

    def group_of_completion(self, completion_id: int) -> int | None:
        rows = self._query("SELECT group_id FROM completions WHERE id = ?", (completion_id,))
        return rows[0][0] if rows else None

    def answer_programs(self, completion_id: int) -> dict[int, tuple[int, str, float, dict[str, Any]]]:
        """answer index -> (program id, status, scalar, artifacts) of the completion's answers that became programs."""
        return {idx: (pid, st, float(sc), json.loads(arts)) for pid, idx, st, sc, arts in self._query(
            "SELECT id, answer_index, status, scalar, artifacts FROM programs WHERE completion_id = ? "
            "AND answer_index IS NOT NULL", (completion_id,))}

    def member_at(self, iteration: int) -> str | None:
        """The portfolio member that proposed ``iteration`` (None: a seed, or an archive without portfolios)."""
        if not self.has_portfolio():
            return None
        rows = self._query("SELECT member FROM portfolio WHERE iteration = ?", (iteration,))
        return str(rows[0][0]) if rows else None

    def policy_versions(self) -> list[tuple[int, int]]:
        """(iteration, policy version the proposer sampled with) of each iteration that records one."""
        return [(int(it), int(v)) for it, v in self._query(
            "SELECT iteration, json_extract(data, '$.policy_version') FROM metrics "
            "WHERE json_extract(data, '$.policy_version') IS NOT NULL ORDER BY iteration")]
