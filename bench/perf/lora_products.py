"""A LoRA layer's adapter products, forward and backward, as the trainer's group forward runs them: through autograd
(``F.linear(x, A)`` then ``addmm_`` with the scaled B, the layout before ``fast_logprobs._LoraAdd``) against
``_LoraAdd`` (every product with the rank as its rows), on the bundled model's layer shapes at a campaign group's
rows (a prompt of 75 tokens and 8 completions of ~49: 465 rows). Interleaved, medians of --repeats; one torch thread.

    python bench/perf/lora_products.py          # ~20 s
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from proposer.backends.fast_logprobs import _LoraAdd  # noqa: E402


def autograd_path(y, x, a, b, s):
    return y.addmm_(F.linear(x, a), (b * s).t())


def lora_add(y, x, a, b, s):
    return _LoraAdd.apply(y, x, a, b, s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=465)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}; torch threads 1; {args.rows} rows, rank {args.rank}")
    total = {"autograd": 0.0, "lora_add": 0.0}
    # (in, out, layers of that shape per decoder layer): q, k, v, o; gate, up; down
    for k, n, per_layer in ((256, 256, 4), (256, 768, 2), (768, 256, 1)):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(args.rows, k, generator=g, requires_grad=True)
        a = torch.randn(args.rank, k, generator=g, requires_grad=True)
        b = torch.randn(n, args.rank, generator=g, requires_grad=True)
        base = torch.randn(n, k, generator=g)
        dy = torch.randn(args.rows, n, generator=g)
        times: dict[str, list[float]] = {"autograd": [], "lora_add": []}
        for i in range(args.repeats + 10):
            for name, fn in (("autograd", autograd_path), ("lora_add", lora_add)):
                y = F.linear(x.detach(), base)  # the base product's output, made outside the timing
                x.grad = a.grad = b.grad = None  # each gradient a fresh tensor, not an accumulation
                t = time.perf_counter()
                fn(y, x, a, b, 2.0).backward(dy)
                if i >= 10:
                    times[name].append(time.perf_counter() - t)
        med = {name: statistics.median(v) for name, v in times.items()}
        for name in total:
            total[name] += 6 * per_layer * med[name]
        print(f"  {k} -> {n}: autograd {1e6 * med['autograd']:.0f} us, _LoraAdd {1e6 * med['lora_add']:.0f} us "
              f"({med['autograd'] / med['lora_add']:.2f}x)")
    print(f"a step's training forward and backward over the 42 LoRA layers of the bundled model: autograd "
          f"{1e3 * total['autograd']:.1f} ms, _LoraAdd {1e3 * total['lora_add']:.1f} ms "
          f"({total['autograd'] / total['lora_add']:.2f}x)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
