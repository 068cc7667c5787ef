#!/usr/bin/env python
"""Export vevo problems as a veRL dataset (parquet, RLHFDataset's fields): one multi-answer prompt per problem with
its seed as parent, evaluated in the sandbox (the prompt a campaign shows first); the vevo reward manager finds the
problem again by id (docs/VERL.md).

    python scripts/export_verl_data.py --suite pbe --m 4 --out data/vevo_pbe
    (writes train.parquet and val.parquet: the suite's train / held-out splits; needs pyarrow, a veRL dependency)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluators.pool import SandboxPool  # noqa: E402
from problems.registry import discover  # noqa: E402
from proposer.integrations.verl_plugin import export_rows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", required=True)
    ap.add_argument("--problems-dir", action="append", default=[])
    ap.add_argument("--m", type=int, default=4, help="answers per completion")
    ap.add_argument("--out", required=True, help="folder for train.parquet and val.parquet")
    ap.add_argument("--style", choices=["compact", "chat"], default="compact",
                    help="prompt style: chat for instruct models (as a campaign picks for a chat backend)")
    ap.add_argument("--workers", type=int, default=2, help="sandbox workers evaluating the seed programs")
    args = ap.parse_args()
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("export_verl_data: needs pyarrow (pip install pyarrow; veRL installs it)", file=sys.stderr)
        return 2
    try:
        probs = discover(args.problems_dir).select(suite=args.suite)
    except KeyError as e:
        print(f"export_verl_data: {e.args[0]}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    splits = {"train": [p for p in probs if p.split != "heldout"], "val": [p for p in probs if p.split == "heldout"]}
    with SandboxPool(workers=args.workers) as pool:
        for name, ps in splits.items():
            rows = export_rows(ps, pool, m=args.m, style=args.style)
            pq.write_table(pa.Table.from_pylist(rows), out / f"{name}.parquet")
            print(f"{out / (name + '.parquet')}: {len(rows)} problems")
    return 0


if __name__ == "__main__":
    sys.exit(main())
