"""The proposer layer's user-facing error, in a module of its own so backends and the spec parser share it
without importing each other."""
from __future__ import annotations

from problems.errors import VevoError


class BackendError(VevoError):
    """A proposer backend cannot be built or used; str() is one line meant for the user."""

    def __init__(self, msg: str) -> None:
        super().__init__(" ".join(str(msg).split()))
