"""The words' counts PostgreSQL keeps (0019: how many entries of each keyword lane hold each word, a
namespace apart) are what counting the entries afresh finds, after each path that changes entries;
a semantic recall reads its new words' frequencies from them, and a confined role its own
namespaces' alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from engine_targets import confined_role, fresh_schema
from fake_embedder import HashedEmbedder
from postgres_server import PostgresServer

from harness_mem.cli import cli
from harness_mem.engines.postgres_lexemes import query_tokens
from harness_mem.storage import DERIVED_SOURCE
from harness_mem.store import MemoryStore

WORDS_AFRESH = ("SELECT source IS NOT DISTINCT FROM %s, w, namespace, count(*) FROM entries,"
                " unnest(tsvector_to_array(tokens)) AS w WHERE tokens IS NOT NULL GROUP BY 1, 2, 3")


def stored(word: str) -> str:
    """A word as the keyword index stores it (stemmed)."""
    return query_tokens(f'"{word}"')[0][0]


def words_kept(store: MemoryStore) -> dict[tuple[bool, str, str], int]:
    return {(derived, word, namespace): int(n) for derived, word, namespace, n in store.storage.query(
        "SELECT derived, word, namespace, entries FROM word_counts")}


def assert_true_words(store: MemoryStore) -> None:
    afresh = {(derived, word, namespace): int(n)
              for derived, word, namespace, n in store.storage.query(WORDS_AFRESH, (DERIVED_SOURCE,))}
    assert afresh and words_kept(store) == afresh


def test_the_words_counts_stay_true_through_every_path_that_changes_entries(postgres_server: PostgresServer,
                                                                              tmp_path: Path) -> None:
    target = fresh_schema(postgres_server)
    store = MemoryStore(target, embedder=None)
    store.add("the lighthouse keeper logs the storm", kind="turn", role="user", session="s1", id="a")
    store.add_many([{"content": "the keeper repaints the lighthouse", "kind": "turn", "role": "assistant",
                     "session": "s1", "id": "b"},
                    {"content": "the ferry leaves on Tuesday", "kind": "fact", "id": "c"}])
    store.add("the keeper prefers the night shift", kind="fact", source=DERIVED_SOURCE, id="d")  # the other lane
    assert_true_words(store)
    assert words_kept(store)[(True, "keeper", store.namespace)] == 1
    assert words_kept(store)[(False, "keeper", store.namespace)] == 2
    store.supersede("c", "the ferry leaves on Thursday", id="c2")  # a correction: an update and a write
    assert_true_words(store)
    store.forget("a")  # its tokens go: "storm" was in no other entry
    assert_true_words(store)
    assert not [key for key in words_kept(store) if key[1] == "storm"]
    files = store.storage.query("SELECT pg_relation_filenode('word_counts')")[0][0]
    store.purge()  # word_counts goes into new files (with the entries), room on its pages kept
    assert store.storage.query("SELECT pg_relation_filenode('word_counts')")[0][0] != files
    store.gc()
    assert_true_words(store)
    assert store.storage.query("SELECT reloptions FROM pg_class WHERE oid = 'word_counts'::regclass")[0][0] == [
        "fillfactor=50"]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"i{i}", "content": f"imported lighthouse note {i}", "role": "user",
                                          "session": "s2"}) + "\n" for i in range(5)))
    result = CliRunner().invoke(cli, ["--db", target, "--namespace", store.namespace, "--embedder", "none",
                                      "import", str(source), "--quiet"])
    assert result.exit_code == 0, result.output
    assert_true_words(store)
    store.promote("b", to="shared")  # moved to another namespace: its words with it
    assert_true_words(store)
    assert [key for key in words_kept(store) if key[1] == stored("repaints")] == [(False, stored("repaints"), "shared")]
    store.reindex()
    assert_true_words(store)
    store.close()


def test_a_sync_apply_counts_its_words(postgres_server: PostgresServer, tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "a.db", embedder=None) as a, MemoryStore(fresh_schema(postgres_server),
                                                                          embedder=None) as b:
        a.sync(folder)
        b.sync(folder)
        a.add_many([{"content": f"turn {i} about the harbour", "role": "user", "session": "s"} for i in range(4)])
        a.sync(folder)
        b.sync(folder)  # applies a's writes
        assert_true_words(b)
        a.forget(session="s")
        a.add("one left", id="left")
        a.sync(folder)
        b.sync(folder)
        assert_true_words(b)
        assert not [key for key in words_kept(b) if key[1] == "harbour"]


def test_the_migration_counts_the_words_already_stored(postgres_server: PostgresServer) -> None:
    target = fresh_schema(postgres_server)
    with MemoryStore(target, embedder=None) as store:
        store.add_many([{"content": f"the lighthouse log {i}", "role": "user", "session": "s"} for i in range(3)])
        storage: Any = store.storage
        with storage.transaction():  # as the store was before the counts
            for trigger in ("entries_added_words", "entries_removed_words", "entries_changed_words"):
                storage.conn.execute(f"DROP TRIGGER {trigger} ON entries")
            for function in ("count_added_words", "count_removed_words", "count_changed_words", "recount_words",
                             "entry_words"):
                storage.conn.execute(f"DROP FUNCTION {function}")
            storage.conn.execute("DROP TABLE word_counts")
            storage.conn.execute("DELETE FROM _migrations WHERE number = 19")
    with MemoryStore(target, embedder=None) as store:
        assert words_kept(store)[(False, stored("lighthouse"), store.namespace)] == 3
        assert_true_words(store)


def test_a_semantic_recall_reads_its_new_words_counts_and_no_entry_holding_them(postgres_server: PostgresServer) -> None:
    with MemoryStore(fresh_schema(postgres_server), embedder=HashedEmbedder()) as store:
        store.add_many([{"content": f"note {i} about the {'lighthouse' if i % 3 else 'harbour'} keeper", "role": "user"}
                        for i in range(60)])
        store.add("the lighthouse keeper's log-book", id="phrase")
        asked: list[tuple[str, Any]] = []
        connection: Any = store.storage.conn
        together = connection.fetch_together
        connection.fetch_together = lambda statements: (asked.extend(statements), together(statements))[1]
        assert store.recall("lighthouse keeper harbour", k=5, mode="semantic")
        counting, params = next((sql, params) for sql, params in asked if "word_counts" in sql)
        # Each word's count is read from word_counts (a row a namespace), no entry holding it.
        assert counting.count("FROM word_counts") == 3 and "FROM entries" not in counting, counting
        lane = store.storage.keywords
        assert lane.document_frequencies(["lighthouse", "harbour", "absent"], 61) == [41, 20, 0]
        # A phrase (a caller's FTS5 term of several words) is counted along the index, as before.
        phrase, _ = lane.frequencies_statement(['"lighthouse keeper"', "keeper"])
        assert phrase.count("tokens @@") == 1 and phrase.count("FROM word_counts") == 1
        assert lane.document_frequencies(['"lighthouse keeper"', '"log book"'], 61) == [41, 1]


def test_a_confined_role_reads_its_namespaces_words_alone(postgres_server: PostgresServer) -> None:
    owner = fresh_schema(postgres_server)
    for namespace, words in (("ada", "lighthouse keeper"), ("team", "lighthouse ferry"), ("bob", "zanzibar lighthouse")):
        with MemoryStore(owner, namespace=namespace, embedder=None) as store:
            store.add_many([{"content": f"{words} {i}"} for i in range(3)])
    confined = confined_role(postgres_server, owner, ["ada", "team"])
    with MemoryStore(confined, namespace="ada", embedder=None) as ada:
        # Bob's word is nowhere the role can read: no row names it, and it counts no entry.
        assert {namespace for _, _, namespace in words_kept(ada)} == {"ada", "team"}
        assert not [key for key in words_kept(ada) if key[1] == "zanzibar"]
        assert ada.storage.keywords.document_frequencies(["lighthouse", "zanzibar"], 6) == [6, 0]
        ada.add("a keeper's note", id="mine")
        ada.forget("mine")
    with MemoryStore(owner, namespace="bob", embedder=None) as store:
        assert_true_words(store)
