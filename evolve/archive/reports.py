"""What reports, exports and analyses read: programs, per-iteration metrics, training steps, portfolio rows and
the aggregates `vevo runs show` / `curves` / `export` print."""
from __future__ import annotations

import json
from typing import Any, Sequence

from evaluators.types import error_text

from .base import ArchiveBase
from .schema import PROGRAM_COLUMNS, MetricsRow, PortfolioRow, ProgramRow, ProgressRow, TrainingRow, _program_row


class Reports(ArchiveBase):
    """`Archive`'s reports (``_query`` / ``_transaction`` from `ArchiveBase`)."""

    def program(self, program_id: int) -> ProgramRow | None:
        rows = self._query(f"SELECT {self._program_cols} FROM programs WHERE id = ?", (program_id,))
        return _program_row(rows[0]) if rows else None

    def programs(self, problem: str | None = None, island: int | None = None,
                 since_id: int | None = None) -> list[ProgramRow]:
        """Programs in id order, optionally of one problem / island, or only those with id > since_id."""
        where, params = [], []
        for cond, value in (("problem = ?", problem), ("island = ?", island), ("id > ?", since_id)):
            if value is not None:
                where.append(cond)
                params.append(value)
        sql = f"SELECT {self._program_cols} FROM programs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_program_row(r) for r in self._query(sql + " ORDER BY id", params)]

    def programs_by_id(self, ids: Sequence[int], chunk: int = 500) -> list[ProgramRow]:
        """The programs with these ids, in id order (unknown ids are skipped)."""
        ids = sorted(set(ids))
        out: list[ProgramRow] = []
        for i in range(0, len(ids), chunk):
            part = ids[i:i + chunk]
            out += [_program_row(r) for r in self._query(
                f"SELECT {PROGRAM_COLUMNS} FROM programs WHERE id IN ({','.join('?' * len(part))}) ORDER BY id", part)]
        return out

    def count_programs(self) -> int:
        return self._query("SELECT COUNT(*) FROM programs")[0][0]

    def portfolio_rows(self) -> list[PortfolioRow]:
        """The member, policy version, reward and bandit state of every committed iteration, in order."""
        if not self.has_portfolio():
            return []
        return [PortfolioRow(i, m, v, float(r), json.loads(d)) for i, m, v, r, d in self._query(
            "SELECT iteration, member, policy_version, reward, data FROM portfolio ORDER BY iteration")]

    def metrics_rows(self) -> list[MetricsRow]:
        return [MetricsRow(i, json.loads(d)) for i, d in self._query("SELECT iteration, data FROM metrics "
                                                                     "ORDER BY iteration")]

    def training_rows(self) -> list[TrainingRow]:
        return [TrainingRow(s, v, json.loads(d))
                for s, v, d in self._query("SELECT step, policy_version, data FROM training ORDER BY step")]

    def status_counts(self, problem: str | None = None) -> dict[str, int]:
        if problem is None:
            rows = self._query("SELECT status, COUNT(*) FROM programs GROUP BY status ORDER BY status")
        else:
            rows = self._query("SELECT status, COUNT(*) FROM programs WHERE problem = ? GROUP BY status "
                               "ORDER BY status", (problem,))
        return dict(rows)

    def solved_problems(self) -> dict[str, int]:
        """problem -> the first iteration in which a program solved it."""
        return dict(self._query("SELECT problem, MIN(iteration) FROM programs WHERE solved = 1 "
                                "GROUP BY problem ORDER BY problem"))

    def best_programs(self) -> dict[str, dict[str, Any]]:
        """problem -> its best program so far (highest scalar; the earliest on ties): id, iteration, scalar,
        solved, status. Malformed answers are not programs."""
        rows = self._query(
            "SELECT problem, id, iteration, scalar, solved, status FROM programs WHERE status != 'format_error' "
            "ORDER BY problem, scalar DESC, id")
        out: dict[str, dict[str, Any]] = {}
        for pr, pid, it, sc, sv, st in rows:
            if pr not in out:
                out[pr] = {"program_id": pid, "iteration": it, "scalar": float(sc), "solved": bool(sv), "status": st}
        return out

    def warnings(self) -> list[tuple[int, str]]:
        """(iteration, text) of every run-health warning the campaign raised (``evolve/search/health.py``), in order."""
        rows = self._query("SELECT iteration, data FROM metrics WHERE instr(data, '\"warnings\"') > 0 "
                           "ORDER BY iteration")
        return [(it, str(w)) for it, d in rows for w in (json.loads(d).get("warnings") or [])]

    def progress_rows(self) -> list[ProgressRow]:
        """The few columns curves need, one row per evaluated program, in evaluation order."""
        return [ProgressRow(p, it, e, float(s), bool(v)) for p, it, e, s, v in self._query(
            "SELECT problem, iteration, eval_index, scalar, solved FROM programs ORDER BY eval_index")]

    def export_rows(self, detail: bool = False) -> list[dict[str, Any]]:
        """One plain row per evaluated program, in id order: what two runs of the same seed must agree on.
        ``proposer``: the portfolio member that proposed it ("" for seed programs and archives before portfolios).
        ``detail`` adds what people read (``vevo export``): id, parent_id (None for seeds), code, error."""
        cols = ["id", "problem", "island", "iteration", "status", "scalar", "solved", "vector", "code_hash"]
        cols += ["parent_ids", "code", "artifacts"] if detail else ["NULL", "NULL", "NULL"]  # code only when asked
        if self.has_portfolio():
            sql = (f"SELECT {', '.join(c if c == 'NULL' else 'p.' + c for c in cols)}, COALESCE(f.member, '') "
                   "FROM programs p LEFT JOIN portfolio f ON f.iteration = p.iteration ORDER BY p.id")
        else:
            sql = f"SELECT {', '.join(cols)}, '' FROM programs ORDER BY id"
        rows = []
        for pid, p, isl, it, st, s, sv, v, h, parents, code, arts, m in self._query(sql):
            row = {"problem": p, "island": isl, "iteration": it, "status": st, "scalar": float(s),
                   "solved": bool(sv), "vector": json.loads(v), "code_hash": h, "proposer": m}
            if detail:
                parent_ids = json.loads(parents)
                row.update(id=pid, parent_id=parent_ids[0] if parent_ids else None, code=code,
                           error=error_text(json.loads(arts)))
            rows.append(row)
        return rows
