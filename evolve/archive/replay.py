"""What the trainer replays: recorded groups with their completions, and which of their answers became programs."""
from __future__ import annotations

import json
from typing import Any

from .base import ArchiveBase
from .schema import COMPLETION_COLUMNS, CompletionRow, GroupRow, _completion_row


class Replay(ArchiveBase):
    """`Archive`'s replay (``_query`` / ``_transaction`` from `ArchiveBase`)."""

    def recent_groups(self, limit: int, problem: str | None = None) -> list[GroupRow]:
        """The `limit` most recent groups (optionally of one problem), oldest first, with their completions.
        Every recorded group is complete: it was written in the same transaction as its completions."""
        if limit <= 0:
            return []
        sql = 'SELECT id FROM "groups"'
        params: list[Any] = []
        if problem is not None:
            sql += " WHERE problem = ?"
            params.append(problem)
        ids = [r[0] for r in self._query(sql + " ORDER BY id DESC LIMIT ?", params + [limit])][::-1]
        return self.groups_by_id(ids)

    def group_ids(self, member: str | None = None, through: int | None = None) -> list[int]:
        """Every group id, oldest first (the replay buffer draws from these); with ``member``, only the groups
        that portfolio member proposed; with ``through``, only those of iterations <= it."""
        last = -1 if through is None else int(through)
        if member is None:
            return [r[0] for r in self._query('SELECT id FROM "groups" WHERE ? < 0 OR iteration <= ? ORDER BY id',
                                              (last, last))]
        return [r[0] for r in self._query('SELECT g.id FROM "groups" g JOIN portfolio p ON p.iteration = g.iteration '
                                          "WHERE p.member = ? AND (? < 0 OR g.iteration <= ?) ORDER BY g.id",
                                          (member, last, last))]

    def groups_by_id(self, ids: list[int]) -> list[GroupRow]:
        """Groups with their completions, in the order of ``ids`` (unknown ids are skipped)."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = {g[0]: g for g in self._query('SELECT id, problem, island, iteration, parent_id, prompt, '
                                             f'policy_version, n, m FROM "groups" WHERE id IN ({marks})', ids)}
        by_group: dict[int, list[CompletionRow]] = {i: [] for i in rows}
        for r in self._query(f"SELECT {COMPLETION_COLUMNS} FROM completions WHERE group_id IN ({marks}) "
                             "ORDER BY group_id, idx", ids):
            by_group[r[1]].append(_completion_row(r))
        return [GroupRow(*rows[i], completions=tuple(by_group[i])) for i in ids if i in rows]

    def new_answers(self, completion_ids: list[int]) -> dict[int, set[int]]:
        """completion id → indices of its answers that were archived as new programs (an answer that reproduced
        a known program, or an earlier answer of its group, has no program row of its own)."""
        out: dict[int, set[int]] = {c: set() for c in completion_ids}
        if not completion_ids:
            return out
        marks = ",".join("?" * len(completion_ids))
        for cid, idx in self._query(f"SELECT completion_id, answer_index FROM programs WHERE completion_id IN "
                                    f"({marks}) AND answer_index IS NOT NULL", completion_ids):
            out[cid].add(int(idx))
        return out

    def program_vectors(self, ids: list[int]) -> dict[int, list[float]]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {i: json.loads(v) for i, v in self._query(f"SELECT id, vector FROM programs WHERE id IN ({marks})",
                                                          ids)}
