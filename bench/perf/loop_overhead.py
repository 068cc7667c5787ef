"""Loop overhead: ms per iteration of the campaign loop itself, with an instant proposer and an instant evaluator,
while the archive grows past 10,000 programs; and the same workload through OpenEvolve 0.4.x for comparison.

Acceptance target: <= 1 ms/iteration, flat (OpenEvolve was measured at 5 -> 49 ms of overhead per iteration as its
archive grows to ~900 programs).

    .venv/bin/python bench/perf/loop_overhead.py            # full: vevo to 15k programs, OpenEvolve to 1,500 (~3-5 min)
    .venv/bin/python bench/perf/loop_overhead.py --quick    # ~1 min (once the OpenEvolve venv exists)
    .venv/bin/python bench/perf/loop_overhead.py --no-openevolve

vevo side: a ``Campaign`` built directly (temp run dir, real SQLite file, one pbe problem, 2 islands) with an
in-process backend that returns G completions of m fresh programs (``def f(x): return x + k``, k from a counter, so
every candidate is new and gets evaluated and archived) and an evaluator that returns a d-entry vector from a hash
of the code at once (never solved, so the problem is never retired). m=4, G=2: 8 programs per iteration;
pipeline_depth 0 and 1. The time of iteration t is the gap between the ``on_iteration`` callbacks of t-1 and t,
so it covers everything the loop does: selection, prompt, parse/apply/dedupe, evaluate call, island update, the
SQLite transaction (WAL, synchronous=NORMAL: survives kill -9) and the checkpoint. A third column reruns depth 0
with ``PRAGMA synchronous=FULL`` (config ``archive_sync: full``: an fsync per commit) to show what durability
against power loss costs.
The archive grows to 15,000 so the 10k window is complete; a single campaign passes the 100 window in ~10
iterations, so that window also pools a few extra short campaigns (``--small-runs``).

OpenEvolve side: a scratch venv (``--oe-venv``, reused if present) with ``openevolve>=0.4,<0.5`` (the nearest
release if none is installable, said in the output); a stub OpenAI-compatible server on 127.0.0.1 (a subprocess,
stdlib ``http.server``, TCP_NODELAY) answering every chat completion at once with a full rewrite of a fresh program
in a python fence; ``diff_based_evolution: false``, no LLM feedback, no embeddings / novelty check, no cascade,
1 model, 1 worker process, 2 islands, log level WARNING, checkpoints every 100 iterations (its default),
``population_size`` raised above the run length so the database keeps every program (as vevo's archive does). The
same seed program and the same kind of trivial evaluator (d metrics + combined_score from a hash of the file).
OpenEvolve makes one program per iteration. A driver (this file, run by the scratch venv's python) wraps
``ProgramDatabase.add`` to timestamp every admitted child in the controller process; the time of an iteration is
the gap between consecutive admissions. Controller submission (sampling + database snapshot) and worker-side phases
(LLM call, evaluation, the rest of the worker function) are timed through wrapped functions (the workers are
forked, so they inherit the wrappers).

Number of problems: the same loop over 1,000 copies of the problem (2,000 islands) against one problem, 400
iterations each (``--many-problems``): the per-iteration cost must not grow with the campaign's width either
(before the checkpoint became incremental it re-serialised every island each iteration: 11.8 ms/iteration at
1,000 problems).

Archive scale (``--archive-sizes 1000,100000,1000000``): what the loop costs on a big archive, without growing it
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

Windows: the iterations after which the archive holds between T/1.5 and T*1.5 programs (capped at what the run
reached), T = 100, 1,000, 10,000; ms/iteration is the median over the window of 4-iteration means (a pipelined
loop alternates short and long gaps). Wall-clock numbers are printed, never asserted; the machine's load is
printed with them.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = (100, 1_000, 10_000)
WINDOW_FACTOR = 1.5
SMALL_RUN_PROGRAMS = 150  # extra short campaigns give the 100 window more than ~10 samples
SCALING_ITERATIONS, SCALING_SKIP = 400, 50  # the many-problems comparison
ROLL = 4  # ms/iteration = (time of 4 consecutive iterations) / 4, then the median over the window
DEFAULT_OE_VENV = Path(tempfile.gettempdir()) / "vevo-bench-openevolve"
OE_REQUIREMENT = "openevolve>=0.4,<0.5"
PROGRAM = "def f(x):\n    return x + {k}\n"


# ============================================================================================== vevo half

class FreshBackend:
    """Backend protocol: every completion carries m programs never handed out before (a counter)."""

    name = "fresh"

    def __init__(self, m: int, policy_version: int = 0) -> None:
        self.m = m
        self.policy_version = policy_version
        self.counter = 0

    def generate(self, prompts, n, sampling):
        from proposer.backends.base import Completion
        from proposer.answers.parsing import format_answers

        groups = []
        for _ in prompts:
            group = []
            for _ in range(n):
                bodies = [PROGRAM.format(k=self.counter + i) for i in range(self.m)]
                self.counter += self.m
                group.append(Completion(text=format_answers(bodies), policy_version=self.policy_version))
            groups.append(group)
        return groups

    def set_policy_version(self, v: int) -> None:
        self.policy_version = int(v)

    def state(self) -> dict:
        return {"counter": self.counter}

    def load_state(self, state: dict) -> None:
        self.counter = int(state["counter"])

    def close(self) -> None:
        pass


def hash_vector(code: str, d: int) -> list[float]:
    """d scores in [0, 1) from a hash of the code: instant, deterministic, varied (so selection has work to do)."""
    import hashlib

    raw = hashlib.blake2b(code.encode("utf-8"), digest_size=64).digest()
    return [raw[j % 64] / 256.0 for j in range(d)]


class HashEvaluator:
    """evaluate_many returning a fixed-size vector per item at once; status 'wrong', never solved."""

    def __init__(self) -> None:
        self.calls = 0
        self.items = 0

    def evaluate_many(self, items, time_limit=None):
        from evaluators.types import Evaluation

        self.calls += 1
        self.items += len(items)
        out = []
        for problem, code in items:
            v = hash_vector(code, max(problem.n_tests, 1))
            out.append(Evaluation(vector=v, scalar=sum(v) / len(v), solved=False, status="wrong"))
        return out


def bench_problem():
    from problems.suites import SUITES

    return SUITES["pbe"]()[0]


def run_vevo(run_dir: str | Path, programs: int, depth: int, m: int = 4, group: int = 2, islands: int = 2,
             seed: int = 0, synchronous: str | None = None, n_problems: int = 1, members: int = 1,
             policy: str = "ucb") -> dict:
    """Grow a fresh campaign's archive to at least `programs` programs; per-iteration timings and sizes.

    Returns iterations, ms (per iteration 1..N, gap between on_iteration callbacks), sizes (archive programs after
    each iteration: the seed + m*G per iteration), seen (iteration numbers in callback order), and what the archive
    holds at the end (count, ids, per-iteration metrics) for correctness checks.

    synchronous: a diagnostic only -- e.g. "FULL" sets that PRAGMA on the archive's connection (an fsync per
    commit, as ``archive_sync: full``); None keeps the archive's default (NORMAL).
    n_problems > 1: that many copies of the problem under their own ids (islands x n_problems islands, a seed
    each), to show that the per-iteration cost does not grow with the number of problems.
    members > 1: a proposer portfolio of that many members (one instant backend behind them all, so every
    program stays fresh) chosen by ``policy``: what choosing, rewarding and attributing cost per iteration."""
    from evolve.search.campaign import Campaign
    from evolve.config.schema import CampaignConfig

    import dataclasses

    per_iter = m * group
    iterations = max(1, -(-(programs - n_problems) // per_iter))  # the seeds are the first programs
    problem = bench_problem()
    probs = [problem] if n_problems == 1 else \
        [dataclasses.replace(problem, id=f"{problem.id}#{k}") for k in range(n_problems)]
    cfg = CampaignConfig(problems=[p.id for p in probs], proposer={"spec": "fresh"}, seed=seed,
                         search={"iterations": iterations, "islands": islands, "answers": m, "group": group,
                                 "pipeline_depth": depth}, portfolio={"policy": policy})
    stamps: list[float] = []
    seen: list[int] = []

    def on_iteration(camp, it: int) -> None:
        stamps.append(time.perf_counter())
        seen.append(it)

    backend = FreshBackend(m)
    team = None
    if members > 1:
        from evolve.policies.portfolio import Member

        team = [(Member(f"m{i}"), backend) for i in range(members)]
    camp = Campaign(cfg, run_dir, probs, backend, HashEvaluator(), on_iteration=on_iteration, members=team)
    if synchronous is not None:
        camp.archive._conn.execute(f"PRAGMA synchronous={synchronous}")
    try:
        t0 = time.perf_counter()
        summary = camp.run()
        wall = time.perf_counter() - t0
        count = camp.archive.count_programs()
        ids = [r.id for r in camp.archive.programs()]
        metrics = camp.archive.metrics_rows()
    finally:
        camp.close()
    ms = [(b - a) * 1e3 for a, b in zip([t0] + stamps[:-1], stamps)]
    return {"depth": depth, "synchronous": synchronous, "iterations": iterations, "per_iteration": per_iter, "ms": ms,
            "sizes": [n_problems + per_iter * it for it in seen], "seen": seen, "wall_s": wall, "count": count, "ids": ids,
            "metrics": metrics, "summary": summary, "n_problems": n_problems}


# ============================================================================================== windows

def rolling(values: list[float], k: int = ROLL) -> list[float | None]:
    """values[i] -> mean of values[i-k+1 .. i] (None for the first k-1): time of k consecutive iterations / k.

    A pipelined loop alternates short and long gaps (OpenEvolve with two tasks in flight: ~0.3 ms, then ~10 ms of
    result polling), so the median of single gaps is unstable; the median of k-iteration means is not."""
    out: list[float | None] = [None] * min(k - 1, len(values))
    acc = sum(values[: k - 1])
    for i in range(k - 1, len(values)):
        acc += values[i]
        out.append(acc / k)
        acc -= values[i - k + 1]
    return out


def window_bounds(target: int, reached: int) -> tuple[float, float] | None:
    lo, hi = target / WINDOW_FACTOR, min(target * WINDOW_FACTOR, reached)
    return (lo, hi) if hi >= lo else None


def window_samples(sizes: list[int], values: list, target: int) -> list[float]:
    """The values of the iterations after which the archive size lies in the window around target."""
    if not sizes:
        return []
    b = window_bounds(target, max(sizes))
    if b is None:
        return []
    return [v for s, v in zip(sizes, values) if v is not None and b[0] <= s <= b[1]]


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


# ============================================================================================== stub server

def stub_server_main(port_file: str) -> None:
    """OpenAI-compatible /v1/chat/completions answering at once with a fresh full-rewrite program per call."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    lock = threading.Lock()
    state = {"n": 0, "handler_s": 0.0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in separate writes: no 40 ms delayed-ACK stall

        def log_message(self, *args) -> None:  # silence per-request logging
            pass

        def _send(self, code: int, obj: dict) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/stats"):
                with lock:
                    self._send(200, dict(state))
            elif self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "bench"}]})
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            t0 = time.perf_counter()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                req = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                req = {}
            with lock:
                k = state["n"]
                state["n"] += 1
            code = "# EVOLVE-BLOCK-START\n" + PROGRAM.format(k=k) + "# EVOLVE-BLOCK-END\n"
            content = f"Here is the rewritten program.\n\n```python\n{code}```\n"
            self._send(200, {
                "id": f"chatcmpl-stub-{k}", "object": "chat.completion", "created": int(time.time()),
                "model": req.get("model", "stub"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": len(raw) // 4, "completion_tokens": len(content) // 4,
                          "total_tokens": (len(raw) + len(content)) // 4}})
            with lock:
                state["handler_s"] += time.perf_counter() - t0

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    tmp = port_file + ".tmp"
    Path(tmp).write_text(str(srv.server_address[1]))
    os.replace(tmp, port_file)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


# ============================================================================================== OpenEvolve driver
# Runs inside the scratch venv (its python, openevolve importable); only the stdlib and openevolve are used here.

OE_EVALUATOR = '''"""Trivial evaluator for the loop-overhead bench: d metrics from a hash of the program, at once."""
import hashlib

D = {d}


def evaluate(program_path):
    with open(program_path, "rb") as fh:
        raw = hashlib.blake2b(fh.read(), digest_size=64).digest()
    v = [raw[j % 64] / 256.0 for j in range(D)]
    out = {{f"t{{j}}": v[j] for j in range(D)}}
    out["combined_score"] = sum(v) / D
    return out
'''


def oe_driver_main(work: str, port: int, iterations: int) -> None:
    import asyncio
    import logging

    work_p = Path(work)
    add_log = open(work_p / "adds.jsonl", "a", buffering=1)

    import openevolve
    from openevolve import process_parallel
    from openevolve.config import Config
    from openevolve.controller import OpenEvolve
    from openevolve.database import ProgramDatabase
    from openevolve.evaluator import Evaluator
    from openevolve.llm.ensemble import LLMEnsemble

    cfg = Config.from_dict(json.loads((work_p / "config.json").read_text()))

    # controller process: timestamp every admission (the database lives here only), time admission and submission
    orig_add = ProgramDatabase.add
    orig_submit = process_parallel.ProcessParallelController._submit_iteration
    submit_s = {"s": 0.0}

    def add(self, program, *a, **kw):
        t = time.perf_counter()
        r = orig_add(self, program, *a, **kw)
        t1 = time.perf_counter()
        add_log.write(json.dumps({"t": t1, "n": len(self.programs), "it": kw.get("iteration"), "ok": r is not None,
                                  "add": t1 - t, "submit": submit_s["s"]}) + "\n")
        submit_s["s"] = 0.0
        return r

    def submit(self, *a, **kw):  # parent + inspiration sampling, snapshot of the whole database, executor.submit
        t = time.perf_counter()
        try:
            return orig_submit(self, *a, **kw)
        finally:
            submit_s["s"] += time.perf_counter() - t

    ProgramDatabase.add = add
    process_parallel.ProcessParallelController._submit_iteration = submit

    # worker processes (forked, so these patches are inherited): time the LLM call, the evaluation, the whole task
    phase = {"llm": 0.0, "eval": 0.0}
    orig_gen, orig_eval = LLMEnsemble.generate_with_context, Evaluator.evaluate_program
    orig_worker = process_parallel._run_iteration_worker

    async def gen(self, *a, **kw):
        t = time.perf_counter()
        try:
            return await orig_gen(self, *a, **kw)
        finally:
            phase["llm"] += time.perf_counter() - t

    async def evaluate_program(self, *a, **kw):
        t = time.perf_counter()
        try:
            return await orig_eval(self, *a, **kw)
        finally:
            phase["eval"] += time.perf_counter() - t

    def run_iteration_worker(iteration, db_snapshot, parent_id, inspiration_ids):
        phase["llm"] = phase["eval"] = 0.0
        t = time.perf_counter()
        r = orig_worker(iteration, db_snapshot, parent_id, inspiration_ids)
        rec = {"it": iteration, "t0": t, "t1": time.perf_counter(), "llm": phase["llm"], "eval": phase["eval"],
               "n_snapshot": len(db_snapshot.get("programs", {})), "error": r.error}
        with open(work_p / f"worker-{os.getpid()}.jsonl", "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        return r

    run_iteration_worker.__module__ = __name__
    run_iteration_worker.__qualname__ = "_oe_run_iteration_worker"
    globals()["_oe_run_iteration_worker"] = run_iteration_worker  # picklable by name in the forked worker
    LLMEnsemble.generate_with_context = gen
    Evaluator.evaluate_program = evaluate_program
    process_parallel._run_iteration_worker = run_iteration_worker

    (work_p / "version.txt").write_text(getattr(openevolve, "__version__", "?"))
    controller = OpenEvolve(str(work_p / "initial_program.py"), str(work_p / "evaluator.py"), cfg,
                            output_dir=str(work_p / "out"))
    logging.getLogger().setLevel(logging.WARNING)
    t0 = time.perf_counter()
    asyncio.run(controller.run(iterations=iterations))
    (work_p / "done.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0}))
    add_log.close()


def oe_config(port: int, iterations: int, islands: int, d: int) -> dict:
    return {
        "max_iterations": iterations,
        "checkpoint_interval": 100,          # OpenEvolve's default persistence
        "log_level": "WARNING",              # less console/file logging than the default INFO (favours OpenEvolve)
        "random_seed": 42,
        "language": "python",
        "diff_based_evolution": False,       # full rewrite, like vevo's answer_mode=full
        "max_code_length": 10000,
        "llm": {"api_base": f"http://127.0.0.1:{port}/v1", "api_key": "stub",
                "models": [{"name": "stub", "weight": 1.0}], "temperature": 0.7, "max_tokens": 512,
                "timeout": 30, "retries": 0, "retry_delay": 0},
        "prompt": {"num_top_programs": 3, "num_diverse_programs": 2},
        "database": {"in_memory": True, "population_size": max(10 * iterations, 1000), "num_islands": islands,
                     "migration_interval": 50, "embedding_model": None},
        "evaluator": {"timeout": 30, "max_retries": 0, "cascade_evaluation": False, "parallel_evaluations": 1,
                      "use_llm_feedback": False, "enable_artifacts": True},
        "evolution_trace": {"enabled": False},
    }


# ============================================================================================== OpenEvolve (parent side)

def _oe_version(py: Path) -> str | None:
    r = subprocess.run([str(py), "-c", "import openevolve; print(openevolve.__version__)"], capture_output=True,
                       text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def _pip(py: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(py), "-m", "pip", *args, "--disable-pip-version-check"], text=True, **kw)


def ensure_oe_venv(venv: Path, log) -> tuple[Path, str, str]:
    """The scratch venv's python, the installed OpenEvolve version, and a note when it is not 0.4.x."""
    py = venv / "bin" / "python"
    if not py.exists():
        log(f"creating scratch venv {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    version = _oe_version(py)
    if version and version.startswith("0.4."):
        return py, version, ""
    log(f"installing '{OE_REQUIREMENT}' into {venv} (pip)")
    if _pip(py, "install", "-q", OE_REQUIREMENT, stdout=subprocess.DEVNULL).returncode == 0:
        return py, _oe_version(py) or "?", ""
    # 0.4.x not installable: take the nearest release the index offers (highest below 0.5, else the lowest above)
    r = _pip(py, "index", "versions", "openevolve", capture_output=True)
    line = next((x for x in r.stdout.splitlines() if "Available versions:" in x), "")
    def key(v: str) -> tuple:
        return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))
    found = sorted((v.strip() for v in line.split(":", 1)[-1].split(",") if v.strip()), key=key)
    below = [v for v in found if key(v) < (0, 5)]
    pick = below[-1] if below else (found[0] if found else None)
    if pick is None:
        raise RuntimeError("openevolve is not available from the package index")
    log(f"openevolve 0.4.x unavailable; installing the nearest release, {pick}")
    _pip(py, "install", "-q", f"openevolve=={pick}", stdout=subprocess.DEVNULL, check=True)
    return py, _oe_version(py) or pick, f"note: OpenEvolve 0.4.x was not installable; measured {pick} instead"


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    """End a process started here (own session) and its children (OpenEvolve's pool workers)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def run_openevolve(work: Path, py: Path, iterations: int, budget_s: float, islands: int, seed_code: str, d: int,
                   log) -> dict:
    import urllib.request

    work.mkdir(parents=True, exist_ok=True)
    (work / "initial_program.py").write_text(seed_code)
    (work / "evaluator.py").write_text(OE_EVALUATOR.format(d=d))
    port_file = work / "port"
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--_stub-server", str(port_file)],
                              start_new_session=True)
    driver = None
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("stub server did not start")
            time.sleep(0.05)
        port = int(port_file.read_text())
        (work / "config.json").write_text(json.dumps(oe_config(port, iterations, islands, d), indent=1))
        env = dict(os.environ, OPENAI_API_KEY="stub", PYTHONUNBUFFERED="1")
        env.pop("PYTHONPATH", None)
        with open(work / "driver.log", "w") as out:
            driver = subprocess.Popen([str(py), str(Path(__file__).resolve()), "--_oe-driver", str(work), str(port),
                                       str(iterations)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                      cwd=str(work), start_new_session=True)
            t0 = time.monotonic()
            try:
                driver.wait(budget_s)
                finished = True
            except subprocess.TimeoutExpired:
                finished = False
                log(f"OpenEvolve: time budget of {budget_s:.0f}s reached, stopping it")
            _kill_group(driver, 10)
            wall = time.monotonic() - t0
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=5) as r:
                stub = json.loads(r.read())
        except OSError:
            stub = {}
    finally:
        if driver is not None:
            _kill_group(driver, 5)
        _kill_group(server, 5)
    adds = [json.loads(x) for x in (work / "adds.jsonl").read_text().splitlines() if x.strip()] \
        if (work / "adds.jsonl").exists() else []
    workers = []
    for f in sorted(work.glob("worker-*.jsonl")):
        workers += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    workers.sort(key=lambda w: w["it"])
    children = [x for x in adds if x["it"] is not None]
    if not children:
        tail = (work / "driver.log").read_text()[-3000:] if (work / "driver.log").exists() else ""
        raise RuntimeError(f"OpenEvolve admitted no program (driver exit {driver.returncode if driver else None})"
                           f":\n{tail}")
    first = next((x for x in adds if x["it"] is None), None)  # the initial program
    stamps = [x["t"] for x in children]
    base = [first["t"]] if first else [stamps[0]]
    # drop the first gap: it holds the process pool's start-up and the first LLM client
    ms = [(b - a) * 1e3 for a, b in zip(base + stamps[:-1], stamps)][1:]
    version = (work / "version.txt").read_text().strip() if (work / "version.txt").exists() else "?"
    return {"version": version, "ms": ms, "sizes": [x["n"] for x in children][1:],
            "add_ms": [x["add"] * 1e3 for x in children][1:], "submit_ms": [x["submit"] * 1e3 for x in children][1:],
            "iterations_done": len(children), "admitted": sum(1 for x in children if x["ok"]),
            "final_size": children[-1]["n"], "finished": finished, "wall_s": wall, "stub": stub,
            "workers": workers, "errors": sum(1 for w in workers if w["error"]),
            "rc": driver.returncode if driver is not None else None}


# ============================================================================================== report

def fmt(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def _label(r: dict) -> str:
    return f"vevo depth{r['depth']}" + (f" sync={r['synchronous']}*" if r.get("synchronous") else "")


def report(vevo_runs: list[dict], oe: dict | None, oe_note: str) -> None:
    cols = []  # (label, [(sizes, ms per iteration) per run], programs per iteration)
    for r in vevo_runs:
        runs = [(r["sizes"], r["ms"])] + [(x["sizes"], x["ms"]) for x in r.get("extra", [])]
        cols.append((_label(r), runs, r["per_iteration"]))
    if oe is not None:
        cols.append(("openevolve", [(oe["sizes"], oe["ms"])], 1))
    w = 26
    print(f"\nms per iteration: median over the window of (time of {ROLL} consecutive iterations) / {ROLL}; "
          "ms/program = ms/iteration / programs per iteration (vevo 8, openevolve 1); n = iterations in the window")
    extra = max((len(r.get("extra", [])) for r in vevo_runs), default=0)
    if extra:
        print(f"(vevo's 100 window pools {extra} more short campaigns grown to ~{SMALL_RUN_PROGRAMS} programs: "
              "one campaign passes it in ~10 iterations)")
    head = f"{'archive':>8} {'window':>11} | " + " | ".join(f"{c[0]:^{w}}" for c in cols)
    print(head)
    print(f"{'programs':>8} {'(programs)':>11} | " + " | ".join(f"{'ms/iter':>9} {'ms/prog':>9} {'n':>5} " for _ in cols))
    print("-" * len(head))
    medians: dict[tuple[str, int], float | None] = {}
    for t in TARGETS:
        cells = []
        for label, runs, per in cols:
            xs = [x for sizes, ms in runs for x in window_samples(sizes, rolling(ms), t)]
            m = med(xs)
            medians[(label, t)] = m
            cells.append(f"{fmt(m):>9} {fmt(None if m is None else m / per, 3):>9} {len(xs):>5} ")
        print(f"{t:>8} {f'{int(t / WINDOW_FACTOR)}-{int(t * WINDOW_FACTOR)}':>11} | " + " | ".join(cells))
    if any(r.get("synchronous") for r in vevo_runs):
        print("* PRAGMA synchronous=FULL on the archive connection for this run (an fsync per commit, as "
              "archive_sync: full); the default is NORMAL (WAL: survives kill -9)")
    if oe is not None:
        print("\nratio openevolve / vevo at the same archive size (medians above):")
        for label, _, per in cols[:-1]:
            parts = []
            for t in TARGETS:
                o, v = medians[("openevolve", t)], medians[(label, t)]
                parts.append(f"{t}: n/a" if o is None or v is None else
                             f"{t}: {o / v:.1f}x/iteration, {o / (v / per):.1f}x/program")
            print(f"  vs {label:<24} " + "   ".join(parts))
    print()
    for r in vevo_runs:
        ms = r["ms"][1:]
        print(f"{_label(r)}: {r['iterations']} iterations, {r['count']} programs in the archive, wall {r['wall_s']:.1f}s;"
              f" single-iteration gaps: median {fmt(med(ms))} ms, p90 {fmt(pct(ms, .9))} ms, "
              f"mean {fmt(statistics.fmean(ms) if ms else None)} ms")
    if oe is not None:
        ms = oe["ms"]
        print(f"openevolve {oe['version']}: {oe['iterations_done']} iterations ({oe['admitted']} children admitted, "
              f"{oe['errors']} failed, database holds {oe['final_size']} programs; "
              f"{'finished' if oe['finished'] else 'stopped at the time budget'}), wall {oe['wall_s']:.1f}s; "
              f"single-iteration gaps: median {fmt(med(ms))} ms, p90 {fmt(pct(ms, .9))} ms, "
              f"mean {fmt(statistics.fmean(ms) if ms else None)} ms")
        print("openevolve split (medians per window; controller and worker run concurrently, two tasks in flight):")
        wk = oe["workers"]
        reached = max(oe["sizes"]) if oe["sizes"] else 0
        for t in TARGETS:
            b = window_bounds(t, reached)
            if b is None:
                continue
            sub = med(window_samples(oe["sizes"], oe["submit_ms"], t))
            add = med(window_samples(oe["sizes"], oe["add_ms"], t))
            sel = [x for x in wk if b[0] <= x["n_snapshot"] <= b[1]]
            line = (f"  ~{t:>5} programs: controller: sample + snapshot of every program + submit {fmt(sub)} ms, "
                    f"database.add {fmt(add)} ms")
            if sel:
                task = med([(x["t1"] - x["t0"]) * 1e3 for x in sel])
                llm = med([x["llm"] * 1e3 for x in sel])
                ev = med([x["eval"] * 1e3 for x in sel])
                rest = med([(x["t1"] - x["t0"] - x["llm"] - x["eval"]) * 1e3 for x in sel])
                line += (f"; worker task {fmt(task)} ms = LLM call {fmt(llm)} + evaluate_program {fmt(ev)} + "
                         f"rebuild programs from the snapshot, prompt, parse {fmt(rest)}")
            print(line)
        st = oe["stub"]
        if st.get("n"):
            print(f"  stub server (the only 'waiting' on the LLM): {st['n']} requests, "
                  f"{1e3 * st['handler_s'] / st['n']:.2f} ms/request in its handler; the trivial evaluate() itself "
                  f"is a hash of a ~50-byte file (~0.01 ms)")
        if oe["sizes"] and max(oe["sizes"]) < TARGETS[-1] / WINDOW_FACTOR:
            print("  (OpenEvolve is not grown to 10k programs: its time per iteration grows with the database, "
                  "so that would take hours; raise --oe-iterations / --oe-budget to go further)")
    if oe_note:
        print(oe_note)


# ============================================================================================== archive scale
# A synthetic archive written in bulk (the rows a campaign writes, iteration by iteration, in big transactions),
# then a campaign resumed on it in a fresh process: restore time, per-iteration overhead and resident memory.

SCALE_PROBLEMS = 10        # 20 islands of 40: full already at 1,000 programs, so sizes compare like with like
SCALE_SENTINEL = 987654321  # stands for the counter in a problem's program template
SCALE_ITERATIONS = 400      # iterations the resumed campaign runs (the first SCALE_SKIP are warm-up)
SCALE_SKIP = 50


class ResumableFreshBackend(FreshBackend):
    """FreshBackend whose counter is part of the checkpoint (STATE), so a resumed campaign keeps proposing
    programs the archive has never seen."""

    capabilities = frozenset({"state"})


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
    import sqlite3

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
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")  # one rollback journal per chunk instead of a WAL of the whole file
    conn.execute("PRAGMA synchronous=OFF")
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
        conn.execute("BEGIN")
        for table, rows in (("groups", rows_g), ("completions", rows_c), ("programs", rows_p), ("metrics", rows_m),
                            ("portfolio", rows_f)):
            ar.bulk_insert(conn, table, rows)
        conn.execute("COMMIT")
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
    conn.execute("BEGIN")
    ar.bulk_insert(conn, "state", state)
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
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
    camp = Campaign(scale_config(probs, last + more, depth), run_dir, probs, ResumableFreshBackend(4),
                    HashEvaluator(), on_iteration=lambda c, it: (stamps.append(time.perf_counter()), cpu.append(time.process_time())))
    restore = camp._restore

    def timed_restore() -> bool:
        nonlocal prof
        ok = restore()
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
        return ok

    camp._restore = timed_restore
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
            cmd = [sys.executable, str(Path(__file__).resolve()), "--_resume", str(work), str(a.scale_iterations),
                   str(a.scale_depth), str(a.scale_problems)] + (["--_profile", a.profile] if a.profile else [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
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


# ============================================================================================== main

def machine_load() -> str:
    """Load average and CPU pressure: on a shared machine these explain most of the run-to-run spread."""
    parts = []
    try:
        parts.append("load avg " + " ".join(f"{x:.1f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cpus")
    except OSError:
        pass
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        parts.append("cpu pressure (some) avg60 " + line.split("avg60=")[1].split()[0] + "%")
    except (OSError, IndexError):
        pass
    return ", ".join(parts) or "unknown"


def portfolio_overhead(a, tmp: Path, programs: int, depths: list[int], log) -> None:
    """ms/iteration of one proposer and of an N-member ucb portfolio, runs interleaved (1, N, 1, N, ...) so a
    shared machine's load drifts over both; per run the median of 4-iteration means after the first 50
    iterations; the ratio of the runs' medians, and of the fastest runs (the least disturbed by other load)."""
    import shutil

    print(f"\nportfolio overhead: {programs} programs (8 per iteration), 2 islands, instant proposer + trivial "
          f"evaluator, {a.repeats} interleaved runs each; machine: {machine_load()}")
    for depth in depths:
        res: dict[int, list[float]] = {1: [], a.portfolio: []}
        for k in range(a.repeats):
            for n in (1, a.portfolio):
                log(f"depth {depth}, {n} member(s), run {k + 1}")
                d = tmp / f"pf-{depth}-{n}-{k}"
                r = run_vevo(d, programs, depth, members=n)
                shutil.rmtree(d, ignore_errors=True)
                res[n].append(med([x for x in rolling(r["ms"])[50:] if x is not None]))
        one, many = med(res[1]), med(res[a.portfolio])
        print(f"  depth {depth}: 1 proposer {fmt(one, 3)} ms/iteration (runs {', '.join(fmt(x, 3) for x in res[1])}); "
              f"{a.portfolio} members {fmt(many, 3)} ms/iteration (runs "
              f"{', '.join(fmt(x, 3) for x in res[a.portfolio])}); ratio of medians {many / one:.3f}, of the "
              f"fastest runs {min(res[a.portfolio]) / min(res[1]):.3f}")
    print(f"machine after: {machine_load()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="~1 minute: vevo to 2,000 programs, OpenEvolve to 700")
    ap.add_argument("--programs", type=int, default=None,
                    help="vevo archive size to grow to (default 15,000, so the 10k window 6,667-15,000 is complete)")
    ap.add_argument("--depths", default="0,1", help="pipeline depths to run (default 0,1)")
    ap.add_argument("--no-openevolve", action="store_true", help="vevo half only")
    ap.add_argument("--oe-iterations", type=int, default=None,
                    help="OpenEvolve iterations (default 1,500, so its 1k window 667-1,500 is complete)")
    ap.add_argument("--oe-budget", type=float, default=None, help="seconds OpenEvolve may run (default 300)")
    ap.add_argument("--oe-venv", type=Path, default=DEFAULT_OE_VENV, help="scratch venv (reused if present)")
    ap.add_argument("--dir", default=None, help="parent folder for the temp run folders (default: system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the temp run folder")
    ap.add_argument("--small-runs", type=int, default=5,
                    help=f"extra short campaigns (to {SMALL_RUN_PROGRAMS} programs) per column for the 100 window")
    ap.add_argument("--no-fsync-diagnostic", action="store_true",
                    help="skip the extra vevo depth0 run with PRAGMA synchronous=FULL (shows the fsync cost)")
    ap.add_argument("--many-problems", type=int, default=1000,
                    help="also time a campaign over this many problems (copies of one, 2 islands each) against one "
                         "problem, same iterations (0 skips)")
    ap.add_argument("--portfolio", type=int, default=0, metavar="N",
                    help="only compare one proposer against a portfolio of N members (ucb), interleaved runs")
    ap.add_argument("--repeats", type=int, default=3,
                    help="--portfolio: runs of each kind; --archive-sizes: resumes of each size")
    ap.add_argument("--archive-sizes", default=None, metavar="N,N,...",
                    help="only the archive-scale study: a synthetic archive of each size (e.g. 1000,100000,1000000) "
                         "resumed in a fresh process: restore seconds, ms/iteration, RSS per program")
    ap.add_argument("--scale-problems", type=int, default=SCALE_PROBLEMS, help="--archive-sizes: problems")
    ap.add_argument("--scale-iterations", type=int, default=SCALE_ITERATIONS,
                    help="--archive-sizes: iterations the resumed campaign runs")
    ap.add_argument("--scale-depth", type=int, default=1, help="--archive-sizes: pipeline depth")
    ap.add_argument("--profile", choices=("cpu", "mem"), default=None,
                    help="--archive-sizes: cProfile the resumed iterations, or tracemalloc the restored campaign")
    ap.add_argument("--_resume", dest="resume", nargs=4, metavar=("DIR", "MORE", "DEPTH", "PROBLEMS"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--_profile", dest="child_profile", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_stub-server", dest="stub_server", metavar="PORT_FILE", help=argparse.SUPPRESS)
    ap.add_argument("--_oe-driver", dest="oe_driver", nargs=3, metavar=("WORK", "PORT", "ITERS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stub_server:
        return stub_server_main(a.stub_server)
    if a.oe_driver:
        return oe_driver_main(a.oe_driver[0], int(a.oe_driver[1]), int(a.oe_driver[2]))

    sys.path.insert(0, str(ROOT))
    if a.resume:
        d, more, depth, n = a.resume
        print(json.dumps(run_resumed(d, int(more), int(depth), int(n), a.child_profile)))
        return
    programs = a.programs or (2_000 if a.quick else 15_000)
    oe_iters = a.oe_iterations or (700 if a.quick else 1_500)
    oe_budget = a.oe_budget or (60.0 if a.quick else 300.0)
    depths = [int(x) for x in a.depths.split(",") if x.strip()]

    def log(msg: str) -> None:
        print(f"[loop_overhead] {msg}", file=sys.stderr, flush=True)

    tmp = tempfile.mkdtemp(prefix="vevo-loop-overhead-", dir=a.dir)
    log(f"run folder {tmp}")
    if a.portfolio > 1:
        return portfolio_overhead(a, Path(tmp), a.programs or 4_000, depths, log)
    if a.archive_sizes:
        try:
            return archive_scale([int(x) for x in a.archive_sizes.split(",") if x.strip()], a, Path(tmp), log)
        finally:
            if not a.keep:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
    t_all = time.perf_counter()
    load_before = machine_load()
    try:
        problem = bench_problem()
        vevo_runs = []
        for depth in depths:
            log(f"vevo: pipeline_depth={depth}, growing the archive to {programs} programs")
            vevo_runs.append(run_vevo(Path(tmp) / f"vevo-depth{depth}", programs, depth))
        if not a.no_fsync_diagnostic:
            log("vevo: diagnostic run, pipeline_depth=0 with PRAGMA synchronous=NORMAL (no fsync per iteration)")
            vevo_runs.append(run_vevo(Path(tmp) / "vevo-fsync", programs, 0, synchronous="FULL"))
        for i, r in enumerate(vevo_runs):
            if r["count"] != 1 + r["iterations"] * r["per_iteration"]:
                log(f"warning: archive holds {r['count']} programs, expected {1 + r['iterations'] * r['per_iteration']}")
            r["extra"] = [run_vevo(Path(tmp) / f"vevo-small-{i}-{k}", SMALL_RUN_PROGRAMS, r["depth"],
                                   synchronous=r["synchronous"]) for k in range(a.small_runs)]
        scaling = []
        if a.many_problems > 1:
            for depth in depths:
                log(f"vevo: pipeline_depth={depth}, 1 problem vs {a.many_problems} problems, {SCALING_ITERATIONS} "
                    "iterations each")
                pair = [run_vevo(Path(tmp) / f"vevo-scaling-{n}-{depth}", n + 8 * SCALING_ITERATIONS, depth,
                                 n_problems=n) for n in (1, a.many_problems)]
                scaling.append((depth, pair))
        oe, note = None, ""
        if not a.no_openevolve:
            try:
                py, version, note = ensure_oe_venv(a.oe_venv, log)
                log(f"openevolve {version} in {a.oe_venv}: {oe_iters} iterations, budget {oe_budget:.0f}s")
                oe = run_openevolve(Path(tmp) / "openevolve", py, oe_iters, oe_budget, islands=2,
                                    seed_code=problem.seed_code, d=max(problem.n_tests, 1), log=log)
            except Exception as e:  # report the vevo half anyway
                note = f"openevolve: not measured ({type(e).__name__}: {e})"
        print(f"\nloop overhead: problem {problem.id} (d={problem.n_tests}), 2 islands, instant proposer + "
              f"trivial evaluator; vevo m=4 answers x G=2 completions = 8 programs/iteration, "
              f"SQLite archive in {tmp}")
        if oe is not None:
            print(f"openevolve {oe['version']} (scratch venv {a.oe_venv}): 1 program/iteration, stub OpenAI server "
                  f"on 127.0.0.1, full rewrites, 1 worker process, 2 islands, population_size above the run length")
        report(vevo_runs, oe, note)
        if scaling:
            print(f"\nper-iteration cost against the number of problems (2 islands each; median of 4-iteration means "
                  f"over iterations {SCALING_SKIP}-{SCALING_ITERATIONS}; the checkpoint rewrites only the islands "
                  "an iteration changed):")
            for depth, pair in scaling:
                cells = []
                for r in pair:
                    xs = [x for x in rolling(r["ms"])[SCALING_SKIP:] if x is not None]
                    n = r["n_problems"]
                    cells.append(f"{n} problem{'s' if n > 1 else ''} {fmt(med(xs))} ms/iteration")
                print(f"  vevo depth{depth}: " + ", ".join(cells))
        print(f"\nmachine: before {load_before}; after {machine_load()} (timings of a shared machine: spread between "
              "runs comes mostly from other load)")
        print(f"total bench wall time {time.perf_counter() - t_all:.0f}s")
    finally:
        if not a.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
