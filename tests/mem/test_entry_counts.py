"""The counts the engines keep (by namespace, kind, role, redaction; forgotten; expired) are exactly
what counting every entry afresh finds, after each path that changes entries, on both engines."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from engine_targets import confined_role, fresh_schema
from postgres_server import PostgresServer

from harness_mem.cli import cli
from harness_mem.counts import entry_counts, redaction_counts
from harness_mem.engines.postgres import PostgresStorage
from harness_mem.engines.sqlite import SQLiteStorage
from harness_mem.models import now_ms
from harness_mem.store import MemoryStore


def _rows(store: MemoryStore, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    storage = store.storage
    if isinstance(storage, SQLiteStorage):
        return list(storage.conn.execute(sql.replace("%s", "?"), params).fetchall())
    assert isinstance(storage, PostgresStorage)
    return list(storage.query(sql, params))


def counted_afresh(store: MemoryStore, now: int) -> dict[str, dict[str, Any]]:
    """Every namespace's counts by a count(*) over every entry, as stats counted before."""
    found: dict[str, dict[str, Any]] = {}
    for namespace, gone, kind, role, redactions, forgotten, n in _rows(
        store, "SELECT namespace, CASE WHEN expires_at <= %s THEN 1 ELSE 0 END, kind, role, redactions,"
               " CASE WHEN forgotten_at IS NULL THEN 0 ELSE 1 END, count(*) FROM entries GROUP BY 1, 2, 3, 4, 5, 6",
        (now,)):
        of = found.setdefault(namespace, {"entries": 0, "expired": 0, "forgotten": 0, "by_kind": {}, "by_role": {},
                                          "redacted": {}, "unredacted": 0})
        if gone:
            of["expired"] += n
            continue
        of["entries"] += n
        of["forgotten"] += n if forgotten else 0
        of["by_kind"][kind] = of["by_kind"].get(kind, 0) + n
        if role is not None:
            of["by_role"][role] = of["by_role"].get(role, 0) + n
        if redactions is None:
            of["unredacted"] += n
        for name, count in redaction_counts(redactions or "{}"):
            of["redacted"][name] = of["redacted"].get(name, 0) + count * n
    for of in found.values():
        of["redacted"] = {k: v for k, v in of["redacted"].items() if v}
    return found


def kept(store: MemoryStore, now: int) -> dict[str, dict[str, Any]]:
    return {namespace: {"entries": c.entries, "expired": c.expired, "forgotten": c.forgotten, "by_kind": c.by("kind"),
                        "by_role": c.by("role"), "redacted": c.by("redacted"), "unredacted": c.unredacted}
            for namespace, c in entry_counts(store.storage, now).items()}


def assert_true_counts(store: MemoryStore) -> None:
    now = now_ms()
    assert kept(store, now) == counted_afresh(store, now)
    stats, fresh = store.stats(), counted_afresh(store, now).get(store.namespace)
    assert fresh is not None
    assert (stats["entries"], stats["by_kind"], stats["by_role"], stats["redacted"]) == (
        fresh["entries"], fresh["by_kind"], fresh["by_role"], fresh["redacted"])


def test_counts_stay_true_through_every_path_that_changes_entries(engine_target: str, tmp_path: Path) -> None:
    store = MemoryStore(engine_target, embedder=None)
    store.add("mail ada@example.com or call +1 415 555 2671", kind="turn", role="user", session="s1", id="a")
    store.add_many([{"content": "noted, ada@example.com", "kind": "turn", "role": "assistant", "session": "s1", "id": "b"},
                    {"content": "the deploy window is Tuesday", "kind": "fact", "id": "c"}])
    assert_true_counts(store)
    store.supersede("c", "the deploy window is Thursday", id="c2")  # a correction: an update and a write
    assert_true_counts(store)
    store.add("expired already", kind="note", id="d", role="user", expires_at="2000-01-01T00:00:00Z")
    assert_true_counts(store)
    store.forget("a")
    assert_true_counts(store)
    store.purge()
    assert_true_counts(store)
    store.gc()  # SQLite rewrites the entries table: its counters must not count the retired copy's rows
    assert_true_counts(store)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"i{i}", "content": f"imported {i}", "role": "user", "session": "s2"}) + "\n"
                              for i in range(5)))
    result = CliRunner().invoke(cli, ["--db", engine_target, "--namespace", store.namespace,
                                      "import", str(source), "--quiet"])
    assert result.exit_code == 0, result.output
    assert store.count(session="s2") == 5  # the import landed in this store
    assert_true_counts(store)
    store.reindex()
    assert_true_counts(store)
    store.close()


def test_an_entry_that_expired_without_a_write_is_counted_apart(engine_store: MemoryStore) -> None:
    store = engine_store
    store.add("kept", kind="fact", id="kept")
    store.add("gone", kind="note", id="gone", role="user", expires_at="2000-01-01T00:00:00Z")
    now = now_ms()
    counts = entry_counts(store.storage, now)[store.namespace]
    assert (counts.entries, counts.expired, counts.by("kind"), counts.by("role")) == (1, 1, {"fact": 1}, {})
    assert kept(store, now) == counted_afresh(store, now)


def test_a_counter_goes_with_the_last_entry_it_counted(engine_target: str) -> None:
    # A counter's key holds the entries' role (words a caller chose, or an identity's pseudonym): once
    # its last entry is purged, no counter may keep it.
    role = f"zqrole{uuid.uuid4().hex[:8]}"
    with MemoryStore(engine_target, embedder=None) as store:
        store.add_many([{"content": f"said {i}", "role": role, "session": "s", "id": f"t{i}"} for i in range(3)])
        store.add("stays", kind="fact", id="stays")
        assert store.stats()["by_role"] == {role: 3}
        store.forget(session="s")
        store.purge()
        keys = _rows(store, "SELECT key FROM entry_counts" if isinstance(store.storage, SQLiteStorage)
                     else "SELECT key FROM namespace_state", ())
        assert keys and not [k for (k,) in keys if role in k]
        assert_true_counts(store)


def test_a_sync_apply_is_counted(engine_target: str, tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "a.db", embedder=None) as a, MemoryStore(engine_target, embedder=None) as b:
        a.sync(folder)
        b.sync(folder)
        a.add_many([{"content": f"turn {i} to ada@example.com", "role": "user", "session": "s"} for i in range(4)])
        a.sync(folder)
        b.sync(folder)  # applies a's writes
        assert b.stats()["entries"] == 4
        assert_true_counts(b)
        a.forget(session="s")
        a.sync(folder)
        b.sync(folder)
        assert_true_counts(b)


def test_the_migration_counts_the_entries_already_stored(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with MemoryStore(path, embedder=None) as store:
        store.add_many([{"content": f"hello {i} ada@example.com", "role": "user", "session": "s"} for i in range(3)])
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM entry_counts")  # as the file was before the counters
        conn.execute("DELETE FROM _migrations WHERE number = 17")
        for trigger in ("entry_counts_added", "entry_counts_removed", "entry_counts_changed"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE entry_counts")
    conn.close()
    with MemoryStore(path, embedder=None) as store:
        assert store.stats()["by_kind"] == {"turn": 3}
        assert store.stats()["redacted"] == {"EMAIL": 3}
        assert_true_counts(store)


def test_a_confined_role_sees_and_moves_only_its_namespaces_counts(postgres_server: PostgresServer) -> None:
    owner = fresh_schema(postgres_server)
    for namespace, n in (("ada", 2), ("team", 3), ("bob", 4)):
        with MemoryStore(owner, namespace=namespace, embedder=None) as store:
            store.add_many([{"content": f"{namespace} {i} ada@example.com", "role": namespace} for i in range(n)])
    confined = confined_role(postgres_server, owner, ["ada", "team"])
    with MemoryStore(confined, namespace="ada", embedder=None) as ada:
        assert {n: c.entries for n, c in entry_counts(ada.storage, now_ms()).items()} == {"ada": 2, "team": 3}
        ada.add("one more of ada's", role="ada")
        ada.forget(next(iter(ada.list(limit=1))).id)
        assert kept(ada, now_ms()) == counted_afresh(ada, now_ms())
    with MemoryStore(owner, namespace="bob", embedder=None) as store:
        now = now_ms()
        assert kept(store, now) == counted_afresh(store, now)
        assert {n: c.entries for n, c in entry_counts(store.storage, now).items()} == {"ada": 3, "bob": 4, "team": 3}


def missing_afresh(store: MemoryStore) -> int:
    """Live entries without a vector, by reading every live entry against the vectors (as health did)."""
    on_sqlite = isinstance(store.storage, SQLiteStorage)
    table = "entries_vec_rowids" if on_sqlite else "entry_vectors"
    exists = ("SELECT count(*) FROM sqlite_master WHERE name = %s" if on_sqlite
              else "SELECT count(to_regclass(%s))")
    without = f" AND NOT EXISTS (SELECT 1 FROM {table} r WHERE r.{'rowid' if on_sqlite else 'pk'} = e.pk)"
    return int(_rows(store, "SELECT count(*) FROM entries e WHERE e.forgotten_at IS NULL"
                            + (without if _rows(store, exists, (table,))[0][0] else ""), ())[0][0])


def assert_true_coverage(store: MemoryStore) -> None:
    assert store.storage.missing_vectors() == missing_afresh(store)
    if store.storage.embedder is not None:  # what health shows (nothing to embed without a model)
        assert store.count_missing_vectors() == missing_afresh(store)
    counts = store.storage.vector_counts()
    assert (counts.entries, counts.missing) == (store.storage.count_all() - _forgotten(store), missing_afresh(store))


def _forgotten(store: MemoryStore) -> int:
    return int(_rows(store, "SELECT count(*) FROM entries WHERE forgotten_at IS NOT NULL", ())[0][0])


def test_entries_without_a_vector_stay_counted_through_every_path(engine_target: str, tmp_path: Path,
                                                                   hashed_embedder: Any) -> None:
    store = MemoryStore(engine_target, embedder=hashed_embedder)
    store.add("the deploy window is Tuesday", kind="fact", id="c")
    store.add_many([{"content": f"turn {i} about the deploy", "role": "user", "session": "s1", "id": f"t{i}"}
                    for i in range(4)])
    assert_true_coverage(store)
    with MemoryStore(engine_target, embedder=None) as without_model:  # written without the model: no vector
        without_model.add_many([{"content": f"unembedded {i}", "role": "user", "session": "s2"} for i in range(3)])
    assert missing_afresh(store) == 3
    assert_true_coverage(store)
    store.supersede("c", "the deploy window is Thursday", id="c2")
    store.add("expired already", kind="note", id="d", expires_at="2000-01-01T00:00:00Z")
    assert_true_coverage(store)
    store.forget("t0")
    store.forget(session="s2")  # entries without a vector, forgotten
    assert_true_coverage(store)
    store.purge()  # deletes forgotten and expired entries, the expired one with its vector
    assert_true_coverage(store)
    store.gc()
    assert_true_coverage(store)
    store.promote("t1", to="team")  # moved to another namespace, its vector along
    assert_true_coverage(store)
    with MemoryStore(engine_target, namespace="team", embedder=hashed_embedder) as team:
        team.forget("t1")
        team.purge()
    assert_true_coverage(store)
    with MemoryStore(engine_target, embedder=None) as without_model:
        without_model.add("one more without a vector", role="user")
    store.reindex()  # embeds what had none
    assert missing_afresh(store) == 0
    assert_true_coverage(store)
    store.reindex(keyword_only=True)  # drops every vector
    assert_true_coverage(store)
    store.close()
    with MemoryStore(engine_target, embedder=hashed_embedder) as again:
        again.reindex()  # the vectors come back: the counts with them
        assert_true_coverage(again)


def test_the_migration_counts_the_vectors_already_stored(postgres_server: PostgresServer,
                                                        hashed_embedder: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    with postgres_server.connect() as conn:
        conn.execute(f"CREATE SCHEMA v_{tag}")
    target = postgres_server.dsn + f"?options=-csearch_path%3Dv_{tag},public"
    with MemoryStore(target, embedder=hashed_embedder) as store:
        store.add_many([{"content": f"hello {i}", "role": "user", "session": "s"} for i in range(3)])
        assert isinstance(store.storage, PostgresStorage)
        # As the store was before the counter: no triggers, no counter, migration 0015 not applied.
        run = store.storage.conn.execute
        run("SELECT drop_vector_counts()")
        run("DROP TRIGGER entry_vectors_added_counts ON entry_vectors")
        run("DROP TRIGGER entry_vectors_removed_counts ON entry_vectors")
        for function in ("keep_vector_counts", "drop_vector_counts", "count_added_vectors", "count_removed_vectors",
                         "count_vector_of_removed_entry", "count_vector_of_moved_entry"):
            run(f"DROP FUNCTION {function}")
        run("DELETE FROM _migrations WHERE number = 15")
    with MemoryStore(target, embedder=None) as without_model:
        without_model.add("no vector", role="user")
    with MemoryStore(target, embedder=hashed_embedder) as store:
        assert store.storage.missing_vectors() == missing_afresh(store) == 1
        store.add("one more, with its vector", role="user")
        assert_true_coverage(store)
