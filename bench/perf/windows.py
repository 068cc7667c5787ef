"""Windows over a growing archive: per-iteration times read where the archive holds about T programs.

Windows: the iterations after which the archive holds between T/1.5 and T*1.5 programs (capped at what the run
reached), T = 100, 1,000, 10,000; ms/iteration is the median over the window of 4-iteration means (a pipelined
loop alternates short and long gaps). Wall-clock numbers are printed, never asserted; the machine's load is
printed with them.
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path


TARGETS = (100, 1_000, 10_000)


WINDOW_FACTOR = 1.5


ROLL = 4  # ms/iteration = (time of 4 consecutive iterations) / 4, then the median over the window


def rolling(values: list[float], k: int = ROLL) -> list[float | None]:
    """values[i] -> mean of values[i-k+1 .. i] (None for the first k-1): time of k consecutive iterations / k.

    A pipelined loop alternates short and long gaps (OpenEvolve with two tasks in flight: ~0.3 ms, then ~10 ms of
    result polling), so the median of single gaps is unstable; the median of k-iteration means is not."""
    out: list[float | None] = [None] * min(k - 1, len(values))
    acc = sum(values[: k - 1])
    for i in range(k - 1, len(values)):
        acc += values[i]
        out.append(acc / k)
        acc -= values[i - k + 1]
    return out


def window_bounds(target: int, reached: int) -> tuple[float, float] | None:
    lo, hi = target / WINDOW_FACTOR, min(target * WINDOW_FACTOR, reached)
    return (lo, hi) if hi >= lo else None


def window_samples(sizes: list[int], values: list, target: int) -> list[float]:
    """The values of the iterations after which the archive size lies in the window around target."""
    if not sizes:
        return []
    b = window_bounds(target, max(sizes))
    if b is None:
        return []
    return [v for s, v in zip(sizes, values) if v is not None and b[0] <= s <= b[1]]


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def machine_load() -> str:
    """Load average and CPU pressure: on a shared machine these explain most of the run-to-run spread."""
    parts = []
    try:
        parts.append("load avg " + " ".join(f"{x:.1f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cpus")
    except OSError:
        pass
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        parts.append("cpu pressure (some) avg60 " + line.split("avg60=")[1].split()[0] + "%")
    except (OSError, IndexError):
        pass
    return ", ".join(parts) or "unknown"
