"""The proposer layer's user-facing errors, in a module of their own so backends, the spec parser and the
trainers share them without importing each other."""
from __future__ import annotations

from problems.errors import VevoError


def one_line(exc: BaseException | str, limit: int = 240) -> str:
    """An exception or message as one line of at most `limit` characters (its type name when it says nothing)."""
    s = " ".join(str(exc).split()) or type(exc).__name__
    return s if len(s) <= limit else s[: limit - 3] + "..."


class BackendError(VevoError):
    """A proposer backend cannot be built or used; str() is one line meant for the user."""

    def __init__(self, msg: str) -> None:
        super().__init__(" ".join(str(msg).split()))


class TrainingError(VevoError):
    """Training asked of a backend or a setting that cannot train; one line."""
