"""The campaign's single source of truth: an append-only SQLite file (contract 2).

One iteration (its groups, completions, evaluated programs, metrics and checkpoint) is written in ONE
transaction, so a kill -9 at any moment leaves either the whole iteration or none of it; the `metrics` row
is the iteration's completion mark. WAL lets readers (curves, dashboards) read while the campaign writes.

The checkpoint is the `state` table, the one part that is updated in place: named entries (the loop's cursor,
one per island) that an iteration rewrites only when they changed, so a campaign over a thousand problems
does not re-serialise a thousand islands per iteration. Every table or index an iteration appends to costs
one more WAL page per commit (the commit was a fifth of the loop's own time), so only the indexes that a
query here uses exist; add others to a copy for ad-hoc analysis.

`synchronous=NORMAL` (default): with WAL, a committed iteration survives kill -9 of the campaign (contract 2);
only a power loss or OS crash could drop the last few commits. ``durable=True`` selects FULL: one fsync per
iteration, which made up most of the loop's own overhead in bench/perf/loop_overhead.py (2-10 ms/iteration on a
busy disk), so it is opt-in (config ``archive_sync: full``).

The package: `schema` (tables, columns, encodings, records and rows), `base` (opening, the one connection,
transactions), and `Archive`'s methods by audience, one module each: `writes` (the loop), `resume` (a restarted
loop), `replay` (the trainer), `reports` (exports, curves, `runs show`, analyses), `browse` (`vevo ui`). Every
statement that names a table is in this package.
"""
from __future__ import annotations

from .base import ArchiveBase
from .browse import Browse
from .replay import Replay
from .reports import Reports
from .resume import Resume
from .schema import (ARCHIVE_NAME, COMPLETION_COLUMNS, PROGRAM_COLUMNS, SCHEMA_VERSION, TABLE_COLUMNS, ArchiveError,
                     CompletionRecord, CompletionRow, GroupRecord, GroupRow, MetricsRow, PortfolioRecord,
                     PortfolioRow, ProgramRecord, ProgramRow, ProgressRow, TrainingRow, archive_path, bulk_insert,
                     check_archive_file, code_hash, encode_json, encode_numbers)
from .writes import Writes, bulk_writer


class Archive(Writes, Resume, Replay, Reports, Browse, ArchiveBase):
    """Append-only SQLite archive of one campaign. Opening an existing file continues it; ``readonly=True``
    reads a live (or copied, finished) one without ever writing."""


__all__ = ["ARCHIVE_NAME", "COMPLETION_COLUMNS", "PROGRAM_COLUMNS", "SCHEMA_VERSION", "TABLE_COLUMNS", "Archive",
           "ArchiveBase", "ArchiveError", "CompletionRecord", "CompletionRow", "GroupRecord", "GroupRow", "MetricsRow",
           "PortfolioRecord", "PortfolioRow", "ProgramRecord", "ProgramRow", "ProgressRow", "TrainingRow",
           "archive_path", "bulk_insert", "bulk_writer", "check_archive_file", "code_hash", "encode_json", "encode_numbers"]
