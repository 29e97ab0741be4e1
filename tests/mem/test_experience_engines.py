"""Episodes, skills and consolidation on both engines.

The experience suites (test_experience, test_consolidate, test_distill, test_cli_experience) run
on SQLite in their own modules. Here every test of theirs that touches a store runs again, unchanged,
on PostgreSQL: this module loads its own copy of each suite and collects its tests with ``db_path``
(and so ``store``) pointing at a fresh schema on the test server. A suite's direct look at the rows
(``store.db.execute(…)`` with ``?`` placeholders, ``store.db.conn.execute(…)``) reads the same tables
there through the experience tables' adapter. The few tests about SQLite itself (its PRAGMAs, its
``write_transaction``) are left out and have engine-neutral counterparts below, which run on both.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from engine_rows import sql
from engine_targets import fresh_schema
from postgres_server import PostgresServer

from harness_mem.errors import NotFoundError, StorageError
from harness_mem.experience.episode import Episode
from harness_mem.experience.ledger import ConsolidationLedger
from harness_mem.experience.skills import Skill
from harness_mem.experience.store import ExperienceStore
from harness_mem.experience.tables import tables_of
from harness_mem.store import MemoryStore

HERE = Path(__file__).resolve().parent
SUITES = ("test_experience", "test_consolidate", "test_distill", "test_cli_experience")
# What a suite's test must ask for to be about a store (the others test pure functions).
STORE_FIXTURES = {"store", "exp", "db_path"}
# Tests about SQLite itself: their counterparts on both engines are in this module.
SQLITE_ONLY = {
    "test_experience": {
        "test_migration_creates_the_tables",  # PRAGMA table_info: see test_the_migration_makes_the_same_tables
        "test_a_failed_row_write_removes_the_entry",  # write_transaction: see test_a_failed_row_write_…
    },
}


_LOADED: dict[str, types.ModuleType] = {}


def _load(name: str) -> types.ModuleType:
    """A copy of the suite ``name`` of its own (its functions read this copy's globals)."""
    if name not in _LOADED:
        spec = importlib.util.spec_from_file_location(f"_on_postgres_{name}", HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
        _LOADED[name] = module
    return _LOADED[name]


def _collect() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for suite in SUITES:
        module = _load(suite)
        short = suite.removeprefix("test_")
        for name, value in vars(module).items():
            if type(value).__name__ == "FixtureFunctionDefinition":  # the suite's own fixtures come along
                assert name not in found, f"two suites define the fixture {name}"
                found[name] = value
            elif (name.startswith("test_") and inspect.isfunction(value) and value.__module__ == module.__name__
                  and name not in SQLITE_ONLY.get(suite, set())
                  and STORE_FIXTURES & set(inspect.signature(value).parameters)):
                found[f"test_postgresql_{short}__{name.removeprefix('test_')}"] = value
    return found


_COLLECTED = _collect()
globals().update(_COLLECTED)


def test_every_suite_has_tests_collected_here() -> None:
    for suite in SUITES:
        assert any(name.startswith(f"test_postgresql_{suite.removeprefix('test_')}__") for name in _COLLECTED), suite


class _Rows:
    """``store.db`` for a PostgreSQL store, as far as the suites use it: ``execute`` with ``?``
    placeholders (through the experience tables' adapter), and ``conn``, the store's connection."""

    def __init__(self, store: MemoryStore) -> None:
        self._tables = tables_of(store.storage)
        self.conn = self._tables.conn

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        return self._tables.execute(query, params)


@pytest.fixture
def db_path(postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """The suites' store location, on PostgreSQL: a schema of its own. Every PostgreSQL store
    opened meanwhile (by the suite, or by the CLI in-process) answers ``store.db`` with :class:`_Rows`."""
    real = MemoryStore.db

    def db(self: MemoryStore) -> Any:
        return _Rows(self) if self.storage.engine == "postgresql" else real.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(MemoryStore, "db", property(db))
    return fresh_schema(postgres_server)


# ---- on both engines -----------------------------------------------------------------------------


def _columns(store: MemoryStore, table: str) -> list[str]:
    if store.storage.engine == "sqlite":
        return [row[1] for row in store.db.execute(f"PRAGMA table_info({table})")]
    return [name for (name,) in sql(store, "SELECT column_name FROM information_schema.columns"
                                           " WHERE table_schema = current_schema() AND table_name = ?"
                                           " ORDER BY ordinal_position", (table,))]


def test_the_migration_makes_the_same_tables(engine_store: MemoryStore) -> None:
    expected = _load("test_experience").EXPECTED_COLUMNS
    for table, columns in {**expected, "consolidations": [
        "namespace", "session", "episode_id", "last_pk", "last_turn_id", "turns", "facts_pk", "facts",
        "created_at", "updated_at",
    ]}.items():
        assert _columns(engine_store, table) == columns, table


def test_an_episode_goes_with_its_entry_on_both_engines(engine_store: MemoryStore) -> None:
    store = engine_store
    exp = ExperienceStore(store)
    episode_id = exp.record(Episode("deploy the site", "deployed", tools=["shell"], success=True))
    skill = Skill("deploy-site", "Deploys the site to production. Use when a deploy is asked for.",
                  "# Deploy\n\n## Steps\n\n1. Build.\n2. Ship.")
    exp.save_skill(skill, origin="distilled", episode_id=episode_id)
    assert exp.get_skill("deploy-site").source_episodes == (episode_id,)
    assert store.delete(episode_id)  # the entry: its row and the skill's link go with it (cascades)
    with pytest.raises(NotFoundError):
        exp.get(episode_id)
    assert exp.get_skill("deploy-site").source_episodes == ()
    assert sql(store, "SELECT count(*) FROM skill_sources") == [(0,)]
    assert [v.episode_id for v in exp.skill_history("deploy-site")] == [episode_id]  # history outlives it


def test_a_failed_row_write_removes_the_entry_on_both_engines(engine_store: MemoryStore) -> None:
    store = engine_store
    exp = ExperienceStore(store)
    with store.transaction():
        exp.tables.execute(
            "INSERT INTO episodes (id, namespace, situation, outcome, created_at) VALUES ('x', 'default', 's', 'o', 0)"
        )
    with pytest.raises(Exception, match="(?i)unique"):
        exp.record(Episode("deploy the site", "deployed"), id="x")
    with pytest.raises(NotFoundError):
        store.get("x")
    assert store.count() == 0


def test_writes_join_the_stores_transaction(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        exp = ExperienceStore(store)
        with pytest.raises(KeyError), store.transaction():
            exp.record(Episode("deploy the site", "deployed", tools=["shell"]), id="ep-1")
            exp.save_skill(Skill("deploy-site", "Deploys the site to production. Use when a deploy is asked for.",
                                 "# Deploy\n\n## Steps\n\n1. Build.\n2. Ship."), episode_id="ep-1")
            assert exp.get("ep-1").episode.tools == ["shell"]  # seen inside the transaction
            raise KeyError("rolled back")
        assert store.count() == 0 and exp.count() == 0 and exp.list_skills() == []
        with MemoryStore(engine_target, embedder=None) as other:
            assert ExperienceStore(other).count() == 0


def test_the_ledger_moves_its_watermark_once_on_both_engines(engine_store: MemoryStore) -> None:
    store = engine_store
    ledger = ConsolidationLedger(store)
    with store.transaction():
        assert ledger.move_watermark("s-1", seen=None, episode_id="session:s-1", last_pk=5, last_turn_id="t5", turns=5)
        assert not ledger.move_watermark("s-1", seen=None, episode_id="session:s-1", last_pk=6,
                                         last_turn_id="t6", turns=6)
        assert ledger.move_watermark("s-1", seen=5, episode_id="session:s-1", last_pk=7, last_turn_id="t7", turns=7)
        assert not ledger.move_watermark("s-1", seen=5, episode_id="session:s-1", last_pk=8,
                                         last_turn_id="t8", turns=8)
        assert ledger.move_derived_watermark("s-1", seen=0, derived_pk=7, segments=2, facts=1)
        assert not ledger.move_derived_watermark("s-1", seen=0, derived_pk=8, segments=2, facts=1)
        assert ledger.move_derived_watermark("s-1", seen=7, derived_pk=9, segments=1, facts=0)
    assert sql(store, "SELECT last_pk, turns FROM consolidations") == [(7, 7)]
    assert sql(store, "SELECT derived_pk, segments, facts FROM derivations") == [(9, 3, 1)]


def test_episode_filters_read_json_arrays_on_both_engines(engine_store: MemoryStore) -> None:
    exp = ExperienceStore(engine_store)
    one = exp.record(Episode("deploy the site", "deployed", tools=["shell", "http_get"], skills=["deploy-site"],
                             success=True))
    two = exp.record(Episode("read the logs", "found it", tools=["read_file"], success=False))
    assert [e.id for e in exp.list(tool="http_get")] == [one]
    assert [e.id for e in exp.list(skill="deploy-site")] == [one]
    assert [e.id for e in exp.list(tool="read_file", success=False)] == [two]
    assert exp.list(tool="shell", success=False) == []
    assert {e.id for e in exp.list()} == {one, two} and exp.count() == 2


def test_the_suites_stores_are_on_postgresql(store: MemoryStore, db_path: str) -> None:
    assert store.storage.engine == "postgresql" and str(db_path).startswith("postgresql://")
    assert [e.id for e in ExperienceStore(store).list()] == []


def test_a_confined_role_sees_its_namespaces_experience_alone(postgres_server: PostgresServer) -> None:
    import uuid

    import psycopg

    tag = uuid.uuid4().hex[:8]
    schema, alice = f"t_{tag}", f"alice_{tag}"
    with postgres_server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    postgres_server.create_role(alice)
    options = f"?options=-csearch_path%3D{schema},public"
    owner = postgres_server.dsn + options
    skill = Skill("deploy-site", "Deploys the site to production. Use when a deploy is asked for.",
                  "# Deploy\n\n## Steps\n\n1. Build.\n2. Ship.")
    for namespace in ("team-a", "team-b"):
        with MemoryStore(owner, namespace=namespace, embedder=None) as admin:
            exp = ExperienceStore(admin)
            exp.record(Episode(f"{namespace} deploys the site", "deployed", tools=["shell"]), id="ep")
            exp.save_skill(skill, episode_id="ep")
            with admin.transaction():
                ConsolidationLedger(admin).move_watermark("s-1", seen=None, episode_id="ep", last_pk=1,
                                                          last_turn_id="t", turns=1)
    with MemoryStore(owner, namespace="team-a", embedder=None) as admin:
        admin.grant(alice)
        # grant() gives the entries' tables; the experience tables' rights are given by hand here.
        admin.storage.conn.execute(  # type: ignore[attr-defined]
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON episodes, skills, skill_revisions, skill_sources,"
            f" consolidations TO {alice}")
    with MemoryStore(postgres_server.dsn_for(user=alice) + options, namespace="team-a", embedder=None) as store:
        exp = ExperienceStore(store)
        assert [e.episode.situation for e in exp.list()] == ["team-a deploys the site"]
        assert exp.get_skill("deploy-site").source_episodes == ("ep",)
        raw = store.storage.conn  # type: ignore[attr-defined]
        for table in ("episodes", "skills", "consolidations"):
            assert raw.execute(f"SELECT DISTINCT namespace FROM {table}").fetchall() == [("team-a",)], table
        for table in ("skill_revisions", "skill_sources"):
            assert raw.execute(f"SELECT count(*) FROM {table}").fetchone() == (1,), table
        assert raw.execute("UPDATE skills SET description = 'x' WHERE namespace = 'team-b'").rowcount == 0
        with pytest.raises(StorageError, match="row-level security") as refused:
            raw.execute("INSERT INTO consolidations (namespace, session, episode_id, last_pk, last_turn_id, turns,"
                        " created_at, updated_at) VALUES ('team-b', 's-2', 'ep', 1, 't', 1, 0, 0)")
        assert isinstance(refused.value.__cause__, psycopg.errors.InsufficientPrivilege)
    with MemoryStore(owner, namespace="team-b", embedder=None) as admin:
        assert ExperienceStore(admin).get_skill("deploy-site").version == 1


def test_a_promoted_episode_is_listed_in_the_namespace_it_went_to_and_no_longer_in_its_own(
        engine_target: str) -> None:
    with MemoryStore(engine_target, namespace="ada", embedder=None) as ada:
        kept = ExperienceStore(ada).record(Episode("deploy the site", "deployed", tools=["shell"], success=True))
        ExperienceStore(ada).record(Episode("read the logs", "found it", tools=["read_file"]), id="stays")
        assert ada.promote(kept, to="team") == [kept]
        assert [e.id for e in ExperienceStore(ada).list()] == ["stays"]
    with MemoryStore(engine_target, namespace="team", embedder=None) as team:
        shared = ExperienceStore(team)
        assert [e.id for e in shared.list()] == [kept]
        assert shared.get(kept).episode.situation == "deploy the site"
        assert [e.id for e in shared.list(tool="shell")] == [kept]
