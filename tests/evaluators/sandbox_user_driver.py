"""The orchestrator side of tests/evaluators/test_sandbox_user.py, run as an ordinary user.

    python sandbox_user_driver.py [--deny unshare,landlock] suite SPEC.json   # evaluate programs, print JSON
    python sandbox_user_driver.py [--deny unshare,landlock] exec ARG...       # exec `python -m evolve.cli ARG...`

``--deny`` first loads a seccomp filter into this process (inherited by everything it starts, kept across exec)
that refuses what a locked-down host refuses: ``unshare`` and namespace-creating ``clone`` with EPERM (Docker's
default profile), the Landlock calls with ENOSYS (a kernel without Landlock). The sandbox then meets the real
kernel refusals, not a flag.
"""
from __future__ import annotations

import json
import os
import sys


def deny(what: list[str]) -> None:
    from evaluators import seccomp

    extra = {}
    if "landlock" in what:
        extra.update({n: seccomp.ENOSYS for n in ("landlock_create_ruleset", "landlock_add_rule",
                                                   "landlock_restrict_self")})
    f = seccomp.Filter(denied=("unshare",) if "unshare" in what else (), extra=extra, self_only=False, sockets=None)
    err = f.load()
    if err:
        raise SystemExit(f"driver: {err}")


def suite(spec_path: str) -> None:
    from evaluators.pool import SandboxPool
    from evaluators.sandbox import SandboxUnavailable
    from problems.registry import discover

    spec = json.load(open(spec_path))
    probs: dict = {}

    def problem(path: str):
        if path not in probs:
            probs[path] = discover([os.path.dirname(path)]).resolve(path)
        return probs[path]
    out: dict = {"pid": os.getpid(), "results": {}}
    try:
        pool = SandboxPool(workers=1, disable=spec.get("disable", []), unsafe_no_sandbox=spec.get("unsafe", False))
    except SandboxUnavailable as e:
        out["refused"] = str(e)
        print(json.dumps(out))
        return
    with pool:
        out["plan"], out["isolation"] = pool.plan, pool.isolation
        for name, code, *where in spec["programs"]:  # [name, code] or [name, code, problem folder]
            ev = pool.evaluate(problem(where[0] if where else spec["problem"]), code,
                               time_limit=spec.get("time_limit"))
            out["results"][name] = {"status": ev.status, "solved": ev.solved,
                                    "stderr": str(ev.artifacts.get("stderr", ""))[-1500:],
                                    "error": str(ev.artifacts.get("error", ""))[-300:],
                                    "metrics": ev.artifacts.get("metrics"),
                                    "unverified": str(ev.artifacts.get("unverified", ""))}
        out["replaced"], out["notes"] = pool.replaced, pool.notes
    print(json.dumps(out))


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--deny"]:
        deny(args[1].split(","))
        args = args[2:]
    if args[0] == "suite":
        suite(args[1])
    elif args[0] == "exec":
        os.execv(sys.executable, [sys.executable, "-m", "evolve.cli"] + args[1:])
    else:
        raise SystemExit(f"driver: unknown command {args[0]!r}")


if __name__ == "__main__":
    main()
