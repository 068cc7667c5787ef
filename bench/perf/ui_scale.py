"""`vevo ui` at scale: a synthetic archive of 100k programs on 50 problems (one problem holding a fifth of them,
so one island's lineage has 10k nodes), written through the real `Archive.record_iteration`, then every page's
server time (the route's work, cold and warm) and payload size.

Each iteration is one group of G=2 completions with m=4 answers: mostly fresh programs (a parent from the same
island, a per-test vector drawn around the parent's), some malformed answers (format_error rows) and some
duplicates (no row), a training step every 50 iterations with the policy version bumped. Timings are printed,
never asserted (tests/evolve/ui/test_ui.py::test_pages_stay_bounded_on_a_large_archive checks the bounded
payloads on a smaller archive).

    .venv/bin/python bench/perf/ui_scale.py                    # 100k programs, 50 problems (~1-2 min to build)
    .venv/bin/python bench/perf/ui_scale.py --programs 20000 --keep /tmp/scale-run
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TESTS = 10
M, G = 4, 2


def build(run_dir: Path, programs: int = 100_000, problems: int = 50, seed: int = 0) -> dict:
    """Write the synthetic run folder; returns what it holds (ids, problems, the big problem)."""
    from evaluators.types import Evaluation
    from evolve.archive import Archive, CompletionRecord, GroupRecord, ProgramRecord, archive_path

    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    pids = [f"synth/p{k:02d}" for k in range(problems)]
    weights = [0.2] + [0.8 / (problems - 1)] * (problems - 1)
    config = {"search": {"iterations": 10 ** 9, "islands": 2, "answers": M, "group": G}, "train": {"algo": "vpo"}}
    members: dict[tuple[str, int], list[tuple[int, list[float]]]] = {}
    next_id, version, step = 1, 0, 0
    with Archive(archive_path(run_dir)) as a:
        a.set_meta("problems", json.dumps(pids))
        a.set_meta("config", json.dumps(config))
        seeds = []
        for pid in pids:
            v = [rng.random() * 0.3 for _ in range(TESTS)]
            seeds.append(ProgramRecord(problem=pid, island=-1, code=f"def f(x):\n    return x  # seed of {pid}\n",
                                       evaluation=Evaluation(vector=v, scalar=sum(v) / TESTS, solved=False,
                                                             status="wrong")))
        ids = a.record_iteration(0, [], seeds, {"seeds": len(seeds)})
        for pid, i, s in zip(pids, ids, seeds):
            for isl in range(2):
                members[(pid, isl)] = [(i, list(s.evaluation.vector))]
        next_id = ids[-1] + 1
        it = 0
        while next_id <= programs:
            it += 1
            pid = rng.choices(pids, weights)[0]
            isl = it % 2
            pool = members[(pid, isl)]
            parent, pvec = pool[-1] if rng.random() < 0.5 else rng.choice(pool[-200:])
            comps, progs = [], []
            for c in range(G):
                answers, vectors = [], []
                for k in range(M):
                    r = rng.random()
                    body = f"def f(x):\n    return x + {next_id + len(progs)}  # answer {k}\n"
                    answers.append(body)
                    if r < 0.1:  # malformed
                        vectors.append([0.0] * TESTS)
                        progs.append(ProgramRecord(problem=pid, island=isl, code=body, parent_ids=[parent],
                                                   evaluation=Evaluation.failed("format_error", TESTS,
                                                                                error="no EVOLVE-BLOCK"),
                                                   completion=(0, c), answer_index=k))
                    elif r < 0.2:  # duplicate: no program row
                        vectors.append(pvec)
                    else:
                        v = [min(1.0, max(0.0, x + rng.gauss(0.01, 0.15))) for x in pvec]
                        solved = all(x >= 1.0 for x in v)
                        vectors.append(v)
                        progs.append(ProgramRecord(problem=pid, island=isl, code=body, parent_ids=[parent],
                                                   evaluation=Evaluation(vector=v, scalar=sum(v) / TESTS,
                                                                         solved=solved,
                                                                         status="ok" if solved else "wrong",
                                                                         artifacts={"first_error": "wrong answer"}),
                                                   completion=(0, c), answer_index=k))
                comps.append(CompletionRecord(idx=c, text="".join(f"<answer_{k + 1}>{b}</answer_{k + 1}>"
                                                                  for k, b in enumerate(answers)),
                                              answers=answers, answer_vectors=vectors, policy_version=version))
            group = GroupRecord(problem=pid, island=isl, parent_id=parent, prompt="synthetic prompt", m=M,
                                completions=comps, policy_version=version)
            metrics = {"problem": pid, "island": isl, "gen_seconds": 0.05, "eval_seconds": 0.02,
                       "policy_version": version}
            new = a.record_iteration(it, [group], progs, metrics)
            for i, p in zip(new, progs):
                if p.evaluation.status != "format_error":
                    pool.append((i, list(p.evaluation.vector)))
            next_id = (new[-1] + 1) if new else next_id
            if it % 50 == 0:
                step += 1
                version += 1
                a.record_training(it, version, {"iteration": it, "mean_set_reward": rng.random(), "kl": rng.random()
                                                * 1e-3, "clip_frac": rng.random() * 0.1,
                                                "reward_diversity": rng.random(), "loss": rng.gauss(0, 0.01)})
        n = a.count_programs()
    return {"programs": n, "problems": pids, "big": pids[0], "iterations": it, "last_id": next_id - 1}


def pages(info: dict) -> list[str]:
    from urllib.parse import quote

    big = quote(info["big"], safe="")
    return ["/", "/api/runs", "/curves?x=iterations", "/curves?x=evaluations", "/curves?x=wall", "/run/synth",
            f"/run/synth/problem?id={big}", f"/run/synth/lineage?problem={big}&island=0",
            f"/run/synth/lineage?problem={big}&island=0&page=24", f"/run/synth/program/{info['last_id']}",
            "/run/synth/training"]


def measure(run_dir: Path, info: dict) -> list[tuple[str, float, float, int]]:
    """(path, cold ms, warm ms, bytes) per page, through the server's router (the server's own time)."""
    from evolve.ui.server import App

    app = App({"synth": [run_dir]})
    out = []
    try:
        for path in pages(info):
            url, _, query = path.partition("?")
            from urllib.parse import parse_qs

            q = parse_qs(query, keep_blank_values=True)
            t0 = time.perf_counter()
            _, body = app.route(url, q)
            cold = (time.perf_counter() - t0) * 1e3
            t0 = time.perf_counter()
            _, body = app.route(url, q)
            warm = (time.perf_counter() - t0) * 1e3
            out.append((path, cold, warm, len(body if isinstance(body, bytes) else body.encode())))
    finally:
        app.close()
    return out


def main() -> None:
    from evolve.archive import archive_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", type=int, default=100_000)
    ap.add_argument("--problems", type=int, default=50)
    ap.add_argument("--keep", type=Path, help="build the run here and keep it (reused if it holds an archive)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.keep or Path(tmp) / "synth"
        t0 = time.perf_counter()
        info = build(run_dir, args.programs, args.problems)
        print(f"built {info['programs']} programs on {len(info['problems'])} problems, {info['iterations']} "
              f"iterations in {time.perf_counter() - t0:.1f} s ({archive_path(run_dir).stat().st_size >> 20} MiB)")
        print(f"{'page':<52} {'cold ms':>8} {'warm ms':>8} {'KiB':>7}")
        for path, cold, warm, size in measure(run_dir, info):
            print(f"{path:<52} {cold:8.1f} {warm:8.1f} {size / 1024:7.1f}")


if __name__ == "__main__":
    main()
