"""OpenEvolve side: a scratch venv (``--oe-venv``, reused if present) with ``openevolve>=0.4,<0.5`` (the nearest
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

This file is also the stub server's and the driver's program (``--stub-server PORT_FILE``, ``--driver WORK PORT
ITERATIONS``), run by the scratch venv's python: it imports nothing of vevo at the top.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


DEFAULT_OE_VENV = Path(tempfile.gettempdir()) / "vevo-bench-openevolve"


OE_REQUIREMENT = "openevolve>=0.4,<0.5"


def stub_server_main(port_file: str) -> None:
    """OpenAI-compatible /v1/chat/completions answering at once with a fresh full-rewrite program per call (the
    instant backend's programs). Run by vevo's python, so it may import the repository."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.perf.instant import PROGRAM

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
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--stub-server", str(port_file)],
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
            driver = subprocess.Popen([str(py), str(Path(__file__).resolve()), "--driver", str(work), str(port),
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


def main() -> None:
    """The two programs this file is besides a module: the stub server (vevo's python) and the driver (the scratch
    venv's python, which has OpenEvolve and not vevo)."""
    ap = argparse.ArgumentParser(description="the OpenEvolve side of bench/perf/loop_overhead.py")
    ap.add_argument("--stub-server", metavar="PORT_FILE")
    ap.add_argument("--driver", nargs=3, metavar=("WORK", "PORT", "ITERS"))
    a = ap.parse_args()
    if a.stub_server:
        stub_server_main(a.stub_server)
    elif a.driver:
        oe_driver_main(a.driver[0], int(a.driver[1]), int(a.driver[2]))
    else:
        ap.error("give --stub-server or --driver")


if __name__ == "__main__":
    main()
