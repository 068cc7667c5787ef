"""Run this checkout's code as an ordinary user (for the non-root sandbox tests and ``eval_throughput --as-user``).

The venv's interpreter may live where another user cannot enter (``/root/.pyenv``): then a system interpreter of
the same minor version runs instead, with this checkout and the venv's site-packages on ``PYTHONPATH``.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class NoUser(RuntimeError):
    """Running as another user is impossible here (not root, no useradd, no usable interpreter)."""


def ensure_user(name: str) -> pwd.struct_passwd:
    """The user, created with a home directory when missing (needs root and useradd)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise NoUser(f"creating user {name} needs root")
    if not shutil.which("useradd"):
        raise NoUser("useradd is not installed")
    r = subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], capture_output=True, text=True)
    if r.returncode != 0:
        raise NoUser(f"useradd {name}: {r.stderr.strip()}")
    return pwd.getpwnam(name)


def remove_user(name: str) -> None:
    subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


def python_path() -> str:
    """This checkout and every site-packages directory this interpreter imports from."""
    paths = [str(ROOT)] + [p for p in sys.path if p and os.path.basename(p) in ("site-packages", "dist-packages")]
    return os.pathsep.join(dict.fromkeys(paths))


def env_for(user: pwd.struct_passwd, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": user.pw_dir, "USER": user.pw_name, "LANG": "C.UTF-8",
           "PYTHONPATH": python_path(), "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": "/tmp"}
    env.update(extra or {})
    return env


def argv_as(user: pwd.struct_passwd, argv: list[str], extra_env: dict[str, str] | None = None) -> list[str]:
    """``runuser`` to the user with exactly the environment of ``env_for`` (nothing of ours leaks through)."""
    env = env_for(user, extra_env)
    return ["runuser", "-u", user.pw_name, "--", "env", "-i"] + [f"{k}={v}" for k, v in env.items()] + argv


def user_python(user: pwd.struct_passwd) -> str:
    """An interpreter the user can run that has this one's minor version and imports this checkout's packages."""
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for cand in dict.fromkeys([os.path.realpath(sys.executable), f"/usr/bin/python{want}", "/usr/bin/python3",
                               "/usr/local/bin/python3"]):
        if not os.path.exists(cand):
            continue
        r = subprocess.run(argv_as(user, [cand, "-c", "import sys, numpy, pydantic, evaluators.pool; "
                                          "print('%d.%d' % sys.version_info[:2])"]),
                           capture_output=True, text=True, cwd="/")
        if r.returncode == 0 and r.stdout.strip() == want:
            return cand
    blocked = [d for p in python_path().split(os.pathsep) for d in [_closed_parent(p)] if d]
    raise NoUser(f"no Python {want} that user {user.pw_name} can run imports this checkout"
                 + (f" ({blocked[0]} is closed to other users)" if blocked else ""))


def _closed_parent(path: str) -> str | None:
    """The first directory on the way to path that other users cannot enter, if any."""
    cur = "/"
    for part in Path(path).resolve().parts[1:]:
        cur = os.path.join(cur, part)
        try:
            if os.path.isdir(cur) and not os.stat(cur).st_mode & 0o001:
                return cur
        except OSError:
            return cur
    return None
