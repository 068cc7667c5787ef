"""Hostile candidates: each gets the right status, none passes falsely, the pool keeps serving, and no
process outlives its evaluation. Everything here is real: real forks, namespaces, uids and rlimits."""
import dataclasses
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from evaluators.pool import SandboxPool
from evaluators.judge import build_job, score
from problems.model import AssertCase, CallCase, Problem, StdioCase
from tests.conftest import processes_of_uid
from tests.sandbox_helpers import ADD, GOOD, HOSTILE, PICKLE_FORGERIES, SANDBOX_UIDS, sandbox_processes

ROOT = Path(__file__).resolve().parents[2]


def _left_over(pool: SandboxPool) -> list[int]:
    return [pid for uid in pool.uids if uid is not None for pid in processes_of_uid(uid)]


def test_hostile_suite_statuses_and_no_false_pass():
    assert len(HOSTILE) >= 30
    # a case that must end in "memory" gets a generous time limit: filling 512 MB takes ~0.3 s on a quiet machine
    # but over 1.5 s on a loaded one, and it is the memory limit, not the clock, that this case checks
    roomy = dataclasses.replace(ADD, time_limit=10.0)
    with SandboxPool(workers=2) as pool:
        names = list(HOSTILE)
        evs = pool.evaluate_many([(roomy if HOSTILE[n][1] == {"memory"} else ADD, HOSTILE[n][0]) for n in names])
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
            "import sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
            "start_new_session=True)\n" + GOOD)
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
        os.kill(pool._all[0].worker_pid, 9)
        pool._all[0].proc.wait()  # the launcher ends with its worker
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


def test_as_many_jobs_as_workers_each_get_a_worker():
    """k candidates on k idle workers run one per worker (a campaign iteration's few candidates spread over all
    the sandboxes), seen from inside: each reports the uid of the worker that ran it."""
    uid = Problem(id="t/uid", seed_code="", entry_point="f", time_limit=2.0, memory_limit_mb=256,
                  tests=[CallCase((), 0)])
    with SandboxPool(workers=4) as pool:
        raws = pool._dispatch([build_job(uid, "import os\ndef f():\n    return os.getuid()\n", None)] * 4)
        ran_as = {r["records"][1]["v"] for r in raws}
        assert ran_as == set(pool.uids) and len(ran_as) == 4


def test_wedged_worker_is_replaced(monkeypatch):
    import signal

    import evaluators.pool as pool_mod

    monkeypatch.setattr(pool_mod, "GRACE", 0.5)
    with SandboxPool(workers=2) as pool:
        wedged = pool._all[0].proc
        os.kill(pool._all[0].worker_pid, signal.SIGSTOP)  # the worker itself, not its launcher
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
        assert iso["network"] == "netns" and iso["filesystem"].startswith("allow-list root")


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


# ---------------------------------------------------------------------------------------------------------------
# The allow-list jail: one test per attack class of the second hostile round (secrets, expected outputs, the
# orchestrator's decoder, what outlives an evaluation, limits, clean-up). Each checks the status, that nothing
# passes falsely, and what is left behind: sandbox processes, IPC objects, the box, the worker's fds.

SECRET = "sk-vevo-test-" + "7f3a9c" * 4


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _residue(pool: SandboxPool) -> dict:
    """What candidates left: processes, and per worker its fd count."""
    return {"procs": _left_over(pool), "fds": [_fds(h.worker_pid) for h in pool._all]}


def _says(ev, needle: str) -> bool:
    return needle in repr(ev.artifacts) or needle in repr(ev.vector)


root_only = __import__("pytest").mark.skipif(os.geteuid() != 0, reason="the jail needs root")


def _host_ipc() -> dict:
    out = {}
    for k in ("shm", "msg", "sem"):
        try:
            out[k] = open(f"/proc/sysvipc/{k}").read()
        except OSError:
            out[k] = None
    return out


@__import__("pytest").fixture(autouse=True)
def _nothing_left_behind():
    """After every test here: no process of a sandbox uid (its pools are closed by then) and the host's SysV
    IPC tables as they were."""
    ipc = _host_ipc()
    yield
    deadline = time.monotonic() + 10
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []
    assert _host_ipc() == ipc


@root_only
def test_jail_layers_are_active():
    with SandboxPool(workers=1) as pool:
        iso = pool.isolation
    assert iso["filesystem"].startswith("allow-list root") and iso["pid"] and iso["ipc"] and iso["network"] == "netns"
    assert iso["uid"] in SANDBOX_UIDS
    assert "cgroup" in iso  # a dict: {"version", "dirs"} or {"none": why}


@root_only
def test_secrets_of_the_orchestrator_are_unreachable(monkeypatch):
    """Class 1: the orchestrator's environment never enters the worker; the candidate scans every environ it can
    open (its own after PR_SET_DUMPABLE, every /proc/*/environ) and its own stack and heap."""
    monkeypatch.setenv("VEVO_TEST_API_KEY", SECRET)
    code = ("import os, ctypes, sys, re\nctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\nfound = []\n"
            "for d in os.listdir('/proc'):\n    for f in ('environ', 'cmdline'):\n        try:\n"
            "            found.append(open(f'/proc/{d}/{f}', 'rb').read())\n        except OSError:\n            pass\n"
            "for line in open('/proc/self/maps'):\n    if '[stack]' in line or '[heap]' in line:\n"
            "        a, b = (int(x, 16) for x in line.split()[0].split('-'))\n"
            "        try:\n            with open('/proc/self/mem', 'rb') as m:\n                m.seek(a)\n"
            "                found.append(m.read(b - a))\n        except OSError:\n            pass\n"
            "blob = b''.join(found)\nhit = re.search(rb'sk-vevo-test-[0-9a-f]+', blob)\n"
            "os.write(2, b'LEAK ' + hit.group() if hit else b'no leak')\n"
            "def add(a, b):\n    return a + b if hit is None else a - b\n")
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(ADD, code)
        assert ev.status == "ok" and ev.solved, ev.artifacts
        assert not _says(ev, SECRET) and "no leak" in ev.artifacts.get("stderr", "")
        assert _left_over(pool) == []


@root_only
def test_problem_folders_datasets_and_the_checkout_are_not_in_the_candidates_root(tmp_path):
    """Class 2: an allow-list, not hidden paths. The candidate walks the whole root it can see and looks for the
    problem's files, the shared datasets, this checkout's tests and run dirs, and other processes' cmdlines."""
    from tests.conftest import SHARED

    prob_dir = tmp_path / "prob"
    prob_dir.mkdir()
    (prob_dir / "problem.toml").write_text('expected = "MARKER-EXPECTED-42"\n')
    tmp_path.chmod(0o755)
    here = str(ROOT)
    from evaluators.jail import python_paths

    # /tmp holds the box, and the way down to the interpreter when it lives under /tmp (a clone's .venv there)
    tmp_ok = {p.split("/")[2] for p in python_paths() if p.startswith("/tmp/")}
    probes = [str(prob_dir / "problem.toml"), str(SHARED / "data"), os.path.join(here, "tests"),
              os.path.join(here, "problems", "suites"), os.path.join(here, "runs"), "/run", "/home", "/var",
              "/etc/passwd", "/root/.bashrc", os.path.join(here, ".git")]
    code = ("import os, sys\nseen = []\n"
            f"for p in {probes!r}:\n    if os.path.exists(p):\n        seen.append(p)\n"
            "for d in os.listdir('/proc'):\n    if d.isdigit() and int(d) != os.getpid():\n        seen.append('proc ' + d)\n"
            f"top = sorted(os.listdir('/'))\nok_tmp = {sorted(tmp_ok)!r}\n"
            "if [n for n in os.listdir('/tmp') if not n.startswith('vevo-box-') and n not in ok_tmp]:\n"
            "    seen.append('/tmp holds more than the box')\n"
            "for r, ds, fs in os.walk('/', topdown=True):\n"
            "    ds[:] = [x for x in ds if os.path.join(r, x) not in ('/proc', '/sys', '/dev')]\n"
            "    for f in fs:\n        if f in ('problem.toml', 'mbpp.jsonl', 'tests.jsonl') or 'MARKER' in f:\n"
            "            seen.append(os.path.join(r, f))\n"
            "os.write(2, repr((seen, top)).encode())\n"
            "def add(a, b):\n    return a + b if not seen else a - b\n")
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(ADD, code, time_limit=30)
    assert ev.status == "ok" and ev.solved, ev.artifacts.get("stderr")
    top = eval(ev.artifacts["stderr"])[1]  # noqa: S307 - our own repr of two lists of str
    # the system dirs, plus the first component of each interpreter path the jail binds (the checkout may sit
    # anywhere: /work/main here, /check/work/main in CI)
    bound = {p.split("/")[1] for p in python_paths()}
    assert set(top) <= {"dev", "proc", "etc", "lib", "lib64", "lib32", "usr", "tmp"} | bound, (top, bound)


@root_only
def test_eval_program_cannot_read_its_problem_folder(tmp_path):
    """Class 2 through the CLI: ``vevo eval-program`` used to hide nothing, so the program read the expected
    output from problem.toml via /proc/*/cmdline. Now it finds neither the cmdline nor the folder."""
    import subprocess
    import sys

    vevo = os.path.join(os.path.dirname(sys.executable), "vevo")
    folder = tmp_path / "echo"
    subprocess.run([vevo, "problems", "new", "echo", "--kind", "io", "--dir", str(tmp_path)], check=True,
                   capture_output=True)
    toml = (folder / "problem.toml").read_text()
    cheat = ("import os\nfound = []\nfor d in os.listdir('/proc'):\n    try:\n"
             "        args = open(f'/proc/{d}/cmdline', 'rb').read().split(b'\\0')\n    except OSError:\n        continue\n"
             "    for a in args:\n        p = os.path.join(a.decode(errors='replace'), 'problem.toml')\n"
             "        if os.path.exists(p):\n            found.append(p)\n"
             "os.write(2, ('FOUND %r' % found).encode())\n"
             "def solve(xs):\n    return sum(x * x for x in xs) if found else -1\n")
    prog = tmp_path / "cheat.py"
    prog.write_text(cheat)
    tmp_path.chmod(0o755)
    r = subprocess.run([vevo, "eval-program", str(folder), str(prog), "--json"], capture_output=True, text=True)
    assert "FOUND []" in r.stdout and '"solved": false' in r.stdout, (r.stdout, r.stderr, toml)


@root_only
def test_openevolve_metrics_channel_cannot_be_forged(tmp_path):
    """Class 2, OpenEvolve: an evaluator that runs the program in a subprocess; the program tries the inherited
    fd 3, the evaluator's /proc/PID/fd/3 and ptrace-free tricks to write a forged metrics record. An evaluator
    that imports the program in its own process is reported unverified and never solved."""
    from problems.openevolve import load_openevolve

    sub_eval = ("import subprocess, sys\n"
                "def evaluate(path):\n"
                "    r = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=10)\n"
                "    try:\n        v = float(r.stdout.strip().splitlines()[-1])\n    except Exception:\n        v = 0.0\n"
                "    return {'combined_score': min(v, 0.5)}\n")
    forge = ("import os, glob\nrec = b'{\"t\":\"oe\",\"metrics\":{\"combined_score\":99.0},\"artifacts\":{}}\\n"
             "{\"t\":\"done\",\"n\":0}\\n'\nfor fd in (3, 4, 5):\n    try:\n        os.write(fd, rec)\n    except OSError:\n"
             "        pass\nfor p in glob.glob('/proc/*/fd/*'):\n    try:\n        f = os.open(p, os.O_WRONLY)\n"
             "        os.write(f, rec)\n    except OSError:\n        pass\nos.system('echo forged >&3')\nprint(0.25)\n")
    for name, ev_src in (("sub", sub_eval),):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "initial_program.py").write_text("print(0.1)\n")
        (folder / "evaluator.py").write_text(ev_src)
        prob = load_openevolve(folder)
        tmp_path.chmod(0o755)
        with SandboxPool(workers=1) as pool:
            ev = pool.evaluate(prob, forge)
            assert ev.status == "ok" and ev.scalar == 0.25 and not ev.solved, ev.artifacts
            assert "unverified" not in ev.artifacts
            assert _left_over(pool) == []
    folder = tmp_path / "inproc"
    folder.mkdir()
    (folder / "initial_program.py").write_text("def value():\n    return 0.1\n")
    (folder / "evaluator.py").write_text(
        "import importlib.util\ndef evaluate(path):\n"
        "    spec = importlib.util.spec_from_file_location('p', path)\n    m = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(m)\n    return {'combined_score': m.value()}\n")
    prob = load_openevolve(folder)
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(prob, "def value():\n    return 5.0\n")
    assert ev.status == "ok" and ev.scalar == 5.0 and not ev.solved and "unverified" in ev.artifacts


def test_forged_metrics_from_an_unpickled_output_are_unverified_never_solved():
    """Class 2, OpenEvolve, issue 34: an evaluator that unpickles what the program wrote (as circle_packing does).
    An output that runs code when unpickled forges 1.5 against a target of 1.0: flagged unverified, not solved;
    the honest seed (a numpy array) scores as before and is not flagged."""
    from problems.registry import load_folder
    from tests.openevolve_helpers import PROBES

    prob = load_folder(PROBES / "pickled_output")
    seed = (PROBES / "pickled_output" / "initial_program.py").read_text()
    names = sorted(PICKLE_FORGERIES)
    with SandboxPool(workers=1) as pool:
        evs = pool.evaluate_many([(prob, seed)] + [(prob, PICKLE_FORGERIES[n]) for n in names])
    honest = evs[0]
    assert honest.status == "ok" and "unverified" not in honest.artifacts, honest.artifacts
    assert honest.scalar == pytest.approx(0.5) and not honest.solved
    for name, ev in zip(names, evs[1:]):
        assert not ev.solved, (name, ev.artifacts)
        assert "unverified" in ev.artifacts and "builtins." in ev.artifacts["unverified"], (name, ev.artifacts)


def test_records_nested_past_the_limit_and_floods_do_not_reach_the_orchestrator():
    """Class 3 and 5: a record nested just under (and over) any recursion limit, and a flood of tiny records,
    are the candidate's problem: the pool keeps its worker, the orchestrator decodes nothing deep, and the
    worker's memory stays bounded."""
    deep = ("import os\nfor depth in (150, 199, 990, 5000):\n"
            "    os.write(3, b'{\"t\":\"case\",\"i\":0,\"v\":' + b'[' * depth + b']' * depth + b'}\\n')\n" + GOOD)
    flood = ("import os\nchunk = b'{}\\n' * (1 << 16)\nfor _ in range(350):\n    os.write(3, chunk)\n" + GOOD)
    with SandboxPool(workers=1) as pool:
        before = _residue(pool)
        evs = pool.evaluate_many([(ADD, deep), (ADD, flood), (ADD, GOOD)])
        assert [e.status for e in evs][1:] == ["output_limit", "ok"], [(e.status, e.artifacts) for e in evs]
        assert evs[0].status in {"wrong", "crash", "ok"} and evs[0].vector[0] == 1.0 or evs[0].status != "ok"
        assert pool.replaced == 0
        with open(f"/proc/{pool._all[0].worker_pid}/status") as f:
            hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
        assert hwm < 400 * 1024, f"worker peaked at {hwm} kB"
        assert _residue(pool) == before


def test_undecodable_worker_message_is_the_candidates_crash():
    """Class 3: whatever the orchestrator's decoder raises on a worker message (RecursionError included) is that
    candidate's crash, not an exception out of the pool."""
    from evaluators.pool import _WorkerHandle

    class Rx:
        def __init__(self, data):
            self.data = data

        def recv_bytes(self):
            return self.data
    h = _WorkerHandle.__new__(_WorkerHandle)
    for data in (b"[" * 100000 + b"]" * 100000, b"\xff\xfe", b"[1, 2]", b'{"records": [}'):
        h.rx = Rx(data)
        msg = h.recv()
        assert set(msg) == {"undecodable"}
        assert score(ADD, msg).status == "crash"


def _kill_9_once_running(proc, n: int, others: set[int]) -> None:
    """Wait until n sandbox processes run, kill -9 proc (the orchestrator), then none may be left (``others``:
    sandbox uids other pools on the machine used before the test started)."""
    try:
        deadline = time.monotonic() + 30
        while len(sandbox_processes(others)) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(sandbox_processes(others)) >= n
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while sandbox_processes(others) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(others) == []


@root_only
def test_kill_9_of_the_orchestrator_leaves_no_sandbox_process(tmp_path):
    """Class 4: candidates and their setsid daemons die with the orchestrator (the worker is init of its PID
    namespace; its launcher has a parent-death signal; candidates set theirs after the uid change)."""
    import subprocess
    import sys

    others = {uid for _, uid in sandbox_processes()}
    script = tmp_path / "orch.py"
    script.write_text(
        "import sys\nsys.path.insert(0, %r)\n" % str(ROOT) +
        "from evaluators.pool import SandboxPool\nfrom tests.sandbox_helpers import ADD\n"
        "code = ('import os, time, subprocess, sys\\n'\n"
        "        'if os.fork() == 0:\\n    os.setsid()\\n    time.sleep(600)\\n'\n"
        "        'subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(600)\"], start_new_session=True)\\n'\n"
        "        'print(\"started\", flush=True)\\ntime.sleep(600)\\n')\n"
        "with SandboxPool(workers=1) as pool:\n    print('ready', flush=True)\n"
        "    pool.evaluate(ADD, code, time_limit=600)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    _kill_9_once_running(proc, 3, others)  # the candidate, its setsid daemon and a detached subprocess


@root_only
def test_kill_9_of_eval_program_mid_candidate_leaves_no_sandbox_process(tmp_path):
    """Class 4 through the CLI: ``vevo eval-program`` killed while its candidate (and a daemon it started) runs."""
    import subprocess
    import sys

    vevo = os.path.join(os.path.dirname(sys.executable), "vevo")
    subprocess.run([vevo, "problems", "new", "slow", "--kind", "io", "--dir", str(tmp_path)], check=True,
                   capture_output=True)
    prog = tmp_path / "slow.py"
    prog.write_text("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\ntime.sleep(600)\n")
    tmp_path.chmod(0o755)
    others = {uid for _, uid in sandbox_processes()}
    proc = subprocess.Popen([vevo, "eval-program", str(tmp_path / "slow"), str(prog), "--timeout", "600"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_9_once_running(proc, 2, others)  # the candidate and its setsid daemon


@root_only
def test_ipc_objects_do_not_outlive_their_candidate():
    """Class 4: SysV shared memory, message queues, semaphores and POSIX queues a candidate creates are gone for
    the next candidate of the same worker (and never were in the host's IPC namespace)."""
    host_before = {k: open(f"/proc/sysvipc/{k}").read() for k in ("shm", "msg", "sem")}
    make = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "assert libc.shmget(4242, 1 << 20, 0o1600) >= 0\nassert libc.msgget(4243, 0o1600) >= 0\n"
            "assert libc.semget(4244, 1, 0o1600) >= 0\n"
            "assert libc.mq_open(b'/vevo-q', os.O_CREAT | os.O_RDWR, 0o600, None) >= 0\n" + GOOD)
    look = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "left = [libc.shmget(4242, 0, 0), libc.msgget(4243, 0), libc.semget(4244, 0, 0),"
            " libc.mq_open(b'/vevo-q', os.O_RDWR, 0, None)]\n"
            "def add(a, b):\n    return a + b if left == [-1, -1, -1, -1] else a - b\n")
    with SandboxPool(workers=1) as pool:
        evs = pool.evaluate_many([(ADD, make), (ADD, look)])
        assert [e.status for e in evs] == ["ok", "ok"], [e.artifacts for e in evs]
        assert evs[1].solved
    assert {k: open(f"/proc/sysvipc/{k}").read() for k in ("shm", "msg", "sem")} == host_before


def test_deep_directory_chain_is_removed_and_the_box_stays_usable():
    """Class 4: a 3000-level directory chain (deeper than PATH_MAX) is removed without recursion; the next
    candidate finds an empty box and the worker's fds are where they were."""
    chain = ("import os\nfor i in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
             "open('f', 'w').write('x')\n" + GOOD)
    look = ("import os\nleft = os.listdir('.') + ([] if os.stat('..').st_nlink == 3 else ['more in the box'])\n"
            "def add(a, b):\n    return a + b if not left else a - b\n")
    with SandboxPool(workers=1) as pool:
        before = _residue(pool)
        evs = pool.evaluate_many([(ADD, chain), (ADD, look), (ADD, chain), (ADD, look)])
        assert [e.status for e in evs] == ["ok"] * 4 and all(e.solved for e in evs), [e.artifacts for e in evs]
        assert _residue(pool) == before and pool.replaced == 0


def test_remove_tree_handles_depth_links_and_unremovable_entries(tmp_path):
    from evaluators.worker import remove_tree

    p = str(tmp_path / "t")
    os.mkdir(p)
    fd = os.open(p, os.O_RDONLY)
    for _ in range(2500):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.symlink("/etc", "link", dir_fd=fd)
    os.close(fd)
    before = len(os.listdir("/proc/self/fd"))
    assert remove_tree(p) and not os.path.exists(p)
    assert len(os.listdir("/proc/self/fd")) == before
    assert os.path.exists("/etc/passwd") or os.path.isdir("/etc")  # the link was removed, not followed


@root_only
def test_page_cache_memory_is_limited_by_the_cgroup():
    """Class 5: sixty 16 MB memfds hold 960 MB under a 512 MB address-space limit; the worker's cgroup charges
    them, so the candidate is stopped as ``memory`` instead of passing."""
    code = ("import os\nfds = []\nfor i in range(60):\n    fd = os.memfd_create(f'm{i}')\n"
            "    for _ in range(16):\n        os.write(fd, b'x' * (1 << 20))\n    fds.append(fd)\n" + GOOD)
    with SandboxPool(workers=1) as pool:
        if "none" in pool.isolation["cgroup"]:
            __import__("pytest").skip(f"no memory cgroup here: {pool.isolation['cgroup']}")
        ev = pool.evaluate(ADD, code, time_limit=20)
        assert ev.status == "memory" and not ev.solved, (ev.status, ev.artifacts)
        assert pool.evaluate(ADD, GOOD).solved and pool.replaced == 0


@root_only
def test_unix_sockets_of_the_host_are_unreachable(tmp_path):
    """Class 5: a world-writable filesystem socket (an X server, a database) and an abstract socket on the host;
    the candidate can connect to neither."""
    tmp_path.chmod(0o777)
    path = str(tmp_path / "host.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    os.chmod(path, 0o777)
    srv.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(b"\0vevo-test-abstract")
    abstract.listen()
    code = ("import socket\nok = []\n"
            f"for addr in ({path!r}, b'\\0vevo-test-abstract'):\n"
            "    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect(addr)\n        ok.append(addr)\n"
            "    except OSError:\n        pass\n"
            "def add(a, b):\n    return a + b if not ok else a - b\n")
    try:
        with SandboxPool(workers=1) as pool:
            ev = pool.evaluate(ADD, code)
        assert ev.status == "ok" and ev.solved, ev.artifacts
    finally:
        srv.close()
        abstract.close()


def test_scoring_a_hostile_value_costs_only_its_test():
    """Class 6: a result whose repr raises in the parent (a 20,000-bit int) is that test's ``wrong``, the other
    tests still count; terminal escapes in the candidate's error come back as data, for the CLI to escape."""
    big = "def add(a, b):\n    return 2 ** 20000 if a == 20 else a + b\n"
    ansi = "def add(a, b):\n    raise ValueError('\\x1b[2J\\x1b[31mred')\n"
    with SandboxPool(workers=1) as pool:
        ev, ev2 = pool.evaluate_many([(ADD, big), (ADD, ansi)])
    assert ev.status == "wrong" and ev.vector == [1.0, 0.0, 1.0] and "int of 20001 bits" in ev.artifacts["first_error"]
    assert ev2.status in {"wrong", "crash"} and not ev2.solved
    from evolve.cli import printable

    raw = ev2.artifacts.get("first_error") or ev2.artifacts.get("error", "")
    assert "\x1b" in raw and "\x1b" not in printable(raw) and "\\x1b[31mred" in printable(raw)


def test_stale_box_dirs_of_dead_workers_are_swept(tmp_path):
    """A killed orchestrator's workers leave empty ``vevo-box-<pid>-*`` dirs; a new pool removes those whose
    launcher is gone, and never a live one's or one with contents."""
    from evaluators.pool import sweep_stale_boxes

    dead = 4194301
    while os.path.exists(f"/proc/{dead}"):
        dead -= 1
    (tmp_path / f"vevo-box-{dead}-aa").mkdir()
    (tmp_path / f"vevo-box-{os.getpid()}-bb").mkdir()  # alive
    full = tmp_path / f"vevo-box-{dead}-cc"
    full.mkdir()
    (full / "keep").write_text("x")
    (tmp_path / "other").mkdir()
    assert sweep_stale_boxes(str(tmp_path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"vevo-box-{os.getpid()}-bb", f"vevo-box-{dead}-cc",
                                                                 "other"])


@root_only
def test_the_start_directory_and_pythonpath_are_not_in_the_candidates_view(tmp_path):
    """Issue 34: `python -m evolve.cli` puts its working directory first on ``sys.path``, and the jail used to bind
    every import path: started from a home, a candidate read its ``.netrc``, listed it and reached a unix socket
    bound there. Now only the interpreter's prefixes and the installed-distribution directories are bound: the
    start directory and a ``PYTHONPATH`` entry (world-readable, so only the view can keep them out) stay unseen."""
    import json
    import subprocess
    import sys

    from tests.sandbox_helpers import snooper

    home, lib, probs = tmp_path / "home", tmp_path / "lib", tmp_path / "probs"
    for d in (home, lib, probs):
        d.mkdir()
    (home / ".netrc").write_text("machine example.com login me password sk-home-1\n")
    (lib / "secret.txt").write_text("sk-lib-2\n")
    for p in (tmp_path, home, lib):
        p.chmod(0o755)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(home / "host.sock"))
    os.chmod(home / "host.sock", 0o777)
    sock.listen()
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{lib}")
    vevo = [sys.executable, "-m", "evolve.cli"]
    subprocess.run(vevo + ["problems", "new", "sq", "--kind", "io", "--dir", str(probs)], check=True,
                   capture_output=True, cwd=str(home), env=env)
    prog = tmp_path / "snoop.py"
    prog.write_text(snooper([str(home / ".netrc"), str(lib / "secret.txt"), str(home / "host.sock")]))
    try:
        r = subprocess.run(vevo + ["eval-program", str(probs / "sq"), str(prog), "--json"], capture_output=True,
                           text=True, cwd=str(home), env=env, timeout=120)
        doctor = subprocess.run(vevo + ["doctor", "--json"], capture_output=True, text=True, cwd=str(home), env=env)
    finally:
        sock.close()
    ev = json.loads(r.stdout)
    assert ev["solved"] and "FOUND []" in ev["artifacts"]["stderr"], (r.stdout, r.stderr)
    bound = json.loads(doctor.stdout)["bound"]["reason"]
    assert str(home) not in bound.split("; import paths not bound")[0] and str(lib) in bound.split("not bound: ")[1]
