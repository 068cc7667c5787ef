"""The sandbox as an ordinary user: a real account made here with useradd (CI runs as root), vevo run as that user
under an interpreter it can execute (``bench/checks/as_user.py``), hostile candidates for every attack class of issue 24.

Each attack program answers the problem correctly only if its attack worked (a leaked secret, a written file, a
found problem folder), so a contained attack is a wrong answer and never a pass. After each suite: the user's home
is byte for byte as before, nothing of the user's is in /tmp, no process of the user is left but a bystander the
test started (which must survive), and the orchestrator finished its work after a candidate signalled everything
it could see. The fallback chain is forced with a seccomp filter on the orchestrator (the kernel refuses
``unshare`` or Landlock as a locked-down host does), not with a flag.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bench.checks import as_user as au
from evaluators import landlock, sandbox, seccomp
from tests.conftest import processes_of_uid

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "sandbox_user_driver.py"
USER = "vevo-sbx-test"
SECRET = "sk-vevo-test-9f2c41"
MARK = "VEVO-PWNED-7c1e"



@pytest.fixture(scope="module")
def user():
    if os.geteuid() != 0:
        pytest.skip("creating an ordinary user for these tests needs root (CI runs as root)")
    try:
        u = au.ensure_user(USER)
        py = au.user_python(u)
    except au.NoUser as e:
        pytest.skip(f"cannot run as an ordinary user here: {e}")
    for stale in _tmp_of(u.pw_uid):  # a reused uid's leftovers from an earlier, interrupted session
        subprocess.run(["rm", "-rf", stale])
    home = Path(u.pw_dir)
    secrets = {".netrc": f"machine api.example.com login me password {SECRET}\n",
               ".ssh/id_ed25519": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n",
               ".config/vevo/token": SECRET + "\n", ".bashrc": "# the user's own bashrc\n"}
    for rel, text in secrets.items():
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        os.chmod(p, 0o600)
    for d in [home] + [p for p in home.rglob("*")]:
        os.chown(d, u.pw_uid, u.pw_gid)
    yield u, py
    _kill_all(u.pw_uid)
    au.remove_user(USER)


@pytest.fixture
def shared_dir():
    """A root-owned folder the user can read (pytest's tmp_path is 0700 root): the problem and the specs."""
    d = Path(tempfile.mkdtemp(prefix="vevo-sbx-test-"))
    d.chmod(0o755)
    yield d
    subprocess.run(["rm", "-rf", str(d)])



def _kill_all(uid: int) -> None:
    for pid in processes_of_uid(uid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _home_digest(home: Path) -> dict[str, str]:
    out = {}
    for p in sorted(home.rglob("*")):
        out[str(p.relative_to(home))] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def _tmp_of(uid: int) -> list[str]:
    found = []
    for base, dirs, files in os.walk("/tmp"):
        for n in dirs + files:
            p = os.path.join(base, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if st.st_uid == uid or MARK in n:
                found.append(p)
        deep = base.count("/") >= 5  # /tmp/a/b/c/d: deep enough for anything a candidate could have made
        dirs[:] = [] if deep else [d for d in dirs if os.access(os.path.join(base, d), os.R_OK | os.X_OK)]
    return found


def _problem(d: Path) -> Path:
    folder = d / "sq"
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "problems", "new", "sq", "--kind", "io", "--dir", str(d)],
                       capture_output=True, text=True, cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    for p in [folder] + list(folder.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return folder


def _attacks(home: str) -> list[tuple[str, str]]:
    right = "\ndef solve(xs):\n    return sum(x * x for x in xs) if hit else -1\n"
    ls = "import os\ndef ls(p):\n    try:\n        return os.listdir(p)\n    except OSError:\n        return []\n"
    return [
        ("read_secrets", "import os, shutil\nhit = []\n"
         f"for rel in ('.netrc', '.ssh/id_ed25519', '.config/vevo/token'):\n    p = os.path.join({home!r}, rel)\n"
         "    try:\n        data = open(p).read()\n    except OSError as e:\n        os.write(2, repr(e).encode())\n"
         "        continue\n    hit.append(p)\n"
         f"    for dst in ('/tmp/{MARK}-' + rel.replace('/', '_'), os.path.join({home!r}, '{MARK}')):\n"
         "        try:\n            open(dst, 'w').write(data)\n        except OSError:\n            pass\n"
         f"try:\n    hit += os.listdir({home!r})\nexcept OSError:\n    pass\n"
         "os.write(2, ('HIT %r' % hit).encode())\n" + right),
        ("append_bashrc", "import os\nhit = []\n"
         "for rel in ('.bashrc', '.profile', '.config/autostart.sh'):\n"
         f"    try:\n        with open(os.path.join({home!r}, rel), 'a') as f:\n            f.write('echo {MARK}\\n')\n"
         "        hit.append(rel)\n    except OSError as e:\n        os.write(2, repr(e).encode())\n"
         f"try:\n    open('/tmp/{MARK}', 'w').write('x')\n    hit.append('/tmp')\nexcept OSError:\n    pass\n"
         "os.write(2, ('HIT %r' % hit).encode())\n" + right),
        ("read_environ", ls + "import os\nhit = []\nseen = 0\n"
         "for d in ['self', str(os.getppid())] + ls('/proc'):\n"
         "    try:\n        env = open('/proc/%s/environ' % d, 'rb').read()\n        seen += 1\n"
         "    except OSError:\n        continue\n"
         f"    if b'{SECRET}' in env:\n        hit.append(d)\n"
         f"if '{SECRET}' in repr(dict(os.environ)):\n    hit.append('own')\n"
         "os.write(2, ('HIT %r seen %d' % (hit, seen)).encode())\n" + right),
        ("problem_folder_via_cmdline", ls + "import os, re\nhit = []\n"
         "for d in ls('/proc'):\n"
         "    try:\n        args = open(f'/proc/{d}/cmdline', 'rb').read().split(b'\\0')\n    except OSError:\n"
         "        continue\n    for a in args:\n        a = a.decode(errors='replace')\n"
         "        for p in (a, os.path.dirname(a)):\n            for q in (p, os.path.join(p, 'sq')):\n"
         "                t = os.path.join(q, 'problem.toml')\n                if os.path.isfile(t):\n"
         "                    try:\n                        hit.append(open(t).read())\n"
         "                    except OSError:\n                        pass\n"
         "os.write(2, ('HIT %d' % len(hit)).encode())\n"
         "import tomllib\ntable = {}\nfor text in hit:\n    for t in tomllib.loads(text).get('tests', []):\n"
         "        xs = t['args'][0] if 'args' in t else eval(t['args_py'])[0]\n"
         "        table[repr(list(xs))] = t['expected'] if 'expected' in t else eval(t['expected_py'])\n"
         "def solve(xs):\n    return table.get(repr(list(xs)), -1)  # only a leaked table answers\n"),
        ("kill_everything", ls + "import os, signal\nn = 0\n"
         "try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n"
         "for d in ls('/proc'):\n"
         "    if d.isdigit() and int(d) != os.getpid():\n        try:\n            os.kill(int(d), signal.SIGKILL)\n"
         "            n += 1\n        except OSError:\n            pass\n"
         "for p in range(1, 4096):\n    if p != os.getpid():\n        try:\n            os.kill(p, signal.SIGKILL)\n"
         "            n += 1\n        except OSError:\n            pass\n"
         "os.write(2, ('SIGNALLED %d' % n).encode())\n"
         "def solve(xs):\n    return sum(x * x for x in xs)\n"),
        ("leave_a_daemon", "import os, time\n"
         "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.closerange(0, 64)\n"
         "        time.sleep(600)\n    os._exit(0)\n"
         "def solve(xs):\n    return sum(x * x for x in xs)\n"),
        ("forbidden_syscalls", "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nhit = []\nerrs = {}\n"
         "calls = {'ptrace_attach_1': lambda: libc.ptrace(16, 1, 0, 0),\n"
         "         'unshare_user': lambda: libc.unshare(0x10000000),\n"
         "         'mount_tmpfs': lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None),\n"
         "         'keyctl': lambda: libc.syscall(250 if os.uname().machine == 'x86_64' else 219, 0, 0, 0, 0),\n"
         "         'bpf': lambda: libc.syscall(321 if os.uname().machine == 'x86_64' else 280, 0, 0, 0),\n"
         "         'perf_event_open': lambda: libc.syscall(298 if os.uname().machine == 'x86_64' else 241, 0, 0, -1, -1, 0),\n"
         "         'process_vm_readv': lambda: libc.syscall(310 if os.uname().machine == 'x86_64' else 270, 1, 0, 0, 0, 0, 0)}\n"
         "for name, call in calls.items():\n    r = call()\n    errs[name] = ctypes.get_errno()\n"
         "    if r == 0:\n        hit.append(name)\n"
         "os.write(2, ('ERRNOS %r HIT %r' % (errs, hit)).encode())\n" + right),
        ("numpy_and_threads", "import threading\nimport numpy as np\n"
         "def solve(xs):\n    out = []\n    t = threading.Thread(target=lambda: out.append(int(np.sum(np.array(xs, "
         "dtype=np.int64) ** 2)) if xs else 0))\n    t.start()\n    t.join()\n    return out[0]\n"),
        ("honest_after_all_that", "def solve(xs):\n    return sum(x * x for x in xs)\n"),
    ]


EXPECT_SOLVED = {"kill_everything", "leave_a_daemon", "numpy_and_threads", "honest_after_all_that"}


def _run_suite(u, py, d: Path, folder: Path, disable=(), deny=(), unsafe=False, programs=None) -> dict:
    spec = d / f"spec-{'-'.join(disable) or 'all'}-{'-'.join(deny) or 'none'}.json"
    spec.write_text(json.dumps({"problem": str(folder), "programs": programs or _attacks(u.pw_dir),
                                "disable": list(disable), "unsafe": unsafe, "time_limit": None if programs else 20}))
    spec.chmod(0o644)
    argv = [py, str(DRIVER)] + (["--deny", ",".join(deny)] if deny else []) + ["suite", str(spec)]
    r = subprocess.run(au.argv_as(u, argv, {"VEVO_TEST_SECRET": SECRET, "OPENAI_API_KEY": SECRET}),
                       capture_output=True, text=True, cwd="/", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _bystander(u) -> subprocess.Popen:
    return subprocess.Popen(au.argv_as(u, ["sleep", "900"]), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _check_contained(out: dict, u, home_before: dict, bystander: subprocess.Popen, sleeper_pid: int) -> None:
    res = out["results"]
    for name, r in res.items():
        if name in EXPECT_SOLVED:
            assert r["status"] == "ok" and r["solved"], (name, r)
        else:  # the attack ran to its end and found nothing: a wrong answer, never a pass
            assert r["status"] in ("ok", "wrong") and not r["solved"], (name, r)
    assert f"'{SECRET}'" not in json.dumps(res)
    assert "HIT []" in res["read_secrets"]["stderr"] and "HIT []" in res["append_bashrc"]["stderr"], res
    assert res["read_environ"]["stderr"].startswith("HIT []"), res["read_environ"]
    assert "HIT 0" in res["problem_folder_via_cmdline"]["stderr"], res["problem_folder_via_cmdline"]
    errnos = eval(res["forbidden_syscalls"]["stderr"].split("ERRNOS ")[1].split(" HIT")[0])  # noqa: S307 - our repr
    assert set(errnos.values()) == {1}, errnos  # EPERM from the filter (or the missing capability) for each
    assert out["replaced"] == 0, "a candidate took its worker down"
    assert _home_digest(Path(u.pw_dir)) == home_before
    assert _tmp_of(u.pw_uid) == []
    assert bystander.poll() is None, "the candidate killed a process of the user outside the sandbox"
    deadline = time.monotonic() + 5
    while set(processes_of_uid(u.pw_uid)) - {sleeper_pid} and time.monotonic() < deadline:
        time.sleep(0.05)
    left = set(processes_of_uid(u.pw_uid)) - {sleeper_pid}
    assert not left, [open(f"/proc/{p}/cmdline", "rb").read() for p in left if os.path.exists(f"/proc/{p}")]


def _sleeper_pid(u, bystander: subprocess.Popen) -> int:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for p in processes_of_uid(u.pw_uid):
            try:
                if open(f"/proc/{p}/cmdline", "rb").read().startswith(b"sleep\0900"):
                    return p
            except OSError:
                pass
        time.sleep(0.02)
    raise AssertionError("bystander did not start")


def skip_unless_mode(mode: str) -> None:
    """Skip where this kernel cannot give the mode (user namespaces, or Landlock) to an ordinary user."""
    if mode == "userns" and not sandbox.userns_probe()[0]:
        pytest.skip(sandbox.userns_probe()[1])
    if mode == "landlock" and not landlock.abi()[0]:
        pytest.skip(landlock.abi()[1])


@pytest.mark.parametrize("mode", ["userns", "landlock"])
def test_every_attack_class_is_contained_as_an_ordinary_user(user, shared_dir, mode):
    u, py = user
    if mode == "userns":
        ok, why = sandbox.userns_probe()
        if not ok:
            pytest.skip(why)
    elif not landlock.abi()[0]:
        pytest.skip(landlock.abi()[1])
    folder = _problem(shared_dir)
    before = _home_digest(Path(u.pw_dir))
    assert _tmp_of(u.pw_uid) == []
    bystander = _bystander(u)
    try:
        sleeper = _sleeper_pid(u, bystander)
        out = _run_suite(u, py, shared_dir, folder, disable=("userns",) if mode == "landlock" else ())
        assert out["plan"]["mode"] == mode, out["plan"]
        iso = out["isolation"]
        if mode == "userns":
            assert iso["userns"] and iso["pid"] and iso["ipc"] and iso["network"] == "netns", iso
            assert "chroot" in iso["filesystem"] and iso["seccomp"] == "yes", iso
            assert iso["summary"].startswith("user namespace; pid+mount+net+ipc namespaces"), iso["summary"]
        else:
            assert iso["landlock"] and iso["seccomp"] == "yes" and not iso["userns"], iso
            assert iso["summary"].startswith("Landlock, no namespaces"), iso["summary"]
            if landlock.abi()[0] < 6:
                pytest.skip("Landlock < 6 cannot keep a candidate's signals in: the kill attack is not contained")
        _check_contained(out, u, before, bystander, sleeper)
    finally:
        bystander.kill()
        _kill_all(u.pw_uid)


def test_fallback_chain_under_a_kernel_that_refuses_user_namespaces_then_landlock(user, shared_dir):
    """userns refused (EPERM, as under Docker's profile) → Landlock; Landlock missing too (ENOSYS) → refused
    unless opted in, with one line naming both layers and why; the opt-in runs and says so."""
    u, py = user
    folder = _problem(shared_dir)
    out = _run_suite(u, py, shared_dir, folder, deny=("unshare",))
    layers = out["plan"]["layers"]
    assert out["plan"]["mode"] == "landlock" and not layers["userns"]["ok"], layers
    assert "unshare(CLONE_NEWUSER): Operation not permitted" in layers["userns"]["reason"], layers
    assert out["results"]["honest_after_all_that"]["solved"] and not out["results"]["read_secrets"]["solved"]

    out = _run_suite(u, py, shared_dir, folder, deny=("unshare", "landlock"))
    msg = out["refused"]
    assert "\n" not in msg and msg.startswith("no sandbox for candidates: user namespaces are blocked: "
                                              "unshare(CLONE_NEWUSER): Operation not permitted"), msg
    assert "Landlock is unavailable: the kernel has no Landlock (ENOSYS)" in msg and "--unsafe-no-sandbox" in msg
    assert out["results"] == {}

    prog = shared_dir / "sq.py"
    prog.write_text("def solve(xs):\n    return sum(x * x for x in xs)\n")
    prog.chmod(0o644)
    base = [py, str(DRIVER), "--deny", "unshare,landlock", "exec"]
    r = subprocess.run(au.argv_as(u, base + ["eval-program", str(folder), str(prog)]), capture_output=True,
                       text=True, cwd="/", timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("vevo: error: no sandbox for candidates: user namespaces are blocked"), lines
    r = subprocess.run(au.argv_as(u, base + ["eval-program", str(folder), str(prog), "--unsafe-no-sandbox"]),
                       capture_output=True, text=True, cwd="/", timeout=120)
    assert r.returncode == 0 and "solved True" in r.stdout, (r.stdout, r.stderr)
    assert "sandbox: NO SANDBOX (opted in)" in r.stdout, r.stdout
    r = subprocess.run(au.argv_as(u, base + ["doctor", "--json"]), capture_output=True, text=True, cwd="/",
                       timeout=120)
    rep = json.loads(r.stdout)
    assert not rep["root"]["ok"] and not rep["userns"]["ok"] and not rep["landlock"]["ok"], rep
    assert rep["seccomp"]["ok"] and rep["mode"]["reason"] == "none", rep
    _kill_all(u.pw_uid)
    assert _tmp_of(u.pw_uid) == []


def test_eval_program_and_doctor_as_an_ordinary_user_say_what_runs(user, shared_dir):
    u, py = user
    if not sandbox.userns_probe()[0]:
        pytest.skip(sandbox.userns_probe()[1])
    folder = _problem(shared_dir)
    prog = shared_dir / "sq.py"
    prog.write_text("def solve(xs):\n    return sum(x * x for x in xs)\n")
    prog.chmod(0o644)
    r = subprocess.run(au.argv_as(u, [py, "-m", "evolve.cli", "eval-program", str(folder), str(prog)]),
                       capture_output=True, text=True, cwd="/", timeout=120)
    assert r.returncode == 0 and "solved True" in r.stdout, (r.stdout, r.stderr)
    line = [x for x in r.stdout.splitlines() if x.startswith("sandbox: ")]
    assert line == [line[0]] and line[0].startswith("sandbox: user namespace; pid+mount+net+ipc namespaces"), r.stdout
    r = subprocess.run(au.argv_as(u, [py, "-m", "evolve.cli", "doctor"]), capture_output=True, text=True, cwd="/",
                       timeout=120)
    assert r.returncode == 0, r.stderr
    rows = {x.split("  ")[0].strip(): x for x in r.stdout.splitlines()}
    assert "no " in rows["root"] and " yes " in rows["user namespaces"] and "userns" in rows["candidates run under"]
    _kill_all(u.pw_uid)


@pytest.mark.parametrize("mode", ["userns", "landlock"])
def test_started_from_the_home_no_candidate_sees_the_home(user, shared_dir, mode):
    """Issue 34: ``python -m evolve.cli`` started from the home puts the home first on ``sys.path``; the jail (and
    the Landlock rules) used to bind every import path, so a candidate read ``~/.netrc`` by its absolute path.
    Landlock mode is forced the way a locked-down host forces it: the kernel refuses ``unshare``."""
    import socket

    from tests.sandbox_helpers import snooper

    u, py = user
    skip_unless_mode(mode)
    home = Path(u.pw_dir)
    folder = _problem(shared_dir)
    sock_path = home / "agent.sock"
    sock_path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    os.chown(sock_path, u.pw_uid, u.pw_gid)
    sock.listen()
    prog = shared_dir / "snoop.py"
    prog.write_text(snooper([str(home / ".netrc"), str(home / ".ssh" / "id_ed25519"), str(sock_path)]))
    prog.chmod(0o644)
    argv = [py, str(DRIVER)] + (["--deny", "unshare"] if mode == "landlock" else []) + \
        ["exec", "eval-program", str(folder), str(prog), "--json"]
    try:
        r = subprocess.run(au.argv_as(u, argv), capture_output=True, text=True, cwd=str(home), timeout=120)
        doctor = subprocess.run(au.argv_as(u, [py, "-m", "evolve.cli", "doctor", "--json"]), capture_output=True,
                                text=True, cwd=str(home), timeout=120)
    finally:
        sock.close()
        sock_path.unlink(missing_ok=True)
        _kill_all(u.pw_uid)
    assert r.returncode == 0, r.stderr[-2000:]
    ev = json.loads(r.stdout)
    assert ev["solved"] and "FOUND []" in ev["artifacts"]["stderr"], ev["artifacts"]
    assert SECRET not in r.stdout
    bound = json.loads(doctor.stdout)["bound"]["reason"]
    assert str(home) not in bound.split("; import paths not bound")[0] and str(home) in bound, bound


def _sched_of(pid: int) -> tuple[str, str]:
    """(nice value, RLIMIT_NOFILE and RLIMIT_CPU lines) of a process, read from /proc as root."""
    stat = open(f"/proc/{pid}/stat").read()
    nice = stat[stat.rfind(")") + 2:].split()[16]
    limits = [x for x in open(f"/proc/{pid}/limits").read().splitlines() if "open files" in x or "cpu time" in x]
    return nice, "\n".join(limits)


@pytest.mark.parametrize("mode", ["userns", "landlock"])
def test_a_candidate_cannot_change_limits_or_priority_of_another_process(user, shared_dir, mode):
    """Issue 34: without root a candidate shares its uid with the worker, the orchestrator and the user's other
    programs, and the kernel let it lower their limits and renice them: the next, correct candidate on that worker
    died of "Too many open files". The seccomp filter keeps those calls to the candidate itself: a meddler aimed at
    every pid gets EPERM, the next candidate passes on the same worker, and a bystander is untouched. With the filter
    left off, the worker notices its own changed limits, retires and is replaced, and the pool says so."""
    from tests.sandbox_helpers import meddler

    u, py = user
    skip_unless_mode(mode)
    folder = _problem(shared_dir)
    honest = "def solve(xs):\n    return sum(x * x for x in xs)\n"
    force = ("userns",) if mode == "landlock" else ()
    bystander = _bystander(u)
    try:
        sleeper = _sleeper_pid(u, bystander)
        before = _sched_of(sleeper)
        everyone = f"[os.getppid(), {sleeper}] + list(range(1, 1 << 15))"
        out = _run_suite(u, py, shared_dir, folder, disable=force,
                         programs=[["meddler", meddler(everyone)], ["honest", honest]])
        assert out["plan"]["mode"] == mode, out["plan"]
        assert out["results"]["meddler"]["solved"] and "HIT []" in out["results"]["meddler"]["stderr"], out
        assert out["results"]["honest"]["solved"] and out["replaced"] == 0 and out["notes"] == [], out
        assert _sched_of(sleeper) == before and bystander.poll() is None

        out = _run_suite(u, py, shared_dir, folder, disable=force + ("seccomp",),
                         programs=[["meddler", meddler("[os.getppid()]", cpu=False)], ["honest", honest],
                                   ["honest_again", honest]])
        assert "('nofile'" in out["results"]["meddler"]["stderr"], out["results"]["meddler"]
        assert out["results"]["honest"]["solved"] and out["results"]["honest_again"]["solved"], out["results"]
        assert out["replaced"] == 1 and len(out["notes"]) == 1, out
        assert "limits or priority changed" in out["notes"][0] and "RLIMIT_NOFILE" in out["notes"][0], out["notes"]
    finally:
        bystander.kill()
        _kill_all(u.pw_uid)


@pytest.mark.parametrize("mode", ["userns", "landlock"])
def test_disk_budget_fork_chains_and_forged_metrics_as_an_ordinary_user(user, shared_dir, mode):
    """Issue 34, without root; Landlock forced as a container runtime forces it (unshare refused by seccomp). A
    candidate writing 64 MB with disk_mb = 32 is stopped (Landlock: the worker's own budget; user namespace: the
    box's tmpfs is full), never solved; a fast fork chain leaves no process behind (the worker is a subreaper and
    kills until it has no child); an OpenEvolve output that runs code when unpickled is unverified, never solved."""
    import shutil

    from tests.openevolve_helpers import PROBES
    from tests.sandbox_helpers import PICKLE_FORGERIES

    u, py = user
    skip_unless_mode(mode)
    folder = _problem(shared_dir)
    toml = folder / "problem.toml"
    toml.write_text(toml.read_text() + "\n[resources]\ndisk_mb = 32\n")
    oe = shared_dir / "pickled_output"
    shutil.copytree(PROBES / "pickled_output", oe)
    for p in [oe] + list(oe.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    right = "def solve(xs):\n    return sum(x * x for x in xs)\n"
    disk = ("import os\nn = 0\nfor i in range(8):\n    try:\n        with open('f%d' % i, 'wb') as f:\n"
            "            for _ in range(8):\n                f.write(b'x' * (1 << 20))\n        n += 1\n"
            "    except OSError:\n        break\nos.write(2, ('WROTE %d' % n).encode())\n"
            "def solve(xs):\n    return sum(x * x for x in xs) if n == 8 else -1\n")
    chain = ("import os\nif os.fork() == 0:\n    for _ in range(100000):\n        try:\n"
             "            if os.fork():\n                os._exit(0)\n        except OSError:\n            pass\n"
             "    os._exit(0)\n" + right)
    programs = [["disk", disk], ["chain", chain], ["honest", right]] + \
        [[f"forge_{n}", c, str(oe)] for n, c in sorted(PICKLE_FORGERIES.items())]
    bystander = _bystander(u)
    try:
        sleeper = _sleeper_pid(u, bystander)
        out = _run_suite(u, py, shared_dir, folder, deny=("unshare",) if mode == "landlock" else (),
                         programs=programs)
        assert out["plan"]["mode"] == mode, out["plan"]
        res = out["results"]
        assert not res["disk"]["solved"], res["disk"]
        if mode == "landlock":
            assert res["disk"]["status"] == "output_limit" and "disk budget" in res["disk"]["error"], res["disk"]
        assert res["chain"]["solved"] and res["honest"]["solved"], res
        for n in PICKLE_FORGERIES:
            r = res[f"forge_{n}"]
            assert not r["solved"] and "unpickled builtins." in r["unverified"], (n, r)
        deadline = time.monotonic() + 5
        while set(processes_of_uid(u.pw_uid)) - {sleeper} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(processes_of_uid(u.pw_uid)) == {sleeper}
        assert _tmp_of(u.pw_uid) == []
        if mode == "landlock":  # and vevo doctor says, layer by layer, what this mode cannot promise
            r = subprocess.run(au.argv_as(u, [py, str(DRIVER), "--deny", "unshare", "exec", "doctor", "--json"]),
                               capture_output=True, text=True, cwd="/", timeout=120)
            rep = json.loads(r.stdout)
            gaps = dict(rep["gaps"]["items"])
            assert rep["mode"]["reason"] == "landlock" and not rep["gaps"]["ok"], rep["gaps"]
            assert {"uid", "pid", "processes", "disk", "network", "ipc", "filesystem"} <= set(gaps), gaps
            assert "20 ms" in gaps["disk"] and "seccomp" in gaps["network"], gaps
            text = subprocess.run(au.argv_as(u, [py, str(DRIVER), "--deny", "unshare", "exec", "doctor"]),
                                  capture_output=True, text=True, cwd="/", timeout=120).stdout
            assert "not promised in landlock mode, layer by layer:" in text and "\n  disk " in text, text
    finally:
        bystander.kill()
        _kill_all(u.pw_uid)


def test_landlock_worker_stops_a_candidate_over_its_process_budget(user, shared_dir):
    """Issue 34, forced Landlock: RLIMIT_NPROC counts all the user's processes, so when processes that ran at the
    worker's start have ended a candidate finds headroom past its own nproc (16). The worker counts the candidate's
    tree itself and stops it (output_limit); the next candidate on the same worker passes."""
    u, py = user
    if not landlock.abi()[0]:
        pytest.skip(landlock.abi()[1])
    folder = _problem(shared_dir)
    toml = folder / "problem.toml"
    toml.write_text(toml.read_text() + "\n[resources]\nnproc = 16\n")
    right = "def solve(xs):\n    return sum(x * x for x in xs)\n"
    pause = "import time\ntime.sleep(3)\n" + right
    threads = ("import os, threading, time\nthreading.stack_size(256 << 10)  # within the address-space limit\n"
               "n, end = 0, time.monotonic() + 4\n"
               "while n < 40 and time.monotonic() < end:\n    try:\n"
               "        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()\n        n += 1\n"
               "    except RuntimeError:\n        time.sleep(0.05)\ntime.sleep(0.5)\n"
               "os.write(2, ('THREADS %d' % n).encode())\n" + right)
    crowd = [_bystander(u) for _ in range(30)]  # running when the worker starts, gone before the hog runs
    deadline = time.monotonic() + 30
    while sum(_cmdline(p).startswith(b"sleep\0") for p in processes_of_uid(u.pw_uid)) < 30 and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    spec = shared_dir / "spec-nproc.json"
    spec.write_text(json.dumps({"problem": str(folder), "programs": [["pause", pause], ["threads", threads],
                                                                     ["honest", right]], "time_limit": 10}))
    spec.chmod(0o644)
    proc = subprocess.Popen(au.argv_as(u, [py, str(DRIVER), "--deny", "unshare", "suite", str(spec)]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        deadline = time.monotonic() + 60  # the pause candidate runs (a fork of the worker): the crowd was counted
        while time.monotonic() < deadline and \
                sum(b"evaluators.worker" in _cmdline(p) for p in processes_of_uid(u.pw_uid)) < 2:
            time.sleep(0.05)
        for p in processes_of_uid(u.pw_uid):
            if _cmdline(p).startswith(b"sleep\0"):
                os.kill(p, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        res = json.loads(out.strip().splitlines()[-1])
        assert res["plan"]["mode"] == "landlock", res["plan"]
        r = res["results"]
        assert r["pause"]["solved"] and r["honest"]["solved"], r
        assert not r["threads"]["solved"], r["threads"]
        assert r["threads"]["status"] == "output_limit" and "processes" in r["threads"]["error"], r["threads"]
    finally:
        for c in crowd:
            c.kill()
        proc.kill()
        _kill_all(u.pw_uid)


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def test_killing_the_orchestrator_mid_evaluation_leaves_no_process_of_the_user(user, shared_dir):
    """kill -9 of an ordinary user's orchestrator while a candidate runs (with a double-forked daemon of its
    own): the launcher, the worker, the candidate and the daemon all go (user namespace: the PID namespace dies
    with its init)."""
    u, py = user
    if not sandbox.userns_probe()[0]:
        pytest.skip(sandbox.userns_probe()[1])
    folder = _problem(shared_dir)
    daemon = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        time.sleep(600)\n    os._exit(0)\ntime.sleep(600)\ndef solve(xs):\n    return 0\n")
    spec = shared_dir / "spec-kill.json"
    spec.write_text(json.dumps({"problem": str(folder), "programs": [["daemon", daemon]], "time_limit": 300}))
    spec.chmod(0o644)
    proc = subprocess.Popen(au.argv_as(u, [py, str(DRIVER), "suite", str(spec)]), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd="/")
    try:
        deadline = time.monotonic() + 60
        while len(processes_of_uid(u.pw_uid)) < 5 and time.monotonic() < deadline:  # driver, launcher, worker, 2 more
            time.sleep(0.05)
        assert len(processes_of_uid(u.pw_uid)) >= 5, processes_of_uid(u.pw_uid)
        time.sleep(0.3)
        driver = [p for p in processes_of_uid(u.pw_uid) if b"sandbox_user_driver" in open(f"/proc/{p}/cmdline", "rb").read()]
        assert len(driver) == 1, driver
        os.kill(driver[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while processes_of_uid(u.pw_uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_of_uid(u.pw_uid) == []
    finally:
        proc.kill()
        _kill_all(u.pw_uid)


@pytest.mark.parametrize("mode", ["userns", "landlock"])
def test_openevolve_probes_give_openevolves_results_as_an_ordinary_user(user, shared_dir, mode):
    """What ordinary OpenEvolve evaluators do (threads, open files, temp files, big stdout, `python` in a
    subprocess, memory) still works under the ordinary user's sandbox and its seccomp filter. Under Landlock there is
    no private /dev/shm, so the multiprocessing probe is left out there (and said so in the docs)."""
    import shutil

    from tests.openevolve_helpers import PROBE_EXPECTED, PROBES

    u, py = user
    skip_unless_mode(mode)
    names = [n for n in sorted(PROBE_EXPECTED) if n != "stage_timeout" and not (mode == "landlock" and n == "shm")]
    programs = []
    for n in names:
        shutil.copytree(PROBES / n, shared_dir / n)
        for p in [shared_dir / n] + list((shared_dir / n).rglob("*")):
            p.chmod(0o755 if p.is_dir() else 0o644)
        programs.append([n, (PROBES / n / "initial_program.py").read_text(), str(shared_dir / n)])
    out = _run_suite(u, py, shared_dir, shared_dir / names[0], programs=programs,
                     disable=("userns",) if mode == "landlock" else ())
    assert out["plan"]["mode"] == mode
    for n in names:
        r = out["results"][n]
        assert r["status"] == "ok" and r["metrics"] == PROBE_EXPECTED[n], (n, r, r["stderr"])
    _kill_all(u.pw_uid)
    assert _tmp_of(u.pw_uid) == []


def test_an_ordinary_users_stale_box_is_swept_whole(user):
    """A Landlock-mode worker's box is a plain directory; one left by a killed orchestrator (dead launcher pid) is
    removed by the next pool of the same user, and nothing of another user's is touched."""
    u, py = user
    dead = 4_000_000  # above any pid_max: never a live process
    mine = Path(f"/tmp/vevo-box-{dead}-0000aaaa")
    theirs = Path(f"/tmp/vevo-box-{dead}-0000bbbb")
    for d in (mine, theirs):
        (d / "w" / "cand").mkdir(parents=True)
        (d / "w" / "cand" / "f").write_text("x")
        (d / "bin").mkdir()
        os.symlink("/etc", d / "bin" / "link")
    for p in [mine] + list(mine.rglob("*")):
        os.lchown(p, u.pw_uid, u.pw_gid)
    try:
        r = subprocess.run(au.argv_as(u, [py, "-c", "from evaluators.pool import sweep_stale_boxes as s; "
                                          "print(s('/tmp'))"]), capture_output=True, text=True, cwd="/")
        assert r.returncode == 0, r.stderr
        assert not mine.exists() and (theirs / "w" / "cand" / "f").exists() and os.path.isdir("/etc")
    finally:
        subprocess.run(["rm", "-rf", str(mine), str(theirs)])


# ------------------------------------------------------------------ as root, no user needed

def test_seccomp_numbers_match_libseccomp():
    """The hand-kept syscall table against libseccomp's, where the library is installed."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("seccomp")
    if not name:
        pytest.skip("libseccomp is not installed: nothing to check the table against")
    lib = ctypes.CDLL(name)
    for arch, (audit, table) in seccomp.TABLES.items():
        for call, nr in table.items():
            assert lib.seccomp_syscall_resolve_name_arch(audit, call.encode()) == nr, (arch, call)


def test_seccomp_filter_refuses_the_listed_calls_and_keeps_threads_and_fork():
    ok, why = seccomp.probe()
    if not ok:
        pytest.skip(why)
    code = ("import ctypes, os, threading, subprocess, sys\nfrom evaluators import seccomp\n"
            "assert seccomp.Filter().load() == ''\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "nrs = seccomp.TABLES[seccomp.arch()][1]\nbad = []\n"
            "for name in seccomp.DENIED:\n    if name in nrs and libc.syscall(nrs[name], 0, 0, 0, 0, 0, 0) != -1 or "
            "(name in nrs and ctypes.get_errno() != 1):\n        bad.append(name)\n"
            "assert libc.unshare(0x10000000) == -1 and ctypes.get_errno() == 1\n"
            "t = threading.Thread(target=lambda: None)\nt.start()\nt.join()\n"
            "assert subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout == '42\\n'\n"
            "print('BAD', bad)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0 and "BAD []" in r.stdout, (r.stdout, r.stderr)


def test_root_pool_reports_seccomp_and_refuses_unknown_layers():
    from evaluators.pool import SandboxPool

    with pytest.raises(ValueError):
        SandboxPool(workers=1, disable=["nope"])
    with SandboxPool(workers=1) as pool:
        iso = pool.isolation
        assert pool.plan["mode"] == ("root" if os.geteuid() == 0 else pool.plan["mode"])
        assert iso["seccomp"] == ("yes" if seccomp.probe()[0] else "no"), iso
        assert iso["summary"] and "\n" not in iso["summary"]


def test_run_prints_its_sandbox_and_runs_show_records_it(tmp_path):
    """`vevo run` names the active layers in one line at its start; the run's metadata keeps them (`runs show`)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    vevo = [sys.executable, "-m", "evolve.cli"]
    r = subprocess.run(vevo + ["problems", "new", "sq", "--kind", "io", "--dir", str(tmp_path)], capture_output=True,
                       text=True, env=env, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"text": "\n```python\ndef solve(xs):\n    return sum(x * x for x in xs)\n```\n"
                                          "</answer_1>\n"}) + "\n")
    run = tmp_path / "run"
    r = subprocess.run(vevo + ["run", "--problems-dir", str(tmp_path), "--problem", "sq", "--proposer",
                               f"replay:{replay}", "--iterations", "1", "--answers", "1", "--group", "2", "--out",
                               str(run)], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("vevo: sandbox: ")]
    assert len(lines) == 1 and "seccomp: " in lines[0], r.stderr[-2000:]
    r = subprocess.run(vevo + ["runs", "show", str(run), "--json"], capture_output=True, text=True, env=env,
                       cwd=str(ROOT))
    iso = json.loads(r.stdout)["isolation"]
    assert iso["mode"] == ("root" if os.geteuid() == 0 else iso["mode"]) and iso["summary"] in lines[0], iso
    r = subprocess.run(vevo + ["runs", "show", str(run)], capture_output=True, text=True, env=env, cwd=str(ROOT))
    assert f"sandbox: {iso['summary']}" in r.stdout, r.stdout


def test_delegated_cgroup_v2_is_found_above_a_leaf_group(tmp_path):
    """An ordinary user's own group is a leaf with processes; the systemd-delegated ancestor with memory (and pids)
    in its subtree_control is where the worker's groups go. No delegated ancestor: none."""
    from evaluators.cgroups import delegated_v2

    leaf = tmp_path / "user.slice" / "user-1000.slice" / "user@1000.service" / "app.slice" / "term.scope"
    leaf.mkdir(parents=True)
    for d in [tmp_path] + list(leaf.parents)[: len(leaf.relative_to(tmp_path).parts) - 1] + [leaf]:
        (d / "cgroup.subtree_control").write_text("")
        (d / "cgroup.procs").write_text("")
    own = "/" + str(leaf.relative_to(tmp_path))
    assert delegated_v2(str(tmp_path), own) == (None, False)
    (leaf.parent.parent / "cgroup.subtree_control").write_text("cpu memory pids\n")  # user@1000.service
    assert delegated_v2(str(tmp_path), own) == (str(leaf.parent.parent), True)
    (leaf.parent / "cgroup.subtree_control").write_text("memory\n")  # app.slice, nearer, without pids
    assert delegated_v2(str(tmp_path), own) == (str(leaf.parent), False)
