"""The fast sampler's linear products at a decode step's few rows, per library (fast_sampler.choose_products):
``torch.mm`` on the pre-transposed weights (blas: MKL in the x86 wheels) against oneDNN on the packed ones, over the
bundled model's 25 matrices one after another (a step's order: 23 MB, more than stays in cache from one pass to
the next), and what reading the same matrices costs (one sum each). Medians, one thread, the load printed.

    python bench/perf/small_products.py            # ~1 min on 2 cores
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from proposer.backends import make_backend  # noqa: E402
from proposer.backends import fast_sampler as fs  # noqa: E402


def per_pass(fn, repeats: int) -> float:
    """Median seconds of one pass over the matrices."""
    for _ in range(3):
        fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--rows", default="1,4,8,16,75")
    args = ap.parse_args()
    be = make_backend("tiny", threads=1)
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}; CPU vendor {fs.cpu_vendor() or 'unknown'}; auto picks "
          f"{fs.choose_products('auto', 'cpu', torch.float32)}")
    from proposer.backends import native_step

    libs = (["blas"] + (["onednn"] if torch.backends.mkldnn.is_available() else [])
            + (["native"] if native_step.avx512() else []))
    with torch.inference_mode():
        w = {lib: fs.Weights(be.model, lib) for lib in libs}
        mats = {lib: [m for layer in ws.layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [ws.head]
                for lib, ws in w.items()}
        dense = [m[0] for m in mats["blas"]]
        nbytes = sum(m.numel() * m.element_size() for m in dense)
        read = per_pass(lambda: [m.sum() for m in dense], args.repeats)
        print(f"{len(dense)} matrices, {nbytes / 1e6:.1f} MB: one sum each {1e3 * read:.2f} ms "
              f"({nbytes / read / 1e9:.1f} GB/s)")
        for rows in (int(r) for r in args.rows.split(",")):
            x = {k: torch.randn(rows, k) for k in {m.shape[0] for m in dense}}
            ms = {lib: per_pass(lambda lib=lib: [fs._lin(x[d.shape[0]], m) for d, m in zip(dense, mats[lib])],
                                args.repeats) for lib in libs}
            flops = 2 * rows * sum(m.numel() for m in dense)
            print(f"{rows:3d} rows: " + ", ".join(
                f"{lib} {1e3 * t:.2f} ms ({flops / t / 1e9:.1f} GFLOP/s, {nbytes / t / 1e9:.1f} GB/s of weights)"
                for lib, t in ms.items())
                + "".join(f"; blas / {lib} {ms['blas'] / ms[lib]:.2f}x" for lib in libs[1:]))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
