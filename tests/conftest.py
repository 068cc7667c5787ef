import os
from pathlib import Path

import pytest

# Ray picks the machine's routable address for a node unless told it is single-machine: every test cluster keeps
# its sockets on the loopback interface. Ray 2.x reads this when it is first imported, by whichever test module
# imports it first, so it is set here, before any of them (and inherited by the `vevo` subprocesses).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
DATA = SHARED / "data"


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
