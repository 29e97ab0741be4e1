"""Hermetic tests: no real home directory, no hub, no network; bugs raise instead of being printed."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from engine_targets import ENGINES, fresh_schema
from fake_embedder import HashedEmbedder, hashed_by_name
from fake_openai import FakeServer
from postgres_server import PostgresServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The light runtime's model export (made once, keyed by the model's fingerprint) is kept out of the
# user's cache directory, and shared by the runs of this machine: making it takes seconds.
os.environ.setdefault("HARNESS_MEM_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"harness-mem-test-cache-{os.getuid()}"))
# Identity keys (harness_mem.identities) are made in a directory of this run, never the user's:
# one for the whole run, so a file built by one test and read by another keeps its key.
os.environ.setdefault("HARNESS_MEM_CONFIG", tempfile.mkdtemp(prefix="harness-mem-test-config-"))


def pytest_configure(config: pytest.Config) -> None:
    # Both CLIs let unexpected errors keep their traceback under tests (harness_mem.cliutils).
    sys._called_from_test = True  # type: ignore[attr-defined]
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A pytest-xdist worker runs each test some hundred frames deeper than a plain run: the same
        # room for recursion (a deeply nested JSON line parses as it would in the CLI) needs more.
        sys.setrecursionlimit(sys.getrecursionlimit() + 500)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_MEM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HARNESS_MEM_DB", raising=False)
    monkeypatch.delenv("HARNESS_MEM_NAMESPACE", raising=False)
    monkeypatch.delenv("HARNESS_MEM_EMBEDDER", raising=False)  # --embedder's default is what tests expect
    monkeypatch.setenv("HARNESS_MEM_RAISE_ERRORS", "1")


@pytest.fixture(autouse=True)
def _test_default_embedder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default embedder (``embedder="auto"``, the CLI's ``--embedder auto``) is the instant
    HashedEmbedder, unless the test is marked ``real_model``: loading MiniLM costs seconds a process."""
    if request.node.get_closest_marker("real_model") is None:
        monkeypatch.setattr("harness_mem.store.default_embedder", HashedEmbedder)
        monkeypatch.setattr("harness_mem.store.named_embedder", hashed_by_name)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[object]:
    """A keyword-only store (no embedder): fast, for everything that is not about vectors."""
    from harness_mem.store import MemoryStore

    with MemoryStore(db_path, embedder=None) as opened:
        yield opened


@pytest.fixture(scope="session")
def embedder() -> object:
    """The real all-MiniLM-L6-v2 from the installed package, loaded once per test run."""
    from harness_mem.providers.embeddings import MiniLMEmbedder

    model = MiniLMEmbedder()
    model.embed(["warm up"])
    return model


@pytest.fixture
def hashed_embedder() -> HashedEmbedder:
    """A fresh deterministic test embedder (its ``calls`` start empty)."""
    return HashedEmbedder()


@pytest.fixture
def semantic_store(db_path: Path, embedder: object) -> Iterator[object]:
    """A store on the real model: for tests whose assertion rests on what the model understands."""
    from harness_mem.store import MemoryStore

    with MemoryStore(db_path, embedder=embedder) as opened:  # type: ignore[arg-type]
        yield opened


@pytest.fixture
def hashed_store(db_path: Path, hashed_embedder: HashedEmbedder) -> Iterator[object]:
    """A store on the test embedder: for tests of the vector plumbing (filters, fusion, reindex…)."""
    from harness_mem.store import MemoryStore

    with MemoryStore(db_path, embedder=hashed_embedder) as opened:
        yield opened


FAKE_SERVER = Path(__file__).resolve().parent / "loop" / "fake_openai_server.py"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_SERVER), "--port", "0", "--lifetime", "120"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server prints its port once it listens
        assert line.startswith("PORT "), f"fake server did not start: {line!r}"
        fake = FakeServer(int(line.split()[1]))
        yield fake
        fake.control.close()
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def fake(server: FakeServer) -> FakeServer:
    server.reset()
    return server


# A real PostgreSQL 18 + pgvector server (tests/postgres_server.py), started at the first test that
# asks for it and stopped at the end of the run. Not skipped when it cannot start: CI must run these.
@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
    except Exception as exc:  # any cause: the message says which, and the test fails
        pytest.fail(f"the PostgreSQL test server could not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The superuser's DSN on the ``harness_mem`` database, which has the ``vector`` extension."""
    return postgres_server.dsn


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """The engine a test runs on, once each: ``"sqlite"`` or ``"postgresql"``."""
    return str(request.param)


@pytest.fixture
def fresh_target(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], str]:
    """Makes new, empty store locations on this test's engine, as many as a test needs (a copy's
    destination, a second store, one per generated example). On SQLite the first is ``db_path``,
    each later one a file in a folder of its own (what the byte-level proofs read)."""
    made = itertools.count()

    def make() -> str:
        n = next(made)
        if engine != "sqlite":
            return fresh_schema(request.getfixturevalue("postgres_server"))
        if n == 0:
            return str(tmp_path / "memory.db")
        folder = tmp_path / f"store-{n}"
        folder.mkdir()
        return str(folder / "memory.db")

    return make


@pytest.fixture
def engine_target(fresh_target: Callable[[], str]) -> str:
    """Where a new, empty store lives, once per engine: a SQLite file, or a schema of its own in
    the test server's database (the conformance suite runs every test on both)."""
    return fresh_target()


@pytest.fixture
def sqlite_store(db_path: Path) -> Iterator[object]:
    """``store``, on SQLite alone, for a module whose ``store`` is ``engine_store``: its tests about
    SQLite itself (or about something else entirely, at SQLite's cost) use this one."""
    from harness_mem.store import MemoryStore

    with MemoryStore(db_path, embedder=None) as opened:
        yield opened


@pytest.fixture
def sqlite_hashed_store(db_path: Path, hashed_embedder: HashedEmbedder) -> Iterator[object]:
    """``hashed_store``, on SQLite alone (as ``sqlite_store``): for the tests of its vector index."""
    from harness_mem.store import MemoryStore

    with MemoryStore(db_path, embedder=hashed_embedder) as opened:
        yield opened


@pytest.fixture
def sqlite_semantic_store(db_path: Path, embedder: object) -> Iterator[object]:
    """``semantic_store``, on SQLite alone (as ``sqlite_store``): for the tests of its vector index."""
    from harness_mem.store import MemoryStore

    with MemoryStore(db_path, embedder=embedder) as opened:  # type: ignore[arg-type]
        yield opened


@pytest.fixture
def engine_store(engine_target: str) -> Iterator[object]:
    """``store`` on each engine: a keyword-only store, for tests that are not about SQLite itself."""
    from harness_mem.store import MemoryStore

    with MemoryStore(engine_target, embedder=None) as opened:
        yield opened


@pytest.fixture
def engine_hashed_store(engine_target: str, hashed_embedder: HashedEmbedder) -> Iterator[object]:
    """``hashed_store`` on each engine: the vector plumbing (filters, fusion, reindex…) on both."""
    from harness_mem.store import MemoryStore

    with MemoryStore(engine_target, embedder=hashed_embedder) as opened:
        yield opened


@pytest.fixture
def engine_semantic_store(engine_target: str, embedder: object) -> Iterator[object]:
    """``semantic_store`` on each engine: what rests on the real model's understanding, on both."""
    from harness_mem.store import MemoryStore

    with MemoryStore(engine_target, embedder=embedder) as opened:  # type: ignore[arg-type]
        yield opened


@pytest.fixture
def small_rekey_steps(monkeypatch: pytest.MonkeyPatch) -> int:
    """A SQLite rekeying or key rotation rewrites this many rows a step (instead of hundreds): a test
    sees its steps, resumes and crashes midway on a store of a few dozen rows."""
    from harness_mem.engines import sqlite_rekey

    monkeypatch.setattr(sqlite_rekey, "ROWS_PER_STEP", 25)
    return 25


@pytest.fixture
def mount_point(tmp_path: Path) -> Iterator[Path]:
    """A directory to mount a small tmpfs on (the disk-full tests); unmounted afterwards if it was."""
    mount = tmp_path / "small"
    mount.mkdir()
    yield mount
    if subprocess.run(["mountpoint", "-q", str(mount)]).returncode == 0:
        subprocess.run(["umount", str(mount)], check=True)
