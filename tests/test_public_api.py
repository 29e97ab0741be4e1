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


# The modules that hold SQL: the memory store and its recall, maintenance and vectors, the file's
# connection and migrations, the experience tables, and the orchestrator's run tables. Everything
# else reaches the file through their methods.
STORAGE_MODULES = {
    "harness_mem/db.py",
    "harness_mem/corrections.py",
    "harness_mem/sessions.py",
    "harness_mem/migrations.py",
    "harness_mem/store.py",
    "harness_mem/recall.py",
    "harness_mem/bm25.py",
    "harness_mem/maintenance.py",
    "harness_mem/vectors.py",
    "harness_mem/experience/store.py",
    "harness_mem/experience/ledger.py",
    "harness_loop/runstore.py",
}
_SQL_CALL = re.compile(r"\.(execute|executemany|executescript)\(|\._conn\b|\.db\.conn\b")


def test_sql_lives_only_in_the_storage_modules() -> None:
    offenders = [
        str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
        if str(path.relative_to(SRC)) not in STORAGE_MODULES and _SQL_CALL.search(path.read_text())
    ]
    assert offenders == []


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
