"""Saved model files with the permissions the user asked for.

safetensors writes its files with mode 0600 whatever the umask, so a model saved for a team (``vevo train
--out``, ``vevo pretrain``, a campaign's adapters) could not be read by anyone else. ``honour_umask`` gives the
files under a folder the mode an ordinary ``open(..., "w")`` would: 0666 less the umask.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

_LOCK = threading.Lock()


def current_umask() -> int:
    with _LOCK:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def honour_umask(folder: str | os.PathLike[str]) -> None:
    """chmod every regular file under ``folder`` to 0666 & ~umask (folders and links are left alone)."""
    mode = 0o666 & ~current_umask()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, mode)
