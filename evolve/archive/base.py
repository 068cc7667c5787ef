"""The archive's plumbing: opening (creating a new file whole, or reading a live or copied one read-only), the one
locked connection, transactions and queries that turn storage failures into an `ArchiveError`, the meta table."""
from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import quote

from .schema import (PROGRAM_COLUMNS, ArchiveError, _checked_transaction, _create_schema, _has_ast_hash,
                     _is_storage_error, _raw_transaction, check_archive_file)


class ArchiveBase:
    """One archive file behind one connection and a lock. Thread-safe, so a pipelined campaign may write from a
    worker thread while the UI reads."""

    def __init__(self, path: str | Path, readonly: bool = False, durable: bool = False):
        self.path = Path(path)
        self._program_cols = PROGRAM_COLUMNS
        self.readonly = readonly
        self._lock = threading.RLock()
        if readonly:
            if not self.path.exists():
                raise FileNotFoundError(f"no archive at {self.path}")
            try:
                self._conn, tables = self._open_readonly()
            except sqlite3.DatabaseError as e:
                raise ArchiveError(f"{self.path}: not a readable vevo archive ({e})") from None
            if not {"programs", "groups", "metrics", "meta"} <= tables:
                self._conn.close()
                raise ArchiveError(f"{self.path}: not a vevo archive (no vevo tables)")
            self.version = self.get_meta("archive_version", "1")
            if not _has_ast_hash(self._conn):  # read-only, from before the column: the hashes read as None
                self._program_cols = PROGRAM_COLUMNS.replace(", ast_hash", ", NULL")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            self._create(durable)
        else:
            check_archive_file(self.path)
        self._conn = self._connect(self.path, durable)
        try:
            with self._transaction() as c:
                _create_schema(c)
            self.version = self.get_meta("archive_version")
        except BaseException:
            self._conn.close()
            raise

    def _create(self, durable: bool) -> None:
        """A new archive appears complete or not at all: built under a temporary name, then renamed, so an
        archive.db that exists is always a vevo archive (and an empty one is someone else's damage)."""
        tmp = self.path.with_name(self.path.name + ".new")
        for stale in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            stale.unlink(missing_ok=True)
        try:
            conn = self._connect(tmp, durable)
            try:
                with _checked_transaction(conn, tmp) as c:
                    _create_schema(c)
            finally:
                conn.close()
            os.replace(tmp, self.path)
        except sqlite3.DatabaseError as e:
            tmp.unlink(missing_ok=True)
            raise ArchiveError(f"{self.path}: cannot create archive: {e}") from None

    @staticmethod
    def _connect(path: Path, durable: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"{path}: SQLite refused WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as e:
            conn.close()
            raise ArchiveError(f"{path}: not a usable vevo archive ({e})") from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_readonly(self) -> tuple[sqlite3.Connection, set[str]]:
        """mode=ro reads a live archive; a WAL file in a read-only folder (no -shm possible) is opened as
        immutable instead, which is right for finished runs copied elsewhere."""
        base = f"file:{quote(str(self.path.resolve()))}"
        for query in ("?mode=ro", "?immutable=1"):
            conn = sqlite3.connect(base + query, uri=True, timeout=30, isolation_level=None, check_same_thread=False)
            try:
                conn.execute("PRAGMA query_only=ON")
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                return conn, tables
            except sqlite3.OperationalError:
                conn.close()
                if query == "?immutable=1":
                    raise
        raise AssertionError("unreachable")

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any exception (including KeyboardInterrupt). A writer's
        storage failure (disk full, I/O error, corrupt file) is an ArchiveError; the last commit stays intact."""
        with self._lock:
            if self.readonly:  # a write through a read-only archive is the caller's bug: keep SQLite's error
                with _raw_transaction(self._conn) as c:
                    yield c
                return
            with _checked_transaction(self._conn, self.path) as c:
                yield c

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as e:
                if not _is_storage_error(e):
                    raise
                raise ArchiveError(f"{self.path}: cannot read archive: {e}") from None

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else default

    def n_evaluations(self) -> int:
        """Evaluations so far (the last program's eval_index): what a resumed loop and the UI's budgets count."""
        return self._query("SELECT COALESCE(MAX(eval_index), 0) FROM programs")[0][0]

    def has_portfolio(self) -> bool:
        """Whether the archive has the portfolio table (archives before portfolios, opened read-only, do not)."""
        return bool(self._query("SELECT 1 FROM sqlite_master WHERE type='table' AND name='portfolio'"))

    def interrupt_when(self, expired: Callable[[], bool], every: int) -> None:
        """SQLite interrupts this connection's running query once ``expired()`` is true (asked every ``every``
        virtual-machine steps; the query raises "interrupted"): the UI's render deadline."""
        self._conn.set_progress_handler(lambda: 1 if expired() else 0, every)
