"""The public surface: honest ``__all__``, one-way imports, no heavy import at start-up."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import harness_loop
import harness_mem

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize("package", [harness_mem, harness_loop])
def test_all_lists_exactly_the_exported_names(package: types.ModuleType) -> None:
    for name in package.__all__:  # names that load on first use are loaded now
        getattr(package, name)
    exported = {
        name for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "annotations"
    }
    assert set(package.__all__) == exported
    assert package.__all__ == sorted(package.__all__, key=str.lower) or package.__all__ == sorted(package.__all__)


def test_harness_mem_never_imports_harness_loop() -> None:
    importing = re.compile(r"^\s*(from|import)\s+harness_loop\b", re.MULTILINE)
    offenders = [p.name for p in (SRC / "harness_mem").rglob("*.py") if importing.search(p.read_text())]
    assert offenders == []


def test_importing_the_library_does_not_load_the_model() -> None:
    code = "import harness_mem, harness_loop, sys; print('torch' in sys.modules or 'sentence_transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.anyio
async def test_async_store_round_trip(tmp_path: Path) -> None:
    async with harness_mem.AsyncMemoryStore(tmp_path / "a.db", embedder=None) as store:
        entry = await store.add("the user prefers short answers", kind="fact")
        await store.add_many([{"text": f"turn {i}", "role": "user"} for i in range(3)])
        hits = await store.recall("short answers")
        assert [h.entry.id for h in hits] == [entry.id]
        assert len(await store.list(kind="turn")) == 3
        assert (await store.get(entry.id)).content == entry.content
        assert await store.delete(entry.id)
        assert (await store.stats())["entries"] == 3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The modules that hold SQL: the engines behind the storage seam (and the SQLite file's connection,
# migrations and vectors), the experience tables, and the orchestrator's run tables. The store and
# its recall, corrections, sessions and maintenance reach the rows through the seam's methods.
STORAGE_MODULES = {
    "harness_mem/db.py",
    "harness_mem/migrations.py",
    "harness_mem/vectors.py",
    "harness_mem/engines/sqlite.py",
    "harness_mem/engines/sqlite_files.py",
    "harness_mem/engines/sqlite_rewrite.py",
    "harness_mem/engines/sqlite_rekey.py",
    "harness_mem/engines/postgres_rekey.py",
    "harness_mem/engines/sqlite_keywords.py",
    "harness_mem/engines/sqlite_where.py",
    "harness_mem/engines/postgres.py",
    "harness_mem/engines/postgres_connection.py",
    "harness_mem/engines/postgres_rewrite.py",
    "harness_mem/experience/store.py",
    "harness_mem/experience/ledger.py",
    "harness_mem/experience/tables.py",
    "harness_loop/runstore.py",
    "harness_loop/runtables.py",
    "harness_loop/runtables_sqlite.py",
    "harness_loop/runtables_postgres.py",
}
# What the seam keeps engine-free: no SQL, and no engine module imported.
ABOVE_THE_SEAM = ("store", "recall", "corrections", "sessions", "maintenance", "bm25", "fusion", "filters", "storage")
_SQL_CALL = re.compile(r"\.(execute|executemany|executescript)\(|\._conn\b|\.db\.conn\b")


def test_sql_lives_only_in_the_storage_modules() -> None:
    offenders = [
        str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
        if str(path.relative_to(SRC)) not in STORAGE_MODULES and _SQL_CALL.search(path.read_text())
    ]
    assert offenders == []


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of both packages by dotted name: (its file, whether it is a package)."""
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _import_graph() -> dict[str, set[str]]:
    """Which of our modules each module imports: every import, type-only and function-level ones too."""
    import ast

    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    if f"{target}.{alias.name}" in modules:
                        graph[name].add(f"{target}.{alias.name}")
                    elif target in modules:
                        graph[name].add(target)
            elif isinstance(node, ast.Import):
                graph[name] |= {alias.name for alias in node.names if alias.name in modules}
    return graph


def test_no_two_modules_import_each_other_even_through_others() -> None:
    graph = _import_graph()
    # Tarjan's strongly connected components: a component of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert cycles == []


def _private_names(path: Path) -> set[str]:
    """The private names a module defines: functions, classes, module globals and attributes it sets."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """``x._name`` (or ``from m import _name``) where ``_name`` belongs to another of our modules."""
    import ast

    modules = _modules()
    private = {name: _private_names(path) for name, (path, _) in modules.items()}
    offenders = []
    for name, (path, _) in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                used = [alias.name for alias in node.names]
            elif isinstance(node, ast.Attribute):
                used = [node.attr]
            else:
                continue
            for attr in used:
                if not attr.startswith("_") or attr.startswith("__") or attr in private[name]:
                    continue
                owners = [other for other, names in private.items() if attr in names and other != name]
                if owners:
                    offenders.append(f"{name}:{node.lineno} uses {attr} of {', '.join(owners)}")
    assert offenders == []


def test_the_store_and_its_parts_use_the_storage_seam_alone() -> None:
    """Above the seam no module imports an engine (the facade opens one through ``engines``), the
    SQLite connection module or the vector index."""
    graph = _import_graph()
    engine_modules = {m for m in graph if m.startswith("harness_mem.engines.")} | {
        "harness_mem.db", "harness_mem.vectors", "harness_mem.migrations"}
    offenders = {
        f"harness_mem.{module}": sorted(graph[f"harness_mem.{module}"] & engine_modules)
        for module in ABOVE_THE_SEAM if graph[f"harness_mem.{module}"] & engine_modules
    }
    # The facade takes the default location and the cache size from the connection module.
    assert offenders == {"harness_mem.store": ["harness_mem.db"]}


def _imports_from_harness_mem(path: Path) -> list[tuple[str, str]]:
    """(module, name) for every ``from harness_mem… import name`` in ``path``."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "harness_mem":
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.startswith("harness_mem.")]
    return found


def test_harness_loop_uses_only_public_harness_mem_names() -> None:
    import importlib

    problems = []
    for path in (SRC / "harness_loop").rglob("*.py"):
        for module_name, name in _imports_from_harness_mem(path):
            module = importlib.import_module(module_name)
            public = getattr(module, "__all__", None)
            if any(part.startswith("_") for part in module_name.split(".")) or public is None:
                problems.append(f"{path.name}: {module_name} is not a public module")
            elif name and name not in public and not isinstance(getattr(module, name, None), types.ModuleType):
                problems.append(f"{path.name}: {module_name}.{name} is not in its __all__")
    assert problems == []


def test_the_import_worker_loads_no_store() -> None:
    """A large import's worker process imports harness_mem.jsonl: it must not pay for the store,
    numpy, sqlite-utils or the experience models (it only parses, validates and redacts)."""
    code = (
        "import sys, harness_mem.jsonl;"
        " print(sorted(m for m in ('harness_mem.store', 'numpy', 'sqlite_utils', 'harness_mem.experience')"
        " if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr
