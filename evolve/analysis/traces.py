"""Campaigns as training data (`vevo export --format traces`): one record per recorded group, with everything an
RL learner needs (the prompt, each completion's tokens and behaviour log-probs, each answer's test vector and fate),
written as Parquet and JSONL under one versioned schema (docs/TRACES.md).

Records are built from the archive alone (``group_records``: pure given the archive), so a seeds folder or several
runs become one dataset. Nothing of the machine goes in: no paths (a run is named by its folder's name), no
environment, no config (a config holds the run folder and may hold a model path); only what the archive says about
each group and the sampling settings it was drawn with.

Per answer, ``outcome`` says what the campaign made of it: ``new`` (a new program: its id, code, status, scalar),
``format_error`` (unparseable or inapplicable: a program row with status format_error), ``duplicate`` (it reproduced
a known program or an earlier answer of its group: no row of its own; its vector is that program's) or ``empty``.
A duplicate's program is found again by the normalised AST hash of the answer applied to the group's parent; where
that fails (a renamed prompt), its code, status and scalar stay null, and its vector, the learning signal, is kept.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from problems.errors import VevoError

TRACE_SCHEMA_VERSION = 1
PARQUET_FILE, JSONL_FILE, MANIFEST_FILE = "traces.parquet", "traces.jsonl", "manifest.json"
OUTCOMES = ("new", "format_error", "duplicate", "empty")


class TraceError(VevoError, ValueError):
    """Traces that cannot be written or read (no runs, no traces folder, a schema version this vevo does not read)."""


# ------------------------------------------------------------------------------------------------- records
def _answer(ai: int, body: str, vector: list[float], prog, dup) -> dict[str, Any]:
    """One answer's record: its own program row when it has one, else the program it duplicated (if found)."""
    if prog is not None:
        outcome = "format_error" if prog.status == "format_error" else "new"
    else:
        outcome = "duplicate" if body.strip() else "empty"
    src = prog if prog is not None else dup
    return {"index": ai, "answer": body, "outcome": outcome, "vector": [float(x) for x in vector],
            "program_id": None if src is None else int(src.id), "code": None if src is None else src.code,
            "status": None if src is None else src.status, "scalar": None if src is None else float(src.scalar),
            "solved": None if src is None else bool(src.solved)}


def _duplicate_of(text: str, m: int, ai: int, parent_code: str | None, by_hash: dict[str, Any]):
    """The known program an answer reproduced: the answer applied to the parent, looked up by normalised hash."""
    if parent_code is None:
        return None
    from proposer.answers.mutate import MutationError, apply_answer, normalized_hash
    from proposer.answers.parsing import parse_answers

    parsed = parse_answers(text, m)
    if ai >= len(parsed):
        return None
    try:
        return by_hash.get(normalized_hash(apply_answer(parent_code, parsed[ai])))
    except MutationError:
        return None


def group_records(archive, run: str, seed: int | None = None,
                  split_of: Callable[[str], str | None] = lambda pid: None) -> list[dict[str, Any]]:
    """Every complete group of one archive as a trace record (schema: docs/TRACES.md), oldest first.
    ``run`` names the run (no path); ``split_of`` gives a problem's split (train / test) where it is known."""
    groups = archive.groups_by_id(archive.group_ids())
    programs = archive.programs()
    by_id = {p.id: p for p in programs}
    by_answer = {(p.completion_id, p.answer_index): p for p in programs if p.completion_id is not None}
    by_hash: dict[str, dict[str, Any]] = {}
    for p in programs:  # the first program with each hash, per problem: what a duplicate reproduced
        if p.ast_hash and p.status != "format_error":
            by_hash.setdefault(p.problem, {}).setdefault(p.ast_hash, p)
    out = []
    for g in groups:
        if not g.completions:
            continue
        parent = by_id.get(g.parent_id) if g.parent_id is not None else None
        comps = []
        for c in g.completions:
            answers = []
            for ai, (body, vec) in enumerate(zip(c.answers, c.answer_vectors)):
                prog = by_answer.get((c.id, ai))
                dup = None
                if prog is None and body.strip():
                    dup = _duplicate_of(c.text, g.m, ai, parent.code if parent else None, by_hash.get(g.problem, {}))
                answers.append(_answer(ai, body, vec, prog, dup))
            s = c.sampling or {}
            comps.append({"idx": c.idx, "text": c.text, "finish_reason": c.finish_reason,
                          "policy_version": int(c.policy_version),
                          "prompt_token_ids": None if c.prompt_token_ids is None else [int(t) for t in c.prompt_token_ids],
                          "token_ids": None if c.token_ids is None else [int(t) for t in c.token_ids],
                          "logprobs": None if c.logprobs is None else [float(x) for x in c.logprobs],
                          "temperature": _opt_float(s.get("temperature")), "top_p": _opt_float(s.get("top_p")),
                          "max_tokens": None if s.get("max_tokens") is None else int(s["max_tokens"]),
                          "answers": answers})
        out.append({"schema_version": TRACE_SCHEMA_VERSION, "run": run, "seed": seed, "group_id": int(g.id),
                    "problem": g.problem, "split": split_of(g.problem), "island": int(g.island),
                    "iteration": int(g.iteration), "policy_version": int(g.policy_version),
                    "parent_id": None if g.parent_id is None else int(g.parent_id),
                    "parent_vector": None if parent is None else [float(x) for x in parent.vector],
                    "parent_scalar": None if parent is None else float(parent.scalar),
                    "prompt": g.prompt, "m": int(g.m), "completions": comps})
    return out


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


# ------------------------------------------------------------------------------------------------- schema
def arrow_schema():
    """The Parquet schema, explicit so an empty list or an all-null column has the same type in every file."""
    import pyarrow as pa

    answer = pa.struct([("index", pa.int32()), ("answer", pa.string()), ("outcome", pa.string()),
                        ("vector", pa.list_(pa.float64())), ("program_id", pa.int64()), ("code", pa.string()),
                        ("status", pa.string()), ("scalar", pa.float64()), ("solved", pa.bool_())])
    completion = pa.struct([("idx", pa.int32()), ("text", pa.string()), ("finish_reason", pa.string()),
                            ("policy_version", pa.int64()), ("prompt_token_ids", pa.list_(pa.int64())),
                            ("token_ids", pa.list_(pa.int64())), ("logprobs", pa.list_(pa.float64())),
                            ("temperature", pa.float64()), ("top_p", pa.float64()), ("max_tokens", pa.int64()),
                            ("answers", pa.list_(answer))])
    return pa.schema([("schema_version", pa.int32()), ("run", pa.string()), ("seed", pa.int64()),
                      ("group_id", pa.int64()), ("problem", pa.string()), ("split", pa.string()),
                      ("island", pa.int64()), ("iteration", pa.int64()), ("policy_version", pa.int64()),
                      ("parent_id", pa.int64()), ("parent_vector", pa.list_(pa.float64())),
                      ("parent_scalar", pa.float64()), ("prompt", pa.string()), ("m", pa.int32()),
                      ("completions", pa.list_(completion))])


# ------------------------------------------------------------------------------------------------- files
def _run_names(folders: Sequence[str | Path]) -> list[str]:
    """Each folder's own name (never its path), made unique with -2, -3 ... where two folders share one."""
    names, seen = [], {}
    for f in folders:
        base = Path(f).resolve().name or "run"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return names


def registry_splits() -> Callable[[str], str | None]:
    """A problem's split from the built-in registry (None for a problem it does not know)."""
    from problems.registry import Registry

    reg, cache = Registry(), {}

    def split_of(pid: str) -> str | None:
        if pid not in cache:
            try:
                cache[pid] = reg.get(pid).split
            except Exception:  # a problem from a folder the registry was not given: split unknown
                cache[pid] = None
        return cache[pid]
    return split_of


def export_traces(folders: Sequence[str | Path], out: str | Path,
                  split_of: Callable[[str], str | None] | None = None) -> dict[str, Any]:
    """Write every group of the runs (a run folder, or each seed of a seeds folder) to OUT/traces.parquet and
    OUT/traces.jsonl, and OUT/manifest.json (schema version, runs, counts). Returns the manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..archive import ARCHIVE_NAME, Archive, archive_path
    from .arms import expand, run_seed

    if not folders:
        raise TraceError("vevo export --format traces: give at least one run folder")
    split_of = split_of or registry_splits()
    records, runs = [], []
    for name, folder in zip(_run_names(folders), folders):
        seeds = expand(folder)
        for run in seeds:
            db = archive_path(run)
            if not db.is_file():
                raise TraceError(f"{run}: not a run directory (no {ARCHIVE_NAME})")
            seed = run_seed(run)
            with Archive(db, readonly=True) as a:
                recs = group_records(a, name, seed, split_of)
            records += recs
            runs.append({"run": name, "seed": seed, "groups": len(recs),
                         "completions": sum(len(r["completions"]) for r in recs)})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, schema=arrow_schema()), out / PARQUET_FILE)
    with open(out / JSONL_FILE, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    manifest = {"format": "vevo-traces", "schema_version": TRACE_SCHEMA_VERSION, "runs": runs,
                "groups": len(records), "completions": sum(x["completions"] for x in runs)}
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def load_traces(folder: str | Path) -> list[dict[str, Any]]:
    """The records of a traces folder (its JSONL, else its Parquet), checked for a schema version this vevo reads."""
    folder = Path(folder)
    if (folder / JSONL_FILE).is_file():
        with open(folder / JSONL_FILE, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
    elif (folder / PARQUET_FILE).is_file():
        import pyarrow.parquet as pq

        records = pq.read_table(folder / PARQUET_FILE).to_pylist()
    else:
        raise TraceError(f"{folder}: not a traces folder (no {JSONL_FILE} or {PARQUET_FILE}; make one with "
                         f"`vevo export RUN --format traces --out {folder}`)")
    bad = sorted({r.get("schema_version") for r in records} - {TRACE_SCHEMA_VERSION}, key=str)
    if bad:
        raise TraceError(f"{folder}: traces schema version {bad[0]}; this vevo reads version {TRACE_SCHEMA_VERSION}")
    return records


# ------------------------------------------------------------------------------------------------- filters
def select(records: Iterable[dict[str, Any]], *, problems: Sequence[str] = (), splits: Sequence[str] = (),
           statuses: Sequence[str] = (), min_version: int | None = None,
           max_version: int | None = None) -> list[dict[str, Any]]:
    """The records a learner uses: of these problems / splits (empty: all), with at least one answer whose status
    or outcome is one of ``statuses`` (empty: all), recorded by a policy version in [min_version, max_version],
    and with the tokens and behaviour log-probs a step needs in every completion."""
    def trainable(r) -> bool:
        return bool(r["completions"]) and all(c.get("token_ids") and c.get("prompt_token_ids")
                                              and c.get("logprobs") is not None for c in r["completions"])

    def has_status(r) -> bool:
        return any(a.get("status") in statuses or a.get("outcome") in statuses
                   for c in r["completions"] for a in c["answers"])

    return [r for r in records
            if (not problems or r["problem"] in problems) and (not splits or r.get("split") in splits)
            and (min_version is None or r["policy_version"] >= min_version)
            and (max_version is None or r["policy_version"] <= max_version)
            and (not statuses or has_status(r)) and trainable(r)]
