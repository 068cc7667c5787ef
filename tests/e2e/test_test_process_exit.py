"""How the test process ends (tests/conftest.py): with a thread beside the main one still running, it leaves after
every Python-level teardown but before the interpreter's native one, and its exit status is still the session's.
Driven through a real pytest subprocess on a small test file that loads tests/conftest.py as a plugin."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import atexit, os, threading, time

OUT = os.environ["PROBE_OUT"]
atexit.register(lambda: open(os.path.join(OUT, "atexit"), "w").close())  # Python-level: always runs


class Witness:
    """Freed with this module's globals, in the interpreter's native teardown."""
    def __del__(self, _write=os.write, _fd=os.open(os.path.join(OUT, "finalised"), os.O_WRONLY | os.O_CREAT)):
        _write(_fd, b"x")


WITNESS = Witness()
if os.environ.get("PROBE_THREAD") == "1":
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # as Ray's gRPC threads stay


def test_passes():
    pass


def test_fails_when_told():
    assert os.environ.get("PROBE_FAIL") != "1"
'''


BROKEN_UNCONFIGURE = '''
import os


def pytest_unconfigure(config):
    if os.environ.get("PROBE_BREAK_UNCONFIGURE") == "1":
        raise RuntimeError("an unconfigure hook failed")
'''


def _run(tmp: Path, thread: bool, fail: bool, broken: bool = False
         ) -> tuple[subprocess.CompletedProcess, set[str]]:
    out = tmp / f"out-{int(thread)}{int(fail)}{int(broken)}"
    out.mkdir()
    (tmp / "test_probe.py").write_text(PROBE)
    (tmp / "conftest.py").write_text(BROKEN_UNCONFIGURE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROBE_OUT": str(out), "PROBE_THREAD": str(int(thread)),
           "PROBE_FAIL": str(int(fail)), "PROBE_BREAK_UNCONFIGURE": str(int(broken))}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                        "--rootdir", str(tmp), str(tmp / "test_probe.py")], cwd=tmp, env=env, capture_output=True,
                       text=True, timeout=120)
    return r, {p.name for p in out.iterdir() if p.stat().st_size or p.name == "atexit"}


def test_a_lingering_thread_skips_only_the_native_teardown_and_keeps_the_status(tmp_path):
    r, seen = _run(tmp_path, thread=True, fail=False)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
    assert seen == {"atexit"}  # atexit handlers ran, the module's objects were never freed
    r, seen = _run(tmp_path, thread=True, fail=True)
    assert r.returncode == 1 and "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    assert seen == {"atexit"}


def test_without_a_lingering_thread_the_interpreter_ends_as_usual(tmp_path):
    r, seen = _run(tmp_path, thread=False, fail=True)
    assert r.returncode == 1 and "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    assert seen == {"atexit", "finalised"}


def test_a_failing_unconfigure_hook_keeps_pytests_own_status(tmp_path):
    """Every test passed, but a hook after the session failed: pytest's status (not the session's 0) and the
    usual teardown."""
    r, seen = _run(tmp_path, thread=True, fail=False, broken=True)
    assert r.returncode != 0 and "an unconfigure hook failed" in r.stderr, r.stdout + r.stderr
    assert seen == {"atexit", "finalised"}
