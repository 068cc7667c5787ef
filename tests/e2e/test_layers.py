"""The layers import downward only — problems → evaluators → proposer → evolve — and no module imports itself
back through others. Every import counts, including the lazy ones inside functions: a lazy upward import is
still an upward dependency, only hidden. Inside proposer/ the sub-packages are layers too (PROPOSER_SUBLAYERS).
A lower layer reading the run config (``evolve.config``) by duck typing is an upward dependency no import shows:
``run_config_reads`` finds those reads."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["problems", "evaluators", "proposer", "evolve"]  # each may import only from itself and those before
# proposer's sub-packages, lowest first: a module may import its own sub-package and those of earlier ranks, not a
# peer of its own rank (the answer format knows no backend; a backend knows no answer format and no trainer)
PROPOSER_SUBLAYERS = [  # sub-packages of proposer ("": proposer/__init__.py)
    ["", "errors", "files"],  # the package's shared bottom: errors, file modes
    ["answers", "backends"],
    ["training", "tiny"],
    ["integrations"],
]
# evolve's sub-packages, lowest first, the same rule: the shared bottom (the archive, the run folder's liveness
# marker, stats, progress) directly under evolve/; then the choice rules the config names; the config; the search
# loop; training and analysis side by side (neither knows the other); the UI; launching runs; the CLI on top
EVOLVE_SUBLAYERS = [
    ["", "archive", "liveness", "progress", "stats"],
    ["policies"],
    ["config"],
    ["search"],
    ["training", "analysis"],
    ["ui"],
    ["launch"],
    ["cli"],
]
SUBLAYERS = {"proposer": PROPOSER_SUBLAYERS, "evolve": EVOLVE_SUBLAYERS}
# variable names the run config travels under in evolve/ (``cfg``); a lower layer reading a top-level run-config
# key off one of them is duck typing the run config
RUN_CONFIG_NAMES = {"cfg", "config", "run_cfg", "run_config", "campaign_cfg"}


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


def _sublayer(mod: str) -> tuple[int, str] | None:
    """(rank, sub-package) of a proposer or evolve module: the longest sub-package prefix it falls under."""
    top = mod.split(".")[0]
    best = None
    for rank, group in enumerate(SUBLAYERS.get(top, ())):
        for name in group:
            pkg = f"{top}.{name}" if name else top  # "" is the package's own __init__, not a prefix
            if (mod == pkg or (name and mod.startswith(pkg + "."))) and (best is None or len(pkg) > len(best[1])):
                best = (rank, pkg)
    return best


def _core(mod: str) -> bool:
    return _sublayer(mod) is not None and _sublayer(mod)[0] == 0


def sublayer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports inside proposer/ or evolve/ that point up its sub-layers or across to a peer of the same rank."""
    wrong = []
    for m, deps in graph.items():
        if m.split(".")[0] not in SUBLAYERS:
            continue
        rank, pkg = _sublayer(m)
        for d in deps:
            if d.split(".")[0] != m.split(".")[0]:
                continue
            d_rank, d_pkg = _sublayer(d)
            if d_rank > rank or (d_rank == rank and d_pkg != pkg and not (_core(m) and _core(d))):
                wrong.append(f"{m} -> {d}")
    return sorted(wrong)


def test_proposer_sublayers_point_one_way():
    """Inside proposer/: answers and backends below training and tiny, integrations on top; peers apart."""
    graph = import_graph()
    unplaced = sorted(m for m in graph if m.split(".")[0] == "proposer" and _sublayer(m) is None)
    assert unplaced == [], "a proposer module outside every sub-layer: add its sub-package to PROPOSER_SUBLAYERS"
    assert [v for v in sublayer_violations(graph) if v.startswith("proposer")] == []


def test_evolve_sublayers_point_one_way():
    """Inside evolve/: policies below the config, the config below the search, training and analysis apart above
    it, then the UI, launching and the CLI; no module directly under evolve/ but the shared bottom and the CLI."""
    graph = import_graph()
    unplaced = sorted(m for m in graph if m.split(".")[0] == "evolve" and _sublayer(m) is None)
    assert unplaced == [], "an evolve module outside every sub-layer: put it in a sub-package of EVOLVE_SUBLAYERS"
    assert [v for v in sublayer_violations(graph) if v.startswith("evolve")] == []


def _sections() -> dict[str, set[str]]:
    """The run config's sections (its fields that are models) → their keys; and "" → its top-level keys."""
    from pydantic import BaseModel

    from evolve.config.schema import CampaignConfig

    out: dict[str, set[str]] = {"": set()}
    for name, field in CampaignConfig.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out[name] = set(ann.model_fields)
        else:
            out[""].add(name)
    return out


def run_config_reads(source: str, sections: dict[str, set[str]]) -> list[str]:
    """Where a module reads the run config: ``X.train.lr``, ``t = cfg.executor``, ``f(x.sampling)``,
    ``getattr(cfg.executor, "workers")``, ``getattr(cfg, "train")`` (a section of the run config read as an
    attribute, anything but a method call such as ``model.train()``), and ``cfg.seed`` (a top-level run-config
    key read off a variable named like the run config). Returns "line: expression" strings."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in sections:
            up = parents.get(node)
            if isinstance(up, ast.Call) and up.func is node:
                continue  # a method call: model.train()
            if isinstance(up, ast.Attribute) and up.attr not in sections[node.attr]:
                continue  # a chain into something that is not the section's key
            hits.append(f"{node.lineno}: {ast.unparse(up if isinstance(up, ast.Attribute) else node)}")
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in RUN_CONFIG_NAMES and node.attr in sections[""]):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in sections):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(set(hits), key=lambda h: int(h.split(":")[0]))


def test_lower_layers_do_not_read_the_run_config():
    """problems/, evaluators/ and proposer/ get small typed values or configs of their own (evolve/ builds them
    from the run config); reading ``cfg.train.*`` there would tie them to evolve's config by duck typing."""
    sections = _sections()
    reads = [f"{path.relative_to(ROOT)}:{hit}" for layer in LAYERS if layer != "evolve"
             for path in sorted((ROOT / layer).rglob("*.py"))
             for hit in run_config_reads(path.read_text(encoding="utf-8"), sections)]
    assert reads == []


def test_the_config_read_checker_sees_duck_typed_reads():
    """The checker can fail: each way of reading the run config is caught, method calls and own configs are not."""
    sections = _sections()
    caught = run_config_reads(
        "def f(cfg, x, model, t):\n"
        "    a = cfg.executor.workers\n"
        "    s = x.train\n"
        "    b = getattr(cfg.executor, 'unsafe_no_sandbox', False)\n"
        "    c = getattr(x, 'executor')\n"
        "    d = cfg.seed\n"
        "    model.train()\n"
        "    e = t.cfg.train_mode\n"
        "    return cfg.clip_eps\n", sections)
    assert [h.split(":")[0] for h in caught] == ["2", "3", "4", "5", "6"]
    assert "2: cfg.executor.workers" in caught and "6: cfg.seed" in caught


def test_the_sublayer_checker_sees_upward_and_sideways_imports(tmp_path, monkeypatch):
    """A backend importing the trainer (upward) and the answer format importing a backend (a peer) are caught;
    the trainer importing a backend (downward) is not."""
    for pkg in LAYERS + ["proposer/backends", "proposer/training", "proposer/answers"]:
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "proposer" / "backends" / "hf.py").write_text("from proposer.training.trainer import x\n")
    (tmp_path / "proposer" / "training" / "trainer.py").write_text("from proposer.backends import hf\n")
    (tmp_path / "proposer" / "answers" / "naming.py").write_text("def f():\n    import proposer.backends.hf\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert sublayer_violations(import_graph()) == ["proposer.answers.naming -> proposer.backends.hf",
                                                   "proposer.backends.hf -> proposer.training.trainer"]
    assert _sublayer("proposer.newmodule") is None  # a new top-level module must be given a sub-layer


def test_the_evolve_sublayer_checker_sees_upward_sideways_and_flat_modules(tmp_path, monkeypatch):
    """The search importing the UI (upward) and training importing analysis (a peer) are caught, the UI reading
    analysis (downward) is not; a new module directly under evolve/ is unplaced."""
    for pkg in LAYERS + ["evolve/search", "evolve/training", "evolve/analysis", "evolve/ui"]:
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "evolve" / "search" / "campaign.py").write_text("def f():\n    from ..ui import server\n")
    (tmp_path / "evolve" / "training" / "probe.py").write_text("from evolve.analysis.curves import fold\n")
    (tmp_path / "evolve" / "analysis" / "curves.py").write_text("from ..archive import Archive\n")
    (tmp_path / "evolve" / "archive.py").write_text("")
    (tmp_path / "evolve" / "ui" / "server.py").write_text("from evolve.analysis import curves\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert sublayer_violations(import_graph()) == ["evolve.search.campaign -> evolve.ui",
                                                   "evolve.search.campaign -> evolve.ui.server",
                                                   "evolve.training.probe -> evolve.analysis.curves"]
    assert _sublayer("evolve.newmodule") is None and _sublayer("evolve.archive") == (0, "evolve.archive")


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


# the archive's schema has one owner: evolve/archive/ writes and reads it; everything else goes through `Archive`
SQL = ("SELECT ", "INSERT ", "UPDATE ", "DELETE FROM", "CREATE TABLE")
SQL_SCANNED = LAYERS + ["bench", "scripts"]


def sql_outside_archive(root: Path) -> list[str]:
    """``path:line`` of each string that holds SQL, each ``sqlite3.connect`` and each reach into an archive's
    connection (``._conn``: a PRAGMA, a raw query) outside evolve/archive/."""
    out = []
    for top in SQL_SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith("evolve/archive/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
                if text is not None and any(k in text for k in SQL) or isinstance(node, ast.Attribute) and (
                        node.attr == "_conn" or node.attr == "connect" and isinstance(node.value, ast.Name)
                        and node.value.id == "sqlite3"):
                    out.append(f"{rel}:{node.lineno}")
    return out


def test_only_the_archive_package_speaks_sql():
    """UI pages, benches and studies read runs through `Archive` (its `browse`, `reports`, `replay` facets), so
    a schema change touches one package."""
    assert sql_outside_archive(ROOT) == []


def test_the_sql_checker_sees_a_query_and_a_connection(tmp_path):
    (tmp_path / "evolve" / "archive").mkdir(parents=True)
    (tmp_path / "evolve" / "archive" / "browse.py").write_text('Q = "SELECT id FROM programs"\n')
    (tmp_path / "evolve" / "ui").mkdir()
    (tmp_path / "evolve" / "ui" / "store.py").write_text('import sqlite3\nc = sqlite3.connect("x")\n'
                                                         'rows = c.execute("SELECT key FROM meta")\n')
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "study.py").write_text('"""No SQL here: selecting a seed."""\n'
                                                 'camp.archive._conn.execute("PRAGMA synchronous=FULL")\n')
    assert sql_outside_archive(tmp_path) == ["evolve/ui/store.py:2", "evolve/ui/store.py:3", "bench/study.py:2"]
