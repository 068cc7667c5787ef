"""What the learner and the sampler cost each other when they run at once, as in an overlapped campaign: the lean
training step's time on a campaign group of 8, alone, beside a sampler on a thread of the same process (the
campaign's layout: one interpreter lock) and beside a sampler in a process of its own; and the sampler's calls per
second alone and beside the step. One torch thread each (the campaign default); medians of --repeats.

    python bench/perf/learner_contention.py          # ~1 min on 2 cores
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402


def _sampler(stop, times) -> None:
    """Sample groups of 8 rows × 75 tokens (a campaign call) until ``stop``; each call's (start, end) to ``times``."""
    from learner_speed import campaign_prompt
    from proposer.backends import fast_sampler as fs
    from proposer.backends import make_backend

    be = make_backend("tiny", threads=1)
    torch.set_num_threads(1)
    ids = be.encode_prompt(campaign_prompt(be), 384)[0]
    while not stop.is_set():
        t = time.time()
        fs.sample(be.model, [ids] * 8, 75, 1.0, 1.0, {-1}, torch.Generator().manual_seed(0))
        times.put((t, time.time()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=4.0, help="warm-up of the sampler after its first call")
    args = ap.parse_args()
    from learner_speed import campaign_prompt
    from proposer.backends import make_backend
    from proposer.backends.base import SamplingParams
    from proposer.training.lora import wrap_lora
    from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample

    be = make_backend("tiny", threads=1)
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}")
    torch.manual_seed(0)
    be.model = wrap_lora(be.model, rank=8)
    g = be.generate([campaign_prompt(be)], 8, SamplingParams(temperature=1.0, max_tokens=384, seed=1))[0]
    samples = [TrainSample.from_completion(c, a) for c, a in zip(g, [1, -1, .5, -.5, 0, 1, -1, 0])]
    trainer = PolicyTrainer(be.model, TrainConfig(lr=0.0, movement=False))

    def step_time() -> float:
        ts = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            trainer.step(samples)
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    def beside(kind: str, work) -> tuple[float, float]:
        """(the result of ``work()`` while a sampler runs as ``kind``, the sampler's calls/s meanwhile: one over
        the median duration of its calls that ran wholly inside ``work()``)."""
        ctx = mp.get_context("spawn")
        times = ctx.Queue()
        stop = threading.Event() if kind == "thread" else ctx.Event()
        other = (threading.Thread(target=_sampler, args=(stop, times), daemon=True) if kind == "thread"
                 else ctx.Process(target=_sampler, args=(stop, times)))
        other.start()
        spans = [times.get(timeout=300)]  # its first call done: the model is loaded (a spawned process imports)
        time.sleep(args.seconds)
        t0 = time.time()
        out = work()
        t1 = time.time()
        stop.set()
        while other.is_alive() or not times.empty():
            try:
                spans.append(times.get(timeout=0.5))
            except Exception:  # queue.Empty: the sampler is finishing its last call
                pass
        other.join()
        inside = [b - a for a, b in spans if a >= t0 and b <= t1]
        return out, 1.0 / statistics.median(inside) if inside else float("nan")

    alone = step_time()
    _, rate_alone = beside("thread", lambda: time.sleep(alone * args.repeats))
    res = {kind: beside(kind, step_time) for kind in ("thread", "process")}
    print(f"lean step on a campaign group of 8 ({sum(len(s.completion_ids) for s in samples)} completion tokens): "
          f"alone {alone:.3f} s; the sampler alone {rate_alone:.2f} calls/s")
    for kind in ("thread", "process"):
        t, r = res[kind]
        print(f"  beside a sampler on a {kind:7s}: step {t:.3f} s ({t / alone:.2f}x), sampler {r:.2f} calls/s "
              f"({r / rate_alone:.2f}x)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
