"""The layers import downward only — problems → evaluators → proposer → evolve — and no module imports itself
back through others. Every import counts, including the lazy ones inside functions: a lazy upward import is
still an upward dependency, only hidden."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["problems", "evaluators", "proposer", "evolve"]  # each may import only from itself and those before


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = mod.split(".") if is_pkg else mod.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        stem = ".".join(base + ([node.module] if node.module else []))
    else:
        stem = node.module or ""
    # `from pkg import mod` names a module when pkg/mod.py exists
    return [f"{stem}.{a.name}" for a in node.names] + [stem]


def import_graph() -> dict[str, set[str]]:
    """module → the vevo modules it imports (anywhere in its body)."""
    files = {_module_name(p): p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = _resolve(mod, path.name == "__init__.py", node)
            else:
                continue
            for n in names:
                while n and n not in files:  # the longest prefix that is a vevo module
                    n = n.rpartition(".")[0]
                if n and n != mod and n.split(".")[0] in LAYERS:
                    deps.add(n)
        graph[mod] = deps
    return graph


def _layer(mod: str) -> int:
    return LAYERS.index(mod.split(".")[0])


def test_layers_import_downward_only():
    upward = sorted(f"{m} -> {d}" for m, deps in import_graph().items() for d in deps if _layer(d) > _layer(m))
    assert upward == []


def _is_ancestor_package(a: str, b: str) -> bool:
    return b.startswith(a + ".")


def test_no_import_cycles():
    graph = import_graph()
    # a package's __init__ may re-export its submodules; that edge is not a dependency between concepts
    graph = {m: {d for d in deps if not _is_ancestor_package(m, d) and not _is_ancestor_package(d, m)}
             for m, deps in graph.items()}
    cycles, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_the_checker_sees_upward_and_circular_imports(tmp_path, monkeypatch):
    """The checker itself can fail: a fake tree with one upward import and one circle is caught."""
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
        (tmp_path / layer / "__init__.py").write_text("")
    (tmp_path / "problems" / "a.py").write_text("def f():\n    from evolve import b\n")
    (tmp_path / "evolve" / "b.py").write_text("from . import c\n")
    (tmp_path / "evolve" / "c.py").write_text("import evolve.b\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    g = import_graph()
    assert "evolve.b" in g["problems.a"] and "evolve.c" in g["evolve.b"] and "evolve.b" in g["evolve.c"]
    import pytest

    with pytest.raises(AssertionError):
        test_layers_import_downward_only()
    with pytest.raises(AssertionError):
        test_no_import_cycles()
