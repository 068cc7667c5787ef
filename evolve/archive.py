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
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence
from urllib.parse import quote

import numpy as np

from evaluators.types import Evaluation, error_text
from problems.errors import VevoError
from proposer.backends.base import Completion, SamplingParams

SCHEMA_VERSION = "2"  # 2: checkpoints became the incremental `state` table
_SQLITE_MAGIC = b"SQLite format 3\x00"
ARCHIVE_NAME = "archive.db"  # a run folder's archive; holding one is what makes a folder a run folder


def archive_path(run_dir: str | Path) -> Path:
    """The archive of the run folder `run_dir` (which need not exist yet)."""
    return Path(run_dir) / ARCHIVE_NAME


class ArchiveError(VevoError, ValueError):
    """An archive that cannot be read or written (not a vevo archive, corrupt, disk full): one line naming the
    file. A ValueError, as the checks it replaced were."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS "groups"(
    id INTEGER PRIMARY KEY,
    problem TEXT NOT NULL,
    island INTEGER NOT NULL,
    iteration INTEGER NOT NULL,
    parent_id INTEGER REFERENCES programs(id),
    prompt TEXT NOT NULL,
    policy_version INTEGER NOT NULL,
    n INTEGER NOT NULL,
    m INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS completions(
    id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL REFERENCES "groups"(id),
    idx INTEGER NOT NULL,
    text TEXT NOT NULL,
    answers TEXT NOT NULL,
    answer_vectors TEXT NOT NULL,
    token_ids TEXT,
    logprobs TEXT,
    prompt_token_ids TEXT,
    policy_version INTEGER NOT NULL,
    sampling TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    UNIQUE(group_id, idx)
);
CREATE TABLE IF NOT EXISTS programs(
    id INTEGER PRIMARY KEY,
    problem TEXT NOT NULL,
    island INTEGER NOT NULL,
    iteration INTEGER NOT NULL,
    parent_ids TEXT NOT NULL,
    code TEXT NOT NULL,
    code_hash TEXT NOT NULL,
    vector TEXT NOT NULL,
    scalar REAL NOT NULL,
    solved INTEGER NOT NULL,
    status TEXT NOT NULL,
    artifacts TEXT NOT NULL,
    policy_version INTEGER NOT NULL,
    completion_id INTEGER REFERENCES completions(id),
    answer_index INTEGER,
    eval_index INTEGER NOT NULL UNIQUE,
    staleness INTEGER NOT NULL DEFAULT 0,
    ast_hash TEXT
);
CREATE TABLE IF NOT EXISTS metrics(iteration INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS state(key TEXT PRIMARY KEY, iteration INTEGER NOT NULL, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS training(step INTEGER PRIMARY KEY, policy_version INTEGER NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS portfolio(iteration INTEGER PRIMARY KEY, member TEXT NOT NULL,
    policy_version INTEGER NOT NULL, reward REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS programs_problem_island ON programs(problem, island, id);
CREATE INDEX IF NOT EXISTS programs_solved ON programs(problem, iteration) WHERE solved = 1;
CREATE INDEX IF NOT EXISTS groups_problem ON "groups"(problem, id);
"""

PROGRAM_COLUMNS = ("id, problem, island, iteration, parent_ids, code, code_hash, vector, scalar, solved, status, "
                 "artifacts, policy_version, completion_id, answer_index, eval_index, staleness, ast_hash")
COMPLETION_COLUMNS = ("id, group_id, idx, text, answers, answer_vectors, token_ids, logprobs, prompt_token_ids, "
                    "policy_version, sampling, finish_reason")


# each table's row as `bulk_insert` takes it: the columns, in order (the loop's commit and the benches' synthetic
# archive write through it)
TABLE_COLUMNS = {"groups": "id, problem, island, iteration, parent_id, prompt, policy_version, n, m",
                 "completions": COMPLETION_COLUMNS, "programs": PROGRAM_COLUMNS, "metrics": "iteration, data",
                 "portfolio": "iteration, member, policy_version, reward, data", "state": "key, iteration, value"}


def bulk_insert(conn: sqlite3.Connection, table: str, rows: Sequence[tuple]) -> None:
    """Raw rows into one table, in the caller's transaction, values already encoded (`encode_json`,
    `encode_numbers`): `Archive.record_iteration` writes its programs, metrics and portfolio rows through it, and
    `bench/perf/loop_overhead.py` a 100k-program archive in seconds; nothing here checks a row."""
    cols = TABLE_COLUMNS[table]
    quoted = '"groups"' if table == "groups" else table
    conn.executemany(f"INSERT INTO {quoted}({cols}) VALUES ({', '.join('?' * (cols.count(',') + 1))})", rows)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_json_default)


def encode_json(obj: Any) -> str:
    """Canonical JSON (sorted keys, compact) so the same run writes byte-identical archives (contract 3).
    One encoder for all calls: building one per call was a tenth of the loop's own time."""
    return _ENCODER.encode(obj)


def encode_numbers(values: list[float] | list[int]) -> str:
    """encode_json of a flat list of floats or ints (not bools), without the encoder's per-call setup (vectors and
    parent ids are most of an iteration's encodes). json writes floats with float.__repr__ too; NaN and infinities, whose repr
    differs, contain an "n" and go through the encoder."""
    text = "[" + ",".join(map(repr, values)) + "]"
    return encode_json(values) if "n" in text else text


def _dumps_opt(obj: Any) -> str | None:
    return None if obj is None else encode_json(obj)


def _loads_opt(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _floats(vector: Sequence[float] | np.ndarray) -> list[float]:
    return [float(x) for x in vector]


def code_hash(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


def _escape_text(text: str) -> str:
    """Text SQLite can store: lone surrogates (a tokenizer decode or a JSON '\\ud800' makes them) become
    backslash escapes. Applied only after a plain write failed, so ordinary text costs nothing."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _escaped_groups(groups: Sequence["GroupRecord"]) -> list["GroupRecord"]:
    return [dataclasses.replace(g, problem=_escape_text(g.problem), prompt=_escape_text(g.prompt), completions=[
        dataclasses.replace(c, text=_escape_text(c.text), finish_reason=_escape_text(c.finish_reason))
        for c in g.completions]) for g in groups]


def _escaped_programs(programs: Sequence["ProgramRecord"]) -> list["ProgramRecord"]:
    return [dataclasses.replace(p, problem=_escape_text(p.problem), code=_escape_text(p.code),
                                evaluation=dataclasses.replace(p.evaluation, status=_escape_text(p.evaluation.status)))
            for p in programs]


def _is_storage_error(e: BaseException) -> bool:
    """Corrupt file, not a database, disk full, I/O error, locked: the file's fault, not the code's (an
    IntegrityError or a ProgrammingError stays a bug with its traceback)."""
    return type(e) in (sqlite3.DatabaseError, sqlite3.OperationalError)


# ---------------------------------------------------------------------------------------------- records (in)

@dataclass
class CompletionRecord:
    """One completion of a group as it will be stored. `answer_vectors` has one vector per answer; an empty,
    invalid or duplicate answer gets a zero vector, since only new programs become rows of `programs`."""

    idx: int
    text: str
    answers: list[str]
    answer_vectors: list[list[float]]
    policy_version: int = 0
    sampling: dict[str, Any] = field(default_factory=dict)
    finish_reason: str = "stop"
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        if len(self.answer_vectors) != len(self.answers):
            raise ValueError(f"completion {self.idx}: {len(self.answers)} answers but "
                             f"{len(self.answer_vectors)} answer vectors")

    @classmethod
    def from_completion(cls, idx: int, completion: Completion, answers: list[str],
                        answer_vectors: list[list[float]],
                        sampling: SamplingParams | dict[str, Any] | None = None) -> "CompletionRecord":
        if isinstance(sampling, SamplingParams):
            sampling = sampling.to_dict()
        return cls(idx=idx, text=completion.text, answers=list(answers),
                   answer_vectors=[_floats(v) for v in answer_vectors], policy_version=completion.policy_version,
                   sampling=dict(sampling or {}), finish_reason=completion.finish_reason,
                   token_ids=completion.token_ids, logprobs=completion.logprobs,
                   prompt_token_ids=completion.prompt_token_ids)


@dataclass
class GroupRecord:
    """The G completions the proposer returned for one prompt (n = len(completions), m answers each)."""

    problem: str
    island: int
    parent_id: int | None
    prompt: str
    m: int
    completions: list[CompletionRecord]
    policy_version: int = 0

    def __post_init__(self) -> None:
        idxs = [c.idx for c in self.completions]
        if len(set(idxs)) != len(idxs):
            raise ValueError(f"group for {self.problem!r}: duplicate completion idx in {idxs}")


@dataclass
class ProgramRecord:
    """One evaluated candidate. `completion` = (index of its group in the same record_iteration call,
    completion idx); None for programs that no completion produced (seeds, migrants are not re-recorded).
    policy_version None means: the completion's version, or 0 without a completion."""

    problem: str
    island: int
    code: str
    evaluation: Evaluation
    parent_ids: list[int] = field(default_factory=list)
    completion: tuple[int, int] | None = None
    answer_index: int | None = None
    policy_version: int | None = None
    staleness: int = 0
    ast_hash: str | None = None  # the dedupe key (proposer.answers.mutate.normalized_hash); None for format errors


# --------------------------------------------------------------------------------------------- rows (out)

@dataclass(frozen=True)
class ProgramRow:
    id: int
    problem: str
    island: int
    iteration: int
    parent_ids: list[int]
    code: str
    code_hash: str
    vector: list[float]
    scalar: float
    solved: bool
    status: str
    artifacts: dict[str, Any]
    policy_version: int
    completion_id: int | None
    answer_index: int | None
    eval_index: int
    staleness: int
    ast_hash: str | None = None  # None: a format error, or an archive from before the column

    @property
    def evaluation(self) -> Evaluation:
        return Evaluation(vector=list(self.vector), scalar=self.scalar, solved=self.solved, status=self.status,
                          artifacts=dict(self.artifacts))


@dataclass(frozen=True)
class CompletionRow:
    id: int
    group_id: int
    idx: int
    text: str
    answers: list[str]
    answer_vectors: list[list[float]]
    token_ids: list[int] | None
    logprobs: list[float] | None
    prompt_token_ids: list[int] | None
    policy_version: int
    sampling: dict[str, Any]
    finish_reason: str

    def score_matrix(self) -> np.ndarray:
        """m × d scores of this completion's answers (the input of the VPO/GRPO estimators)."""
        if not self.answer_vectors:
            return np.zeros((0, 0))
        return np.asarray(self.answer_vectors, dtype=float)


@dataclass(frozen=True)
class GroupRow:
    id: int
    problem: str
    island: int
    iteration: int
    parent_id: int | None
    prompt: str
    policy_version: int
    n: int
    m: int
    completions: tuple[CompletionRow, ...]


class MetricsRow(NamedTuple):
    iteration: int
    data: dict[str, Any]


class TrainingRow(NamedTuple):
    step: int
    policy_version: int
    data: dict[str, Any]


class PortfolioRecord(NamedTuple):
    """What one iteration's portfolio row holds: the member that proposed it, its policy version, the reward the
    batch brought and the bandit's state after it (evolve/policies/portfolio.py)."""
    member: str
    policy_version: int
    reward: float
    data: dict[str, Any]


class PortfolioRow(NamedTuple):
    iteration: int
    member: str
    policy_version: int
    reward: float
    data: dict[str, Any]


class ProgressRow(NamedTuple):
    problem: str
    iteration: int
    eval_index: int
    scalar: float
    solved: bool


def _program_row(r: tuple) -> ProgramRow:
    return ProgramRow(id=r[0], problem=r[1], island=r[2], iteration=r[3], parent_ids=json.loads(r[4]), code=r[5],
                      code_hash=r[6], vector=json.loads(r[7]), scalar=float(r[8]), solved=bool(r[9]), status=r[10],
                      artifacts=json.loads(r[11]), policy_version=r[12], completion_id=r[13], answer_index=r[14],
                      eval_index=r[15], staleness=r[16], ast_hash=r[17])


def _completion_row(r: tuple) -> CompletionRow:
    return CompletionRow(id=r[0], group_id=r[1], idx=r[2], text=r[3], answers=json.loads(r[4]),
                         answer_vectors=json.loads(r[5]), token_ids=_loads_opt(r[6]), logprobs=_loads_opt(r[7]),
                         prompt_token_ids=_loads_opt(r[8]), policy_version=r[9], sampling=json.loads(r[10]),
                         finish_reason=r[11])


# ------------------------------------------------------------------------------------------------ archive

def _create_schema(c: sqlite3.Connection) -> None:
    for stmt in _SCHEMA.split(";"):
        if stmt.strip():
            c.execute(stmt)
    if not _has_ast_hash(c):  # archives from before the column: their programs are hashed again on resume
        c.execute("ALTER TABLE programs ADD COLUMN ast_hash TEXT")
    c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('archive_version', ?)", (SCHEMA_VERSION,))


def _has_ast_hash(c: sqlite3.Connection) -> bool:
    return any(r[1] == "ast_hash" for r in c.execute("PRAGMA table_info(programs)"))


def check_archive_file(path: Path) -> None:
    """Refuse to continue a file that cannot be an archive this code wrote (archives are created whole, see
    Archive._create): empty, not SQLite, or SQLite without vevo's tables. Read-only, so a refused file is
    left exactly as it was."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise ArchiveError(f"{path}: cannot read archive: {e.strerror}") from None
    if not head:
        raise ArchiveError(f"{path}: empty file, not a vevo archive; refusing to start a new run over it")
    if head != _SQLITE_MAGIC:
        raise ArchiveError(f"{path}: not a vevo archive (not an SQLite file)")
    conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, timeout=30)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as e:
        raise ArchiveError(f"{path}: not a readable vevo archive ({e})") from None
    finally:
        conn.close()
    if not {"programs", "groups", "metrics", "meta"} <= tables:
        raise ArchiveError(f"{path}: not a vevo archive (SQLite without vevo's tables); refusing to write into it")


@contextmanager
def _raw_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any exception, with SQLite's own errors."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def _checked_transaction(conn: sqlite3.Connection, path: Path) -> Iterator[sqlite3.Connection]:
    """_raw_transaction whose storage failures become one-line ArchiveErrors naming the file. A failed
    ROLLBACK (SQLite may already have rolled back after a full disk) must not hide the first error."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.DatabaseError:
                pass
            raise
        conn.execute("COMMIT")
    except sqlite3.DatabaseError as e:
        if not _is_storage_error(e):
            raise
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.DatabaseError:
                pass
        raise ArchiveError(f"{path}: cannot write archive: {e}") from None


class Archive:
    """Append-only SQLite archive of one campaign. Opening an existing file continues it.

    Thread-safe (one connection behind a lock), so a pipelined campaign may write from a worker thread."""

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

    # -- plumbing
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

    def __enter__(self) -> "Archive":
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

    # -- writing
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

    def set_meta(self, key: str, value: str) -> None:
        """meta is the one mutable table (config, seed, problem list): a key is overwritten."""
        with self._transaction() as c:
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, str(value)))

    # -- reading
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else default

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

    def count_programs(self) -> int:
        return self._query("SELECT COUNT(*) FROM programs")[0][0]

    def n_evaluations(self) -> int:
        return self._query("SELECT COALESCE(MAX(eval_index), 0) FROM programs")[0][0]

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

    def has_portfolio(self) -> bool:
        """Whether the archive has the portfolio table (archives before portfolios, opened read-only, do not)."""
        return bool(self._query("SELECT 1 FROM sqlite_master WHERE type='table' AND name='portfolio'"))

    def portfolio_rows(self) -> list[PortfolioRow]:
        """The member, policy version, reward and bandit state of every committed iteration, in order."""
        if not self.has_portfolio():
            return []
        return [PortfolioRow(i, m, v, float(r), json.loads(d)) for i, m, v, r, d in self._query(
            "SELECT iteration, member, policy_version, reward, data FROM portfolio ORDER BY iteration")]

    def portfolio_rewards(self, through: int) -> list[tuple[int, str, float]]:
        """(iteration, member, reward) of each iteration through ``through``: what a resumed portfolio learns
        from, without the bandit states."""
        if not self.has_portfolio():
            return []
        return [(i, m, float(r)) for i, m, r in self._query(
            "SELECT iteration, member, reward FROM portfolio WHERE iteration <= ? ORDER BY iteration", (through,))]

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
