"""What a problem's evaluation may use: memory, processes, open files, file and output sizes, box size.

Native problems keep small limits (a test call needs little); OpenEvolve evaluators are whole programs that load
JAX, start process pools, write temp files and print progress, so their folders get generous defaults, raised
further by ``evaluator.memory_limit_mb`` in ``config.yaml``, or ``memory_limit_mb`` and ``[resources]`` in a
``vevo.toml`` beside it (memory has that one key everywhere; ``[resources] memory_mb`` is an error naming it).
Whatever a problem asks for, ``capped`` bounds it by this host (a fraction of its memory, fixed ceilings for the
rest) before it reaches the sandbox: a problem folder cannot ask for the machine. The wall-clock limit is the
problem's ``time_limit`` (per cascade stage for OpenEvolve folders).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from .errors import ProblemError

# Ceilings whatever a problem asks for; memory and the box (a tmpfs, so RAM) are also bounded by the host.
HOST_MEMORY_SHARE = 0.5
MAX = {"nproc": 4096, "nofile": 65536, "fsize_mb": 16384, "output_mb": 256, "disk_mb": 16384,
       "memory_mb": 1 << 20, "address_space_mb": 1 << 22}
MIN = {"nproc": 8, "nofile": 16, "fsize_mb": 1, "output_mb": 1, "disk_mb": 16, "memory_mb": 64,
       "address_space_mb": 64}


@dataclass(frozen=True)
class Resources:
    """memory_mb: the memory cgroup limit (and the address-space limit where no cgroup is available);
    address_space_mb: RLIMIT_AS where a cgroup bounds memory (0: none, since JAX/XLA and some BLAS reserve far
    more address space than they touch); nproc: processes + threads; nofile: open files; fsize_mb: largest file
    written; output_mb: stdout + stderr before ``output_limit``; disk_mb: the private box (cwd, TMPDIR,
    /dev/shm), a tmpfs."""

    memory_mb: int = 1024
    address_space_mb: int | None = None  # None: memory_mb (the native default)
    nproc: int = 64
    nofile: int = 64
    fsize_mb: int = 16
    output_mb: int = 1
    disk_mb: int = 256

    def to_job(self) -> dict[str, int]:
        c = capped(self)
        return {"memory_mb": c.memory_mb, "as_mb": c.memory_mb if c.address_space_mb is None else c.address_space_mb,
                "nproc": c.nproc, "nofile": c.nofile, "fsize_mb": c.fsize_mb, "output_mb": c.output_mb,
                "disk_mb": c.disk_mb}


NATIVE = Resources()
# What stock OpenEvolve examples need (JAX, multiprocessing pools, ~100 open files, temp files, chatty output).
OPENEVOLVE = Resources(memory_mb=8192, address_space_mb=0, nproc=1024, nofile=4096, fsize_mb=4096, output_mb=64,
                       disk_mb=4096)


def host_memory_mb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError):
        return 4096


def capped(r: Resources) -> Resources:
    """r bounded by this host: memory and box at most HOST_MEMORY_SHARE of RAM, the rest by MAX."""
    host = max(256, int(host_memory_mb() * HOST_MEMORY_SHARE))
    kw: dict[str, Any] = {}
    for f in fields(r):
        v = getattr(r, f.name)
        if v is None or (f.name == "address_space_mb" and v == 0):
            continue
        hi = MAX[f.name]
        if f.name in ("memory_mb", "disk_mb"):
            hi = min(hi, host)
        kw[f.name] = max(MIN[f.name], min(int(v), hi))
    return replace(r, **kw)


MEMORY_KEY = "memory_limit_mb"  # the one key of the memory limit: top level in problem.toml and vevo.toml


def resources_from_dict(data: Any, base: Resources, where: str | Path, field_: str = "resources",
                        table: bool = True) -> Resources:
    """A ``[resources]`` table over base. Unknown keys and non-integers are one-line errors. In a user's table
    (table=True) ``memory_mb`` is one too, naming MEMORY_KEY: one limit has one key, so two cannot disagree."""
    if not isinstance(data, dict):
        raise ProblemError(where, field_, "must be a table")
    names = {f.name for f in fields(Resources)} - ({"memory_mb"} if table else set())
    if table and "memory_mb" in data:
        raise ProblemError(where, f"{field_}.memory_mb", f"the memory limit's key is {MEMORY_KEY}, at the top level "
                           f"(write {MEMORY_KEY} = {data['memory_mb']!r} above [{field_}])")
    kw = {}
    for k, v in data.items():
        if k not in names:
            raise ProblemError(where, f"{field_}.{k}", f"unknown key (known: {', '.join(sorted(names))})")
        if not isinstance(v, int) or isinstance(v, bool):
            raise ProblemError(where, f"{field_}.{k}", f"expected an integer, got {type(v).__name__}")
        lo = 0 if k == "address_space_mb" else MIN[k]
        if not lo <= v <= MAX[k]:
            raise ProblemError(where, f"{field_}.{k}", f"must be in [{lo}, {MAX[k]}], got {v}")
        kw[k] = v
    return replace(base, **kw)


def resources_to_dict(r: Resources, base: Resources = NATIVE) -> dict[str, int]:
    """The fields that differ from base (what a written problem.toml needs)."""
    return {f.name: getattr(r, f.name) for f in fields(r)
            if getattr(r, f.name) != getattr(base, f.name) and getattr(r, f.name) is not None}
