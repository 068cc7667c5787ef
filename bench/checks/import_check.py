"""Acceptance run for the dataset importers: import each dataset from /work/shared/data, evaluate every
problem's reference and seed in the sandbox (``problems.check``), print solved counts and every failure.

    .venv/bin/python bench/checks/import_check.py                       # mbpp, humaneval, mbppplus (the criteria)
    .venv/bin/python bench/checks/import_check.py --datasets all        # + sanitized MBPP, HumanEval+, APPS seeds
    .venv/bin/python bench/checks/import_check.py --json out.json

Criteria: MBPP full >= 970/974, HumanEval >= 160/164, MBPP+ >= 370/378 references solved, and no seed
solved. Exit status 1 when one is missed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATA = ROOT.parent / "shared" / "data"
DATASETS = {
    # name: (source, path, required references solved or None)
    "mbpp": ("mbpp", "mbpp/mbpp.jsonl", 970),
    "humaneval": ("humaneval", "humaneval/HumanEval.jsonl.gz", 160),
    "mbppplus": ("evalplus", "evalplus/MbppPlus.jsonl.gz", 370),
    "mbpp-sanitized": ("mbpp", "mbpp/sanitized-mbpp.json", None),
    "humanevalplus": ("evalplus", "evalplus/HumanEvalPlus.jsonl.gz", None),
    "apps": ("apps", "apps_mapcoder150/selected150.jsonl", None),
}
DEFAULT = ("mbpp", "humaneval", "mbppplus")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=",".join(DEFAULT), help=f"comma list of {', '.join(DATASETS)} or 'all'")
    ap.add_argument("--data", default=str(DATA), help="folder holding the datasets")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-plus", type=int, default=100, help="EvalPlus plus inputs kept per problem")
    ap.add_argument("--json", help="write the per-problem results here")
    args = ap.parse_args(argv)

    from evaluators.pool import SandboxPool
    from problems.check import check_many
    from problems.importers import import_problems

    names = list(DATASETS) if args.datasets == "all" else [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        ap.error(f"unknown dataset(s): {', '.join(unknown)}")
    print("command:", " ".join([Path(sys.executable).name, "bench/checks/import_check.py"] + (argv if argv is not None
                                                                                      else sys.argv[1:])))
    ok = True
    dump: dict = {}
    with SandboxPool(workers=args.workers) as pool:
        print(f"sandbox: {args.workers} workers, isolation {pool.isolation}")
        for name in names:
            source, rel, need = DATASETS[name]
            path = Path(args.data) / rel
            if not path.exists():
                print(f"\n== {name}: {path} missing, skipped")
                continue
            t0 = time.monotonic()
            report: dict = {}
            opts = {"pool": pool, "max_plus": args.max_plus, "report": report} if source == "evalplus" else {}
            probs = import_problems(source, path, **opts)
            t_import = time.monotonic() - t0
            t1 = time.monotonic()
            results = check_many(probs, pool)
            t_check = time.monotonic() - t1
            n_tests = sum(p.n_tests for p in probs)
            with_ref = [r for r in results if r["reference"] is not None]
            ref_solved = sum(1 for r in with_ref if r["reference"]["solved"])
            seed_solved = [r["id"] for r in results if r["seed"]["solved"]]
            print(f"\n== {name} ({path}): {len(probs)} problems, {n_tests} tests; "
                  f"import {t_import:.1f}s, check {t_check:.1f}s")
            print(f"references solved {ref_solved}/{len(with_ref)}"
                  + (f" (required >= {need})" if need is not None else "")
                  + f"; seeds solved {len(seed_solved)}/{len(results)}")
            for p, r in zip(probs, results):
                ref = r["reference"]
                if ref is not None and not ref["solved"]:
                    a = ref["artifacts"]
                    why = a.get("first_error") or a.get("error") or a.get("exit") or a.get("stderr", "")[-200:]
                    print(f"  reference not solved: {p.id}: {ref['status']} {ref['scalar']:.3f}: {why}")
            for pid in seed_solved:
                print(f"  seed solved: {pid}")
            if report:
                dropped = {k: v["dropped"] for k, v in report.items() if v["dropped"]}
                n_drop = sum(sum(d.values()) for d in dropped.values())
                modes: dict[str, int] = {}
                for v in report.values():
                    modes[v["compare"]] = modes.get(v["compare"], 0) + 1
                print(f"  inputs dropped: {n_drop} in {len(dropped)} problems {dropped}")
                print(f"  comparisons: {modes}; time limits: "
                      f"{sorted({v['time_limit'] for v in report.values() if 'time_limit' in v})}")
                for k, v in report.items():
                    if "skipped" in v:
                        print(f"  skipped: {k}: {v['skipped']}")
            if need is not None and ref_solved < need or seed_solved:
                ok = False
            dump[name] = {"problems": len(probs), "tests": n_tests, "reference_solved": ref_solved,
                          "with_reference": len(with_ref), "seed_solved": seed_solved, "import_s": t_import,
                          "check_s": t_check, "results": results, "report": report}
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1, default=str), encoding="utf-8")
    print("\nPASS" if ok else "\nFAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
