"""Which problems the tiny proposer could solve by recall: a screen of a problem set against a program set.

The corpus guard (``corpus.LeakGuard``) keeps programs out of the corpus while it is drawn; it was drawn against
the *std* held-out targets only, so a corpus program can still solve a *hard* held-out problem (one solves all
14 tests of ``pbe/hard-reduce-1002``). The weights are fixed, so the fix is on the other side: a suite that is to
measure search may only hold problems that no corpus program solves. ``screen`` says which pairs offend;
``corpus_programs`` regenerates the bundled checkpoint's corpus (its ``pretrain.json``: seed, size, plain
fraction, validation samples) and yields its distinct programs.

    python -m proposer.tiny.leaks --suite pbe-hard-heldout   # offending pairs, verbatim corpus targets (JSON)
    python -m proposer.tiny.leaks --study                    # the pbe-study screen (docs/results/...plan.md)
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from problems.evolve_block import evolve_block
from problems.model import CallCase, Problem
from problems.suites import pbe

CHECKPOINT = Path(__file__).parent / "checkpoint"
VAL_START = 5 * 10**6  # pretrain.py draws its validation samples from this index on


@dataclass(frozen=True)
class Leak:
    """``program`` passes every test of ``problem`` (``why`` "tests"), or behaves like its reference on pbe's
    fixed probe inputs (``why`` "fingerprint")."""

    problem: str
    program: str
    why: str


def _strip(prog: str) -> str:
    """A program as the screen judges it: its EVOLVE block when it has one."""
    return evolve_block(prog) or prog


def _solves(fn, problem: Problem) -> bool:
    for t in problem.tests:
        got = pbe._call(fn, copy.deepcopy(t.args[0]))
        if isinstance(got, tuple) and got[:1] == ("!err",) or not pbe._eq(got, t.expected):
            return False
    return True


def _fingerprints(fn) -> set[str]:
    return {pbe._fingerprint_fn(fn, "int"), pbe._fingerprint_fn(fn, "list")}


def screen(problems: Iterable[Problem], programs: Iterable[str]) -> list[Leak]:
    """Every (problem, program) pair where the program solves the problem: passes all its tests, or (a pbe
    problem) has its reference's behaviour fingerprint. Pure: trusted sources, run in-process; a program that
    does not compile solves nothing. Programs inside EVOLVE markers are judged by their block."""
    probs = [p for p in problems if p.tests]
    for p in probs:
        if not all(isinstance(t, CallCase) and len(t.args) == 1 and not t.kwargs for t in p.tests):
            raise ValueError(f"screen: {p.id} is not a one-argument call problem (pbe-style); cannot screen it")
    by_fp: dict[str, list[Problem]] = {}
    for p in probs:
        if p.meta.get("fingerprint"):
            by_fp.setdefault(p.meta["fingerprint"], []).append(p)
    out: list[Leak] = []
    seen: set[str] = set()
    for prog in programs:
        src = _strip(prog)
        if src.strip() in seen:
            continue
        seen.add(src.strip())
        try:
            fn = pbe.compile_fn(src)
        except Exception:  # noqa: BLE001 - not a function: solves nothing
            continue
        fp_hit = {p.id for fp in _fingerprints(fn) for p in by_fp.get(fp, ())}
        for p in probs:
            if _solves(fn, p):
                out.append(Leak(p.id, src, "tests"))
            elif p.id in fp_hit:
                out.append(Leak(p.id, src, "fingerprint"))
    return out


def seed_solves(problems: Iterable[Problem]) -> list[str]:
    """Ids of the problems whose own seed program already passes every test (nothing left to search)."""
    return [p.id for p in problems if p.tests and _solves(pbe.compile_fn(evolve_block(p.seed_code) or p.seed_code,
                                                                         p.entry_point), p)]


def study_screen(candidates: list[Problem], programs: Iterable[str], per_family: int) -> dict:
    """The study suite's rule: drop every candidate some program solves or whose seed solves it, then keep the
    first ``per_family`` survivors of each family in stream order. Returns the kept ids and why the rest went."""
    candidates = list(candidates)
    leaks = screen(candidates, programs)
    seeded = set(seed_solves(candidates))
    dropped: dict[str, str] = {}
    for x in leaks:
        dropped.setdefault(x.problem, f"{x.why}: {x.program.strip()!r}")
    for pid in seeded:
        dropped.setdefault(pid, "seed solves")
    kept: list[str] = []
    count: dict[str, int] = {}
    for p in candidates:
        fam = p.meta.get("family", "")
        if p.id in dropped or count.get(fam, 0) >= per_family:
            continue
        count[fam] = count.get(fam, 0) + 1
        kept.append(p.id)
    return {"candidates": [p.id for p in candidates], "dropped": dropped, "kept": kept}


def recipe(checkpoint: Path = CHECKPOINT) -> dict:
    """Seed, size, plain fraction and validation count of the corpus the checkpoint was pretrained on."""
    info = json.loads((checkpoint / "pretrain.json").read_text())
    a = info["args"]
    return {"seed": info["seed"], "n": a["corpus_size"], "plain_frac": a["plain_frac"], "val": a.get("val", 0)}


def corpus_programs(seed: int, n: int, plain_frac: float = 0.1, val: int = 0) -> Iterator[str]:
    """The distinct programs (EVOLVE block stripped) of corpus samples 0..n-1 and of the ``val`` validation
    samples, drawn exactly as ``pretrain.py`` draws them (one guard, the same calls)."""
    from proposer.tiny.corpus import LeakGuard, iter_corpus

    guard = LeakGuard()
    seen: set[str] = set()
    streams = (iter_corpus(seed, n, plain_frac=plain_frac, guard=guard),
               iter_corpus(seed, val, start=VAL_START, plain_frac=0.0, guard=guard))
    for stream in streams:
        for s in stream:
            for prog in s.programs:
                src = _strip(prog)
                if src.strip() not in seen:
                    seen.add(src.strip())
                    yield src


def corpus_targets(seed: int, n: int, plain_frac: float = 0.1) -> set[str]:
    """The target sources of corpus samples 0..n-1 (what a sample's right answer is, verbatim)."""
    from proposer.tiny.corpus import LeakGuard, iter_corpus

    return {s.meta["target"] for s in iter_corpus(seed, n, plain_frac=plain_frac, guard=LeakGuard())}


def study_programs() -> Iterator[str]:
    """What a study problem must not be solved by: the bundled checkpoint's corpus, then every reference of the
    other pbe suites (a study problem that behaves like one of those would carry over whatever was tuned there)."""
    from problems.suites import SUITES

    r = recipe()
    yield from corpus_programs(r["seed"], r["n"], r["plain_frac"], r["val"])
    for name in ("pbe", "pbe-hard"):
        for p in SUITES[name]():
            yield p.reference_code


def main(argv: list[str] | None = None) -> int:
    from problems.suites import SUITES

    ap = argparse.ArgumentParser(prog="python -m proposer.tiny.leaks", description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--suite", help=f"screen this suite against the corpus (one of {', '.join(SUITES)})")
    g.add_argument("--study", action="store_true", help="rerun the pbe-study screen (its candidates, kept, dropped)")
    args = ap.parse_args(argv)
    r = recipe()
    if args.study:
        res = study_screen(pbe.study_candidates(), study_programs(), pbe.STUDY_PER_FAMILY)
        print(json.dumps({"study_seed": pbe.STUDY_SEED, "corpus": r, **res}, indent=1))
        return 0
    if args.suite not in SUITES:
        print(f"unknown suite {args.suite!r} (known: {', '.join(SUITES)})", file=sys.stderr)
        return 2
    probs = SUITES[args.suite]()
    leaks = screen(probs, corpus_programs(r["seed"], r["n"], r["plain_frac"], r["val"]))
    targets = corpus_targets(r["seed"], r["n"], r["plain_frac"])
    print(json.dumps({"suite": args.suite, "corpus": r, "problems": len(probs),
                      "offending": sorted({x.problem for x in leaks}),
                      "verbatim_targets": [p.id for p in probs if p.reference_code in targets],
                      "seed_solves": seed_solves(probs), "pairs": [asdict(x) for x in leaks]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
