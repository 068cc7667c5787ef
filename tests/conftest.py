import os
from pathlib import Path

import pytest

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
