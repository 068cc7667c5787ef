"""Hostile candidates: each gets the right status, none passes falsely, the pool keeps serving, and no
process outlives its evaluation. Everything here is real: real forks, namespaces, uids and rlimits."""
import os
import socket
import threading
import time


from evaluators.pool import SandboxPool
from problems.model import AssertCase, CallCase, Problem, StdioCase
from tests.conftest import processes_of_uid

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
    "kill_everything": ("import os\nos.kill(-1, 9)\n", {"wrong"}),  # reaches only its own uid: nothing
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


def _left_over(pool: SandboxPool) -> list[int]:
    return [pid for uid in pool.uids if uid is not None for pid in processes_of_uid(uid)]


def test_hostile_suite_statuses_and_no_false_pass():
    assert len(HOSTILE) >= 30
    with SandboxPool(workers=2) as pool:
        names = list(HOSTILE)
        evs = pool.evaluate_many([(ADD, HOSTILE[n][0]) for n in names])
        problems = []
        for name, ev in zip(names, evs):
            if ev.status not in HOSTILE[name][1]:
                problems.append(f"{name}: {ev.status} {ev.artifacts}")
            assert not ev.solved, name
        assert not problems, "\n".join(problems)
        assert _left_over(pool) == []
        assert pool.replaced == 0  # no candidate takes its worker down
        good = pool.evaluate(ADD, GOOD)
        assert good.status == "ok" and good.solved and good.vector == [1.0, 1.0, 1.0]


def test_partial_vector_survives_a_crash_midway():
    code = "import os\ndef add(a, b):\n    if a == 20:\n        os._exit(3)\n    return a + b\n"
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(ADD, code)
    assert ev.status == "crash" and ev.vector == [1.0, 0.0, 0.0] and not ev.solved


def test_leftover_children_and_daemons_are_killed():
    code = ("import os, time, subprocess\n"
            "if os.fork() == 0:\n    time.sleep(300)\n    os._exit(0)\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(300)\n    os._exit(0)\n"
            "subprocess.Popen(['sleep', '300'], start_new_session=True)\n" + GOOD)
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(ADD, code)
        assert ev.status == "ok" and ev.solved  # a correct program that leaves children still counts
        time.sleep(0.2)
        assert _left_over(pool) == []


def test_no_write_outside_private_dir(tmp_path):
    target = tmp_path / "escaped"
    tmp_path.chmod(0o777)
    code = (f"for p in [{str(target)!r}, '/tmp/vevo-escape', '/var/tmp/vevo-escape', '/dev/shm/vevo-escape', "
            f"'/root/vevo-escape']:\n    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n"
            "open('inside.txt', 'w').write('private dir is writable')\n" + GOOD)
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(ADD, code)
        assert "read-only" in pool.isolation["filesystem"] or pool.isolation["uid"]
    assert ev.status == "ok"
    for p in (target, "/tmp/vevo-escape", "/var/tmp/vevo-escape", "/dev/shm/vevo-escape", "/root/vevo-escape"):
        assert not os.path.exists(p), p


def test_parent_env_and_files_unreadable(tmp_path, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-42")
    secret.chmod(0o600)
    monkeypatch.setenv("VEVO_TEST_SECRET", "ENVSECRET-17")
    code = ("import os\ngot = []\n"
            "got.append(os.environ.get('VEVO_TEST_SECRET', ''))\n"
            f"for p in [{str(secret)!r}, '/proc/%d/environ' % os.getppid(), '/proc/1/environ']:\n"
            "    try:\n        got.append(open(p, 'rb').read().decode('latin1'))\n    except OSError:\n        pass\n"
            "def add(a, b):\n    return '|'.join(got)\n")
    with SandboxPool(workers=1) as pool:
        p = Problem(id="t/leak", seed_code="", entry_point="add", time_limit=2, tests=[CallCase((1, 2), "")])
        ev = pool.evaluate(p, code)
    assert ev.status == "ok", ev.artifacts  # it ran, and it saw nothing
    assert ev.vector == [1.0]


def test_network_is_unreachable():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    accepted = []

    def accept():
        end = time.time() + 3
        while time.time() < end:
            try:
                accepted.append(srv.accept())
            except OSError:
                pass

    t = threading.Thread(target=accept)
    t.start()
    code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1).send(b'hi')\n"
            "    ok = 'connected'\nexcept OSError as e:\n    ok = 'blocked'\n"
            "def add(a, b):\n    return ok\n")
    with SandboxPool(workers=1) as pool:
        p = Problem(id="t/net", seed_code="", entry_point="add", time_limit=3, tests=[CallCase((1, 2), "blocked")])
        ev = pool.evaluate(p, code)
    t.join()
    srv.close()
    assert ev.vector == [1.0] and accepted == []


def test_pool_replaces_a_dead_worker():
    with SandboxPool(workers=1) as pool:
        pid_before = pool._all[0].proc.pid
        pool._all[0].proc.kill()
        pool._all[0].proc.wait()
        ev = pool.evaluate(ADD, GOOD)  # never reached the dead worker: the replacement evaluates it
        assert ev.solved
        assert pool.replaced == 1 and pool._all[0].proc.pid != pid_before
        assert pool.evaluate(ADD, GOOD).solved


SLOW_GOOD = "import time\ntime.sleep(0.3)\n" + GOOD


def test_worker_death_mid_batch_kills_only_the_running_candidate():
    """Jobs queued behind the running one never started: they go to the replacement, in order."""
    with SandboxPool(workers=1) as pool:
        victim = pool._all[0].proc
        threading.Timer(0.15, victim.kill).start()
        evs = pool.evaluate_many([(ADD, SLOW_GOOD)] * 4)
        assert [e.status for e in evs] == ["killed", "ok", "ok", "ok"]
        assert pool.replaced == 1 and victim.poll() is not None


def test_concurrent_callers_share_the_pool():
    wrong = "def add(a, b):\n    return a - b\n"
    results = {}

    def call(name, code):
        results[name] = pool.evaluate_many([(ADD, code)] * 6)

    with SandboxPool(workers=2) as pool:
        threads = [threading.Thread(target=call, args=(n, c)) for n, c in (("good", GOOD), ("wrong", wrong))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [e.status for e in results["good"]] == ["ok"] * 6
        assert [e.status for e in results["wrong"]] == ["wrong"] * 6
        assert pool.replaced == 0 and pool._idle.qsize() == 2


def test_wedged_worker_is_replaced(monkeypatch):
    import signal

    import evaluators.pool as pool_mod

    monkeypatch.setattr(pool_mod, "GRACE", 0.5)
    with SandboxPool(workers=2) as pool:
        wedged = pool._all[0].proc
        os.kill(wedged.pid, signal.SIGSTOP)
        t = time.monotonic()
        evs = pool.evaluate_many([(ADD, GOOD)] * 6)
        assert time.monotonic() - t < ADD.time_limit + 0.5 + 3
        statuses = [e.status for e in evs]
        assert statuses.count("killed") == 1 and statuses.count("ok") == 5, statuses
        assert pool.replaced == 1 and wedged.poll() is not None
        assert all(e.solved for e in pool.evaluate_many([(ADD, GOOD)] * 4))


def test_candidates_compiled_in_the_worker_or_in_their_own_process_score_alike():
    """Sources up to COMPILE_IN_WORKER_MAX are compiled before the fork; larger ones in the candidate process."""
    from evaluators.harness import COMPILE_IN_WORKER_MAX

    pad = "#" * (COMPILE_IN_WORKER_MAX + 10) + "\n"
    bad = "def add(a, b)\n    return a + b\n"
    with SandboxPool(workers=1) as pool:
        evs = pool.evaluate_many([(ADD, GOOD), (ADD, pad + GOOD), (ADD, bad), (ADD, pad + bad)])
    assert [e.status for e in evs] == ["ok", "ok", "syntax_error", "syntax_error"]
    assert evs[2].artifacts.get("error", "")[:40] == evs[3].artifacts.get("error", "")[:40] != ""


def test_records_encode_as_json_dumps():
    import json

    from evaluators.harness import _encode_record

    for rec in ({"t": "start"}, {"t": "case", "i": 3, "vs": [[1, 2.5, "é\u2028\x00"], {"a": None, "b": [True]}]},
                {"t": "points", "vs": [float("nan"), float("inf"), -0.0, 1e300, 10**40]}):
        assert _encode_record(rec) == json.dumps(rec, separators=(",", ":"))


def test_stdio_problem_and_stdout_per_case():
    prob = Problem(id="t/sum", seed_code="", time_limit=3,
                   tests=[StdioCase("1 2\n", "3\n"), StdioCase("5 6\n", "11\n"), StdioCase("0 0\n", "0\n")])
    with SandboxPool(workers=1) as pool:
        assert pool.evaluate(prob, "a, b = map(int, open(0).read().split())\nprint(a + b)\n").solved
        ev = pool.evaluate(prob, "a, b = map(int, input().split())\nprint(a + b if a else 7)\n")
        assert ev.status == "wrong" and ev.vector == [1.0, 1.0, 0.0]
        ev = pool.evaluate(prob, "import sys\nsys.exit(0)\n")
        assert ev.status == "wrong" and ev.vector == [0.0, 0.0, 0.0]


def test_assert_cases_and_values():
    prob = Problem(id="t/asserts", seed_code="", entry_point="f", time_limit=3, setup_code="import math",
                   tests=[AssertCase("assert f(2) == (2, None)"), AssertCase("assert math.isclose(f(3)[0], 3.0)"),
                          CallCase((4,), (4, None)), CallCase((5,), [5, None])])
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(prob, "def f(x):\n    return (x, None)\n")
    assert ev.vector == [1.0, 1.0, 1.0, 0.0]  # a tuple is not a list, as in Python


def test_isolation_is_reported():
    with SandboxPool(workers=1) as pool:
        iso = pool.isolation
    assert set(iso) >= {"network", "filesystem", "uid"}
    if os.geteuid() == 0:
        assert iso["network"] == "netns" and iso["filesystem"] == "read-only mount namespace"


def test_candidates_can_import_stdlib_and_installed_packages():
    code = ("import xml.dom.minidom, encodings.idna, numpy as np\n"
            "def add(a, b):\n    return int(np.add(a, b))\n")
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(ADD, code)
    assert ev.status == "ok" and ev.solved, ev.artifacts


def test_split_asserts_cannot_be_forged():
    """Asserts with literal expectations are decided in the parent: forged records and patched
    comparisons do not pass them; the honest program still does."""
    from evaluators.asserts import split_assert, setup_names

    prob = Problem(id="t/forge", seed_code="", entry_point="f", time_limit=3, setup_code="import math",
                   tests=[AssertCase("assert f(2) == 4"), AssertCase("assert math.isclose(f(1.5), 2.25)"),
                          AssertCase("assert set(f(3) for _ in range(2)) == {9}")])
    assert split_assert("assert f(2) == 4", frozenset({"f"}), setup_names("import math")) is not None
    with SandboxPool(workers=1) as pool:
        honest = pool.evaluate(prob, "def f(x):\n    return x * x\n")
        assert honest.solved and honest.vector == [1.0, 1.0, 1.0]
        assert "unverified_tests" not in honest.artifacts
        forged = ("import os\nfor i in range(2):\n    os.write(3, ('{\"t\":\"case\",\"i\":%d,\"pass\":true}\\n' % i).encode())\n"
                  "os.write(3, b'{\"t\":\"done\",\"n\":2}\\n')\n"
                  "class Eq:\n    def __eq__(self, o):\n        return True\n"
                  "import builtins\nbuiltins.AssertionError = type('X', (Exception,), {})\n"
                  "def f(x):\n    return 0\n")
        ev = pool.evaluate(prob, forged)
        assert ev.vector[:2] == [0.0, 0.0] and not ev.solved
