"""How closely the samplers' behaviour log-probs agree with the trainer's full-sequence recompute, per seed: the
fast sampler and the general transformers loop in fp32 (the campaign's dtype), the recompute against its own
float64 value, and the fast sampler in float64 (the same function term for term, so ~0). The bundled model under
a LoRA with non-zero B, T = 0.7, top-p 0.9, the prompts of tests/proposer/test_fast_sampler.py.

    python bench/perf/sampler_agreement.py --seeds 8      # ~2 min on 2 cores
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from proposer.backends import make_backend  # noqa: E402
from proposer.backends import fast_sampler as fs  # noqa: E402
from proposer.backends.base import SamplingParams  # noqa: E402
from proposer.backends.logprobs import batch_sequence_logprobs  # noqa: E402
from proposer.training.lora import wrap_lora  # noqa: E402

LONG = ("def f(xs):\n    # EVOLVE-BLOCK-START\n    xs = [x * x for x in xs]\n    return sum(xs)\n"
        "    # EVOLVE-BLOCK-END\n# square each element, then take the sum of the elements\n<answer_1>")
SHORT = "# sort the list, then keep the first three elements\n<answer_1>"
T, TOP_P, TOKENS = 0.7, 0.9, 200


def gap(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for r, q in zip(a, b) for x, y in zip(r, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--products", default="auto", choices=fs.PRODUCTS,
                    help="the fp32 fast sampler's linear products (fast_sampler.choose_products; default auto)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    be = make_backend("tiny", threads=1)
    ids = {n: be.encode_prompt(p, 200)[0] for n, p in (("one prompt", LONG), ("short", SHORT))}
    torch.manual_seed(0)
    m32 = wrap_lora(be.model, rank=8)
    for n, p in m32.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0.0, 0.05)
    m64 = copy.deepcopy(m32).double()
    be.model = m32
    print(f"fast sampler products: {fs.choose_products(args.products, 'cpu', torch.float32)}")
    print("seed  layout        fast-rec32  general-rec32  rec32-rec64  fast64-rec64")
    worst = [0.0] * 4
    for seed in range(11, 11 + args.seeds):
        for layout in ("one prompt", "two prompts"):
            rows = [ids["one prompt"]] * 8 if layout == "one prompt" else [ids["one prompt"]] * 4 + [ids["short"]] * 4
            fast = fs.sample(m32, rows, TOKENS, T, TOP_P, be.eos_ids, torch.Generator().manual_seed(seed),
                             products=args.products)
            toks = [f[0] for f in fast]
            rec32 = batch_sequence_logprobs(m32, rows, toks, temperature=T, top_p=TOP_P)
            rec64 = batch_sequence_logprobs(m64, rows, toks, temperature=T, top_p=TOP_P)
            gen = be._decode(rows, SamplingParams(temperature=T, top_p=TOP_P, max_tokens=TOKENS),
                             torch.Generator().manual_seed(seed))
            grec = batch_sequence_logprobs(m32, rows, [g[0] for g in gen], temperature=T, top_p=TOP_P)
            f64 = fs.sample(m64, rows, TOKENS, T, TOP_P, be.eos_ids, torch.Generator().manual_seed(seed))
            r64 = batch_sequence_logprobs(m64, rows, [f[0] for f in f64], temperature=T, top_p=TOP_P)
            row = [gap([f[1] for f in fast], rec32), gap([g[1] for g in gen], grec), gap(rec32, rec64),
                   gap([f[1] for f in f64], r64)]
            worst = [max(w, r) for w, r in zip(worst, row)]
            print(f"{seed:4d}  {layout:12s}  " + "  ".join(f"{r:11.1e}" for r in row))
    print("max               " + "  ".join(f"{r:11.1e}" for r in worst))


if __name__ == "__main__":
    main()
