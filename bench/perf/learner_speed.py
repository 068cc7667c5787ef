"""The learner's speed in one run: sampling (the general transformers loop vs the fast sampler), one training step
(the general step vs the lean one), the machine's measured FLOP limit and memory limit (the bytes a decode step
reads at the bandwidth one read of them gets), and optionally the wall time of a trained
and an untrained campaign at the same G (from the runs' own compute account), with the CPU seconds each command
used and the floor they put under the trained wall (`cpu_bound`). Ratios, medians of --repeats, the load average
printed beside them.

    python bench/perf/learner_speed.py                       # sampling, step, FLOP limit (~2 min on 2 cores)
    python bench/perf/learner_speed.py --campaigns 30        # + 30-iteration campaigns: untrained, trained (overlapped
                                                        #   learner, the default) and trained in the loop
    python bench/perf/learner_speed.py --campaigns 12 --campaigns-only --arms none,vpo --baseline HEAD^
                                                        # + the trained arm of an older tree (`git archive`), interleaved
                                                        #   (--baseline-arms none,vpo: its untrained arm too)
    python bench/perf/learner_speed.py --device cuda         # bench/checks/gpu_check.sh runs this on a GPU
"""
from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.perf.overlap_model import modelled  # noqa: E402
from evolve.analysis.account import describe  # noqa: E402
from proposer.answers.scoring import seed_prompt  # noqa: E402
from proposer.backends import make_backend  # noqa: E402
from proposer.backends import fast_sampler as fs  # noqa: E402
from proposer.backends.base import SamplingParams  # noqa: E402
from proposer.training.lora import save_lora, wrap_lora  # noqa: E402
from proposer.training.trainer import PolicyTrainer, TrainConfig, TrainSample  # noqa: E402


def median_time(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def campaign_prompt(backend) -> str:
    """A real campaign prompt: the first pbe-hard-heldout problem's seed, m = 4 (as the studies run)."""
    from evaluators.types import Evaluation
    from problems.suites import SUITES

    p = SUITES["pbe-hard-heldout"]()[0]
    ev = Evaluation(vector=[0.0] * len(p.tests), scalar=0.0, solved=False, status="wrong")
    return seed_prompt(p, ev, 4, "compact", "f")


def flop_limit(device: str, repeats: int) -> dict[str, float]:
    """fp32 matmul GFLOP/s on this device at the sampler's thread count (a 1024^3 product), per library the
    sampler may use (fast_sampler.choose_products): torch.mm, and oneDNN on a packed weight on a CPU with it."""
    a = torch.randn(1024, 1024, device=device)
    b = torch.randn(1024, 1024, device=device)
    out = {"blas": 2 * 1024 ** 3 / median_time(lambda: a @ b, repeats * 3) / 1e9}
    if device == "cpu" and torch.backends.mkldnn.is_available():
        packed = fs._t((b.t(), None), "onednn")  # the sampler's own packing and product
        t = median_time(lambda: fs._lin(a, packed), repeats * 3)
        out["onednn"] = 2 * 1024 ** 3 / t / 1e9
    from proposer.backends import native_step

    if device == "cpu" and native_step.avx512():
        packed = fs._t((b.t(), None), "native")
        out["native"] = 2 * 1024 ** 3 / median_time(lambda: fs._lin(a, packed), repeats * 3) / 1e9
    return out


def memory_limit(device: str, nbytes: float, repeats: int) -> float:
    """GB/s of one read of ``nbytes`` (a sum over a buffer that size: what a decode step streams)."""
    buf = torch.ones(int(nbytes) // 4, device=device)
    t = median_time(lambda: buf.sum(), repeats * 3)
    return nbytes / t / 1e9


def sampling(be, prompt_ids, batch: int, tokens: int, repeats: int, lora: bool) -> dict:
    """tokens/s of the general loop and the fast sampler, the same rows, EOS off so every row runs `tokens`."""
    eos = be.eos_ids
    be.eos_ids = {-1}
    sp = SamplingParams(temperature=1.0, max_tokens=tokens)
    try:
        old = median_time(lambda: be._decode([prompt_ids] * batch, sp, torch.Generator(be.device).manual_seed(0)),
                          repeats)
        def fast(products: str, step: str) -> float:
            return median_time(lambda: fs.sample(be.model, [prompt_ids] * batch, tokens, 1.0, 1.0, {-1},
                                                 torch.Generator(be.device).manual_seed(0), products=products,
                                                 step=step), repeats)

        new = fast(be.products, be.step)
        blas = new if be.products == "blas" else fast("blas", be.step)  # before oneDNN, where auto picks it
        python = new if be.step == "python" else fast(be.products, "python")  # before the C++ step
    finally:
        be.eos_ids = eos
    n = batch * tokens
    return {"batch": batch, "lora": lora, "general_tok_s": n / old, "fast_tok_s": n / new, "ratio": old / new,
            "products": be.products, "fast_blas_tok_s": n / blas, "ratio_to_blas": blas / new, "step": be.step,
            "fast_python_step_tok_s": n / python, "ratio_to_python_step": python / new}


def step_times(be, prompt: str, repeats: int) -> dict:
    """One step on a campaign's group of 8 (one prompt, sampled completions): the general step (pi_old,
    reference, training forward, movement; each row its own prompt) vs the lean one (movement off, as on 9 of
    10 campaign steps), lean with movement, lean through transformers' forward (fast_forward off: the lean
    step before proposer/backends/fast_logprobs.py), and lean with the LoRA's frozen base products in bf16
    (``frozen_bf16``, the campaign default where the CPU has AMX; the others here are fp32)."""
    g = be.generate([prompt], 8, SamplingParams(temperature=1.0, max_tokens=384, seed=1))[0]
    samples = [TrainSample.from_completion(c, a) for c, a in zip(g, [1, -1, .5, -.5, 0, 1, -1, 0])]
    cfgs = {"general": dict(lean=False, shared_prompt=False, movement=True), "lean": dict(movement=False),
            "lean_with_movement": dict(movement=True), "lean_transformers": dict(movement=False, fast_forward=False),
            "lean_frozen_bf16": dict(movement=False, frozen_bf16=True)}
    trainers = {k: PolicyTrainer(be.model, TrainConfig(lr=0.0, **v)) for k, v in cfgs.items()}
    out = {k: median_time(lambda t=t: t.step(samples), repeats) for k, t in trainers.items()}
    out["completion_tokens"] = sum(len(s.completion_ids) for s in samples)
    out["ratio"] = out["general"] / out["lean"]
    out["ratio_with_movement"] = out["general"] / out["lean_with_movement"]
    out["ratio_transformers"] = out["general"] / out["lean_transformers"]
    out["ratio_frozen_bf16"] = out["general"] / out["lean_frozen_bf16"]
    with tempfile.TemporaryDirectory() as tmp:  # each step's adapter snapshot (evolve/training/campaign.py)
        n = iter(range(10**6))
        out["snapshot_peft_ms"] = 1e3 * median_time(lambda: be.model.save_pretrained(f"{tmp}/{next(n)}"), 5 * repeats)
        out["snapshot_lean_ms"] = 1e3 * median_time(lambda: save_lora(be.model, f"{tmp}/{next(n)}"), 5 * repeats)
    return out


ARMS = {"none": ["--train", "none"], "vpo": ["--train", "vpo"],  # vpo: the default, overlapped learner (a process)
        "vpo_thread": ["--train", "vpo", "--set", "train.learner=thread"],  # the overlapped step on the thread
        "vpo_in_loop": ["--train", "vpo", "--set", "train.overlap=false"],  # the step in the loop's thread
        "vpo_transformers": ["--train", "vpo", "--set", "train.fast_forward=false"],  # forwards via transformers
        "vpo_lag2": ["--train", "vpo", "--set", "train.lag=2"],  # two steps in flight: one more version of staleness
        "vpo_fp32": ["--train", "vpo", "--set", "train.frozen_dtype=fp32"],  # the learner's products all in fp32
        "none_blas": ["--train", "none", "--hf-products", "blas"],  # the sampler's products in torch.mm
        "none_python": ["--train", "none", "--hf-step", "python"]}  # the sampler's decode step in Python


OLD = "@baseline"  # the suffix of an arm run by the tree of --baseline


def baseline_arm(arm: str) -> str:
    """The name of ``arm`` (a key of ARMS) run by the tree of --baseline."""
    return arm + OLD


def git_tree(rev: str, dest: Path) -> Path:
    """The files of revision ``rev`` of this repository (`git archive`), extracted into ``dest``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def decode_steps(run_dir: Path) -> int:
    """The run's decode steps: per group, its longest completion (the sampler steps until the last row of a
    call is done), so generation seconds per decode step compare arms whose policies write different lengths."""
    from evolve.archive import ARCHIVE_NAME, Archive

    arch = Archive(run_dir / ARCHIVE_NAME, readonly=True)
    try:
        return sum(max((len(c.token_ids or ()) for c in g.completions), default=0)
                   for g in arch.groups_by_id(arch.group_ids()))
    finally:
        arch.close()


def campaigns(iterations: int, repeats: int, group: int, arms: list[str] | None = None,
              baseline: Path | None = None) -> dict:
    """Wall seconds of `vevo run` untrained, trained (vpo at the default schedule and probe rate, the learner
    overlapped) and trained with the step in the loop (train.overlap=false, the code before the overlap), at
    G, on pbe-hard-heldout, interleaved, from each run's compute account (`vevo runs show --json`); ``arms``: a
    subset of ARMS and of their ``baseline_arm`` names with ``baseline`` (an older tree, which runs that arm's
    flags)."""
    vevo = str(Path(sys.executable).parent / "vevo")
    arms = arms or list(ARMS)
    walls: dict[str, list[float]] = {k: [] for k in arms}
    commands: dict[str, list[float]] = {k: [] for k in arms}  # the whole command: start-up and exit too
    step_ms: dict[str, list[float]] = {k: [] for k in arms}  # generation ms per decode step
    cpu: dict[str, list[float]] = {k: [] for k in arms}  # CPU seconds of the command and every process it waited for
    accounts = {}
    models: dict[str, list[dict[str, float]]] = {}  # overlapped trained arms: their runs replayed (overlap_model)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for arm in arms:
                old = arm.endswith(OLD)
                flags = ARMS[arm.removesuffix(OLD)]
                out = Path(tmp) / f"{arm}-{r}"
                cmd = [sys.executable, "-m", "evolve.cli"] if old else [vevo]
                t, used = time.perf_counter(), _children_cpu()
                run = subprocess.run([*cmd, "run", "--suite", "pbe-hard-heldout", "--proposer", "tiny", "--iterations",
                                      str(iterations), "--group", str(group), "--answers", "4", "--seed", "0",
                                      *flags, "--out", str(out), "--quiet"], capture_output=True, text=True,
                                     cwd=baseline if old else None,
                                     env=dict(os.environ, PYTHONPATH=str(baseline)) if old else None)
                commands[arm].append(time.perf_counter() - t)
                cpu[arm].append(_children_cpu() - used)
                if run.returncode:  # the run's own summary is not wanted here, its error is
                    sys.exit(f"learner_speed: {arm} run {r} failed: {(run.stderr or run.stdout).strip()[-2000:]}")
                show = json.loads(subprocess.run([vevo, "runs", "show", str(out), "--json"], check=True,
                                                 capture_output=True, text=True).stdout)
                comp = show.get("compute", {})
                walls[arm].append(float(comp.get("wall_seconds") or 0.0))
                steps = decode_steps(out)
                step_ms[arm].append(1e3 * float(comp.get("gen_seconds") or 0.0) / steps if steps else float("nan"))
                accounts[arm] = comp
                if (m := modelled(out)) is not None:
                    models.setdefault(arm, []).append(m)
    med = {k: statistics.median(v) for k, v in walls.items()}
    cmd = {k: statistics.median(v) for k, v in commands.items()}
    ms = {k: statistics.median(v) for k, v in step_ms.items()}
    cpus = {k: statistics.median(v) for k, v in cpu.items()}
    out = {"iterations": iterations, "group": group, "walls": walls, "commands": commands, "accounts": accounts,
           "decode_step_ms": step_ms, "cpu": cpu, **{f"wall_{k}": v for k, v in med.items()},
           **{f"cpu_{k}": v for k, v in cpus.items()},
           **{f"command_{k}": v for k, v in cmd.items()}, **{f"decode_step_ms_{k}": v for k, v in ms.items()},
           "modelled": {a: {k: statistics.median(m[k] for m in ms_) for k in ms_[0]} for a, ms_ in models.items()}}
    for k in med.keys() - {"none"}:
        out[f"ratio_{k}"] = med[k] / med["none"] if med.get("none") else None
        out[f"command_ratio_{k}"] = cmd[k] / cmd["none"] if cmd.get("none") else None
        out[f"decode_step_ratio_{k}"] = ms[k] / ms["none"] if ms.get("none") else None
        out[f"cpu_ratio_{k}"] = cpus[k] / cpus["none"] if cpus.get("none") else None
    out["ratio"] = out.get("ratio_vpo")
    for k in ARMS:  # ratio_vpo_to_baseline: this tree's trained wall over the baseline tree's
        if k in med and baseline_arm(k) in med:
            out[f"ratio_{k}_to_baseline"] = med[k] / med[baseline_arm(k)]
    return out


def _children_cpu() -> float:
    """User + system CPU seconds of the waited-for children so far (a `vevo run` and, once waited for, its
    learner process and sandboxes)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cpu_bound(c: dict, arm: str, cores: int) -> float | None:
    """A floor under ``arm``'s wall on ``cores`` cores, from CPU time: the untrained run keeps a core busy for its
    whole wall (its loop generates throughout), so the untrained wall plus the CPU seconds ``arm``'s command used
    beyond the untrained one's (start-up is in both and cancels) must fit on ``cores`` cores. Better overlap cannot
    go below it; only less work can."""
    if "none" not in c["walls"] or arm not in c["walls"]:
        return None
    return (c["wall_none"] + max(0.0, c[f"cpu_{arm}"] - c["cpu_none"])) / cores


def arms_line(c: dict, label: str, value: str, ratio: str, unit: str, spec: str = ".1f",
              names: dict | None = None) -> str:
    """Each campaign arm's median ``c[value + arm]`` and, where there is one, its ratio to the untrained arm."""
    return label + ", ".join(f"{(names or {}).get(a, a)} {c[value + a]:{spec}} {unit}" + (
        "" if c.get(ratio + a) is None else f" ({c[ratio + a]:.2f}x)") for a in c["walls"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: the campaign default)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=200, help="tokens per row in the sampling measurement")
    ap.add_argument("--campaigns", type=int, default=0, help="iterations of the campaign arms (0: skip)")
    ap.add_argument("--campaigns-only", action="store_true", help="skip the sampling and step measurements")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--arms", default=",".join(ARMS), help=f"campaign arms, comma-separated (of {', '.join(ARMS)}; "
                    "the ratios are to none, printed when it is among them)")
    ap.add_argument("--baseline", default=None, help="a git revision: its tree runs the arms of --baseline-arms "
                    "beside the others, interleaved, and each one's ratio to this tree's is printed")
    ap.add_argument("--baseline-arms", default="vpo", help="with --baseline: which arms its tree runs, "
                    "comma-separated (default: the trained one)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    arms = args.arms.split(",")
    old_arms = args.baseline_arms.split(",") if args.baseline else []
    unknown = sorted((set(arms) | set(old_arms)) - set(ARMS))
    if unknown:
        ap.error(f"--arms/--baseline-arms: unknown {', '.join(unknown)} (known: {', '.join(ARMS)})")
    be = make_backend("tiny", device=args.device, threads=args.threads)
    torch.set_num_threads(args.threads)
    print(f"load average before: {os.getloadavg()}; torch threads {torch.get_num_threads()}; device {args.device}")
    res: dict = {"threads": args.threads, "device": args.device}
    if not args.campaigns_only:
        prompt = campaign_prompt(be)
        ids = be.encode_prompt(prompt, 384)[0]
        res["prompt_tokens"] = len(ids)
        libs = flop_limit(args.device, args.repeats)
        gflops = max(libs.values())  # the machine's limit: the faster library's
        per_tok = fs.flops_per_token(be.model, len(ids) + args.tokens // 2)
        res["fp32_gflops"], res["fp32_gflops_by_library"] = gflops, libs
        res["flop_limit_tok_s"] = gflops * 1e9 / per_tok
        print(f"fp32 matmul {gflops:.1f} GFLOP/s (" + ", ".join(f"{k} {v:.1f}" for k, v in libs.items())
              + f"); {per_tok / 1e6:.1f} MFLOP per token -> FLOP limit {res['flop_limit_tok_s']:.0f} tokens/s")
        mem = {}
        for batch in (8, 16):  # the roofline: the same rows read at the measured bandwidth, at the mean context
            nbytes = fs.bytes_per_step(be.model, batch, len(ids), args.tokens // 2)
            gbs = memory_limit(args.device, nbytes, args.repeats)
            mem[batch] = batch * gbs * 1e9 / nbytes
            print(f"batch {batch:2d}: a decode step reads {nbytes / 1e6:.1f} MB, read at {gbs:.1f} GB/s -> memory "
                  f"limit {mem[batch]:.0f} tokens/s ({100 * mem[batch] / res['flop_limit_tok_s']:.0f}% of the FLOP "
                  "limit)")
        res["memory_limit_tok_s"] = mem
        rows = []
        for lora in (False, True):
            if lora:
                torch.manual_seed(0)
                be.model = wrap_lora(be.model, rank=8)
                for n, p in be.model.named_parameters():
                    if "lora_B" in n:
                        p.data.normal_(0.0, 0.02)
            for batch in (8, 16):
                r = sampling(be, ids, batch, args.tokens, args.repeats, lora)
                r["share_of_flop_limit"] = r["fast_tok_s"] / res["flop_limit_tok_s"]
                r["share_of_memory_limit"] = r["fast_tok_s"] / mem[batch]
                rows.append(r)
                print(f"sampling batch {batch:2d} lora {str(lora):5s}: general {r['general_tok_s']:6.0f} tok/s, "
                      f"fast {r['fast_tok_s']:6.0f} tok/s ({r['ratio']:.2f}x; {100 * r['share_of_flop_limit']:.0f}% "
                      f"of the FLOP limit, {100 * r['share_of_memory_limit']:.0f}% of the memory limit; products "
                      f"{r['products']}" + ("" if r["products"] == "blas" else
                                            f", {r['ratio_to_blas']:.2f}x its blas products' {r['fast_blas_tok_s']:.0f}")
                      + f"; step {r['step']}" + ("" if r["step"] == "python" else
                                                  f", {r['ratio_to_python_step']:.2f}x its Python step's "
                                                  f"{r['fast_python_step_tok_s']:.0f}") + ")")
        res["sampling"] = rows
        st = step_times(be, prompt, args.repeats)
        res["step"] = st
        print(f"training step on a group of 8 ({st['completion_tokens']} completion tokens): general "
              f"{st['general']:.3f} s, lean {st['lean']:.3f} s ({st['ratio']:.2f}x), lean with movement "
              f"{st['lean_with_movement']:.3f} s ({st['ratio_with_movement']:.2f}x), lean through transformers' "
              f"forward {st['lean_transformers']:.3f} s ({st['ratio_transformers']:.2f}x), lean with the frozen "
              f"base products in bf16 {st['lean_frozen_bf16']:.3f} s ({st['ratio_frozen_bf16']:.2f}x)")
        print(f"the step's adapter snapshot: peft's save_pretrained {st['snapshot_peft_ms']:.1f} ms, save_lora "
              f"{st['snapshot_lean_ms']:.1f} ms (the same files but the model card)")
    if args.campaigns:
        with tempfile.TemporaryDirectory() as tmp:
            base = git_tree(args.baseline, Path(tmp) / "baseline") if args.baseline else None
            c = campaigns(args.campaigns, args.repeats, args.group, arms + [baseline_arm(a) for a in old_arms], base)
        res["campaigns"] = c
        names = {"none": "untrained", "vpo": "trained", "vpo_thread": "trained with the step on the learner thread",
                 "vpo_in_loop": "trained with the step in the loop",
                 "vpo_transformers": "trained through transformers' forward",
                 "vpo_lag2": "trained with two steps in flight (train.lag 2)",
                 "vpo_fp32": "trained with every product in fp32 (train.frozen_dtype fp32)",
                 "none_blas": "untrained with the sampler's products in torch.mm (--hf-products blas)",
                 "none_python": "untrained with the sampler's decode step in Python (--hf-step python)"}
        names.update({baseline_arm(a): f"{names[a]} by {args.baseline}" for a in ARMS})
        print(arms_line(c, f"{c['iterations']}-iteration campaign at G = {c['group']} (medians of {args.repeats}): ",
                        "wall_", "ratio_", "s", names=names))
        print(arms_line(c, "  the whole commands (start-up and exit included): ", "command_", "command_ratio_", "s"))
        print(arms_line(c, "  generation per decode step (a group's longest completion): ", "decode_step_ms_",
                        "decode_step_ratio_", "ms", spec=".2f"))
        print(arms_line(c, "  CPU seconds of the whole commands (learner process and sandboxes included): ", "cpu_",
                        "cpu_ratio_", "s"))
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)  # usable
        for arm in c["walls"]:
            floor = cpu_bound(c, arm, cores) if not arm.startswith("none") else None
            if floor is not None:
                print(f"  {names.get(arm, arm)}: at {cores} cores its wall cannot fall below {floor:.1f} s "
                      f"({floor / c['wall_none']:.2f}x the untrained wall) without less work")
        for arm, m in c["modelled"].items():
            run = m["as run"]
            rest = "; ".join(f"{k} {v:.1f} s ({v / run:.2f}x)" for k, v in m.items() if k != "as run")
            print(f"  {names.get(arm, arm)}, its runs replayed (bench/perf/overlap_model.py, upper bounds): "
                  f"as they ran {run:.1f} s; {rest}")
        for arm, acc in c["accounts"].items():
            print(f"  {arm}: {describe(acc)}")
        for a in old_arms:
            if c.get(f"ratio_{a}_to_baseline") is not None:
                print(f"  {names[a]} against {args.baseline}'s: {c[f'ratio_{a}_to_baseline']:.2f}x the wall")
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
