"""Runs inside the sandboxed candidate process and reports raw results as JSON lines on a pipe.

It reports *values*, never verdicts: expected outputs never enter this process, so whatever a
hostile candidate does to this module, to builtins or to the pipe, it cannot turn a wrong answer
into a pass — the parent compares. Primitives are bound before candidate code runs.
"""
from __future__ import annotations

import builtins
import json
import os
import sys

from problems import values

_write = os.write
_dumps = json.dumps
_encode = values.encode
_decode = values.decode
_opaque = values.opaque
_BaseException = BaseException
_MemoryError = MemoryError
_isinstance = isinstance
COMPILE_IN_WORKER_MAX = 64 << 10  # characters
_COMPILE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError)  # what compile() raises


def _record_encoder():
    """json.dumps(rec, separators=(",", ":")) with the C encoder built once, in the worker: building an encoder
    per record made the candidate's first record cost ~50 copy-on-write page faults."""
    try:
        from json.encoder import c_make_encoder, encode_basestring_ascii
    except ImportError:
        c_make_encoder = None
    if c_make_encoder is None:
        return lambda rec: _dumps(rec, separators=(",", ":"))

    def default(o):
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")
    # no circular-reference markers (records are built here and hold JSON-safe values; a cycle would end in a
    # RecursionError instead): a markers dict shared by every call could keep stale ids after an error
    enc = c_make_encoder(None, default, encode_basestring_ascii, None, ":", ",", False, False, True)
    return lambda rec, enc=enc, join="".join: join(enc(rec, 0))


_encode_record = _record_encoder()


def _emitter(fd: int, write=_write, dumps=_encode_record, memoryview=memoryview):
    """Primitives are bound as defaults now, so patching json/os/builtins later changes nothing here."""
    def emit(rec: dict) -> None:
        data = (dumps(rec) + "\n").encode()
        view = memoryview(data)
        while view:
            n = write(fd, view)
            view = view[n:]
    return emit


def _exc(e: BaseException) -> str:
    try:
        return f"{type(e).__name__}: {str(e)[:300]}"
    except _BaseException:
        return "exception"


def _tb_tail(limit: int = 1500) -> str:
    try:
        import traceback

        return traceback.format_exc()[-limit:]
    except _BaseException:
        return ""


def main(job: dict, fd: int) -> None:
    emit = _emitter(fd)
    mode = job["mode"]
    if mode == "openevolve":
        return run_openevolve(job, emit, fd)
    try:
        code = job.get("compiled") or compile(job["code"], "candidate.py", "exec")
    except _COMPILE_ERRORS as e:
        emit({"t": "syntax_error", "msg": _exc(e)})
        return
    if mode == "stdio":
        return run_stdio(code, job, emit, fd)
    return run_function(code, job, emit)


def _encoder(encode=_encode, opaque=_opaque, exc_type=_BaseException):
    def enc(v):
        try:
            return encode(v)
        except exc_type:  # unserialisable: the parent sees an opaque value (truthy, equal to nothing)
            return opaque(v)
    return enc


def run_function(code, job: dict, emit, encode=_encoder(), decode=_decode, exc_type=_BaseException) -> None:
    ns: dict = {"__name__": "candidate", "__builtins__": builtins}
    emit({"t": "start"})
    try:
        exec(code, ns)
        if job.get("setup"):
            exec(_compile(job["setup"], "setup.py", "exec"), ns)
    except _BaseException as e:
        emit({"t": "load_error", "exc": _exc(e), "mem": _isinstance(e, _MemoryError), "tb": _tb_tail()})
        return
    entry = job.get("entry_point")
    fn = ns.get(entry) if entry else None
    cases = job["cases"]
    for i, case in enumerate(cases):
        kind = case["kind"]
        rec: dict
        try:
            if kind == "assert":
                exec(_compile(case["code"], f"test_{i}.py", "exec"), ns)
                rec = {"t": "case", "i": i, "pass": True}
            elif kind == "calls":  # a split assert: report the values, the parent decides
                if fn is None or not callable(fn):
                    raise NameError(f"entry point {entry!r} is not defined")
                ns["_vevo_pack"] = _pack
                vs = []
                for src in case["calls"]:
                    a, k = eval(_compile(src, f"test_{i}.py", "eval"), ns)
                    vs.append(encode(fn(*a, **k)))
                rec = {"t": "case", "i": i, "vs": vs}
            elif fn is None or not callable(fn):
                rec = {"t": "case", "i": i, "err": f"NameError: entry point {entry!r} is not defined"}
            elif kind == "call":
                result = fn(*decode(case["args"]), **decode(case.get("kwargs", {})))
                rec = {"t": "case", "i": i, "v": encode(result)}
            else:  # points
                outs = []
                for x in case["inputs"]:
                    try:
                        y = fn(*x)
                        outs.append(float(y) if type(y) in (int, float, bool) or hasattr(y, "__float__") else None)
                    except _MemoryError:
                        raise
                    except _BaseException:
                        outs.append(None)
                rec = {"t": "points", "i": i, "vs": [o if o is None or o == o and abs(o) != float("inf") else None
                                                     for o in outs]}
        except _BaseException as e:
            rec = {"t": "case", "i": i, "err": _exc(e), "mem": _isinstance(e, _MemoryError)}
        emit(rec)
    emit({"t": "done", "n": len(cases)})


_CODE_CACHE: dict[tuple[str, str, str], object] = {}


def _compile(src: str, name: str, mode: str):
    """Test code (setup, asserts, split calls) is the problem's, not the candidate's: the worker compiles it
    once before forking (precompile) and every candidate process finds it here."""
    key = (src, name, mode)
    code = _CODE_CACHE.get(key)
    if code is None:
        code = compile(src, name, mode)
        if len(_CODE_CACHE) < 50_000:
            _CODE_CACHE[key] = code
    return code


def compile_candidate(job: dict) -> None:
    """Compile the candidate's source in the worker, before forking: compiling runs none of it, and a code
    object the candidate process inherits costs it no parser allocations (copy-on-write page faults). A source
    that does not compile is left to the candidate process, which reports the error as usual, and so is a huge
    one (the worker's memory would keep the compiler's high-water mark, and every later fork would copy it)."""
    if len(job.get("code", "")) > COMPILE_IN_WORKER_MAX:
        return
    try:
        job["compiled"] = compile(job["code"], "candidate.py", "exec")
    except _COMPILE_ERRORS:
        pass


def precompile(job: dict) -> None:
    try:
        if job.get("setup"):
            _compile(job["setup"], "setup.py", "exec")
        for i, case in enumerate(job.get("cases", [])):
            if case["kind"] == "assert":
                _compile(case["code"], f"test_{i}.py", "exec")
            elif case["kind"] == "calls":
                for src in case["calls"]:
                    _compile(src, f"test_{i}.py", "eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass  # the candidate process meets the same error and reports it


def _pack(*a, **k):
    return a, k


def run_stdio(code, job: dict, emit, fd: int) -> None:
    """Each case runs in its own grandchild with real fds 0/1 (``open(0).read()`` works). This process
    runs no candidate code itself, so it reports the captured stdout faithfully."""
    emit({"t": "start"})
    cap = int(job.get("stdout_cap", 1 << 20))
    for i, case in enumerate(job["cases"]):
        with open("stdin.txt", "w", encoding="utf-8") as f:
            f.write(case["stdin"])
        pid = os.fork()
        if pid == 0:
            try:
                os.close(fd)
                os.dup2(os.open("stdin.txt", os.O_RDONLY), 0)
                os.dup2(os.open("stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
                sys.stdin = open(0, encoding="utf-8", closefd=False)
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
                exec(code, {"__name__": "__main__", "__builtins__": builtins})
                rc = 0
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                import traceback

                traceback.print_exc()
                rc = 1
            try:
                sys.stdout.flush()
            except BaseException:
                rc = rc or 120
            os._exit(rc)
        _, status = os.waitpid(pid, 0)
        try:
            with open("stdout.txt", "rb") as f:
                out = f.read(cap + 1)
        except OSError:
            out = b""
        rec = {"t": "case", "i": i, "out": out[:cap].decode("utf-8", "replace"), "truncated": len(out) > cap}
        if os.WIFSIGNALED(status):
            rec["signal"] = os.WTERMSIG(status)
        else:
            rec["rc"] = os.WEXITSTATUS(status)
        emit(rec)
    emit({"t": "done", "n": len(job["cases"])})


def ensure_openevolve() -> None:
    """Evaluators import ``openevolve.evaluation_result``; without the package, load our shim. The worker calls
    this before forking, because the candidate's uid may not be able to read this repository's files."""
    try:
        import openevolve.evaluation_result  # noqa: F401
    except ImportError:
        shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shims")
        for m in [m for m in sys.modules if m == "openevolve" or m.startswith("openevolve.")]:
            del sys.modules[m]
        sys.path.insert(0, shim)
        try:
            import openevolve.evaluation_result  # noqa: F401,F811
        finally:
            sys.path.remove(shim)


def run_openevolve(job: dict, emit, fd: int = 3) -> None:
    """OpenEvolve's evaluator contract, run in the sandbox next to the candidate file it evaluates.

    The metrics channel (fd 3) is one the program cannot write when the evaluator runs it in a subprocess: fd 3
    is not inherited across exec, and this process is not dumpable, so a same-uid program cannot open it
    through /proc/PID/fd or ptrace us. An evaluator that instead executes the program in this process (import,
    exec) hands it the channel by construction: that is detected (a compile of the program's path or source)
    and reported, and such a result is never counted as solved.

    Each stage runs under its own timeout (``stage_timeout``, OpenEvolve's ``evaluator.timeout``) in this
    process's main thread (so evaluators may use signals); a watchdog thread reports OpenEvolve's timeout result
    for that stage and ends the process when it expires."""
    import ctypes
    import importlib.util
    import threading

    ensure_openevolve()
    os.set_inheritable(fd, False)
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    with open("program.py", "w", encoding="utf-8") as f:
        f.write(job["code"])
    path = os.path.abspath("program.py")
    seen = {"in_process": False, "armed": False, "unpickled": None}
    code = job["code"]
    me = os.getpid()

    def hook(event, args, path=path, code=code, seen=seen, me=me, getpid=os.getpid, allowed=PICKLE_ALLOWED):
        if event == "pickle.find_class":
            # Called before the global is looked up, so before any code it names can run: the record is on the
            # channel before a hostile payload could write its own, and nothing it writes later takes it back.
            if seen["armed"] and seen["unpickled"] is None and getpid() == me and tuple(args[:2]) not in allowed:
                seen["unpickled"] = name = _dotted(args)
                emit({"t": "unverified", "why": f"the evaluator unpickled {name}"})
        elif event == "compile" and not seen["in_process"] and len(args) == 2:
            src, fname = args
            if fname == path or (isinstance(fname, str) and os.path.basename(fname) == "program.py") or \
                    (isinstance(src, (str, bytes)) and _same_source(src, code)):
                seen["in_process"] = True
    sys.addaudithook(hook)
    # a process the evaluator forks (multiprocessing's fork start method) may run the program's code: it does not
    # keep the metrics channel (exec already closes it)
    os.register_at_fork(after_in_child=lambda fd=fd, close=os.close: _quiet(close, fd))
    lock = threading.Lock()
    sent = []

    def finish(result: tuple, outcome: str) -> bool:
        with lock:
            if sent:
                return False
            sent.append(outcome)
            metrics, artifacts = _wire(result)
            emit({"t": "oe", "metrics": metrics, "artifacts": artifacts, "outcome": outcome,
                  "in_process": seen["in_process"]})
            emit({"t": "done", "n": 0})
            return True

    def call(fn, on_timeout: tuple, timeout=float(job.get("stage_timeout") or job["time_limit"])):
        def expire():
            if finish(on_timeout, "timeout"):
                os._exit(0)
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            return fn(path)
        finally:
            timer.cancel()

    emit({"t": "start"})
    try:
        ev_path = job["evaluator"]
        sys.path.insert(0, os.path.dirname(ev_path))
        spec = importlib.util.spec_from_file_location("evaluation_module", ev_path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["evaluation_module"] = mod
        spec.loader.exec_module(mod)
        seen["in_process"] = False  # compiling the evaluator itself is not the program
    except _BaseException as e:
        emit({"t": "load_error", "exc": _exc(e), "mem": _isinstance(e, _MemoryError), "tb": _tb_tail()})
        return
    timeout = float(job.get("stage_timeout") or job["time_limit"])
    seen["armed"] = True  # what the evaluator unpickles from here on may come from the program
    try:
        result, outcome = cascade(mod, call, bool(job.get("cascade", True)), list(job.get("thresholds", [])), timeout)
    except _MemoryError as e:
        emit({"t": "load_error", "exc": _exc(e), "mem": True, "tb": _tb_tail()})
        return
    finish(result, outcome)


# What an evaluator may unpickle from a program's output and still be believed: builtin containers and scalars,
# numpy arrays, dtypes and scalars (every name numpy's own pickles use, protocols 0-5), and the result envelope
# of concurrent.futures. None of them runs code of the pickle's choosing; any other global could.
_NUMPY = [(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")] + \
    [(m, "_frombuffer") for m in ("numpy.core.numeric", "numpy._core.numeric")] + \
    [("numpy", "ndarray"), ("numpy", "dtype")]
PICKLE_ALLOWED = frozenset(
    [(m, n) for m in ("builtins", "__builtin__") for n in ("list", "dict", "tuple", "set", "frozenset", "bytearray",
                                                           "bytes", "str", "int", "float", "complex", "bool",
                                                           "range", "slice")] +
    [("_codecs", "encode"), ("collections", "OrderedDict"), ("concurrent.futures.process", "_ResultItem")] + _NUMPY)


def _dotted(args) -> str:
    try:
        return (str(args[0]) + "." + str(args[1]))[:200]
    except _BaseException:
        return "an unprintable global"


def _quiet(fn, *a) -> None:
    try:
        fn(*a)
    except OSError:
        pass


def _same_source(src, code: str) -> bool:
    try:
        return (src.decode("utf-8") if isinstance(src, bytes) else src).strip() == code.strip() and bool(code.strip())
    except (UnicodeDecodeError, AttributeError):
        return False


def _wire(result: tuple) -> tuple[dict, dict]:
    """(metrics, artifacts) as they go over the channel: numbers and booleans stay metrics (a boolean is a
    flag, kept as one); other metric values and every artifact become text, at most 4000 characters."""
    metrics, artifacts = result
    clean, arts = {}, {}
    for k, v in metrics.items():
        if isinstance(v, (bool, int, float)):
            clean[str(k)] = v if isinstance(v, bool) else (float(v) if isinstance(v, float) or abs(v) < 1 << 53 else str(v))
        else:
            arts.setdefault(str(k), v)
    for k, v in artifacts.items():
        arts[str(k)] = v
    out = {}
    for k, v in arts.items():
        try:
            s = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        except _BaseException:
            s = "<unprintable>"
        out[k] = s[:4000]
    return clean, out


def _result(r) -> tuple[dict, dict]:
    """OpenEvolve's _process_evaluation_result: a dict is the metrics, an EvaluationResult brings artifacts,
    anything else is {"error": 0.0}."""
    if isinstance(r, dict):
        return dict(r), {}
    if hasattr(r, "metrics") and isinstance(r.metrics, dict):
        return dict(r.metrics), dict(getattr(r, "artifacts", None) or {})
    return {"error": 0.0}, {}


def _passes(metrics: dict, threshold: float) -> bool:
    """OpenEvolve's Evaluator._passes_threshold: combined_score if present, else the mean of numeric
    metrics (booleans included, as there) other than 'error'."""
    if not metrics:
        return False
    if "combined_score" in metrics and isinstance(metrics["combined_score"], (int, float)):
        return float(metrics["combined_score"]) >= threshold
    vals = [float(v) for k, v in metrics.items() if k != "error" and isinstance(v, (int, float))]
    return bool(vals) and sum(vals) / len(vals) >= threshold


def _merge_numeric(into: dict, metrics: dict) -> None:
    """OpenEvolve merges cascade stages as floats, dropping 'error' and non-numbers."""
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and k != "error":
            into[k] = float(v)


def _failure(e: BaseException, stage: str) -> dict:
    return {"failure_stage": stage, "error_type": type(e).__name__, "error_message": str(e)[:2000]}


def cascade(mod, call, use_cascade: bool, thresholds: list[float], timeout: float) -> tuple[tuple[dict, dict], str]:
    """OpenEvolve's Evaluator.evaluate_program / _cascade_evaluate, result for result: stage1 → (threshold[0]) →
    stage2 → (threshold[1]) → stage3, each under its own timeout, with the metrics and artifacts OpenEvolve
    reports for a stage that raises or times out. ``call(fn, on_timeout)`` runs one stage; on_timeout is the
    (metrics, artifacts) reported if it does not finish in time. Returns ((metrics, artifacts), outcome) with
    outcome ``ok`` or ``error``. (OpenEvolve retries a direct evaluate() that raises; evaluators are
    deterministic here, so it runs once.)"""
    if not use_cascade or not hasattr(mod, "evaluate_stage1"):
        out = ({"error": 0.0, "timeout": True},
               {"timeout": True, "timeout_duration": timeout, "failure_stage": "evaluation", "error_type": "timeout"})
        try:
            m, a = _result(call(mod.evaluate, out))
        except _MemoryError:
            raise
        except _BaseException as e:
            return ({"error": 0.0}, {"stderr": str(e), "traceback": _tb_tail(4000), "failure_stage": "evaluation",
                                     "attempt": 1}), "error"
        if m.get("timeout") is True:
            a.update(timeout=True, timeout_duration=timeout, failure_stage="evaluation", error_type="timeout")
        return (m, a), "ok"
    try:
        m1, a1 = _result(call(mod.evaluate_stage1, ({"stage1_passed": 0.0, "error": 0.0, "timeout": True},
                                                    {"failure_stage": "stage1", "timeout": True})))
    except _MemoryError:
        raise
    except _BaseException as e:
        return ({"stage1_passed": 0.0, "error": 0.0},
                {"stderr": str(e), "traceback": _tb_tail(4000), **_failure(e, "stage1")}), "error"
    th = thresholds[0] if thresholds else 0.5
    if not _passes(m1, th) or not hasattr(mod, "evaluate_stage2"):
        return (m1, a1), "ok"
    try:
        m2, a2 = _result(call(mod.evaluate_stage2, ({**m1, "stage2_passed": 0.0, "timeout": True},
                                                    {**a1, "stage2_timeout": True, "failure_stage": "stage2"})))
    except _MemoryError:
        raise
    except _BaseException as e:
        return ({**m1, "stage2_passed": 0.0}, {**a1, "stage2_stderr": str(e), "stage2_traceback": _tb_tail(4000),
                                               "failure_stage": "stage2"}), "ok"
    merged: dict = {}
    _merge_numeric(merged, m1)
    _merge_numeric(merged, m2)
    arts = {**a1, **a2}
    if len(thresholds) < 2 or not _passes(merged, thresholds[1]) or not hasattr(mod, "evaluate_stage3"):
        return (merged, arts), "ok"
    try:
        m3, a3 = _result(call(mod.evaluate_stage3, ({**merged, "stage3_passed": 0.0, "timeout": True},
                                                    {**arts, "stage3_timeout": True, "failure_stage": "stage3"})))
    except _MemoryError:
        raise
    except _BaseException as e:
        return ({**merged, "stage3_passed": 0.0}, {**arts, "stage3_stderr": str(e),
                                                   "stage3_traceback": _tb_tail(4000), "failure_stage": "stage3"}), "ok"
    _merge_numeric(merged, m3)
    arts.update(a3)
    return (merged, arts), "ok"
