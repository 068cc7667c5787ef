"""Trying something in a forked child: for probes whose effect must not stick to the caller (a seccomp filter
cannot be removed, a process enters a namespace once)."""
from __future__ import annotations

import os


def in_child(fn) -> str:
    """Run fn() (returns '' or what went wrong) in a forked child; its answer ('' = it worked)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                err = fn()
            except BaseException as e:  # noqa: BLE001 - whatever happened is the answer
                err = f"{type(e).__name__}: {e}"
            os.write(w, (err or "").encode()[:1000])
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        out = fh.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return out
