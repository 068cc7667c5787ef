"""The proposer layer's user-facing errors, in a module of their own so backends, the spec parser and the
trainers share them without importing each other."""
from __future__ import annotations

from problems.errors import VevoError


class BackendError(VevoError):
    """A proposer backend cannot be built or used; str() is one line meant for the user."""

    def __init__(self, msg: str) -> None:
        super().__init__(" ".join(str(msg).split()))


class TrainingError(VevoError):
    """Training asked of a backend or a setting that cannot train; one line."""
