"""glibc's malloc told to keep the memory a CPU forward frees, so the next forward does not fault it in again.

Why: a training step, a prefill or a decode loop on the CPU allocates blocks of 0.1-30 MB (activations, logits,
caches) and frees them soon after. By default glibc maps the larger blocks on their own and unmaps them when freed,
and hands the top of its heap back to the kernel once more than ``M_TRIM_THRESHOLD`` of it is free; each page comes
back on the next use as a page fault, zeroed by the kernel. A lean step of the bundled model on a campaign group
took ~6,000 faults (~25 MB), ~50 with the heap kept (``resource.getrusage``'s minor faults around
``PolicyTrainer.step``, a scratch measurement). The learner process set this first (100 iterations of
`pbe-hard-heldout`: its steps 51.8 -> 49.1 s); in the campaign's own process, where the sampler runs, 30-iteration
untrained campaigns took 0.88x the wall over four interleaved pairs (docs/TRAINING.md).

Blocks of 1 GiB and more are still mapped on their own and returned when freed. The cost: a process keeps the peak
of its heap, which it needed anyway. A person who tunes malloc through its environment variables
(``MALLOC_TRIM_THRESHOLD_``, ...) keeps their setting: nothing is changed then.
"""
from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
LIMIT = 1 << 30
_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set both thresholds once per process (a forked child inherits them); whether they are set."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux") or any(k.startswith("MALLOC_") for k in os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (or no symbol): leave the allocator as it is
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # the mapping threshold first: setting the trim threshold alone turns glibc's adaptive mapping threshold off
    # and maps every block over 128 kB. mallopt(3) documents 32 MB as its upper limit on 64-bit systems, where a
    # glibc refuses 1 GiB (2.36 here takes it)
    if not (mallopt(M_MMAP_THRESHOLD, LIMIT) or mallopt(M_MMAP_THRESHOLD, 32 << 20)):
        return False
    _done = bool(mallopt(M_TRIM_THRESHOLD, LIMIT))
    return _done
