"""The `vevo` command line. Heavy imports happen inside each command so `vevo --help` stays instant."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from problems.errors import VevoError


class UserError(VevoError):
    """A one-line error about the command line itself; exit code 2, no traceback."""


# C0 controls but tab and newline, DEL, C1, line/paragraph separators, bidi overrides, lone surrogates
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: object, newlines: bool = True) -> str:
    """Untrusted text (a candidate's errors or program, problem data, archive contents) as it may reach a
    terminal: control characters become visible escapes (\\x1b, \\r, \\u202e), so a candidate cannot recolour,
    rewrite or hide output; newlines are kept for layout unless the line must stay one line."""
    text = str(text)
    if not newlines:
        text = text.replace("\n", "\\n")
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _registry(args):
    from problems.registry import discover

    return discover(getattr(args, "problems_dir", None) or [])


def _pool(workers: int = 2, hide=()):
    from evaluators.pool import SandboxPool

    return SandboxPool(workers=workers, hide=hide)


# ------------------------------------------------------------------ problems

def cmd_problems_list(args) -> int:
    reg = _registry(args)
    probs = reg.select(suite=args.suite) if args.suite else list(reg.problems.values())
    if args.json:
        for p in probs:
            print(json.dumps({"id": p.id, "suite": p.suite, "split": p.split, "title": p.title,
                              "tests": p.n_tests, "kind": "openevolve" if p.openevolve else "native"}))
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        t = Table(title=f"{len(probs)} problems")
        for col in ("id", "suite", "split", "tests", "title"):
            t.add_column(col)
        for p in probs:
            t.add_row(*(escape(printable(x, newlines=False)) for x in (
                p.id, p.suite or "", p.split or "", str(p.n_tests) if not p.openevolve else "metrics",
                (p.title or "")[:50])))
        Console().print(t)
    for e in reg.errors:
        print(f"vevo: warning: {printable(e, newlines=False)}", file=sys.stderr)
    for folder, why in reg.skipped:
        print(f"vevo: skipped {printable(str(folder), False)}: {printable(why, False)}", file=sys.stderr)
    return 0


def cmd_problems_show(args) -> int:
    p = _registry(args).resolve(args.id)
    one = lambda x: printable(x, newlines=False)  # noqa: E731
    print(f"id:          {one(p.id)}\nsuite:       {one(p.suite)}  split: {one(p.split)}\ntitle:       {one(p.title)}")
    print(f"entry point: {one(p.entry_point)}\ntests:       {p.n_tests}\nlimits:      {p.time_limit}s, "
          f"{p.memory_limit_mb} MB\nsolved rule: {one(p.solved_rule)}\nsource:      {one(p.source)}")
    print(f"\ndescription:\n{printable(p.description)}\n\nseed program:\n{printable(p.seed_code)}")
    for i in range(min(p.n_tests, 10)):
        print(f"test {i}: {one(p.test_label(i))}")
    return 0


def cmd_problems_new(args) -> int:
    from problems.scaffold import new_problem

    folder = new_problem(args.name, args.kind, args.dir)
    print(f"created {folder} (check it with: vevo problems check {folder})")
    return 0


def cmd_problems_check(args) -> int:
    from problems.model import ProblemError
    from problems.registry import load_tree

    errors: list[ProblemError] = []
    from problems.suites import SUITES

    target = Path(args.target)
    if target.exists():
        probs = load_tree(target, errors)
    elif args.target in SUITES:  # a built-in suite by name: every problem of it
        probs = SUITES[args.target]()
    else:
        probs = [_registry(args).resolve(args.target)]
    from problems.check import check_many

    bad_ref = 0
    with _pool(args.workers) as pool:
        for start in range(0, len(probs), 32):  # chunks keep every worker busy and output flowing
            chunk = probs[start:start + 32]
            for p, res in zip(chunk, check_many(chunk, pool)):
                ref = res.get("reference")
                if ref is not None and not ref["solved"]:
                    bad_ref += 1
                if args.json:
                    print(json.dumps(res), flush=True)
                else:
                    seed = res["seed"]
                    line = f"{printable(p.id, False)}: seed {printable(seed['status'], False)} {seed['scalar']:.3f}"
                    if ref is not None:
                        line += f" | reference {ref['status']} {ref['scalar']:.3f}{' solved' if ref['solved'] else ''}"
                    if any((r or {}).get("artifacts", {}).get("unverified") for r in (seed, ref)):
                        line += (" | unverified: the evaluator runs the program in its own process, so a program"
                                 " can forge its metrics; solves are not counted")
                    print(line, flush=True)
    for e in errors:
        print(f"vevo: error: {printable(e, newlines=False)}", file=sys.stderr)
    if errors:
        return 2
    if not args.json:
        n_ref = sum(1 for p in probs if p.reference_code is not None)
        print(f"{len(probs)} problems checked; references solved {n_ref - bad_ref}/{n_ref}")
    return 1 if bad_ref else 0


def cmd_problems_import(args) -> int:
    import shutil

    from problems.importers import NEEDS_SANDBOX, import_problems
    from problems.model import write_native

    out = Path(args.out)
    if args.source == "openevolve":
        from problems.importers.openevolve import skipped_folders

        for folder, why in skipped_folders(args.path):
            print(f"skipped {printable(str(folder), False)}: {printable(why, False)}")
    pool = _pool(args.workers) if args.source in NEEDS_SANDBOX else None
    try:
        probs = import_problems(args.source, Path(args.path), **({"pool": pool} if pool is not None else {}))
    finally:
        if pool is not None:
            pool.close()
    # an OpenEvolve folder is copied as written, to its id (its path below the import root), so a registry
    # loading --out gives the same ids; an existing destination is never merged into
    for p in probs:
        if p.openevolve is not None and (out / p.id).exists():
            raise UserError(f"{out / p.id}: already exists (problem {p.id!r}); remove it or choose another --out")
    for p in probs:
        if p.openevolve is not None and p.source is not None:  # the author's folder, as written
            shutil.copytree(p.source, out / p.id)
        else:
            write_native(p, out / p.id.replace("/", "__"))
    print(f"imported {len(probs)} {args.source} problems into {out}" +
          (f": {', '.join(p.id for p in probs)}" if args.source == "openevolve" else ""))
    return 0


def cmd_eval_program(args) -> int:
    from .config import MAX_EVAL_TIMEOUT

    if args.timeout is not None and not 0 < args.timeout <= MAX_EVAL_TIMEOUT:  # also refuses nan and inf
        raise UserError(f"--timeout {args.timeout}: expected seconds in (0, {MAX_EVAL_TIMEOUT:g}]")
    reg = _registry(args)
    p = reg.resolve(args.problem)
    try:
        code = Path(args.program).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{args.program}: cannot read program: {e}")
    with _pool(1) as pool:
        ev = pool.evaluate(p, code, time_limit=args.timeout)
        iso = pool.isolation
    if args.json:
        print(json.dumps(ev.to_dict()))
    else:
        print(f"{printable(p.id, False)}: {ev.status}  scalar {ev.scalar:.4f}  solved {ev.solved}")
        print("vector: " + " ".join(f"{v:.2f}" for v in ev.vector))
        for k in ("first_error", "error", "exit"):
            if ev.artifacts.get(k):
                print(f"{k}: {printable(ev.artifacts[k], newlines=False)}")
        print(f"isolation: {iso.get('network')}, {iso.get('filesystem')}")
    return 0



# ------------------------------------------------------------------ campaigns

def _chat_value(text: str | None):
    """--chat auto|true|false as the config value (bool or "auto")."""
    return None if text is None else {"true": True, "false": False}.get(text, text)


def _backend_kw(spec: str, chat: str | None) -> dict:
    """Keyword arguments for make_backend from `vevo train/eval` flags (chat goes to hf, vllm, vllm-ray, openai)."""
    kind = "hf" if spec == "tiny" else spec.partition(":")[0]
    return {"chat": _chat_value(chat)} if chat is not None and kind in ("hf", "vllm", "vllm-ray", "openai") else {}


def _set_overrides(items: list[str]) -> dict:
    """--set KEY=VALUE (repeatable): any config key, the value read as YAML (1e-4, true, [a, b])."""
    import yaml

    out = {}
    for item in items or []:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise UserError(f"--set {item!r}: expected KEY=VALUE")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise UserError(f"--set {item!r}: value is not YAML ({str(e).splitlines()[0]})") from None
        section, dot, sub_key = key.strip().partition(".")
        if dot:  # train.lr=1e-4: the sectioned spelling
            out.setdefault(section, {})[sub_key] = value
        else:
            out[key.strip()] = value
    return out


def cmd_run(args) -> int:
    from .config import flag_value, load_config, run_flags
    from .runner import start

    overrides = {}
    for _, key, kind, _, _ in run_flags():
        v = getattr(args, key, None)
        if v not in (None, []):
            overrides[key] = flag_value(kind, v) if isinstance(v, str) else v
    overrides.update(_set_overrides(args.set))
    cfg = load_config(args.config, overrides)
    if not (cfg.problems or cfg.suite or cfg.problems_dir):
        print("vevo: no problems given (--suite, --problem or --problems-dir): running the built-in suite 'pbe'",
              file=sys.stderr)
        cfg.suite = "pbe"
    run_dir, summary = start(cfg, progress=not args.quiet)
    _print_summary(run_dir, summary)
    return 0


def cmd_resume(args) -> int:
    from .runner import resume

    summary = resume(args.run_dir, progress=not args.quiet, iterations=args.iterations)
    _print_summary(Path(args.run_dir), summary)
    return 0


def _print_summary(run_dir: Path, s: dict) -> None:
    print(f"run {run_dir}: {s['iterations']} iterations, {s['evaluations']} evaluations, "
          f"solved {s['solved']}/{s['problems']} problems")
    print("statuses: " + ", ".join(f"{printable(k, False)} {v}" for k, v in sorted(s["status_counts"].items())))
    for pid, b in sorted(s.get("best", {}).items()):
        print(f"  best {printable(pid, False)}: {b['scalar']:.6g} (program {b['program_id']}, iteration "
              f"{b['iteration']}, {b['status']}{', solved' if b['solved'] else ''})")


def _open_run(run_dir: str):
    from .archive import Archive

    db = Path(run_dir) / "archive.db"
    if not db.is_file():
        raise UserError(f"{run_dir}: not a run directory (no archive.db)")
    return Archive(db, readonly=True)


def cmd_runs_show(args) -> int:
    from .campaign import summarize

    from .portfolio_stats import member_stats

    with _open_run(args.run_dir) as a:
        s = summarize(a)
        s["training_steps"] = len(a.training_rows())
        s["proposers"] = member_stats(a)
    if args.json:
        print(json.dumps(s))
    else:
        _print_summary(Path(args.run_dir), s)
        for pid, it in sorted(s["solved_problems"].items()):
            print(f"  solved {printable(pid, False)} at iteration {it}")
        for name, m in s["proposers"].items():
            print(f"  proposer {printable(name, False)}: {m['iterations']} iterations, {m['programs']} programs, "
                  f"{m['improvements']} improvements ({m['improvement_rate']:.2f}/100 proposals), "
                  f"solved first {m['solved_first']}, {m['tokens']} tokens, {m['gen_seconds']:.1f}s generating")
    if getattr(args, "code", False):
        with _open_run(args.run_dir) as a:
            for pid, b in sorted(s["best"].items()):
                row = a.program(b["program_id"])
                print(f"# ---- best program of {printable(pid, False)} (scalar {b['scalar']:.6g})")
                print(printable(row.code if row else "", True))
    return 0


def cmd_export(args) -> int:
    import csv

    with _open_run(args.run_dir) as a:
        rows = a.export_rows()
    for r in rows:
        r["vector"] = json.dumps(r["vector"])
    cols = ["problem", "island", "iteration", "status", "scalar", "solved", "vector", "code_hash", "proposer"]
    if args.format == "csv":
        with open(args.out, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
    else:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError("parquet export needs pyarrow: pip install 'vevo[parquet]'")
        pq.write_table(pa.Table.from_pylist(rows), args.out)
    print(f"exported {len(rows)} programs to {args.out}")
    return 0


def _labelled_runs(runs: list[str], labels: list[str]) -> dict[str, list[str]]:
    """Run folders by label, as `curves` and `report` take them: RUN is labelled by its folder name, NAME=RUN
    (positional or --label) by NAME. Runs sharing a label are seeds of one setting, averaged together."""
    out: dict[str, list[str]] = {}
    specs = [(r, False) for r in runs] + [(spec, True) for spec in labels]
    for spec, must_name in specs:
        if "=" in spec and (must_name or not Path(spec).exists()):
            name, path = spec.split("=", 1)
            if not name:
                raise UserError(f"{spec!r}: empty label, expected NAME=RUN")
        elif must_name:
            raise UserError(f"--label {spec!r}: expected NAME=RUN")
        else:
            name, path = Path(spec).name, spec
        out.setdefault(name, []).append(path)
    if not out:
        raise UserError("no runs given")
    for paths in out.values():
        for p in paths:
            if not (Path(p) / "archive.db").is_file():
                raise UserError(f"{p}: not a run directory (no archive.db)")
    return out


def cmd_curves(args) -> int:
    from . import curves

    runs = _labelled_runs(args.runs, args.label)
    dbs = {k: [str(Path(p) / "archive.db") for p in v] for k, v in runs.items()}
    if args.by == "proposer":
        dbs = curves.split_by_proposer(dbs)
    rows = curves.curve_table(dbs, args.x)
    out = args.out or str(Path(next(iter(runs.values()))[0]) / "curves.png")
    curves.plot(dbs, args.x, out, band=args.band)
    print(f"wrote {out}")
    if args.csv:
        csv_path = str(Path(out).with_suffix(".csv"))
        curves.write_csv(rows, csv_path)
        print(f"wrote {csv_path}")
    return 0


def cmd_report(args) -> int:
    from . import report

    runs = _labelled_runs(args.runs, args.label)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    try:
        data = report.gather(runs)
    except ValueError as e:  # an archive.db that is not a vevo archive
        raise UserError(str(e))
    index = report.render(data, out, args.x)
    print(f"wrote {index}")
    return 0


# ------------------------------------------------------------------ proposer studies

def _problems_for(args):
    reg = _registry(args)
    probs = reg.select(suite=args.suite, ids=getattr(args, "problem", []) or [])
    if not probs:
        raise UserError("no problems selected (give --suite or --problem)")
    return probs


def cmd_train(args) -> int:
    from proposer.backends import make_backend

    from .study import train

    probs = _problems_for(args)
    backend = make_backend(args.proposer, **_backend_kw(args.proposer, args.chat))
    with _pool(args.workers) as pool:
        hist = train(backend, probs, pool, algo=args.algo, steps=args.steps, m=args.answers, group=args.group,
                     batch=args.batch, lr=args.lr, lora=not args.full, seed=args.seed, out=args.out,
                     max_tokens=args.max_tokens)
    if hist:
        key = "mean_set_reward" if "mean_set_reward" in hist[0] else "reward"  # covrl: reference log-likelihood
        print(f"trained {len(hist)} steps: {key.replace('_', ' ')} {hist[0].get(key, 0.0):.3f} -> "
              f"{hist[-1].get(key, 0.0):.3f}; model saved to {args.out} (use --proposer hf:{args.out})")
    return 0


def cmd_eval(args) -> int:
    from proposer.backends import make_backend

    from .study import evaluate_proposer

    probs = _problems_for(args)
    backend = make_backend(args.proposer, **_backend_kw(args.proposer, args.chat))
    with _pool(args.workers) as pool:
        res = evaluate_proposer(backend, probs, pool, k=args.k, m=args.answers, n=args.n, seed=args.seed,
                                max_tokens=args.max_tokens)
    if args.json:
        print(json.dumps(res))
    else:
        k = res["k"]
        print(f"{args.proposer} on {len(probs)} problems, budget n={res['n']} candidates (m={res['m']}):")
        print(f"  best@{k} {res[f'best@{k}']:.4f}  pass@{k} {res[f'pass@{k}']:.4f}  pass@1 {res['pass@1']:.4f}  "
              f"diversity {res['diversity']:.3f}  parse rate {res['parse_rate']:.3f}")
    return 0


def cmd_pretrain(args) -> int:
    import runpy

    sys.argv = ["proposer.tiny.pretrain", "--out", args.out, "--minutes", str(args.minutes), "--seed", str(args.seed)]
    runpy.run_module("proposer.tiny.pretrain", run_name="__main__")
    return 0

# ------------------------------------------------------------------ parser

def build_parser(cmd: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``cmd`` (the subcommand being run), the flags and choices that need the config
    model and the registries are built for that subcommand only, so `vevo --help` stays instant."""
    full = cmd is None

    ap = argparse.ArgumentParser(prog="vevo", description="Evolutionary program search with a VPO-trained proposer.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def pdir(p):
        p.add_argument("--problems-dir", action="append", default=[], metavar="D",
                       help="folder of problem folders (repeatable; also VEVO_PROBLEMS_PATH)")

    pr = sub.add_parser("problems", help="list, show, create, check and import problems")
    psub = pr.add_subparsers(dest="pcmd", required=True)
    p = psub.add_parser("list")
    p.add_argument("--suite")
    p.add_argument("--json", action="store_true")
    pdir(p)
    p.set_defaults(fn=cmd_problems_list)
    p = psub.add_parser("show")
    p.add_argument("id")
    pdir(p)
    p.set_defaults(fn=cmd_problems_show)
    p = psub.add_parser("new")
    p.add_argument("name")
    p.add_argument("--kind", default="io", choices=["io", "asserts", "stdio", "openevolve"])
    p.add_argument("--dir", default=".")
    p.set_defaults(fn=cmd_problems_new)
    p = psub.add_parser("check")
    p.add_argument("target", metavar="ID|PATH|SUITE")
    p.add_argument("--json", action="store_true")
    p.add_argument("--workers", type=int, default=2)
    pdir(p)
    p.set_defaults(fn=cmd_problems_check)
    p = psub.add_parser("import")
    if full or cmd == "problems":
        from problems.importers import sources

        p.add_argument("source", choices=sources())
    else:
        p.add_argument("source")
    p.add_argument("path")
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=2, help="sandbox workers (importers that run reference code)")
    p.set_defaults(fn=cmd_problems_import)

    p = sub.add_parser("eval-program", help="evaluate one program file on a problem")
    p.add_argument("problem", metavar="ID|PATH")
    p.add_argument("program")
    p.add_argument("--json", action="store_true")
    p.add_argument("--timeout", type=float, default=None)
    pdir(p)
    p.set_defaults(fn=cmd_eval_program)


    p = sub.add_parser("run", help="run an evolution campaign")
    p.add_argument("config", nargs="?", help="YAML config (flags override it)")
    if full or cmd == "run":
        from .config import run_flags
    # one flag per config key, generated from the config model
    for flag, key, kind, choices, help_ in (run_flags() if full or cmd == "run" else []):
        kw: dict = {"dest": key, "help": help_.replace("%", "%%") or None}
        if kind == "list":
            kw.update(action="append", metavar={"problems_dir": "D", "problems": "ID"}.get(key, "VALUE"))
        else:
            kw.update(type={"int": int, "float": float}.get(kind, str), choices=choices)
        p.add_argument(f"--{flag}", **kw)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config key, flat or dotted (train_lr=1e-4, train.reward=novel); repeatable")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("resume", help="continue a run from its last checkpoint")
    p.add_argument("run_dir")
    p.add_argument("--iterations", type=int, help="raise the iteration budget")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(fn=cmd_resume)
    p = sub.add_parser("runs", help="inspect runs")
    rsub = p.add_subparsers(dest="rcmd", required=True)
    p = rsub.add_parser("show")
    p.add_argument("run_dir")
    p.add_argument("--code", action="store_true", help="print each problem's best program")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_runs_show)
    p = sub.add_parser("export", help="one row per evaluated program")
    p.add_argument("run_dir")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("curves", help="solved-over-iterations and best-score curves from archives")
    p.add_argument("runs", nargs="*", metavar="RUN")
    p.add_argument("--label", action="append", default=[], metavar="NAME=RUN")
    p.add_argument("--x", choices=["iterations", "evaluations"], default="iterations")
    p.add_argument("--out", metavar="FILE.png|.svg")
    p.add_argument("--csv", action="store_true")
    p.add_argument("--band", choices=["minmax", "ci95"], default="minmax",
                   help="band around a label's mean when it has several runs (seeds)")
    p.add_argument("--by", choices=["run", "proposer"], default="run",
                   help="proposer: one curve per portfolio member (its own programs, on the campaign's iterations)")
    p.set_defaults(fn=cmd_curves)
    p = sub.add_parser("report", help="static HTML page: curves, per-problem table, training diagnostics")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run folder, or NAME=RUN; runs sharing a name are averaged")
    p.add_argument("--label", action="append", default=[], metavar="NAME=RUN")
    p.add_argument("--x", choices=["iterations", "evaluations"], default="iterations")
    p.add_argument("--out", required=True, metavar="DIR")
    p.set_defaults(fn=cmd_report)

    for name, fn, hlp in (("train", cmd_train, "RL on problems without evolution (VPO or a baseline)"),
                          ("eval", cmd_eval, "best@k / pass@k / diversity of a proposer")):
        p = sub.add_parser(name, help=hlp)
        p.add_argument("--proposer", required=True, metavar="SPEC")
        p.add_argument("--suite")
        p.add_argument("--problem", action="append", default=[], metavar="ID")
        pdir(p)
        p.add_argument("--answers", type=int, default=4, help="m answers per completion")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--workers", type=int, default=2)
        p.add_argument("--max-tokens", dest="max_tokens", type=int, default=384)
        p.add_argument("--chat", choices=["auto", "true", "false"], help="chat template (default: auto)")
        p.set_defaults(fn=fn)
        if name == "train":
            algos = None
            if full or cmd == "train":
                from proposer.algorithms import training_algorithms

                algos = training_algorithms(campaign=False)
            p.add_argument("--algo", default="vpo", choices=algos,
                           help="covrl: needs reference solutions")
            p.add_argument("--steps", type=int, default=10)
            p.add_argument("--group", type=int, default=4, help="G completions per prompt")
            p.add_argument("--batch", type=int, default=2, help="problems per step")
            p.add_argument("--lr", type=float, default=1e-3, help="as the run config's train_lr")
            p.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
            p.add_argument("--out", required=True, metavar="DIR")
        else:
            p.add_argument("--k", type=int, default=30)
            p.add_argument("--n", type=int, default=None, help="candidates per problem (default 2k)")
            p.add_argument("--json", action="store_true")
    p = sub.add_parser("pretrain", help="pretrain the tiny proposer on CPU (the bundled one was made this way)")
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=cmd_pretrain)
    return ap


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(next((w for w in words if not w.startswith("-")), "")).parse_args(argv)
    from problems.errors import VevoError

    try:
        return int(args.fn(args) or 0)
    except VevoError as e:  # every layer's user-facing error: one line; anything else is a bug and shows itself
        return _fail(e)
    except OSError as e:  # the environment's fault (unwritable dir, disk full): name the file, no traceback
        return _fail(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else e)
    except KeyboardInterrupt:
        print("vevo: interrupted", file=sys.stderr)
        return 130


def _fail(msg: object) -> int:
    print(f"vevo: error: {printable(msg, newlines=False)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
