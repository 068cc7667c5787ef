"""proposer/backends/__init__.py: a backend whose module lacks its factory, or is missing, is a one-line BackendError."""
from __future__ import annotations

import pytest

from proposer.backends import _optional
from proposer.errors import BackendError


def test_an_optional_backend_module_without_its_factory_or_missing_is_a_one_line_error():
    with pytest.raises(BackendError, match=r"^proposer 'x:y': json does not define VLLMBackend$"):
        _optional("json", "VLLMBackend", "x:y", "y", {})
    with pytest.raises(BackendError, match=r"^proposer 'x:y': backend module proposer\.nope is not available$"):
        _optional("proposer.nope", "X", "x:y", "y", {})
    assert _optional("json", "dumps", "x:y", [1], {}) == "[1]"  # found: called with (arg, **kw)
