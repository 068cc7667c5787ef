"""vevo against OpenEvolve's own loop: same proposer, same problems, same evaluation budget, several seeds.

    .venv/bin/python bench/studies/vs_openevolve.py --problems 4 --evaluations 48 --seeds 0 1 2 --out runs/vs_oe

- **Proposer**: the bundled tiny model, sampled by vevo's HF backend. OpenEvolve reaches it through a small
  OpenAI-compatible server on 127.0.0.1 started here (``/v1/chat/completions``): its system + user messages are
  given to the model as plain text ending in ``<answer_1>`` (the tiny model's own answer convention, as vevo's
  chat style pre-fills it), context cut from the left to the model's window. vevo drives the same model in process.
- **Problems**: built-in ``pbe-hard`` problems written out as OpenEvolve folders (the evaluator runs the program
  in a subprocess and reports the fraction of tests passed as ``combined_score``; a ``vevo.toml`` beside it
  says solved = combined_score >= 1, and OpenEvolve gets ``target_score`` 1.0), plus OpenEvolve's offline
  examples when ``--examples DIR`` is given (open-ended: best score only).
- **Budget**: OpenEvolve gets ``--evaluations`` iterations (one evaluation each); vevo gets the number of
  iterations whose candidate count (group x answers, less duplicates) reaches the same budget, and the actual
  counts are reported. Solved per 1,000 evaluations is the headline ratio (vevo / OpenEvolve).

Writes ``OUT/results.json`` and prints a markdown table. Needs ``pip install openevolve`` (0.4.x).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MODEL = "vevo-tiny"
CONTEXT = 1024

PBE_EVALUATOR = '''"""Programming-by-example tests for {pid}, run in a subprocess (the program never shares this process)."""
import json
import subprocess
import sys

TESTS = {tests}
ENTRY = {entry!r}
RUNNER = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
out = []
for args in json.loads(sys.stdin.read()):
    try:
        out.append([True, repr(getattr(m, sys.argv[2])(*args))])
    except Exception as e:
        out.append([False, type(e).__name__])
print(json.dumps(out))
"""


def evaluate(program_path):
    try:
        r = subprocess.run([sys.executable, "-c", RUNNER, program_path, ENTRY], capture_output=True, text=True,
                           input=json.dumps([t[0] for t in TESTS]), timeout=10)
        got = json.loads(r.stdout.strip().splitlines()[-1])
    except Exception as e:
        return {{"combined_score": 0.0, "error": 0.0, "stderr": str(e)[:300]}}
    passed = sum(1 for (args, want), (ok, v) in zip(TESTS, got) if ok and v == want)
    return {{"combined_score": passed / len(TESTS), "passed": float(passed)}}
'''


def write_pbe_folders(n: int, out: Path) -> list[Path]:
    """The first n pbe-hard problems as OpenEvolve folders (expected values compared by repr, as Python prints)."""
    from problems.model import CallCase
    from problems.registry import discover

    folders = []
    for p in discover().select(suite="pbe-hard")[:n]:
        tests = [[list(t.args), repr(t.expected)] for t in p.tests if isinstance(t, CallCase)]
        f = out / p.id.replace("/", "_")
        f.mkdir(parents=True, exist_ok=True)
        (f / "initial_program.py").write_text(p.seed_code)
        (f / "evaluator.py").write_text(PBE_EVALUATOR.format(pid=p.id, tests=json.dumps(tests), entry=p.entry_point))
        (f / "config.yaml").write_text("evaluator:\n  timeout: 30\n  cascade_evaluation: false\n"
                                       f"prompt:\n  system_message: {json.dumps(p.description)}\n")
        (f / "vevo.toml").write_text('solved = "scalar >= 1.0"\n')
        folders.append(f)
    return folders


# ---------------------------------------------------------------- the proposer behind an OpenAI-compatible server
class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code: int, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        srv = self.server
        if "messages" in body:
            text = "\n\n".join(str(m.get("content", "")) for m in body["messages"]).rstrip() + "\n<answer_1>"
        else:
            text = str(body.get("prompt", ""))
        from proposer.backends.base import SamplingParams

        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 384)
        ids = srv.tok(text, add_special_tokens=False)["input_ids"]
        keep = CONTEXT - max_tokens - 8
        if len(ids) > keep:
            text = srv.tok.decode(ids[-keep:])
        sp = SamplingParams(temperature=float(body.get("temperature", 1.0)), top_p=float(body.get("top_p", 1.0)),
                            max_tokens=max_tokens, seed=srv.next_seed())
        with srv.lock:
            comps = srv.backend.generate([text], int(body.get("n", 1)), sp)[0]
        srv.calls += 1
        chat = "messages" in body
        choices = [({"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": c.text}}
                    if chat else {"index": i, "finish_reason": "stop", "text": c.text}) for i, c in enumerate(comps)]
        self._send(200, {"id": "x", "object": "chat.completion" if chat else "text_completion", "created": 0,
                         "model": MODEL, "choices": choices,
                         "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})


class TinyServer(ThreadingHTTPServer):
    def __init__(self, seed: int):
        from proposer.backends import make_backend

        super().__init__(("127.0.0.1", 0), _Handler)
        self.backend = make_backend("tiny", threads=1)
        self.tok = self.backend._tokenizer
        self.lock = threading.Lock()
        self.seed, self.calls = seed, 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def next_seed(self) -> int:
        self.seed += 1
        return self.seed

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


# ---------------------------------------------------------------- the two loops
def run_openevolve(folder: Path, evaluations: int, seed: int, out: Path, url: str) -> dict:
    """OpenEvolve 0.4.x's controller, target_score 1.0 when the problem has one. Returns the best score,
    evaluations done and the evaluation at which it first reached 1.0 (None if never)."""
    from openevolve.config import Config, LLMModelConfig
    from openevolve.controller import OpenEvolve

    cfg = Config.from_yaml(folder / "config.yaml") if (folder / "config.yaml").is_file() else Config()
    cfg.random_seed = seed
    cfg.log_level = "WARNING"
    cfg.max_iterations = evaluations
    cfg.diff_based_evolution = False  # the tiny model writes whole programs
    cfg.checkpoint_interval = 10**6
    cfg.evaluator.parallel_evaluations = 1
    cfg.evaluator.max_retries = 0
    m = LLMModelConfig(name=MODEL, api_base=url, api_key="none", weight=1.0, temperature=1.0, top_p=1.0,
                       max_tokens=384, timeout=600, retries=1, retry_delay=1)
    cfg.llm.models = [m]
    cfg.llm.evaluator_models = [m]
    cfg.llm.api_base = url
    cfg.database.num_islands = 2
    cfg.database.random_seed = seed
    target = 1.0 if (folder / "vevo.toml").is_file() else None
    ctrl = OpenEvolve(str(folder / "initial_program.py"), str(folder / "evaluator.py"), cfg,
                      output_dir=str(out))
    t0 = time.time()
    asyncio.run(ctrl.run(iterations=evaluations, target_score=target))
    progs = list(ctrl.database.programs.values())
    scores = sorted(((p.iteration_found, float(p.metrics.get("combined_score", 0.0))) for p in progs))
    solved_at = next((it for it, s in scores if s >= 1.0 - 1e-9), None)
    # one evaluation per iteration; a reply with no parseable program costs an iteration, not an evaluation
    return {"best": max(s for _, s in scores), "evaluations": len(progs) - 1, "solved_at": solved_at,
            "seconds": round(time.time() - t0, 1)}


def run_vevo(folder: Path, evaluations: int, seed: int, out: Path) -> dict:
    from evolve.archive import Archive, archive_path
    from evolve.config.schema import CampaignConfig
    from evolve.launch.runner import start

    answers, group = 4, 2
    iterations = max(1, evaluations // (answers * group))
    cfg = CampaignConfig(problems_dir=[str(folder)], problems=[folder.name], seed=seed, out=str(out),
                         proposer={"spec": "tiny"}, executor={"workers": 1},
                         search={"iterations": iterations, "islands": 2, "answers": answers, "group": group})
    t0 = time.time()
    _, summary = start(cfg, progress=False)
    with Archive(archive_path(out), readonly=True) as a:
        rows = [p for p in sorted(a.programs(), key=lambda p: p.eval_index)
                if p.status != "format_error" and p.iteration > 0]
    solved_at = next((i + 1 for i, p in enumerate(rows) if p.solved), None)
    return {"best": summary["best"][folder.name]["scalar"], "evaluations": len(rows), "solved_at": solved_at,
            "seconds": round(time.time() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=4, help="pbe-hard problems")
    ap.add_argument("--examples", nargs="*", default=[], help="OpenEvolve example folders (open-ended)")
    ap.add_argument("--evaluations", type=int, default=48)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/vs_openevolve")
    ap.add_argument("--table", metavar="RESULTS_JSON", help="only print the table of an earlier run")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    folders = write_pbe_folders(args.problems, out / "problems") + [Path(e) for e in args.examples]
    results = []
    for seed in args.seeds:
        server = TinyServer(seed * 1_000_003)
        try:
            for f in folders:
                for system in ("vevo", "openevolve"):
                    dst = out / system / f"{f.name}-s{seed}"
                    r = run_vevo(f, args.evaluations, seed, dst) if system == "vevo" else \
                        run_openevolve(f, args.evaluations, seed, dst, server.url)
                    r.update(system=system, problem=f.name, seed=seed, target=(f / "vevo.toml").is_file())
                    results.append(r)
                    print(json.dumps(r), flush=True)
        finally:
            server.shutdown()
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


def table(results: list[dict]) -> str:
    """Markdown summary: solved and solved per 1,000 evaluations on problems with a target, mean best score
    on those and on the open-ended ones, and the vevo / OpenEvolve ratios."""
    lines = ["| system | runs with a target | solved | evaluations | solved / 1k evals | mean best (target) | "
             "runs open-ended | mean best (open-ended) | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    per: dict[str, tuple[float, float]] = {}
    for system in ("vevo", "openevolve"):
        rs = [r for r in results if r["system"] == system]
        tg = [r for r in rs if r["target"]]
        oe = [r["best"] for r in rs if not r["target"]]
        solved = sum(1 for r in tg if r["solved_at"] is not None)
        evals = sum(r["evaluations"] for r in tg)
        rate = 1000 * solved / evals if evals else 0.0
        mean_t = sum(r["best"] for r in tg) / len(tg) if tg else float("nan")
        per[system] = (rate, mean_t)
        lines.append(f"| {system} | {len(tg)} | {solved} | {evals} | {rate:.2f} | {mean_t:.4f} | {len(oe)} | "
                     f"{(sum(oe) / len(oe)) if oe else float('nan'):.4f} | {sum(r['seconds'] for r in rs):.0f} |")
    (rv, bv), (ro, bo) = per["vevo"], per["openevolve"]
    ratio = rv / ro if ro else (float("inf") if rv else float("nan"))
    lines.append(f"\nsolved per 1,000 evaluations, vevo / OpenEvolve: {ratio:.2f} ({rv:.2f} / {ro:.2f}); "
                 f"mean best on the target problems, vevo / OpenEvolve: {bv / bo if bo else float('nan'):.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
