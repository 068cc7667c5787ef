import atexit
import logging
import os
import sys
from pathlib import Path

import pytest

# Ray picks the machine's routable address for a node unless told it is single-machine: every test cluster keeps
# its sockets on the loopback interface. Ray 2.x reads this when it is first imported, by whichever test module
# imports it first, so it is set here, before any of them (and inherited by the `vevo` subprocesses).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
DATA = SHARED / "data"


# The test process leaves without the interpreter's native teardown once every result is reported. The suite starts
# Ray drivers here, and ray.shutdown leaves gRPC's threads running: after a full run, 25 native threads are alive at
# exit (grpc_global_timer, event_engine, gcs_client_io_service, client.poll, worker.io, ...) where `threading` sees
# two. The C-level finalisation after the atexit handlers (modules freed, shared libraries' static destructors)
# races them: CI stops 50 and 55 passed every test, then died with SIGSEGV after the fault handler was gone, so
# nothing printed. Everything Python-level still runs first (fixtures, pytest_unconfigure, every other atexit
# handler: this one is registered before all but logging's, and atexit runs the last registered first). Only in
# the process that ran the session, after pytest_unconfigure ended without an error and with a thread beside the main
# one alive; the exit status is the session's, which is what pytest returns then.
_FINISHED: dict = {}


def pytest_sessionfinish(session) -> None:
    _FINISHED["session"] = session


@pytest.hookimpl(wrapper=True)
def pytest_unconfigure(config):
    yield  # re-raises if an unconfigure hook failed: the interpreter then ends as usual, with pytest's own status
    _FINISHED["pid"] = os.getpid()


def threads_alive() -> int:
    """OS threads of this process, native ones included (`threading` only knows its own)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _leave_without_native_teardown() -> None:
    if _FINISHED.get("pid") != os.getpid() or "session" not in _FINISHED or threads_alive() <= 1:
        return  # a forked child, no session or an unfinished one, or nothing running beside the main thread
    logging.shutdown()  # the one atexit handler registered before this one (pytest imports logging)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # pytest's status for a closed stdout is its own: leave it to the usual exit
    os._exit(int(_FINISHED["session"].exitstatus))


atexit.register(_leave_without_native_teardown)


@pytest.fixture(scope="session")
def pool():
    from evaluators.pool import SandboxPool

    p = SandboxPool(workers=2)
    yield p
    p.close()


def processes_of_uid(uid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    out.append(int(d))
            except OSError:
                pass
    return out
