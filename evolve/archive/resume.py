"""What a restarted campaign reads back: its checkpoint, the programs and metrics through the last committed
iteration (by pages: no read transaction outlives a page), the portfolio's rewards."""
from __future__ import annotations

import json
from typing import Any, Iterator

from .base import ArchiveBase
from .schema import SCHEMA_VERSION


class Resume(ArchiveBase):
    """`Archive`'s resume (``_query`` / ``_transaction`` from `ArchiveBase`)."""

    def last_iteration(self) -> int | None:
        return self._query("SELECT MAX(iteration) FROM metrics")[0][0]

    def checkpoint(self) -> tuple[int, dict[str, Any]] | None:
        """(the last iteration that wrote state, every state entry's latest value), or None before the first."""
        if self.version != SCHEMA_VERSION:
            raise ValueError(f"{self.path}: archive format {self.version} was written by an older vevo, whose "
                             f"checkpoints this one cannot resume (its programs stay readable: runs show, "
                             f"export, curves)")
        rows = self._query("SELECT key, iteration, value FROM state")
        if not rows:
            return None
        return max(r[1] for r in rows), {k: json.loads(v) for k, _, v in rows}

    def restore_rows(self, through: int, page: int = 20_000) -> Iterator[tuple]:
        """(id, problem, island, iteration, scalar, solved, status, artifacts, ast_hash, code) of each program of
        iterations <= through, in id order, read by pages of ids (no read transaction outlives a page). Only what a
        restore needs is decoded: artifacts only where they hold an error line's keys (else {}), code only where
        the artifacts lack the ast hash (archives from before it was kept there; else None)."""
        last = 0
        while True:
            rows = self._query(
                "SELECT id, problem, island, iteration, scalar, solved, status, "
                "CASE WHEN instr(artifacts, '\"error\"') OR instr(artifacts, '\"first_error\"') "
                "OR instr(artifacts, '\"error_type\"') "
                "OR instr(artifacts, '\"exit\"') THEN artifacts END, COALESCE(ast_hash, json_extract(artifacts, '$.ast_hash')), "
                "CASE WHEN COALESCE(ast_hash, json_extract(artifacts, '$.ast_hash'), '') = '' THEN code END "
                "FROM programs WHERE id > ? AND iteration <= ? ORDER BY id LIMIT ?", (last, through, page))
            for r in rows:
                yield r[:7] + ({} if r[7] is None else json.loads(r[7]),) + r[8:]
            if len(rows) < page:
                return
            last = rows[-1][0]

    def metrics_pages(self, through: int, page: int = 5_000) -> Iterator[tuple[int, dict[str, Any]]]:
        """(iteration, data) of each metrics row through ``through``, in order, read by pages."""
        last = -1
        while True:
            rows = self._query("SELECT iteration, data FROM metrics WHERE iteration > ? AND iteration <= ? "
                               "ORDER BY iteration LIMIT ?", (last, through, page))
            for it, d in rows:
                yield it, json.loads(d)
            if len(rows) < page:
                return
            last = rows[-1][0]

    def portfolio_rewards(self, through: int) -> list[tuple[int, str, float]]:
        """(iteration, member, reward) of each iteration through ``through``: what a resumed portfolio learns
        from, without the bandit states."""
        if not self.has_portfolio():
            return []
        return [(i, m, float(r)) for i, m, r in self._query(
            "SELECT iteration, member, reward FROM portfolio WHERE iteration <= ? ORDER BY iteration", (through,))]
