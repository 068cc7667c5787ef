"""EvalPlus: HumanEval+ (``HumanEvalPlus*.jsonl.gz``, ids ``humanevalplus/<n>``) and MBPP+
(``MbppPlus*.jsonl.gz``, ids ``mbppplus/<n>``).

No expected outputs are stored, so they are computed the way EvalPlus does, by running the canonical
solution on every input, but here inside the sandbox (``reference_outputs``). Each input becomes one
CallCase (base inputs first, then at most ``max_plus`` plus inputs, chosen evenly spaced through the
list so that later, larger inputs are represented too). Inputs whose reference raises, times out, or
returns something that cannot cross the pipe are dropped; the count is in ``meta['dropped_inputs']``.

Faithful to EvalPlus's checker:
- MBPP+ inputs that JSON turned from tuples/sets/complex into lists/strings are restored per task
  (``mbpp_deserialize_inputs``, same task lists as evalplus/data/mbpp.py).
- float tolerance: ``atol`` when non-zero, else 1e-6 (EvalPlus also enforces 1e-6 for float outputs).
- MBPP_OUTPUT_SET_EQ_TASKS compare ``set(output)``; MBPP_OUTPUT_NOT_NONE_TASKS compare ``output is not
  None``; HumanEval/32 (``find_zero``) checks ``abs(poly(xs, x)) <= atol`` (any root is right). These go
  through an entry wrapper (``common.entry_wrapper``); so do references whose outputs are builtin
  subclasses such as Counter (normalised to builtins).
- Not reproduced: the "either the canonical answer or an alternative" oracles of Mbpp/558, Mbpp/581,
  Mbpp/164 and Mbpp/295 (EvalPlus accepts a second answer there); the canonical answer is required.

Slow inputs: when the reference needs more than SLOW_BUDGET (2 s) for all inputs, each input is timed
alone and the slowest plus inputs are dropped until it fits (status 'slow' in the report). The time limit
is then ``max(10 s, 5 x the reference's wall time on the kept inputs)``, at most 60 s.

Every imported problem is solvable: the reference then runs on the finished problem as a candidate would, all
tests in one sandbox job (``fit_reference``), and limits or tests are fitted until it passes (humanevalplus/15's
6.9 MB strings fit one at a time but not a dozen together); `vevo problems import` prints what was done in one
line per problem, and one per problem left out.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from problems import values
from problems.model import CallCase, Problem, ProblemError

from ..jsonl import read_jsonl
from .common import (WRAPPER, entry_wrapper, evolve_block, field, find_def, first_sentence, parse_code,
                     stub_from_arity, stub_from_def, wrapped_label)
from .humaneval import seed_and_description, task_number

DEFAULT_MAX_PLUS = 100
TIME_LIMIT = 10.0
MAX_TIME_LIMIT = 60.0
MEMORY_MB = 1024
REF_TIME_LIMIT = 30.0   # per reference run while computing expected outputs
SLOW_BUDGET = 2.0       # seconds of reference time per problem; slower plus inputs are dropped
MAX_REF_TIMEOUTS = 3    # after this many inputs time out, the rest of the problem's inputs are dropped
MAX_FIT_ROUNDS = 8      # reference runs that fit limits and tests to it (fit_reference)
REASONS = {"output_limit": "with the largest expected values, past the sandbox's output limit together",
           "memory": "with the largest expected values, past the memory limit together"}

MBPP_OUTPUT_NOT_NONE_TASKS = ("check_str", "text_match_three", "text_starta_endb")
MBPP_OUTPUT_SET_EQ_TASKS = ("similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly",
                            "larg_nnum", "intersection_array", "find_dissimilar", "Diff")
DEFAULT_FILES = ("HumanEvalPlus.jsonl.gz", "MbppPlus.jsonl.gz")


def import_evalplus(path: str | Path, pool=None, max_plus: int = DEFAULT_MAX_PLUS,
                    report: dict | None = None) -> list[Problem]:
    """path: one EvalPlus ``*.jsonl[.gz]`` file (HumanEval+ or MBPP+ main or -NoExtreme/-Mini format),
    or a folder, meaning both ``HumanEvalPlus.jsonl.gz`` and ``MbppPlus.jsonl.gz``. pool: the sandbox to
    compute expected outputs with (anything with ``run_problem_raw(problem, code, time_limit)``, e.g.
    ``evaluators.pool.SandboxPool``; given by the caller, since problems/ sits below evaluators/).
    report: filled with per-problem counts of inputs kept and dropped. A problem whose canonical solution
    gives no usable output on any input is left out (``report[id]['skipped']``)."""
    path = Path(path)
    if path.is_dir():
        files = [path / n for n in DEFAULT_FILES if (path / n).is_file()]
        if not files:
            raise ProblemError(path, "", f"none of {', '.join(DEFAULT_FILES)} here")
    else:
        files = [path]
    rows = []
    for f in files:
        if "OriginFmt" in f.name:
            raise ProblemError(f, "", "the -OriginFmt files embed their tests in code; import the main file instead")
        rows += [(f, n, obj) for n, obj in read_jsonl(f)]
    specs = [parse_row(obj, f, f"line {n}", max_plus) for f, n, obj in rows]
    seen: set[str] = set()
    for spec in specs:
        if spec["id"] in seen:
            raise ProblemError(spec["file"], spec["where"], f"duplicate task_id ({spec['id']})")
        seen.add(spec["id"])
    if pool is None:
        raise ProblemError(path, "", "EvalPlus stores no expected outputs: importing it needs a sandbox to run the "
                           "canonical solutions (pass pool=, as `vevo problems import evalplus` does)")
    return _build_all(specs, pool, report)


def _build_all(specs: list[dict], pool, report: dict | None) -> list[Problem]:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()
    out: list[Problem | None] = [None] * len(specs)

    def one(i: int) -> None:
        p, info = build_problem(specs[i], pool)
        out[i] = p
        if report is not None:
            with lock:
                report[specs[i]["id"]] = info

    with ThreadPoolExecutor(max_workers=max(1, getattr(pool, "n", 1))) as ex:
        list(ex.map(one, range(len(specs))))
    return [p for p in out if p is not None]


# ---------------------------------------------------------------- rows

def parse_row(row: dict, path: Path, where: str, max_plus: int) -> dict:
    task_id = field(row, "task_id", str, path, where)
    num = task_number(task_id, path, where)
    where = f"{where} ({task_id})"
    kind = "mbppplus" if task_id.lower().startswith("mbpp") else "humanevalplus"
    prompt = field(row, "prompt", str, path, where)
    entry = field(row, "entry_point", str, path, where)
    solution = field(row, "canonical_solution", str, path, where)
    atol = field(row, "atol", (int, float), path, where, default=0)
    base = field(row, "base_input", list, path, where)
    plus = field(row, "plus_input", (list, dict), path, where, default=[])
    if isinstance(plus, dict):
        if plus:
            raise ProblemError(path, where, "field 'plus_input': expected a list of argument lists")
        plus = []  # Mbpp/793 stores an empty object
    n_plus_total = len(plus)
    for key, inputs in (("base_input", base), ("plus_input", plus)):
        for j, inp in enumerate(inputs):
            if not isinstance(inp, list):
                raise ProblemError(path, where, f"field {key!r}[{j}]: expected a list of arguments")
    if not base and not plus:
        raise ProblemError(path, where, "no inputs (base_input and plus_input are empty)")
    plus = spread(plus, max_plus)
    if kind == "mbppplus":
        try:
            base, plus = mbpp_deserialize_inputs(task_id, base), mbpp_deserialize_inputs(task_id, plus)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
            raise ProblemError(path, where, f"field 'base_input'/'plus_input': not the argument shapes "
                                            f"EvalPlus expects for {task_id} ({type(e).__name__})") from None
        reference = solution.strip("\n") + "\n"
        mod = parse_code(reference, path, where, "field 'canonical_solution'")
        fn = find_def(mod, entry)
        stub = stub_from_def(fn, entry) if fn is not None else stub_from_arity(entry, len((base or plus)[0]))
        seed = evolve_block(stub)
        doc = prompt.strip().strip('"').strip()
        description = doc
        title = first_sentence(doc.splitlines()[0] if doc else entry)
    else:
        reference = prompt + solution
        parse_code(reference, path, where, "prompt + canonical_solution")
        seed, description = seed_and_description(prompt, entry, path, where)
        title = entry
    mode = None
    if kind == "mbppplus" and entry in MBPP_OUTPUT_SET_EQ_TASKS:
        mode = "set"
    elif kind == "mbppplus" and entry in MBPP_OUTPUT_NOT_NONE_TASKS:
        mode = "not_none"
    elif kind == "humanevalplus" and entry == "find_zero":
        mode = "poly_root"
    return {"id": f"{kind}/{num}", "kind": kind, "task_id": task_id, "file": path, "where": where, "entry": entry,
            "reference": reference, "seed": seed, "description": description, "title": title,
            "atol": float(atol), "inputs": [("base", tuple(a)) for a in base] + [("plus", tuple(a)) for a in plus],
            "mode": mode, "n_plus_total": n_plus_total}


def spread(items: list, k: int) -> list:
    """k items evenly spaced through items (all of them when there are at most k)."""
    n = len(items)
    if k <= 0:
        return []
    if n <= k:
        return list(items)
    if k == 1:
        return [items[0]]
    return [items[round(i * (n - 1) / (k - 1))] for i in range(k)]


def mbpp_deserialize_inputs(task_id: str, inputs: list) -> list:
    """Restore the Python types JSON lost (task lists from evalplus/data/mbpp.py)."""
    n = int(task_id.split("/")[-1])
    if n in (2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740,
             744, 809):
        return [[tuple(lst) for lst in inp] for inp in inputs]
    if n in (63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780):
        return [[[tuple(lst) for lst in lst_lst] for lst_lst in inp] for inp in inputs]
    if n in (75, 413, 444, 753):
        return [[[tuple(lst) for lst in inp[0]]] + [inp[1]] for inp in inputs]
    if n in (106, 750):
        return [[inp[0]] + [tuple(inp[1])] for inp in inputs]
    if n == 115:
        return [[[set(item) if isinstance(item, list) and len(item) else {} for item in inp[0]]] for inp in inputs]
    if n == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if n in (250, 405, 446, 617, 720, 763, 808):
        return [[tuple(inp[0])] + [inp[1]] for inp in inputs]
    if n in (259, 401, 445):
        mod = [[[tuple(lst) for lst in lst_lst] for lst_lst in inp] for inp in inputs]
        return [[tuple(lst) for lst in inp] for inp in mod]
    if n == 278:
        mod = [[[tuple(item) if isinstance(item, list) else item for item in inp[0]]] for inp in inputs]
        return [[tuple(lst) for lst in inp] for inp in mod]
    if n == 307:
        return [[tuple(inp[0])] + [inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{key: tuple(value) for key, value in inp[0].items()}] + inp[1:] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in (580, 615, 791):
        def tup(x):
            return tuple(tup(i) for i in x) if isinstance(x, list) else x
        return [tup(inp) for inp in inputs]
    return inputs


# ---------------------------------------------------------------- expected outputs

def reference_outputs(pool, code: str, entry: str, inputs: list[tuple], setup: str = "",
                      time_limit: float = REF_TIME_LIMIT, memory_mb: int = MEMORY_MB,
                      max_timeouts: int = MAX_REF_TIMEOUTS) -> tuple[list[tuple[str, Any]], float]:
    """Run code's ``entry`` on each argument tuple inside the sandbox. Returns one (status, value) per
    input, status 'ok' (value: the decoded result), 'error' (value: the message), 'timeout', 'crash' or
    'unserialisable'; and the summed wall time of the runs. An input that hangs or kills the process
    is marked and the run resumes after it."""
    results: list[tuple[str, Any] | None] = [None] * len(inputs)
    wall = 0.0
    timeouts = 0
    start = 0
    while start < len(inputs):
        chunk = list(range(start, len(inputs)))
        prob = Problem(id="reference", seed_code="", entry_point=entry, setup_code=setup, time_limit=time_limit,
                       memory_limit_mb=memory_mb,
                       tests=[CallCase(args=inputs[i], expected=None) for i in chunk])
        try:
            raw = pool.run_problem_raw(prob, code, time_limit)
        except values.ValueCodecError as e:
            # an input that cannot be encoded: find it, drop it, carry on
            bad = next(j for j in chunk if not _encodes(inputs[j]))
            results[bad] = ("unserialisable", f"input: {e}")
            start = bad + 1 if bad == start else start
            continue
        wall += float(raw.get("wall") or 0.0)
        got = 0
        load_err = None
        for rec in raw.get("records", []):
            if rec.get("t") == "load_error":
                load_err = rec.get("exc", "load error")
            if rec.get("t") != "case" or not isinstance(rec.get("i"), int) or not 0 <= rec["i"] < len(chunk):
                continue
            i = chunk[rec["i"]]
            if "v" in rec:
                try:
                    results[i] = ("ok", values.decode(rec["v"]))
                except (values.ValueCodecError, TypeError, ValueError, KeyError):
                    results[i] = ("unserialisable", "undecodable result")
            else:
                err = str(rec.get("err", "error"))
                results[i] = ("unserialisable" if err.startswith("unserialisable") else "error", err)
            got += 1
        if load_err is not None:
            for i in chunk:
                if results[i] is None:
                    results[i] = ("error", f"reference does not load: {load_err}")
            break
        missing = [i for i in chunk if results[i] is None]
        if not missing:
            break
        first = missing[0]
        status = "timeout" if raw.get("timed_out") else "crash"
        results[first] = (status, raw.get("killed") or raw.get("stderr_tail", "")[-200:] or status)
        if status == "timeout":
            timeouts += 1
            if timeouts >= max_timeouts:
                for i in missing[1:]:
                    results[i] = ("timeout", "skipped after repeated timeouts")
                break
        start = first + 1
    return [r if r is not None else ("crash", "no result") for r in results], wall


def _encodes(v: Any) -> bool:
    try:
        values.encode(list(v))
        return True
    except values.ValueCodecError:
        return False


def _drop_slowest(pool, spec: dict, call: str, setup: str, inputs: list[tuple],
                  outs: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], float]:
    """Time each input on its own and drop the slowest plus inputs until the reference needs at most
    SLOW_BUDGET seconds (base inputs are always kept), so candidates are scored in seconds."""
    walls: dict[int, float] = {}
    for i, (status, _) in enumerate(outs):
        if status == "ok":
            _, walls[i] = reference_outputs(pool, spec["reference"], call, [inputs[i]], setup)
    # a run's fixed cost (fork, setup) is paid once by a candidate, not once per input
    fixed = min(walls.values()) if walls else 0.0
    walls = {i: w - fixed for i, w in walls.items()}
    total = sum(walls.values()) + fixed
    plus = sorted((i for i in walls if spec["inputs"][i][0] == "plus"), key=lambda i: -walls[i])
    outs = list(outs)
    for i in plus:
        if total <= SLOW_BUDGET:
            break
        outs[i] = ("slow", f"reference took {walls[i]:.2f}s")
        total -= walls[i]
    return outs, total


def build_problem(spec: dict, pool) -> tuple[Problem | None, dict]:
    """The problem for one parsed row, and a report (inputs kept/dropped, reference wall time); None when
    the canonical solution gives no usable output at all (reported as skipped)."""
    entry, mode = spec["entry"], spec["mode"]
    inputs = [a for _, a in spec["inputs"]]
    setup = entry_wrapper(entry, mode, atol=spec["atol"] or 1e-4) if mode else ""
    call = WRAPPER if mode else entry
    outs, wall = reference_outputs(pool, spec["reference"], call, inputs, setup)
    if mode is None and any(s == "unserialisable" and "unsupported type" in str(v) for s, v in outs):
        # builtin subclasses (Counter, namedtuple...): compare their builtin copies, as Python's == would
        mode, call = "normalise", WRAPPER
        setup = entry_wrapper(entry, mode)
        outs, wall = reference_outputs(pool, spec["reference"], call, inputs, setup)
    if wall > SLOW_BUDGET:
        outs, wall = _drop_slowest(pool, spec, call, setup, inputs, outs)
    tests: list[CallCase] = []
    parts: list[str] = []  # base | plus, per test
    dropped: dict[str, int] = {}
    n_base = 0
    for (part, args), (status, value) in zip(spec["inputs"], outs):
        if status != "ok":
            dropped[status] = dropped.get(status, 0) + 1
            continue
        label = wrapped_label(entry, mode, args, {}, value, spec["atol"] or 1e-4) if mode else ""
        tests.append(CallCase(args=args, expected=value, label=label))
        parts.append(part)
        n_base += part == "base"
    info = {"inputs": len(inputs), "kept": len(tests), "dropped": dropped, "reference_wall": round(wall, 3),
            "compare": mode or "equal"}
    if not tests:  # the canonical solution is broken: nothing to compare with, leave the problem out
        info["skipped"] = "no input gave a usable reference output"
        return None, info
    time_limit = float(min(MAX_TIME_LIMIT, max(TIME_LIMIT, math.ceil(5 * wall))))
    float_tol = spec["atol"] if spec["atol"] > 0 else 1e-6
    meta = {"source_task_id": spec["task_id"], "dataset": spec["kind"], "base_inputs": n_base,
            "plus_inputs": len(tests) - n_base,
            "plus_inputs_available": spec["n_plus_total"]}
    if dropped:
        meta["dropped_inputs"] = sum(dropped.values())
    if mode:
        meta["entry_function"] = entry
        meta["compare"] = mode
    p = Problem(id=spec["id"], seed_code=spec["seed"], tests=list(tests), title=spec["title"],
                description=spec["description"], entry_point=call, setup_code=setup,
                reference_code=spec["reference"], time_limit=time_limit, memory_limit_mb=MEMORY_MB,
                float_tol=float_tol, suite="evalplus", meta=meta)
    p = fit_reference(p, pool, info, parts)
    if p is not None:
        info["time_limit"] = p.time_limit
        info["kept"] = p.n_tests
    return p, info


def _size(value: Any) -> int:
    return len(values.dumps(value))


def fit_reference(p: Problem, pool, info: dict, parts: list[str] | None = None,
                  rounds: int = MAX_FIT_ROUNDS) -> Problem | None:
    """Run the reference on the finished problem as every candidate is run (all tests in one sandbox job) and
    make it pass, so every imported problem is solvable: a timeout doubles the time limit (up to
    MAX_TIME_LIMIT); results too large for the sandbox (``output_limit``, ``memory``: the expected values were
    computed a few inputs at a time, a candidate returns them all at once; humanevalplus/15 has 6.9 MB strings)
    drop the tests with the largest expected values until half the bytes are left, plus inputs before base ones
    (``parts``: "base" | "plus" per test); failing tests are dropped. ``info['fitted']`` says what was done in
    one line; None (and ``info['skipped']``) when the reference still fails. A pool without ``evaluate``
    leaves p as it is."""
    evaluate = getattr(pool, "evaluate", None)
    if evaluate is None:
        return p
    done: list[str] = []
    dropped: dict[str, int] = {}
    parts = list(parts) if parts is not None else ["plus"] * p.n_tests
    for _ in range(rounds):
        ev = evaluate(p, p.reference_code)
        if ev.solved:
            break
        keep = list(range(p.n_tests))
        if ev.status == "timeout" and p.time_limit < MAX_TIME_LIMIT:
            p.time_limit = float(min(MAX_TIME_LIMIT, 2 * p.time_limit))
            done.append(f"time limit raised to {p.time_limit:g}s")
            continue
        if ev.status in ("output_limit", "memory"):
            sizes = {i: _size(t.expected) for i, t in enumerate(p.tests)}
            left = sum(sizes.values())
            half = left // 2
            for i in sorted(sizes, key=lambda i: (parts[i] == "base", -sizes[i])):
                if left <= half or len(keep) == 1:
                    break
                keep.remove(i)
                left -= sizes[i]
        else:
            failing = set(ev.artifacts.get("failing_tests") or [])
            keep = [i for i in keep if i not in failing]
        if not keep or len(keep) == p.n_tests:
            break
        dropped[ev.status] = dropped.get(ev.status, 0) + p.n_tests - len(keep)
        p.tests, parts = [p.tests[i] for i in keep], [parts[i] for i in keep]
    else:
        ev = evaluate(p, p.reference_code)
    n_drop = sum(dropped.values())
    if n_drop:
        why = ", ".join(f"{v} {REASONS.get(k, k)}" for k, v in sorted(dropped.items()))
        done.append(f"dropped {n_drop} test{'s' * (n_drop != 1)} so that its reference passes run as a candidate is, "
                    f"all tests in one sandbox job ({why}); {p.n_tests} kept")
        p.meta["dropped_inputs"] = p.meta.get("dropped_inputs", 0) + n_drop
        p.meta["base_inputs"], p.meta["plus_inputs"] = parts.count("base"), parts.count("plus")
        for k, v in dropped.items():
            info["dropped"][f"reference_{k}"] = v
    if done:
        info["fitted"] = "; ".join(done)
    if not ev.solved:
        info["skipped"] = f"the reference fails its own tests ({ev.status}) after fitting"
        return None
    return p
