"""proposer/backends/base.py declares every backend attribute and method other code reads beyond the protocol
(OPTIONAL, OPTIONAL_METHODS): a bare backend gets the declared defaults, the bundled one has what it is read
for, and no code outside proposer/backends/ probes a declared name with getattr/hasattr behind the contract."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from proposer.backends import TINY_CHECKPOINT
from proposer.backends.base import OPTIONAL, OPTIONAL_METHODS, method, optional

ROOT = Path(__file__).resolve().parents[2]
# the one probe left: the answer format may not import a backend (tests/e2e/test_layers.py)
KNOWN_PROBES = {("proposer/answers/naming.py", "entry_name")}


class Bare:
    name, policy_version, capabilities = "bare", 0, frozenset()


def test_a_backend_without_the_optional_attributes_reads_as_their_defaults():
    b = Bare()
    assert {k: optional(b, k) for k in OPTIONAL} == OPTIONAL
    assert all(method(b, m) is None for m in OPTIONAL_METHODS)
    b.chat, b.sleep = True, "not callable"
    assert optional(b, "chat") is True and method(b, "sleep") is None
    with pytest.raises(KeyError):
        optional(b, "undeclared")
    with pytest.raises(KeyError):
        method(b, "undeclared")


@pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled tiny checkpoint")
def test_the_bundled_backend_has_what_training_reads_off_it():
    from proposer.backends import make_backend

    b = make_backend("tiny")
    try:
        assert optional(b, "tokenizer") is not None and optional(b, "eos_ids") and optional(b, "max_context") > 0
        assert (Path(optional(b, "path")) / "config.json").is_file() and optional(b, "chat") is False
        assert all(method(b, m) for m in ("encode_prompt", "pin_sampling", "unpin_sampling", "live_sampling"))
        assert method(b, "sleep") is None  # an in-process model has no engine memory to free
    finally:
        b.close()


def test_no_code_outside_the_backends_probes_a_declared_name_behind_the_contract():
    declared = set(OPTIONAL) | set(OPTIONAL_METHODS)
    found = set()
    for path in sorted(ROOT.glob("*/**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.split("/")[0] not in ("evolve", "proposer", "problems", "evaluators") or \
                rel.startswith("proposer/backends/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 and \
                    isinstance(node.args[1], ast.Constant) and node.args[1].value in declared:
                found.add((rel, node.args[1].value))
    assert found - KNOWN_PROBES == set(), "read these through proposer.backends.base.optional / method"
