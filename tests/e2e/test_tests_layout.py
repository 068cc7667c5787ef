"""The test tree mirrors the packages (tests/README.md): every test module sits in a package's folder or e2e/,
each folder is a package, no test module imports another (shared code lives in conftest.py and *_helpers.py), and
no program is run from tests/ itself, where the folders named after the packages would shadow them."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGES = {"problems", "evaluators", "proposer", "evolve"}
FOLDERS = PACKAGES | {"e2e"}


def _imports(path: Path) -> list[str]:
    """Every module an import in ``path`` names, relative ones resolved inside tests/."""
    pkg = ["tests", *path.parent.relative_to(TESTS).parts]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[: len(pkg) - node.level + 1]) if node.level else ""
            mod = ".".join(x for x in (base, node.module or "") if x)
            out += [mod] + [f"{mod}.{a.name}" for a in node.names]
    return out


def test_every_test_module_sits_in_a_package_folder():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []
    assert {p.parent.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")} <= FOLDERS
    assert all((TESTS / f / "__init__.py").is_file() for f in FOLDERS)
    assert all((TESTS.parent / f / "__init__.py").is_file() for f in PACKAGES)  # the folders name real packages


def test_no_test_module_imports_another():
    found = [(p.relative_to(TESTS).as_posix(), m) for p in sorted(TESTS.rglob("*.py")) for m in _imports(p)
             if m.startswith("tests.") and any(part.startswith("test_") for part in m.split("."))]
    assert found == []


def test_no_program_is_run_from_the_top_of_tests():
    assert [p.name for p in TESTS.glob("*.py") if "__main__" in p.read_text()] == []
