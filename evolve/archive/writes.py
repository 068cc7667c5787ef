"""What the campaign loop writes: one whole iteration per transaction (contract 2), a training step, a meta key."""
from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from .base import ArchiveBase
from .schema import (COMPLETION_COLUMNS, ArchiveError, GroupRecord, PortfolioRecord, ProgramRecord, _dumps_opt,
                     _escape_text, _escaped_groups, _escaped_programs, _floats, bulk_insert, code_hash, encode_json,
                     encode_numbers)


@contextmanager
def bulk_writer(path: str | Path) -> Iterator[Callable[[Mapping[str, Sequence[tuple]]], None]]:
    """Rows straight into an existing archive, fast, for building a large one (the benches' synthetic archives):
    ``write({table: rows})`` commits one transaction, tables in the order given, rows in `TABLE_COLUMNS` order
    (`bulk_insert`). A rollback journal and no fsync while it is open; WAL again when it closes. Not for a
    campaign's archive: nothing here checks what the rows say."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")  # one rollback journal per transaction, not a WAL of the whole file
    conn.execute("PRAGMA synchronous=OFF")

    def write(tables: Mapping[str, Sequence[tuple]]) -> None:
        conn.execute("BEGIN")
        for table, rows in tables.items():
            bulk_insert(conn, table, rows)
        conn.execute("COMMIT")

    try:
        yield write
    finally:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()


class Writes(ArchiveBase):
    """`Archive`'s writes (``_query`` / ``_transaction`` from `ArchiveBase`)."""

    def record_iteration(self, iteration: int, groups: Sequence[GroupRecord], programs: Sequence[ProgramRecord],
                         metrics: dict[str, Any] | None = None, state: dict[str, Any] | None = None,
                         portfolio: "PortfolioRecord | None" = None) -> list[int]:
        """Write one whole iteration atomically; returns the new program ids in the order of `programs`.

        Iterations must increase. Programs get consecutive eval_index values after those already recorded.
        state: the checkpoint entries that changed (name -> JSON value), each replacing its previous value.
        portfolio: the proposer member of the iteration, its reward and the bandit's state (evolve/policies/portfolio.py).
        Text SQLite cannot encode (lone surrogates) is stored escaped; the failed attempt was rolled back."""
        try:
            return self._record_iteration(iteration, groups, programs, metrics, state, portfolio)
        except UnicodeEncodeError:
            state = {_escape_text(str(k)): v for k, v in (state or {}).items()}
            return self._record_iteration(iteration, _escaped_groups(groups), _escaped_programs(programs), metrics,
                                          state, portfolio)

    def _record_iteration(self, iteration: int, groups: Sequence[GroupRecord], programs: Sequence[ProgramRecord],
                          metrics: dict[str, Any] | None, state: dict[str, Any] | None,
                          portfolio: "PortfolioRecord | None" = None) -> list[int]:
        with self._transaction() as c:
            last = c.execute("SELECT MAX(iteration) FROM metrics").fetchone()[0]
            if last is not None and iteration <= last:
                raise ValueError(f"iteration {iteration} already recorded (last is {last})")
            completion_of: dict[tuple[int, int], tuple[int, int]] = {}
            for gi, g in enumerate(groups):
                gid = c.execute(
                    'INSERT INTO "groups"(problem, island, iteration, parent_id, prompt, policy_version, n, m) '
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (g.problem, g.island, iteration, g.parent_id, g.prompt, g.policy_version, len(g.completions),
                     g.m)).lastrowid
                for comp in g.completions:
                    cid = c.execute(
                        f"INSERT INTO completions({COMPLETION_COLUMNS.split(', ', 1)[1]}) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (gid, comp.idx, comp.text, encode_json(list(comp.answers)),
                         "[" + ",".join(encode_numbers(_floats(v)) for v in comp.answer_vectors) + "]",
                         _dumps_opt(comp.token_ids),
                         _dumps_opt(comp.logprobs), _dumps_opt(comp.prompt_token_ids), comp.policy_version,
                         encode_json(comp.sampling), comp.finish_reason)).lastrowid
                    completion_of[(gi, comp.idx)] = (cid, comp.policy_version)
            eval_index = c.execute("SELECT COALESCE(MAX(eval_index), 0) FROM programs").fetchone()[0]
            first_id = c.execute("SELECT COALESCE(MAX(id), 0) FROM programs").fetchone()[0] + 1
            rows = []
            for p in programs:
                completion_id, version = None, 0
                if p.completion is not None:
                    if tuple(p.completion) not in completion_of:
                        raise ValueError(f"program refers to completion {p.completion} (group index, idx) "
                                         "that is not in this iteration")
                    completion_id, version = completion_of[tuple(p.completion)]
                if p.policy_version is not None:
                    version = p.policy_version
                ev = p.evaluation
                eval_index += 1
                rows.append((first_id + len(rows), p.problem, p.island, iteration,
                             encode_numbers([int(i) for i in p.parent_ids]), p.code, code_hash(p.code),
                             encode_numbers(_floats(ev.vector)), float(ev.scalar), int(bool(ev.solved)), ev.status,
                             encode_json(ev.artifacts), version, completion_id, p.answer_index, eval_index, p.staleness,
                             p.ast_hash))
            # one statement for all programs; ids are explicit (single writer inside BEGIN IMMEDIATE)
            bulk_insert(c, "programs", rows)
            ids = [r[0] for r in rows]
            bulk_insert(c, "metrics", [(iteration, encode_json(metrics or {}))])
            if portfolio is not None:
                bulk_insert(c, "portfolio", [(iteration, portfolio.member, portfolio.policy_version,
                                              float(portfolio.reward), encode_json(portfolio.data))])
            if state:
                c.executemany("INSERT OR REPLACE INTO state(key, iteration, value) VALUES (?, ?, ?)",
                              [(str(k), iteration, encode_json(v)) for k, v in state.items()])
        return ids

    def record_training(self, step: int, policy_version: int, data: dict[str, Any]) -> None:
        with self._transaction() as c:
            c.execute("INSERT INTO training(step, policy_version, data) VALUES (?, ?, ?)",
                      (step, policy_version, encode_json(data)))

    def add_training_data(self, step: int, data: dict[str, Any]) -> None:
        """Merge ``data`` into the recorded row of ``step``: the probes of its policy, sampled in the learner's
        idle time, come after the row (evolve/training/campaign.py). The one change a training row gets; the meta
        key ``training_revision`` counts them, so that a reader polling for changes (the UI) sees it."""
        with self._transaction() as c:
            row = c.execute("SELECT data FROM training WHERE step = ?", (step,)).fetchone()
            if row is None:
                raise ArchiveError(f"{self.path}: no training row at step {step} to add to")
            merged = encode_json({**json.loads(row[0]), **data})
            c.execute("UPDATE training SET data = ? WHERE step = ?", (merged, step))
            c.execute("INSERT INTO meta(key, value) VALUES ('training_revision', '1') ON CONFLICT(key) "
                      "DO UPDATE SET value = CAST(value AS INTEGER) + 1")

    def set_meta(self, key: str, value: str) -> None:
        """meta is the one mutable table (config, seed, problem list): a key is overwritten."""
        with self._transaction() as c:
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, str(value)))
