"""What several test modules run through the sandbox: a small problem, hostile candidates with the statuses each
may get, and the sandbox processes left on the host."""
import os

from problems.model import CallCase, Problem

ADD = Problem(id="t/add", seed_code="", entry_point="add", time_limit=1.5, memory_limit_mb=512,
              tests=[CallCase((1, 2), 3), CallCase((20, 22), 42), CallCase((-1, 1), 0)])
GOOD = "def add(a, b):\n    return a + b\n"

HOSTILE = {
    # name: (code, allowed statuses)
    "infinite_loop": ("while True:\n    pass\n" + GOOD, {"timeout"}),
    "infinite_loop_in_call": ("def add(a, b):\n    while True:\n        pass\n", {"timeout"}),
    "sleep": ("import time\ntime.sleep(100)\n" + GOOD, {"timeout"}),
    "memory_bomb": ("x = bytearray(10 ** 11)\n" + GOOD, {"memory"}),
    "memory_growth": ("xs = []\nwhile True:\n    xs.append(' ' * 10 ** 8)\n", {"memory"}),
    "memory_in_call": ("def add(a, b):\n    return len([0] * 10 ** 11)\n", {"memory"}),
    "fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
                  {"timeout", "crash", "memory", "killed"}),
    "os_exit_top": ("import os\nos._exit(0)\n", {"crash"}),
    "os_exit_in_call": ("import os\ndef add(a, b):\n    os._exit(0)\n", {"crash"}),
    "system_exit_top": ("raise SystemExit(0)\n", {"crash"}),
    "sys_exit_in_call": ("import sys\ndef add(a, b):\n    sys.exit(0)\n", {"wrong"}),
    "segfault_ctypes": ("import ctypes\nctypes.string_at(0)\n", {"crash"}),
    "recursion_bomb": ("def f(n):\n    return f(n + 1)\nf(0)\n", {"crash"}),
    "c_stack_overflow": ("import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n):\n    return f(n + 1)\nf(0)\n",
                         {"crash", "memory", "timeout"}),
    "stdout_flood": ("while True:\n    print('x' * 10000)\n", {"output_limit"}),
    "stderr_flood": ("import sys\nwhile True:\n    sys.stderr.write('y' * 10000)\n", {"output_limit"}),
    "kill_parent": ("import os\nos.kill(os.getppid(), 9)\n" + GOOD, {"crash"}),
    "kill_own_group": ("import os, signal\nos.killpg(0, signal.SIGKILL)\n", {"killed"}),
    # reaches only its own uid inside its PID namespace: nothing (ESRCH with the PID namespace)
    "kill_everything": ("import os\nos.kill(-1, 9)\n", {"wrong", "crash"}),
    "setuid_root": ("import os\nos.setuid(0)\n" + GOOD, {"crash"}),
    "signal_tricks": ("import signal\nfor s in (signal.SIGTERM, signal.SIGALRM, signal.SIGXCPU, signal.SIGINT):\n"
                      "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n", {"timeout"}),
    "close_result_pipe": ("import os\nos.close(3)\n" + GOOD, {"crash"}),
    "forge_records": ("import os\nos.write(3, b'{\"t\":\"case\",\"i\":0,\"pass\":true}\\n{\"t\":\"case\",\"i\":1,\"v\":7}\\n"
                      "{\"t\":\"done\",\"n\":3}\\n')\nos._exit(0)\n", {"crash", "wrong"}),
    "patch_builtins": ("import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.type = lambda *a: int\n"
                       "def add(a, b):\n    return a - b\n", {"wrong", "crash"}),
    "patch_harness": ("import evaluators.harness as h, problems.values as v, json\nh._encode = lambda x: 3\n"
                      "v.encode = lambda x, *a: 3\njson.dumps = lambda *a, **k: '{\"t\":\"done\",\"n\":3}'\n"
                      "def add(a, b):\n    return None\n", {"wrong", "crash"}),
    "lying_eq": ("class Liar(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
                 "def add(a, b):\n    return Liar(0)\n", {"wrong"}),
    "unserialisable": ("def add(a, b):\n    return lambda: a + b\n", {"wrong"}),
    "huge_result": ("def add(a, b):\n    return list(range(3 * 10 ** 7))\n", {"output_limit", "memory", "timeout"}),
    "fd_exhaustion": ("fs = [open('/dev/null') for _ in range(10 ** 6)]\n" + GOOD, {"crash"}),
    "read_stdin": ("x = input()\n" + GOOD, {"crash"}),
    "huge_file": ("with open('big', 'wb') as f:\n    f.write(b'0' * 10 ** 9)\n" + GOOD, {"crash", "memory"}),
    "regenerate_expected": ("from problems.suites import SUITES\n" + GOOD, {"crash"}),
    "syntax_error": ("def add(a, b)\n    return a + b\n", {"syntax_error"}),
    "giant_expression": ("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n" + GOOD, {"syntax_error"}),
    # compile bombs under COMPILE_IN_WORKER_MAX: the worker compiles them before forking and must survive
    "compile_bomb_chain": ("x = " + "1+" * 30000 + "1\n" + GOOD, {"syntax_error"}),
    "compile_bomb_lambda": ("x = " + "lambda: " * 5000 + "1\n" + GOOD, {"syntax_error"}),
    "compile_bomb_attr": ("x = a" + ".b" * 30000 + "\n" + GOOD, {"syntax_error"}),
}

SANDBOX_UIDS = range(200000, 300000)


def sandbox_processes(ignore: frozenset[int] | set[int] = frozenset()) -> list[tuple[int, int]]:
    """(pid, uid) of every process on the host running as a sandbox uid, but the uids in ``ignore`` (other pools
    that were already running on a shared machine: each pool has uids of its own)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                uid = os.stat(f"/proc/{d}").st_uid
            except OSError:
                continue
            if uid in SANDBOX_UIDS and uid not in ignore:
                out.append((int(d), uid))
    return out


def snooper(paths: list[str], solve: str = "solve(xs)", answer: str = "sum(x * x for x in xs)") -> str:
    """A candidate that reads each path, lists its directory and connects to it as a unix socket (the C socket, past
    any Python-level block), by absolute path, and says what it got on stderr (``FOUND [...]``). It answers
    ``answer`` only when it got nothing: a contained snoop passes, a leak is a wrong answer (a crash is neither)."""
    return ("import os, _socket\nfound = []\n"
            f"for p in {list(paths)!r}:\n"
            "    try:\n        found.append((p, open(p).read()[:80]))\n    except OSError:\n        pass\n"
            "    try:\n        found.append((os.path.dirname(p), sorted(os.listdir(os.path.dirname(p)))))\n"
            "    except OSError:\n        pass\n"
            "    try:  # the C socket: no Python-level block in the way\n"
            "        _socket.socket(_socket.AF_UNIX).connect(p)\n        found.append((p, 'connected'))\n"
            "    except OSError:\n        pass\n"
            "os.write(2, ('FOUND %r' % found).encode())\n"
            f"def {solve}:\n    return {answer} if not found else -1\n")


def meddler(targets: str, cpu: bool = True) -> str:
    """A candidate that, for each pid of the expression ``targets``, lowers RLIMIT_NOFILE to 4 (and with ``cpu``
    RLIMIT_CPU to 1 s), renices it to 19, idle-schedules it and gives it idle I/O priority; then renices every
    process of its uid (PRIO_USER). Stderr says ``HIT [...]``, the calls that worked; it answers right only when
    none did (a contained meddler passes)."""
    return ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "class RL(ctypes.Structure):\n    _fields_ = [('cur', ctypes.c_uint64), ('max', ctypes.c_uint64)]\n"
            "class SP(ctypes.Structure):\n    _fields_ = [('prio', ctypes.c_int)]\n"
            "ioprio_set = 251 if os.uname().machine == 'x86_64' else 30\nhit = []\n"
            f"for pid in {targets}:\n"
            "    if pid <= 0 or pid == os.getpid():\n        continue\n"
            "    calls = {'nofile': lambda: libc.prlimit(pid, 7, ctypes.byref(RL(4, 4)), None),\n"
            + ("             'cpu': lambda: libc.prlimit(pid, 0, ctypes.byref(RL(1, 1)), None),\n" if cpu else "")
            + "             'nice': lambda: libc.setpriority(0, pid, 19),\n"
            "             'idle': lambda: libc.sched_setscheduler(pid, 5, ctypes.byref(SP(0))),\n"
            "             'ioprio': lambda: libc.syscall(ioprio_set, 1, pid, 3 << 13)}\n"
            "    for name, call in calls.items():\n        if call() == 0:\n            hit.append((name, pid))\n"
            "if libc.setpriority(2, 0, 19) == 0:\n    hit.append(('prio_user', 0))\n"
            "os.write(2, ('HIT %r' % hit[:20]).encode())\n"
            "def solve(xs):\n    return sum(x * x for x in xs) if not hit else -1\n")


# Programs whose output, when the evaluator unpickles it (tests/data/oe_probes/pickled_output), runs code in the
# evaluator's process and forges a score of 1.5 against a target of 1.0 (the honest seed scores 0.5): one writes a
# forged metrics record on the channel and exits, one hands back a forged array, one lowers the
# evaluator's target. Each must come back unverified and never solved.
_FORGED = ('{"t":"oe","metrics":{"combined_score":1.5,"sum_radii":3.0},"artifacts":{},"outcome":"ok",'
           '"in_process":false}\\n{"t":"done","n":0}\\n')
PICKLE_FORGERIES = {
    "channel": ("class Forge:\n    def __reduce__(self):\n        return (exec, (\"import os\\nos.write(3, b'"
                + _FORGED.replace("\\n", "\\\\n").replace('"', '\\"') + "')\\nos._exit(0)\",))\n"
                "def run():\n    return Forge()\n"),
    "array": ("class Forge:\n    def __reduce__(self):\n"
              "        return (eval, (\"__import__('numpy').full(10, 0.3)\",))\n"
              "def run():\n    return Forge()\n"),
    "patch": ("class Forge:\n    def __reduce__(self):\n        return (eval, (\"(setattr(__import__('sys').modules"
              "['evaluation_module'], 'TARGET', 0.6), __import__('numpy').full(10, 0.1))[1]\",))\n"
              "def run():\n    return Forge()\n"),
}
