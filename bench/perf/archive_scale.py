"""Archive scale (``--archive-sizes 1000,100000,1000000``): what the loop costs on a big archive, without growing it
iteration by iteration. Per size, ``build_archive`` writes in bulk the archive and checkpoint such a campaign (10
problems x 2 islands of 40, this instant backend and hash evaluator) would have written: seeds, then per iteration
one group of G completions of m fresh programs with vectors, ast hashes, parents and inspirations from the island, a
metrics row and a portfolio row; islands kept with the real ``Island.add_many``; every island's members and RNG
and the loop's cursor in ``state``. A child process then resumes a copy of it as ``vevo resume`` would (a new
``Campaign`` on the folder) for ``--scale-iterations`` iterations: the time of construction + restore, the
per-iteration wall and CPU time after it, and its resident set (VmRSS after the imports, at the end, peak), sizes
interleaved over ``--repeats`` resumes. ``--profile cpu`` (cProfile of the resumed iterations) and
``--profile mem`` (tracemalloc's largest sites once restored) say where time and memory go.
With 10 problems the islands are full (40 members) already at 1,000 programs, so every size runs the same
selection and eviction work and the comparison is about the archive alone.

    .venv/bin/python bench/perf/loop_overhead.py --archive-sizes 1000,100000,1000000   # ~5 min, ~1 GB of temp disk

The resumed campaign runs as ``python -m bench.perf.archive_scale DIR MORE DEPTH PROBLEMS [--profile cpu|mem]``
(one JSON line on stdout).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from bench.perf.instant import PROGRAM, HashEvaluator, ResumableFreshBackend, hash_vector
from bench.perf.windows import ROLL, machine_load, med, rolling


SCALE_PROBLEMS = 10        # 20 islands of 40: full already at 1,000 programs, so sizes compare like with like


SCALE_SENTINEL = 987654321  # stands for the counter in a problem's program template


SCALE_ITERATIONS = 400      # iterations the resumed campaign runs (the first SCALE_SKIP are warm-up)


SCALE_SKIP = 50


def scale_problems(n: int) -> list:
    """n problems: the pbe suite's, cycled, each copy under its own id (pbe/int-0#0, ...)."""
    import dataclasses

    from problems.suites import SUITES

    base = SUITES["pbe"]()
    return [dataclasses.replace(base[k % len(base)], id=f"{base[k % len(base)].id}#{k}") for k in range(n)]


def scale_config(problems: list, iterations: int, depth: int, m: int = 4, group: int = 2, islands: int = 2,
                 seed: int = 0):
    from evolve.config.schema import CampaignConfig

    return CampaignConfig(problems=[p.id for p in problems], proposer={"spec": "fresh"}, seed=seed,
                          search={"iterations": iterations, "islands": islands, "answers": m, "group": group,
                                  "pipeline_depth": depth})


def rss_bytes(field: str = "VmRSS") -> int:
    """This process's resident set (or its peak, VmHWM) from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _ast_key(code: str) -> tuple[str, str]:
    """``normalized_hash``'s key of a problem's program template, split around the sentinel constant: the program
    whose constant is k has the key head + repr(k) + tail (checked against ``normalized_hash``), which spares
    parsing a million programs that differ in one number."""
    import ast

    from proposer.answers import mutate

    tree = ast.parse(code)
    if "'" in code or '"' in code:
        mutate._strip_docstrings(tree)
    out = ["ast:"]
    mutate._dump(tree, out)
    head, sep, tail = "\x00".join(out).partition(repr(SCALE_SENTINEL))
    if not sep or repr(SCALE_SENTINEL) in tail:
        raise RuntimeError("the program template must hold the sentinel constant once")
    return head, tail


def build_archive(run_dir: str | Path, programs: int, n_problems: int = SCALE_PROBLEMS, depth: int = 1,
                  m: int = 4, group: int = 2, islands: int = 2, seed: int = 0, chunk: int = 4_000) -> dict:
    """Write the archive (and checkpoint) a campaign over ``n_problems`` with the instant backend and the hash
    evaluator would have written after growing to ``programs`` programs, in bulk: the same rows as
    ``Archive.record_iteration`` (seeds in iteration 0; then per iteration one group of G completions of m fresh
    answers, m*G programs with their vectors, ast hashes, parents and inspirations from the island, a metrics row and
    a portfolio row), ``chunk`` iterations per transaction. Islands are kept with the real ``Island.add_many``
    (capacity, per-test elites), visited round robin as ``Campaign`` does; the ``state`` table holds every
    island's members and RNG and the loop's cursor (with the backend's counter), as a checkpoint would.
    Not simulated: migration (islands exchange nothing) and selection (parents and inspirations are drawn
    uniformly from the island; an island takes its new programs 20 iterations at a time, which ``add_many`` keeps
    as adding them one by one would). Returns what it wrote."""
    import hashlib
    import random

    import numpy as np

    from evolve import archive as ar
    from evolve.search.campaign import member_name
    from evolve.search.islands import Island, ProgramFacts
    from evolve.policies.portfolio import batch_reward
    from proposer.backends.base import SamplingParams
    from proposer.answers.mutate import apply_answer, normalized_hash
    from proposer.answers.parsing import format_answers, parse_answers
    from proposer.answers.prompting import PromptContext, build_prompt

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    probs = scale_problems(n_problems)
    per = m * group
    iterations = max(0, -(-(programs - n_problems) // per))
    cfg = scale_config(probs, iterations, depth, m, group, islands, seed)
    path = ar.archive_path(run_dir)
    with ar.Archive(path) as a:
        a.set_meta("config", json.dumps(cfg.model_dump()))
        a.set_meta("problems", json.dumps([p.id for p in probs]))
    with ar.bulk_writer(path) as write:
        rng = random.Random(seed)
        keys = [(p.id, k) for p in probs for k in range(islands)]
        capacity = cfg.search.island_capacity
        member = member_name(cfg.proposer.spec)
        sp = SamplingParams(temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
                            max_tokens=cfg.sampling.max_tokens).to_dict()
        template, prompt, d, astkey = {}, {}, {}, {}
        for p in probs:  # the code a fresh answer gives once applied to the parent; a prompt of the usual size
            (ans,) = parse_answers(format_answers([PROGRAM.format(k=SCALE_SENTINEL)]), 1)
            template[p.id] = apply_answer(p.seed_code, ans)
            astkey[p.id] = _ast_key(template[p.id])
            d[p.id] = max(p.n_tests, 1)
            prompt[p.id] = build_prompt(PromptContext(problem_id=p.id, description=p.description, parent_code=p.seed_code,
                                                      parent_vector=[0.5] * p.n_tests,
                                                      test_labels=[p.test_label(i) for i in range(p.n_tests)],
                                                      inspirations=[(p.seed_code, [0.5] * p.n_tests)] * 2, m=m))
        island = {key: Island(*key) for key in keys}
        cache: dict[int, ProgramFacts] = {}
        baseline: dict[str, float] = {}
        touched = {key: 0 for key in keys}
        rows_p, rows_g, rows_c, rows_m, rows_f = [], [], [], [], []

        def program_row(pid: int, problem: str, isl: int, it: int, parents: list[int], code: str, vec: list[float],
                        completion_id, answer_index, ast_hash: str) -> tuple:
            scalar = sum(vec) / len(vec)
            return (pid, problem, isl, it, ar.encode_numbers(parents), code, ar.code_hash(code), ar.encode_numbers(vec),
                    scalar, 0, "wrong", ar.encode_json({}), 0, completion_id, answer_index, pid, 0, ast_hash)

        def flush() -> None:
            write({"groups": rows_g, "completions": rows_c, "programs": rows_p, "metrics": rows_m, "portfolio": rows_f})
            for rows in (rows_p, rows_g, rows_c, rows_m, rows_f):
                rows.clear()

        def remember(pid: int, code: str, vec: list[float]) -> None:
            cache[pid] = ProgramFacts(vector=np.asarray(vec), scalar=sum(vec) / len(vec), code_len=len(code), solved=False,
                                code=code, status="wrong")

        for i, p in enumerate(probs, 1):  # iteration 0: the seeds
            vec = hash_vector(p.seed_code, d[p.id])
            rows_p.append(program_row(i, p.id, -1, 0, [], p.seed_code, vec, None, None, normalized_hash(p.seed_code)))
            remember(i, p.seed_code, vec)
            baseline[p.id] = cache[i].scalar
            for k in range(islands):
                island[(p.id, k)].members.append(i)
        rows_m.append((0, ar.encode_json({"seeds": n_problems, "eval_seconds": 0.0, "solved": 0, "wall_seconds": 0.0})))
        next_id, counter, comp_id = n_problems + 1, 0, 0
        waiting: dict[tuple[str, int], list[int]] = {k: [] for k in keys}  # new programs an island has yet to take
        for t in range(1, iterations + 1):
            key = keys[(t - 1) % len(keys)]
            pid_, isl = key
            members = island[key].members
            parent = rng.choice(members)
            insp = rng.sample([x for x in members if x != parent], min(2, len(members) - 1))
            rows_g.append((t, pid_, isl, t, parent, prompt[pid_], 0, group, m))
            children, new = [], []
            for c in range(group):
                comp_id += 1
                bodies = [PROGRAM.format(k=counter + i) for i in range(m)]
                text = format_answers(bodies)
                vecs = []
                for ai in range(m):
                    code = template[pid_].replace(str(SCALE_SENTINEL), str(counter + ai))
                    vec = hash_vector(code, d[pid_])
                    vecs.append(vec)
                    h = hashlib.sha256((astkey[pid_][0] + repr(counter + ai) + astkey[pid_][1]).encode()).hexdigest()
                    if t <= len(keys):  # each template's key checked once
                        assert h == normalized_hash(code), "the template's AST key does not give normalized_hash"
                    rows_p.append(program_row(next_id, pid_, isl, t, [parent] + insp, code, vec, comp_id, ai, h))
                    remember(next_id, code, vec)
                    children.append((vec, cache[next_id].scalar, "wrong"))
                    new.append(next_id)
                    next_id += 1
                counter += m
                answers = [a.body for a in parse_answers(text, m)]
                rows_c.append((comp_id, t, c, text, ar.encode_json(answers),
                               "[" + ",".join(ar.encode_numbers(v) for v in vecs) + "]", None, None, None, 0,
                               ar.encode_json(sp), "stop"))
            waiting[key] += new
            if len(waiting[key]) >= 20 * per or t > iterations - len(keys):  # and each island's last visit
                island[key].add_many(waiting[key], cache, capacity)
                waiting[key] = []
            touched[key] = t
            pm = cache[parent]
            reward = batch_reward(pm.vector, pm.scalar, baseline[pid_], children)
            best = max(cache[x].scalar for x in island[key].members)
            rows_m.append((t, ar.encode_json({"problem": pid_, "island": isl, "parent": parent, "staleness": 0,
                                         "completions": group, "candidates": per, "duplicates": 0, "format_errors": 0,
                                         "solved": 0, "best_scalar": best, "gen_seconds": 0.0, "gen_tokens": 0, "eval_seconds": 0.0,
                                         "migrated": 0, "policy_version": 0, "in_flight_dups": 0,
                                         "wall_seconds": round(t * 1e-3, 3)})))
            rows_f.append((t, member, 0, reward, ar.encode_json({})))
            if t % chunk == 0:
                flush()
                live = {x for isl_ in island.values() for x in isl_.members} | {x for w in waiting.values() for x in w}
                cache = {x: v for x, v in cache.items() if x in live}
        flush()
        seqs = np.random.SeedSequence(seed).spawn(len(keys))  # the streams a fresh campaign starts with
        state = [(f"island/{k[1]}/{k[0]}", touched[k], ar.encode_json({"members": island[k].members,
                                                                  "rng": np.random.default_rng(s).bit_generator.state}))
                 for k, s in zip(keys, seqs)]
        state.append(("loop", iterations, ar.encode_json({"problems": [p.id for p in probs], "next_key": iterations % len(keys),
                                                     "backend": {"counter": counter}, "policy_version": 0,
                                                     "pending": []})))
        write({"state": state})
    return {"programs": next_id - 1, "iterations": iterations, "problems": n_problems,
            "bytes": path.stat().st_size}


def run_resumed(run_dir: str | Path, more: int, depth: int, n_problems: int, profile: str | None = None) -> dict:
    """Resume the campaign in ``run_dir`` for ``more`` iterations as ``vevo resume`` would (a new ``Campaign`` on
    the folder; ``run`` restores the checkpoint, then continues); the time of construction + restore, the gaps
    between iterations after it, and the resident set before (imports only), after the restore and at the end.
    profile "cpu": cProfile of the iterations after the restore; "mem": tracemalloc's largest allocation sites
    once restored (both slow the run down: their timings are not the overhead)."""
    from evolve.archive import Archive, archive_path
    from evolve.search.campaign import Campaign

    probs = scale_problems(n_problems)
    with Archive(archive_path(run_dir), readonly=True) as a:
        last, n = a.last_iteration(), a.count_programs()
    import gc

    gc.collect()
    rss0 = rss_bytes()
    out: dict = {"programs": n, "rss_base": rss0}
    stamps: list[float] = []
    cpu: list[float] = []
    prof = None
    if profile == "mem":
        import tracemalloc

        tracemalloc.start(8)
    t0, c0 = time.perf_counter(), time.process_time()

    def restored(camp) -> None:
        nonlocal prof
        out["restore_s"], out["restore_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
        out["rss_restored"] = rss_bytes()
        if profile == "mem":
            import tracemalloc

            snap = tracemalloc.take_snapshot()
            out["mem_top"] = [(" <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in list(s.traceback)[::-1][:4]),
                               s.size, s.count) for s in snap.statistics("traceback")[:12]]
            out["mem_total"] = sum(s.size for s in snap.statistics("filename"))
            tracemalloc.stop()
        if profile == "cpu":
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        out["t_restored"], out["cpu_restored"] = time.perf_counter(), time.process_time()

    camp = Campaign(scale_config(probs, last + more, depth), run_dir, probs, ResumableFreshBackend(4),
                    HashEvaluator(), on_restored=restored,
                    on_iteration=lambda c, it: (stamps.append(time.perf_counter()), cpu.append(time.process_time())))
    try:
        camp.run()
    finally:
        if prof is not None:
            prof.disable()
        camp.close()
    if prof is not None:
        import io
        import pstats

        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        out["cpu_profile"] = s.getvalue()
    out["ms"] = [(b - a) * 1e3 for a, b in zip([out["t_restored"]] + stamps[:-1], stamps)]
    out["cpu_ms"] = [(b - a) * 1e3 for a, b in zip([out["cpu_restored"]] + cpu[:-1], cpu)]
    out["rss_end"], out["rss_peak"] = rss_bytes(), rss_bytes("VmHWM")
    out["iterations"] = len(stamps)
    return out


def archive_scale(sizes: list[int], a, tmp: Path, log) -> None:
    """Build one archive per size here, then resume a copy of each in a child process (its RSS is the campaign's
    alone), sizes interleaved, ``--repeats`` times (a shared machine's load drifts over all sizes alike); one table
    row per size with the medians over the repeats."""
    import shutil

    from evolve.archive import archive_path

    built = {}
    for n in sizes:
        d = tmp / f"scale-{n}"
        t0 = time.perf_counter()
        log(f"archive scale: writing a synthetic archive of {n} programs on {a.scale_problems} problems")
        info = build_archive(d, n, a.scale_problems, a.scale_depth)
        info["built_s"] = time.perf_counter() - t0
        log(f"archive scale: {info['programs']} programs, {info['iterations']} iterations, "
            f"{info['bytes'] / 2**20:.0f} MiB in {info['built_s']:.0f} s")
        built[n] = (d, info)
    repeats = 1 if a.profile else a.repeats
    runs: dict[int, list[dict]] = {n: [] for n in sizes}
    for k in range(repeats):
        for n in sizes:
            d, info = built[n]
            work = tmp / "resume"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            shutil.copy2(archive_path(d), archive_path(work))  # every repeat resumes the same archive
            log(f"archive scale: resuming {info['programs']} programs for {a.scale_iterations} iterations "
                f"(run {k + 1}/{repeats})")
            cmd = [sys.executable, "-m", "bench.perf.archive_scale", str(work), str(a.scale_iterations),
                   str(a.scale_depth), str(a.scale_problems)] + (["--profile", a.profile] if a.profile else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise RuntimeError(f"resumed campaign failed:\n{proc.stderr[-4000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[n].append(r)
            shutil.rmtree(work, ignore_errors=True)
            if r.get("cpu_profile"):
                print(f"\ncProfile of the {r['iterations']} iterations after the restore at {r['programs']} programs "
                      f"(tottime):\n{r['cpu_profile']}")
            if r.get("mem_top"):
                print(f"\ntracemalloc once restored at {r['programs']} programs: {r['mem_total'] / 2**20:.1f} MiB "
                      "traced; largest sites:")
                for where, size, count in r["mem_top"]:
                    print(f"  {size / 2**20:9.1f} MiB {count:>9} blocks  {where}")
    if not a.keep:
        for d, _ in built.values():
            shutil.rmtree(d, ignore_errors=True)

    def per_iter(r: dict, key: str) -> float | None:
        return med([x for x in rolling(r[key])[SCALE_SKIP:] if x is not None])

    print(f"\narchive scale: synthetic archives on {a.scale_problems} problems x 2 islands (m=4, G=2, islands of "
          f"40), each resumed {repeats}x from the same copy in a fresh process at pipeline_depth {a.scale_depth} for "
          f"{a.scale_iterations} iterations (instant proposer, hash evaluator). restore s: campaign construction + "
          f"restore (cpu s: its CPU time). ms/iter: wall time; cpu ms/iter: the process's CPU time (all threads; what other load disturbs "
          f"least); each the median of {ROLL}-iteration means after the first {SCALE_SKIP}, then the median over the "
          f"runs. RSS: at the end of the run; B/program = (RSS at the end - RSS after imports) / programs"
          + ("; PROFILED: timings include the profiler" if a.profile else ""))
    print(f"{'programs':>9} {'db MiB':>7} {'build s':>8} {'restore s':>10} {'(cpu s)':>8} {'ms/iter':>8} {'cpu ms/iter':>12} "
          f"{'RSS MB':>7} {'peak MB':>8} {'B/program':>10}   per run: ms/iter, cpu ms/iter")
    summary = {}
    for n in sizes:
        rs, info = runs[n], built[n][1]
        row = {"restore": med([r["restore_s"] for r in rs]), "restore_cpu": med([r["restore_cpu_s"] for r in rs]),
               "ms": med([per_iter(r, "ms") for r in rs]),
               "cpu": med([per_iter(r, "cpu_ms") for r in rs]), "rss": med([r["rss_end"] for r in rs]),
               "peak": med([r["rss_peak"] for r in rs]),
               "per_prog": med([(r["rss_end"] - r["rss_base"]) / r["programs"] for r in rs])}
        summary[n] = row
        each = ", ".join(f"{per_iter(r, 'ms'):.2f}/{per_iter(r, 'cpu_ms'):.2f}" for r in rs)
        print(f"{info['programs']:>9} {info['bytes'] / 2**20:>7.0f} {info['built_s']:>8.1f} {row['restore']:>10.2f} "
              f"{row['restore_cpu']:>8.2f} {row['ms']:>8.3f} {row['cpu']:>12.3f} {row['rss'] / 1e6:>7.0f} {row['peak'] / 1e6:>8.0f} "
              f"{row['per_prog']:>10.0f}   {each}")
    if len(sizes) > 1:
        first, last = summary[sizes[0]], summary[sizes[-1]]
        print(f"per-iteration overhead at {sizes[-1]} / at {sizes[0]} programs: wall {last['ms'] / first['ms']:.2f}x, "
              f"cpu {last['cpu'] / first['cpu']:.2f}x")
    print(f"machine: {machine_load()}")


def main() -> None:
    """The resumed campaign, in a process of its own: one JSON line of `run_resumed`'s numbers."""
    ap = argparse.ArgumentParser(description="resume a synthetic archive (bench/perf/loop_overhead.py --archive-sizes)")
    ap.add_argument("dir")
    ap.add_argument("more", type=int)
    ap.add_argument("depth", type=int)
    ap.add_argument("problems", type=int)
    ap.add_argument("--profile", choices=("cpu", "mem"), default=None)
    a = ap.parse_args()
    print(json.dumps(run_resumed(a.dir, a.more, a.depth, a.problems, a.profile)))


if __name__ == "__main__":
    main()
