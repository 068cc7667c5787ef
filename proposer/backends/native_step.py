"""Build and load the fast sampler's C++ operators (native_step.cpp: its decode step, and the ``native`` linear
products on AVX-512 CPUs), once per machine and torch version.

torch's own JIT builder compiles it (~15 s on the 2-core machines here, with ninja from PyPI and the system's C++
compiler) in a folder of torch's extension cache (``$TORCH_EXTENSIONS_DIR``, else ``~/.cache/torch_extensions``)
named by the torch and Python versions and the source's hash, from a copy of the source kept there: every checkout
of the same source shares one build, and a checkout of another source builds its own beside it, never over a
library another process has loaded. Later processes load it in milliseconds. Where it cannot be built (no compiler,
no writable cache) the sampler keeps its Python step (the Python products where ``native`` ones were asked for);
``reason()`` says why.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import sys
import threading
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("native_step.cpp")
_lock = threading.Lock()


def name(code: bytes) -> str:
    """The build's name: the library is built against this torch's headers, from this source."""
    tag = re.sub(r"[^0-9A-Za-z]", "_", f"{torch.__version__}_py{sys.version_info[0]}{sys.version_info[1]}")
    return f"vevo_sampler_{tag}_{hashlib.sha256(code).hexdigest()[:12]}"


def cache_root() -> Path:
    """torch's extension cache (where ``torch.utils.cpp_extension`` builds by default)."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def build(build_directory: str | os.PathLike[str] | None = None) -> tuple[object | None, str]:
    """(the operators: ``torch.ops.vevo_sampler``, "") or (None, why they could not be built, one line)."""
    from torch.utils import cpp_extension

    with _lock:
        path = os.environ.get("PATH", "")
        try:  # torch's builder runs `ninja` from PATH: the pip package's, beside this interpreter
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + path
        except ImportError:
            pass
        quiet = logging.getLogger("torch.utils.cpp_extension")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # its many-line notes on compilers: the reason below is the one line kept
        try:
            code = SOURCE.read_bytes()
            folder = Path(build_directory) if build_directory is not None else cache_root() / name(code)
            folder.mkdir(parents=True, exist_ok=True)
            src = folder / SOURCE.name  # the same path and bytes for every checkout: ninja's rebuild test passes
            if not src.is_file() or src.read_bytes() != code:
                tmp = folder / f".{SOURCE.name}.{os.getpid()}"
                tmp.write_bytes(code)
                os.replace(tmp, src)
            cpp_extension.load(name=name(code), sources=[str(src)], extra_cflags=["-O3"], is_python_module=False,
                               build_directory=str(folder), verbose=False)
        except Exception as exc:  # a compiler's error, a missing tool, an unwritable cache: the Python step runs
            return None, "cannot build the C++ decode step: " + _first_error(str(exc))
        finally:
            os.environ["PATH"] = path
            quiet.setLevel(level)
    return torch.ops.vevo_sampler, ""


def _first_error(text: str) -> str:
    """The line that says what went wrong (a compiler's first ``error:``, a missing tool), not the command."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for mark in ("error:", "not found", "No such file", "Permission denied", "Read-only"):
        pick = next((ln for ln in lines if mark in ln and not ln.startswith(("FAILED", "[", "Error building"))), None)
        if pick:
            break
    else:
        pick = lines[0] if lines else "unknown error"
    return " ".join(pick.split())[:240]


@functools.cache
def _loaded() -> tuple[object | None, str]:
    op, why = build()
    if op is None:  # once per process: sampling runs, at the Python step's speed
        logging.getLogger(__name__).warning("fast sampler: the Python decode step runs (%s)", why)
    return op, why


def load():
    """The operators (``.step``, ``.linear``, ``.pack``, ``.avx512``), built or loaded on the first call in this
    process; None where they cannot be built."""
    return _loaded()[0]


def avx512() -> bool:
    """Whether the ``native`` linear products can run here: the operators built and the CPU has AVX-512."""
    ops = load()
    return ops is not None and bool(ops.avx512())


def reason() -> str:
    """Why ``load()`` gave None ("" where it did not)."""
    return _loaded()[1]
