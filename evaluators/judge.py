"""Turns a worker's raw report into an Evaluation. Runs in the orchestrator: the only place expected
outputs are ever compared, on decoded builtins, never with the candidate's own ``==``."""
from __future__ import annotations

import math
import signal
from typing import Any

from problems import metrics as metric_names
from problems import values
from problems.model import AssertCase, CallCase, PointsCase, Problem, StdioCase

from .asserts import SplitAssert, setup_names, split_assert, verdict

from .types import Evaluation


OE_STAGES = 3
OE_GRACE = 5.0  # seconds past the last stage's timeout before the worker's own deadline


def build_job(problem: Problem, code: str, time_limit: float | None = None) -> dict:
    """What the sandbox receives: the program and test *inputs* only, and the problem's resource limits
    (bounded by this host). For OpenEvolve folders time_limit is per cascade stage, as OpenEvolve's timeout."""
    limit = float(time_limit or problem.time_limit)
    job: dict[str, Any] = {"code": code, "time_limit": limit, **problem.limits().to_job()}
    if problem.openevolve is not None:
        # the harness times each stage; the worker's deadline covers every stage that may run
        job.update(mode="openevolve", evaluator=str(problem.openevolve.evaluator), stage_timeout=limit,
                   time_limit=limit * OE_STAGES + OE_GRACE, cascade=problem.openevolve.cascade,
                   thresholds=list(problem.openevolve.thresholds))
        return job
    cases = []
    stdio = all(isinstance(t, StdioCase) for t in problem.tests)
    for t in problem.tests:
        if isinstance(t, CallCase):
            cases.append({"kind": "call", "args": values.encode(list(t.args)), "kwargs": values.encode(dict(t.kwargs))})
        elif isinstance(t, StdioCase):
            cases.append({"kind": "stdio", "stdin": t.stdin})
        elif isinstance(t, PointsCase):
            cases.append({"kind": "points", "inputs": [list(x) for x in t.inputs]})
        else:
            sp = assert_split(problem, t)
            cases.append({"kind": "calls", "calls": list(sp.calls)} if sp else {"kind": "assert", "code": t.code})
    job.update(mode="stdio" if stdio else "function", cases=cases, entry_point=problem.entry_point,
               setup=problem.setup_code)
    return job


def assert_split(problem: Problem, t: AssertCase) -> SplitAssert | None:
    callees = frozenset(n for n in (problem.entry_point, "candidate") if n)
    return split_assert(t.code, callees, setup_names(problem.setup_code))


def normalise_stdout(s: str) -> str:
    return "\n".join(line.rstrip() for line in s.replace("\r\n", "\n").strip().split("\n"))


def score(problem: Problem, raw: dict) -> Evaluation:
    """raw: the worker's report (records, timed_out, output_limit, signal/exit_code, tails)."""
    n = problem.n_tests
    if "worker_error" in raw or "killed" in raw:
        return Evaluation.failed("killed", n, error=raw.get("worker_error") or raw.get("killed"))
    if "budget" in raw:  # over the disk or process budget a Landlock worker checks itself (evaluators/budget.py)
        return Evaluation.failed("output_limit", n, error=f"stopped: it {_text(raw['budget'], 200)}")
    if "undecodable" in raw:  # the worker's report carried something the orchestrator would not decode
        return Evaluation.failed("crash", n, error=f"undecodable result ({raw['undecodable']})")
    if problem.openevolve is not None:
        return _score_openevolve(problem, raw)
    records = raw.get("records", [])
    arts: dict[str, Any] = {}
    if raw.get("stderr_tail"):
        arts["stderr"] = raw["stderr_tail"][-1500:]
    vec = [0.0] * n
    failing: list[int] = []
    mem_err = done = started = False
    syntax = load_err = None
    seen: set[int] = set()
    for rec in records:
        if not isinstance(rec, dict):
            continue
        t = rec.get("t")
        if t == "syntax_error":
            syntax = str(rec.get("msg", ""))
        elif t == "load_error":
            load_err = rec
        elif t == "start":
            started = True
        elif t == "done":
            done = rec.get("n") == n
        elif t in ("case", "points"):
            i = rec.get("i")
            if not isinstance(i, int) or not 0 <= i < n or i in seen:
                continue  # forged or repeated records count for nothing
            seen.add(i)
            s, err = _guarded_case_score(problem, i, rec)
            vec[i] = s
            mem_err |= bool(rec.get("mem"))
            if s < 1.0:
                failing.append(i)
                if err and "first_error" not in arts:
                    arts["first_error"] = err
    failing += [i for i in range(n) if i not in seen]
    arts["failing_tests"] = sorted(failing)[:50]
    unverified = sum(1 for t in problem.tests if isinstance(t, AssertCase) and assert_split(problem, t) is None)
    if unverified:
        arts["unverified_tests"] = unverified
    if syntax is not None:
        return Evaluation.failed("syntax_error", n, error=syntax, **{k: v for k, v in arts.items() if k == "stderr"})
    w = problem.weight_vector(n)
    scalar = float(sum(a * b for a, b in zip(w, vec)))
    sig = raw.get("signal")
    if raw.get("output_limit"):
        status = "output_limit"
    elif raw.get("timed_out") or sig == signal.SIGXCPU:
        status = "timeout"
    elif load_err is not None:
        status = "memory" if load_err.get("mem") else "crash"
        arts["error"] = _text(load_err.get("exc", ""), 300)
        arts["traceback"] = _text(load_err.get("tb", ""), 1500)
    elif not done:
        status = "memory" if _looks_oom(raw) else ("killed" if sig == signal.SIGKILL else "crash")
        arts["exit"] = f"signal {sig}" if sig else f"exit code {raw.get('exit_code')}"
    elif not failing:
        status = "ok"
    else:
        status = "memory" if mem_err else "wrong"
    if not started and status == "ok":  # cannot happen honestly: no start record, no pass
        status = "crash"
    solved = status == "ok" and problem.is_solved(vec, scalar)
    return Evaluation(vector=vec, scalar=scalar, solved=solved, status=status, artifacts=arts)


def _looks_oom(raw: dict) -> bool:
    """A MemoryError the candidate printed, or the worker's cgroup saw its OOM killer take the candidate."""
    return bool(raw.get("oom_kill")) or "MemoryError" in raw.get("stderr_tail", "")


def _guarded_case_score(problem: Problem, i: int, rec: dict) -> tuple[float, str]:
    """A result the parent cannot even score (a value whose conversion raises) fails that test only."""
    try:
        return _case_score(problem, i, rec)
    except Exception as e:
        return 0.0, f"{problem.test_label(i)}: unscorable result ({type(e).__name__})"


def _case_score(problem: Problem, i: int, rec: dict) -> tuple[float, str]:
    test = problem.tests[i]
    if "err" in rec:
        err = rec["err"]
        return 0.0, f"{problem.test_label(i)}: {_short(err) if isinstance(err, str) else values.safe_repr(err)}"
    if isinstance(test, CallCase):
        if "v" not in rec:
            return 0.0, ""
        try:
            got = values.decode(rec["v"])
        except (values.ValueCodecError, TypeError, ValueError, KeyError, AttributeError):
            return 0.0, f"{problem.test_label(i)}: undecodable result"
        ok = values.values_equal(got, test.expected, rel_tol=problem.float_tol, abs_tol=problem.float_tol * 1e-3,
                                 strict_bool=problem.strict_bool)
        return (1.0, "") if ok else (0.0, f"{problem.test_label(i)}: got {values.safe_repr(got)}")
    if isinstance(test, StdioCase):
        out = rec.get("out")
        if not isinstance(out, str):
            return 0.0, ""
        ok = normalise_stdout(out) == normalise_stdout(test.stdout) and not rec.get("signal")
        return (1.0, "") if ok else (0.0, f"{problem.test_label(i)}: got {values.safe_repr(out)}")
    if isinstance(test, PointsCase):
        vs = rec.get("vs")
        if not isinstance(vs, list) or len(vs) != len(test.outputs):
            return 0.0, ""
        hits = 0
        for got, want in zip(vs, test.outputs):
            if isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(got) and \
                    math.isclose(got, want, rel_tol=test.rtol, abs_tol=test.atol):
                hits += 1
        return hits / len(test.outputs), ""
    sp = assert_split(problem, test)
    if sp is None:  # ran inside the sandbox: the best a non-splittable assert can do
        return (1.0, "") if rec.get("pass") is True else (0.0, "")
    vs = rec.get("vs")
    if not isinstance(vs, list) or len(vs) != len(sp.calls):
        return 0.0, ""
    try:
        got = [values.decode(v) for v in vs]
    except (values.ValueCodecError, TypeError, ValueError, KeyError, AttributeError):
        return 0.0, f"{problem.test_label(i)}: undecodable result"
    ok = verdict(sp, got, problem.setup_code)
    return (1.0, "") if ok else (0.0, f"{problem.test_label(i)}: failed with {values.safe_repr(got)}")


def _short(s: str, n: int = 300) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _text(v: Any, n: int) -> str:
    """A record field shown as text: strings cut to n characters, anything else through safe_repr."""
    return _short(v, n) if isinstance(v, str) else values.safe_repr(v, n)


def _score_openevolve(problem: Problem, raw: dict) -> Evaluation:
    """The evaluator's metrics, by name → the vector (score columns, see problems/metrics.py) and the scalar
    (OpenEvolve's fitness). A run the worker had to stop (whole-job deadline, output flood) still reports what
    OpenEvolve would: {"error": 0.0, "timeout": True} for a timeout."""
    recs = raw.get("records", [])
    oe = next((r for r in recs if r.get("t") == "oe"), None)
    syntax = next((r for r in recs if r.get("t") == "syntax_error"), None)
    load = next((r for r in recs if r.get("t") == "load_error"), None)
    arts: dict[str, Any] = {}
    if raw.get("stderr_tail"):
        arts["stderr"] = raw["stderr_tail"][-1500:]
    spec = problem.openevolve
    if oe is None or not isinstance(oe.get("metrics"), dict):
        metrics: dict[str, Any] = {"error": 0.0}
        if raw.get("output_limit"):
            status = "output_limit"
        elif raw.get("timed_out"):
            status = "timeout"
            metrics["timeout"] = True
        elif syntax:
            status = "syntax_error"
        elif load is not None:
            status = "memory" if load.get("mem") else "crash"
            arts["error"], arts["traceback"] = _text(load.get("exc", ""), 300), _text(load.get("tb", ""), 1500)
        elif _looks_oom(raw):
            status = "memory"
        else:
            status = "killed" if raw.get("signal") == signal.SIGKILL else "crash"
        arts["metrics"], arts["metric_names"] = metrics, []
        return Evaluation(vector=[], scalar=0.0, solved=False, status=status, artifacts=arts)
    metrics = {}
    for k, v in oe["metrics"].items():
        if isinstance(v, bool):
            metrics[_text(k, 200)] = v
        elif metric_names.finite_number(v) is not None:
            metrics[_text(k, 200)] = metric_names.finite_number(v)
    extra = oe.get("artifacts")
    arts.update({_text(k, 200): _text(v, 4000) for k, v in (extra.items() if isinstance(extra, dict) else ())})
    arts["metrics"] = metrics
    dims = tuple(spec.feature_dims) if spec is not None else ()
    names, vec = metric_names.score_columns(metrics, problem.metric_directions, dims)
    arts["metric_names"] = names
    scalar = metric_names.fitness(metrics, dims)
    outcome = oe.get("outcome", "ok")
    if raw.get("output_limit"):
        status = "output_limit"
    elif raw.get("timed_out") or outcome == "timeout":
        status = "timeout"
    elif outcome == "error":
        status = "crash"
    else:
        status = "ok"
    solved = status == "ok" and problem.is_solved(vec, scalar)
    if oe.get("in_process") is not False:  # the program ran inside the evaluator's process: it could forge this
        arts["unverified"] = "the evaluator ran the program in its own process; its metrics are forgeable"
        solved = False
    flagged = next((r for r in recs if r.get("t") == "unverified"), None)
    if flagged is not None:  # written before anything the evaluator unpickled could run: a forged record cannot hide it
        arts["unverified"] = _text(flagged.get("why", ""), 300) + \
            " (outside the allow-list of builtin containers and numpy arrays): its metrics are forgeable"
        solved = False
    return Evaluation(vector=vec, scalar=float(scalar), solved=solved, status=status, artifacts=arts)
