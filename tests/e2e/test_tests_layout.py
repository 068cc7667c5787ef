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
    """In a package's folder, or a folder of one of evolve's sub-packages (tests/evolve/search/ for
    evolve/search/), each a package; e2e/ for the tool as a whole."""
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []
    folders = {p.parent.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")}
    subs = {f for f in folders if f.startswith("evolve/")}
    assert folders - subs <= FOLDERS
    assert all((TESTS.parent / f / "__init__.py").is_file() for f in subs), "tests/evolve/X/ mirrors evolve/X/"
    assert all((TESTS / f / "__init__.py").is_file() for f in FOLDERS | subs)
    assert all((TESTS.parent / f / "__init__.py").is_file() for f in PACKAGES)  # the folders name real packages


def test_no_test_loads_bench_code_by_path():
    """bench/ is a package (perf/, studies/, checks/): tests import what they use from it as modules."""
    by_path = [p.relative_to(TESTS).as_posix() for p in sorted(TESTS.rglob("*.py")) if p != Path(__file__).resolve()
               and "spec_from_file_location" in (t := p.read_text()) and "bench" in t]
    assert by_path == []
    bench = TESTS.parent / "bench"
    assert sorted(p.name for p in bench.glob("*.py")) == ["__init__.py"]
    assert sorted(p.name for p in bench.iterdir() if p.is_dir() and (p / "__init__.py").is_file()) == \
        ["checks", "perf", "studies"]


def test_no_test_module_imports_another():
    found = [(p.relative_to(TESTS).as_posix(), m) for p in sorted(TESTS.rglob("*.py")) for m in _imports(p)
             if m.startswith("tests.") and any(part.startswith("test_") for part in m.split("."))]
    assert found == []


def test_no_program_is_run_from_the_top_of_tests():
    assert [p.name for p in TESTS.glob("*.py") if "__main__" in p.read_text()] == []
