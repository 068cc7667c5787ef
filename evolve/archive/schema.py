"""The archive's file format: its tables and columns, how values are encoded into them and decoded out of them, the
records the loop writes and the rows readers get back, and the transactions that keep a file whole. The SQL of
the archive lives in this package (`evolve/archive/`); nothing outside it names a table or a column."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence
from urllib.parse import quote

import numpy as np

from evaluators.types import Evaluation
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
