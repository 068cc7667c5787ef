"""What a different learner schedule would have saved a finished trained run, before anyone builds it: the run's
own timings (each iteration's loop work, each step's learner work, from its archive) replayed through the
overlapped pipeline as it ran (``train.lag``: the step started at commit t is published at commit t + lag), with
two or three steps in flight (lag 2, 3: each a policy version more stale than the one before), with the probes
taken off the learner's path (sampled in its idle time instead; a probe's row would then be published later), and
with each step's reference forward taken in the learner's idle time before the step's commit.

    python bench/perf/overlap_model.py RUN [RUN ...]     # RUN: a finished `vevo run --train ...` (overlapped)

The model has no contention: each side's work takes what it took in the run, although work moved into the other
side's idle time slows it there (docs/TRAINING.md: ~1.15x on generation beside the learner). So a saving it
prints is an upper bound; the lag-1 replay beside the measured wall says how well it fits the run at all.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evolve.archive import ARCHIVE_NAME, Archive  # noqa: E402
from evolve.config.legacy import upgrade  # noqa: E402


@dataclass
class Timings:
    """One run's work per iteration t = 1..n: ``loop[t]`` what the loop did between the trainer hook of t - 1 and
    the commit of t (preparing, generating, committing; not its waits), ``step[t]`` the learner's work on the
    step started at commit t (without the reference forwards the loop took ahead, which are in ``loop``),
    ``probe[t]`` the probe of the policy it made (in its flight, after it; or in the learner's idle time where t is
    in ``idle_probes``: the run sampled it there, ``probe_deferred``), ``start`` the baseline probe's (it runs from
    the run's start; in the idle time too where ``idle_start``), ``first`` the clock at the commit of iteration 0,
    ``wall`` the measured wall and ``lag`` the run's own ``train.lag``."""
    loop: dict[int, float]
    step: dict[int, float]
    probe: dict[int, float]
    start: float
    first: float
    wall: float
    lag: int = 1
    idle_probes: frozenset[int] = frozenset()
    idle_start: bool = False


def timings(run: Path) -> Timings:
    """The run's `Timings` from its archive (metrics: ``wall_seconds`` stamped at each commit, before the trainer's
    hook; training rows: ``train_seconds``, ``reference_ahead_seconds``, ``probe_seconds``, ``train_wait_seconds``:
    what the hook of t + lag waited for step t). ValueError for a run that is not one whose every step overlapped
    (untrained, the step in the loop, steps redone in the loop at a resume) or whose stamps are missing."""
    with Archive(run / ARCHIVE_NAME, readonly=True) as a:
        metrics = {r.iteration: r.data for r in a.metrics_rows()}
        rows = {r.step: r.data for r in a.training_rows()}
        config = a.get_meta("config")
    if not rows or not all("train_wait_seconds" in d for d in rows.values()):
        raise ValueError(f"{run}: not a trained run whose every step ran on the overlapped learner")
    try:
        its = sorted(metrics)
        wall = {t: float(metrics[t]["wall_seconds"]) for t in its}
        wait = {s: float(d["train_wait_seconds"]) for s, d in rows.items()}
        lag = int((upgrade(json.loads(config or "{}")).get("train") or {}).get("lag", 1))
        loop = {t: wall[t] - wall[prev] - wait.get(prev - lag, 0.0) for prev, t in zip(its, its[1:])}
        step = {s: float(d["train_seconds"]) - float(d.get("reference_ahead_seconds", 0.0)) for s, d in rows.items()}
        probe = {s: float(d.get("probe_seconds", 0.0)) for s, d in rows.items()}
        start = sum(float(d.get("probe_seconds_before", 0.0)) for d in rows.values())
        # a step's publication, or a probe's values added to its row later (the run's account counts both)
        last = max(float(d.get(k, 0.0)) for d in rows.values() for k in ("wall_seconds", "probe_wall_seconds"))
        idle = frozenset(s for s, d in rows.items() if d.get("probe_deferred"))
        idle_start = any(d.get("probe_deferred_before") for d in rows.values())
        return Timings(loop, step, probe, start, wall[its[0]], max(wall[its[-1]], last), lag, idle, idle_start)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise ValueError(f"{run}: a stamp the replay needs is missing or not a number ({type(e).__name__}: {e})") \
            from None


def replay(tm: Timings, lag: int = 1, background_probes: bool = False, idle_share: float = 0.0) -> float:
    """The modelled wall: at commit t the hook waits for step t - lag, then starts step t, which the learner takes
    once it has finished step t - 1; the loop's next iteration starts when the hook returns. With
    ``background_probes`` a probe's work leaves the step and fills the learner's idle time instead (whatever is
    left at the end runs after the last step), as the run's own ``idle_probes`` did. With ``idle_share`` up to that
    share of each step (its reference forward: ~25% of a step in a py-spy profile, docs/TRAINING.md) is done in the
    learner's idle time before the hook that starts it, counted from when the learner is free (an upper bound: the
    step's completions may not exist yet then)."""
    idle_start = background_probes or tm.idle_start
    done: dict[int, float] = {0: tm.start if not idle_start else 0.0}  # the learner's baseline probe
    backlog = tm.start if idle_start else 0.0
    commit, free = tm.first, done[0]
    n = max(tm.loop)
    for t in range(1, n + 1):
        commit += tm.loop[t]
        hook = max(commit, done.get(t - lag, 0.0))
        idle = max(0.0, hook - free)  # the learner's idle time until this step arrives
        ahead = min(idle, idle_share * tm.step.get(t, 0.0))  # the share of the step done in it
        work = tm.step.get(t, 0.0) - ahead
        backlog = max(0.0, backlog - (idle - ahead))  # probes fill what idle time the share left
        if background_probes or t in tm.idle_probes:
            backlog += tm.probe.get(t, 0.0)
        else:  # the step's flight ends after the probe of the policy it made
            work += tm.probe.get(t, 0.0)
        if t in tm.step:
            free = max(hook, free) + work
            done[t] = free
        commit = hook
    return max(commit, free) + backlog


SCHEDULES = {"two steps in flight (lag 2)": dict(lag=2),  # what `modelled` and main() replay besides the run's own
             "three steps in flight (lag 3)": dict(lag=3),
             "probes in the learner's idle time": dict(background_probes=True),
             "both (lag 2, probes idle)": dict(lag=2, background_probes=True),
             "references in the learner's idle time": dict(idle_share=0.25)}


def modelled(run: Path) -> dict[str, float] | None:
    """The run replayed as it went (``as run``) and under each of SCHEDULES, in seconds; None for a run without an
    overlapped learner (untrained, the step in the loop, an older tree's archive)."""
    try:
        tm = timings(run)
    except ValueError:
        return None
    return {"as run": replay(tm, lag=tm.lag), **{k: replay(tm, **kw) for k, kw in SCHEDULES.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    for run in args.runs:
        try:
            tm = timings(run)
        except (ValueError, OSError) as e:
            sys.exit(f"overlap_model: {e}")
        base = replay(tm, lag=tm.lag)
        probes = sum(tm.probe.values()) + tm.start
        print(f"{run}: measured wall {tm.wall:.1f} s; loop work {sum(tm.loop.values()):.1f} s, learner work "
              f"{sum(tm.step.values()) + probes:.1f} s (probes {probes:.1f} s of it)")
        width = max(map(len, SCHEDULES))
        print(f"  {f'replayed as run (lag {tm.lag})':{width}s} {base:6.1f} s")
        for label, kw in SCHEDULES.items():
            w = replay(tm, **kw)
            print(f"  {label:{width}s} {w:6.1f} s  ({w - base:+.1f} s, {w / base:.2f}x the replay)")


if __name__ == "__main__":
    main()
