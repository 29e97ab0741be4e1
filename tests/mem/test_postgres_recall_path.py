"""What a recall on PostgreSQL sends to the server, and what an import leaves behind there.

A recall across a network pays a round trip for every statement, and the server's own time for
each plan: keyword ranking is one statement that scores BM25 (the same scores as SQLite: see
test_engines), the vector search walks the HNSW graph, and the other reads of a recall ride on
statements it sends anyway (the hits' rows with the ranking, several statements in one pipeline,
the snapshot's COMMIT sent without waiting for its answer). An import puts the HNSW index off and builds it whole at its end; one
stopped midway leaves that to the next handle that writes. Statement counts here are the engine's
own (each ``execute`` is one round trip, and each ``fetch_together``); no timing is asserted. Which plan the server picks for
the vector search depends on the table's size: bench/bench_postgres.py shows it at 20,000 entries.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from engine_targets import fresh_schema, schema_of
from fake_embedder import HashedEmbedder, StartReader
from psycopg import sql as pgsql

from harness_mem import MemoryStore
from harness_mem.engines import postgres
from harness_mem.engines.postgres_reads import RecallReads, recall_reads
from harness_mem.errors import MissingVectorsWarning
from harness_mem.jsonl import import_jsonl
from harness_mem.passages import PASSAGE_CANDIDATES, embed_entries
from harness_mem.storage import DERIVED_SOURCE

pytestmark = pytest.mark.slow

WORDS = ("lake", "pottery", "camping", "painting", "adoption", "counseling", "running", "sunrise", "mountains")


def _lines(n: int) -> list[str]:
    return [json.dumps({"id": f"e{i}", "text": f"note {i} about {WORDS[i % len(WORDS)]} and {WORDS[(i * 7) % len(WORDS)]}",
                        "role": "user" if i % 2 else "assistant", "session": f"s{i // 20}",
                        "timestamp": f"2024-01-{1 + i // 1000:02d}T{(i // 60) % 24:02d}:{i % 60:02d}:00Z"})
            for i in range(n)]


@pytest.fixture
def store(postgres_server: Any) -> Iterator[MemoryStore]:
    with MemoryStore(fresh_schema(postgres_server), embedder=HashedEmbedder()) as opened:
        import_jsonl(opened, _lines(3000), workers=0)
        yield opened


class Sent:
    """Every statement the store's connection sends, with its parameters, and the round trips:
    one a statement, or one for statements sent together; how many rows came back for those sent
    together."""

    def __init__(self, store: MemoryStore) -> None:
        self.statements: list[tuple[str, Any]] = []
        self.answered: dict[str, int] = {}
        self.trips = 0
        connection = store.storage.conn
        execute, together = connection.execute, connection.fetch_together

        def counted(sql: Any, params: Any = None) -> Any:
            self.statements.append((str(sql), params))
            self.trips += 1
            return execute(sql, params)

        def counted_together(statements: Any) -> Any:
            self.statements.extend((str(sql), params) for sql, params in statements)
            self.trips += 1
            found = together(statements)
            self.answered.update((str(sql), len(rows)) for (sql, _), rows in zip(statements, found, strict=True))
            return found

        connection.execute = counted  # type: ignore[method-assign]
        connection.fetch_together = counted_together  # type: ignore[method-assign]


def test_a_keyword_recall_ranks_and_reads_its_hits_in_one_statement(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="keyword")
    sent = Sent(store)
    hits = store.recall("camping by the lake", k=5, mode="keyword")
    assert hits and all({"camping", "lake"} & set(h.entry.content.split()) for h in hits)
    # The BM25 statement, its snapshot's BEGIN sent with it, and what the recall asks before its
    # snapshot (told what the last recall read, checked here: see postgres_reads), the hits' rows and
    # index texts read in it; the COMMIT sent without waiting for its answer.
    assert sent.trips == 1, [s for s, _ in sent.statements]
    assert sum("ts_rank_cd" in sql for sql, _ in sent.statements) == 1
    assert "ts_rank_cd" in sent.statements[-1][0]  # nothing read after the ranking


def test_a_semantic_recall_walks_the_hnsw_graph_in_few_round_trips(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="semantic")
    sent = Sent(store)
    hits = store.recall("pottery painting", k=5, mode="semantic")
    assert len(hits) == 5
    # The search (its snapshot's BEGIN and the check of what the recall was told before it sent with
    # it; the candidates' passages, the hits' rows and index texts and the keyword counts their
    # coverage weighs read in it), and, in the same round trip, the frequencies of the words it had
    # not seen before (kept for the next recalls); the COMMIT sent without waiting for its answer.
    assert sent.trips == 1, [s for s, _ in sent.statements]
    assert sum("FROM word_counts" in sql for sql, _ in sent.statements) == 1
    sent = Sent(store)
    assert len(store.recall("painting pottery", k=5, mode="semantic")) == 5
    assert sent.trips == 1, [s for s, _ in sent.statements]
    assert not [sql for sql, _ in sent.statements if "FROM word_counts" in sql]  # remembered
    assert "<=>" in sent.statements[-1][0]  # nothing read after the search
    # One vector search, the graph walked at the connection's own ef_search (no SET around it).
    assert sum("<=>" in sql for sql, _ in sent.statements) == 1
    assert not [sql for sql, _ in sent.statements if sql.startswith(("SET", "SAVEPOINT"))]


def _rows_of(node: dict[str, Any], name: str) -> int | None:
    """The rows the part of a plan (as it ran) named ``name`` (a CTE's) gave, if it is there."""
    if node.get("Subplan Name") == name:
        return int(node["Actual Rows"])
    return next((rows for child in node.get("Plans", ()) if (rows := _rows_of(child, name)) is not None), None)


def test_a_semantic_search_reads_no_more_of_the_walk_than_its_hits(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="semantic")
    sent = Sent(store)
    assert len(store.recall("pottery painting", k=5, mode="semantic")) == 5
    search, params = next((sql, params) for sql, params in sent.statements if "<=>" in sql)
    # Each vector's distance is computed once: the query vector is compared with the vectors once
    # in the search, the distance ordered by its name (twice, the server computed it twice a vector
    # scanned); the other time it is a parameter, the later windows' distances are computed.
    assert search.count("<=> %s::halfvec") == 1 + search.count("p.embedding <=> %s::halfvec")
    assert sum(param == params[1] for param in params) == search.count("<=> %s::halfvec")
    assert "ORDER BY distance" in search and "ORDER BY embedding" not in search
    # No entry of this store has later windows: only the k nearest come back, not k + 200 of which
    # the 200 could not rise (only a later window lifts an entry past the k-th), and the walk is
    # read no further than those k (a count of it, read to its end, is asked only when too few passed).
    assert sent.answered[search] == 5
    plan = store.storage.query("EXPLAIN (ANALYZE, FORMAT JSON) " + search, params)[0][0][0]["Plan"]
    # Read by a sort in groups of 32 rows at least: not the walk's 600 (HNSW_EF_SEARCH), nor 205.
    assert _rows_of(plan, "CTE nearest") <= 64, plan


def test_a_hybrid_recall_reads_each_candidates_vector_and_windows_once(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="hybrid")
    sent = Sent(store)
    assert len(store.recall("camping by the lake", k=5, mode="hybrid")) == 5
    # As semantic, with the keyword ranking (its counts reused by coverage), the cosines of the
    # keyword candidates (their windows and speakers along) in the search's round trip, and the
    # fused hits' rows.
    assert sent.trips == 3, [s for s, _ in sent.statements]
    assert not [sql for sql, _ in sent.statements if "FROM entry_passages WHERE" in sql]
    assert not [sql for sql, _ in sent.statements if sql.startswith("SELECT pk, role, session")]


def _as_recall_runs_it(store: MemoryStore, sql: str, params: Any) -> dict[str, Any]:
    """The plan of a statement a recall sent, as it ran there: the statement psycopg prepared,
    executed in a snapshot on its generic plan (EXPLAIN of the text itself would plan it for its values)."""
    pieces = sql.split("%s")  # as psycopg sends it: each placeholder numbered
    sent_as = "".join(f"{piece}${i}" for i, piece in enumerate(pieces[:-1], 1)) + pieces[-1]
    storage = store.storage
    with storage.snapshot():
        (name,), = storage.query("SELECT name FROM pg_prepared_statements WHERE statement = %s", (sent_as,))
        execute = pgsql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {}({})").format(
            pgsql.Identifier(name), pgsql.SQL(", ").join(map(pgsql.Literal, params)))
        return storage.query(execute)[0][0][0]["Plan"]  # type: ignore[no-any-return]


def _scans_of(node: dict[str, Any], table: str) -> int:
    """How many times the plan (as it ran) read ``table``: each scan of it, each time it ran."""
    own = int(node.get("Actual Loops", 0)) if node.get("Relation Name") == table else 0
    return own + sum(_scans_of(child, table) for child in node.get("Plans", ()))


def test_a_hybrid_recalls_keyword_candidates_come_without_their_rows(store: MemoryStore) -> None:
    # Fusion takes the keyword ranking 200 deep and reads only its winners' rows. Asked by a
    # parameter whether the rows come along, the generic plan a recall runs on read every
    # candidate's row and the turn before it, and dropped them (2.5 of 4.4 ms at 20,000 entries).
    for _ in range(6):  # prepared by the fifth (psycopg), and planned once
        store.recall("camping by the lake", k=5, mode="hybrid")
    sent = Sent(store)
    assert len(store.recall("camping by the lake", k=5, mode="hybrid")) == 5
    ranking, params = next((sql, params) for sql, params in sent.statements if "ts_rank_cd" in sql)
    plan = _as_recall_runs_it(store, ranking, params)
    assert int(plan["Actual Rows"]) > 5  # the candidates, deeper than the hits
    assert _scans_of(plan, "entries") == 1, plan  # the entries holding its words, and no row of any read again
    # A keyword recall's ranking, as deep as its hits, reads them along (no round trip after it).
    for _ in range(6):
        store.recall("camping by the lake", k=5, mode="keyword")
    sent = Sent(store)
    store.recall("camping by the lake", k=5, mode="keyword")
    ranking, params = next((sql, params) for sql, params in sent.statements if "ts_rank_cd" in sql)
    assert _scans_of(_as_recall_runs_it(store, ranking, params), "entries") > 1


def test_a_question_naming_a_speaker_by_its_pronouns_costs_no_round_trip_more(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="hybrid")
    sent = Sent(store)
    hits = store.recall("when did I go camping by the lake", k=5, mode="hybrid", explain=True)
    # The user's turns named by "I" are known from what the recall was told before its snapshot: no
    # statement reads speakers: the ranking, the search, the hits' rows.
    assert not [sql for sql, _ in sent.statements if "spelled" in sql or sql.startswith("SELECT coalesce((SELECT value")]
    assert sent.trips == 3 and "e.pk = ANY(%s)" in sent.statements[-1][0], [s for s, _ in sent.statements]
    assert set(sent.statements[-1][1][-1]) == {store.storage.pk_of(store.namespaces[0], h.entry.id) for h in hits}
    assert hits[0].entry.role == "user" and hits[0].components["speaker"]["score"] > 0  # type: ignore[index]


def test_the_speakers_a_question_names_are_read_from_the_counters_not_the_turns(store: MemoryStore) -> None:
    # "I" names the user, who said half of this store's 3,000 turns: the speakers are read from the
    # counters kept per (kind, role) (a few rows a namespace), not from each of the user's turns
    # (34 ms at 200,000 entries). Every spelling is found, each once.
    store.add("a note in capitals", role="USER")
    hits = store.recall("what did I say about the lake", k=5, mode="hybrid", explain=True)
    assert hits and any(h.components["speaker"]["score"] > 0 for h in hits)  # type: ignore[index]
    assert store.storage.roles_named(store.namespaces[0], ["user", "lake"]) == ["USER", "user"]
    params = RecallReads.params(store.namespaces)
    plan = store.storage.query("EXPLAIN (ANALYZE, FORMAT JSON) " + recall_reads(passages=True), params)[0][0][0]["Plan"]
    assert _rows_read(plan, "entries") < 100, plan


def _rows_read(node: dict[str, Any], table: str) -> int:
    """How many rows the plan (as it ran) read from ``table``, over every scan of it and every time it ran."""
    own = int(node.get("Actual Rows", 0) * node.get("Actual Loops", 1)) if node.get("Relation Name") == table else 0
    return own + sum(_rows_read(child, table) for child in node.get("Plans", ()))


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_a_recall_leaves_no_transaction_open(store: MemoryStore, mode: str) -> None:
    # Its snapshot's COMMIT is sent without waiting for the answer: read before the next statement,
    # which runs on its own again (read committed, not the recall's repeatable read).
    store.recall("camping by the lake", k=5, mode=mode)
    assert not store.storage.conn.in_transaction
    assert store.storage.query("SHOW transaction_isolation") == [("read committed",)]
    store.add("a note written after the recall, about the lake")
    assert store.recall("written after the recall", k=1, mode=mode)[0].entry.content.startswith("a note written")


def test_cited_turns_are_read_together(store: MemoryStore) -> None:
    store.forget("e5")
    sent = Sent(store)
    found = store.get_many(["e7", "e3", "missing", "e5", "e7"])
    assert [entry.id for entry in found] == ["e7", "e3"]  # as asked, each once; gone and unknown ones left out
    assert len(sent.statements) == 1


def _without_vector_index(server: Any, target: str) -> None:
    """What an import killed after putting the HNSW index off leaves in ``target``."""
    with server.connect() as conn:
        conn.execute(f"DROP INDEX {schema_of(target)}.entry_vectors_hnsw")


def test_an_import_builds_the_vector_index_whole_at_its_end(postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "DEFERRED_INDEX_ROWS", 100)
    with MemoryStore(fresh_schema(postgres_server), embedder=HashedEmbedder()) as opened:
        sent = Sent(opened)
        import_jsonl(opened, _lines(400), workers=0, batch_size=100)
        dropped = [sql for sql, _ in sent.statements if sql.startswith("DROP INDEX")]
        assert dropped == ["DROP INDEX IF EXISTS entry_vectors_hnsw"]  # once its rows outnumber the store's
        assert opened.storage.query("SELECT to_regclass('entry_vectors_hnsw') IS NOT NULL")[0][0]
        assert opened.recall("note 123 about", k=1, mode="semantic")[0].entry.id == "e123"
        # A second import into what is now a larger store keeps the index as it goes.
        sent.statements.clear()
        import_jsonl(opened, _lines(450)[400:], workers=0, batch_size=100)
        assert not [sql for sql, _ in sent.statements if sql.startswith("DROP INDEX")]


def test_the_vector_index_is_built_with_room_for_its_graph(postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Past what maintenance_work_mem holds (64 MB by default: ~40,000 vectors' graph) pgvector
    # builds on disk, several times as long: the build raises it to the graph's size, for itself.
    monkeypatch.setattr(postgres, "DEFERRED_INDEX_ROWS", 100)
    monkeypatch.setattr(postgres, "_HNSW_INDEX", postgres._HNSW_INDEX + ";"
                        " INSERT INTO settings (key, value) SELECT 'seen.memory', current_setting('maintenance_work_mem')"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value")
    target = fresh_schema(postgres_server)
    with MemoryStore(target, embedder=HashedEmbedder()) as opened:
        import_jsonl(opened, _lines(400), workers=0, batch_size=100)
        assert opened.storage.setting("seen.memory") == "64MB"  # 400 vectors: the server's own is room enough
        monkeypatch.setattr(postgres, "_GRAPH_BYTES_A_DIMENSION", 100)  # as if each took 38 kB
        import_jsonl(opened, _lines(2000)[400:], workers=0, batch_size=400)
        assert opened.storage.setting("seen.memory") == "75000kB"  # 2,000 vectors of 384 dimensions at 100 bytes each
        monkeypatch.setattr(postgres, "_GRAPH_BYTES_A_DIMENSION", 10**6)
    _without_vector_index(postgres_server, target)
    with MemoryStore(target, embedder=HashedEmbedder()) as opened:
        opened.add("a note that mends the index")
        assert opened.storage.setting("seen.memory") == "2GB"  # at most
        assert opened.storage.query("SHOW maintenance_work_mem") == [("64MB",)]  # for the build alone


def test_a_large_import_leaves_the_planner_its_counts_and_the_keyword_index_merged(postgres_server: Any,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Right after a large import, the planner knew nothing of the rows and every keyword match read
    # the GIN index's pending list: recall took 3 to 7 times as long until autovacuum came by.
    monkeypatch.setattr(postgres, "DEFERRED_INDEX_ROWS", 100)
    with MemoryStore(fresh_schema(postgres_server), embedder=HashedEmbedder()) as opened:
        import_jsonl(opened, _lines(400), workers=0, batch_size=100)
        # The planner's statistics (written by ANALYZE itself, not reported later as its counters are).
        counted = {name for (name,) in opened.storage.query(
            "SELECT DISTINCT tablename FROM pg_stats WHERE schemaname = current_schema()")}
        assert {"entries", "entry_vectors", "word_counts"} <= counted
        assert opened.storage.query("SELECT gin_clean_pending_list('entries_tokens'::regclass)")[0][0] == 0


def test_a_searchs_candidates_are_looked_up_in_an_index_alone(postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each of a search's ~200 candidates was a random page of the entries' table, most of them cold
    # in a large store: their filters' columns and speakers are read from entries_candidates (0020).
    monkeypatch.setattr(postgres, "DEFERRED_INDEX_ROWS", 100)
    with MemoryStore(fresh_schema(postgres_server), embedder=HashedEmbedder()) as opened:
        import_jsonl(opened, _lines(600), workers=0, batch_size=200)
        sent = Sent(opened)
        hits = opened.recall("camping by the lake", k=5, mode="semantic")
        sql, params = next((sql, params) for sql, params in sent.statements if "nearest AS" in sql)
        with opened.storage.snapshot():
            plan = "\n".join(row[0] for row in opened.storage.query("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params))
    # (How many heap pages it still reads depends on what the visibility map marks: a transaction
    # open elsewhere while the import's VACUUM ran, autovacuum's own, keeps its rows unmarked.)
    assert "Index Only Scan using entries_candidates" in plan, plan
    assert len(hits) == 5


def test_a_large_import_inside_a_callers_transaction_settles_too(postgres_server: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # VACUUM cannot run inside a transaction: there the import's end analyzes and merges as before.
    monkeypatch.setattr(postgres, "DEFERRED_INDEX_ROWS", 100)
    with MemoryStore(fresh_schema(postgres_server), embedder=HashedEmbedder()) as opened:
        with opened.transaction():
            import_jsonl(opened, _lines(400), workers=0, batch_size=100)
        assert opened.count() == 400
        assert opened.storage.query("SELECT gin_clean_pending_list('entries_tokens'::regclass)")[0][0] == 0
        assert opened.recall("note 123 about", k=1, mode="semantic")[0].entry.id == "e123"


def test_an_import_stopped_midway_leaves_the_index_to_the_next_writer(postgres_server: Any) -> None:
    target = fresh_schema(postgres_server)
    with MemoryStore(target, embedder=HashedEmbedder()) as opened:
        opened.add("a first note about the lake")
        opened.storage.query("SELECT 1")  # bound
    _without_vector_index(postgres_server, target)
    with MemoryStore(target, embedder=HashedEmbedder()) as opened:
        opened.add("a second note, about pottery")
        assert opened.storage.query("SELECT to_regclass('entry_vectors_hnsw') IS NOT NULL")[0][0]
        assert opened.recall("pottery", k=1, mode="semantic")[0].entry.content == "a second note, about pottery"


def test_what_a_recall_read_before_its_snapshot_is_read_again_once_it_writes(store: MemoryStore) -> None:
    storage = store.storage
    asked: dict[str, Any] = {}

    def recall() -> None:
        asked["version"] = storage.data_version()
        asked["named"] = storage.roles_named(store.namespaces[0], ["assistant"])
        sent = Sent(store)
        assert storage.data_version() == asked["version"] and not storage.has_derived(store.namespaces[0])
        assert sent.trips == 0  # answered from what was read for the recall
        store.add("a note written while a recall is under way", role="assistant")
        asked["after"] = storage.data_version()  # asked again: the write may have changed it
        asked["trips"] = sent.trips

    storage.recalling(store.namespaces, recall)
    assert asked["named"] == ["assistant"]
    assert asked["after"] > asked["version"] and asked["trips"] > 1


def _another_handle(store: MemoryStore, **options: Any) -> MemoryStore:
    """A second handle on ``store``'s database (another process's, as far as the first can tell)."""
    return MemoryStore(store.storage.dsn, **options)


def test_a_recall_told_what_the_last_one_read_is_run_again_when_a_new_speaker_is_named(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="hybrid")  # what it read is what the next is told
    with _another_handle(store, embedder=HashedEmbedder()) as other:
        other.add("Zelda went camping by the lake at sunrise", role="Zelda")
        other.add("Yusuf went camping by the lake at sunrise", role="Yusuf")
    # The speaker prior lifts the turn Zelda said: only if this recall knows Zelda speaks here,
    # which the last recall's reads did not say.
    hits = store.recall("what did Zelda say about camping by the lake", k=3, mode="hybrid", explain=True)
    assert hits[0].entry.role == "Zelda" and hits[0].components["speaker"]["score"] > 0  # type: ignore[index]
    sent = Sent(store)
    store.recall("what did Zelda say about camping by the lake", k=3, mode="hybrid")
    assert sent.trips == 3  # told right this time: no statement of its own for what it asks first


def test_a_recall_told_what_the_last_one_read_sees_what_another_handle_derived(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="keyword")
    with _another_handle(store, embedder=HashedEmbedder()) as other:
        other.add("a summary: the lake trip was cancelled by the storm", kind="summary", source=DERIVED_SOURCE)
    # A summary is looked for in the derived lane too: this namespace holds a derived entry now.
    hits = store.recall("storm cancelled lake trip", k=3, mode="keyword", kind="summary")
    assert [h.entry.content for h in hits] == ["a summary: the lake trip was cancelled by the storm"]


def test_a_recall_told_what_the_last_one_read_runs_once_while_another_handle_writes(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="semantic")
    with _another_handle(store, embedder=HashedEmbedder()) as other:
        for i in range(3):  # each write a new data version and a new count of entries, all with vectors
            other.add(f"note {i} written by another handle, about the lake")
            sent = Sent(store)
            assert store.recall("camping by the lake", k=3, mode="semantic")
            assert sent.trips == 1, [s for s, _ in sent.statements]  # not run again, nothing asked apart


def test_a_recall_told_what_the_last_one_read_warns_of_entries_written_since_without_a_vector(store: MemoryStore) -> None:
    store.recall("warm up the connection", mode="hybrid")
    with _another_handle(store, embedder=None) as other:
        other.add("a note about the lake written with no model")
    with pytest.warns(MissingVectorsWarning, match="no vector yet for 1 of 3,001 entries"):
        store.recall("camping by the lake", k=3, mode="hybrid")


def test_threads_recall_on_connections_of_their_own_and_reuse_them(store: MemoryStore) -> None:
    # Each thread's snapshot and write on a connection of its own (one connection, shared, would run
    # one thread's statements inside another's transaction); a pool of 4 threads makes 4 at most,
    # and threads started one after another reuse the one an ended thread left.
    from concurrent.futures import ThreadPoolExecutor

    expected = {mode: [h.entry.id for h in store.recall("camping by the lake", k=5, mode=mode)]
                for mode in ("keyword", "semantic", "hybrid")}

    def recall_and_write(i: int) -> tuple[str, list[str]]:
        mode = ("keyword", "semantic", "hybrid")[i % 3]
        if i % 5 == 0:
            store.add(f"a note {i} written from a thread, about pottery")
        return mode, [h.entry.id for h in store.recall("camping by the lake", k=5, mode=mode)]

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(recall_and_write, range(60)))
    assert all(ids == expected[mode] for mode, ids in answers)
    assert 2 <= store.storage.pool.count() <= 5  # the opening thread's, and one a worker at most
    for i in range(6):  # one short-lived thread after another
        worker = threading.Thread(target=recall_and_write, args=(i,))
        worker.start()
        worker.join()
    assert store.storage.pool.count() <= 5
    assert store.count() == 3000 + 12 + 2  # every write stored


def test_a_recall_plans_its_ranking_and_search_once(store: MemoryStore) -> None:
    # Planned again at each call, the ranking's and the search's statements cost 1-5 ms of a recall;
    # inside its snapshot they run on the plan made once (psycopg prepares a statement sent five times).
    for i in range(8):
        for mode in ("keyword", "semantic"):
            store.recall(f"camping by the lake {i}", k=5, mode=mode)
    plans = dict(store.storage.query(
        "SELECT CASE WHEN statement LIKE '%%ts_rank_cd%%' THEN 'ranking' ELSE 'search' END, max(generic_plans)"
        " FROM pg_prepared_statements WHERE statement LIKE '%%ts_rank_cd%%' OR statement LIKE '%%nearest AS%%'"
        " GROUP BY 1"))
    assert plans.get("ranking", 0) > 0 and plans.get("search", 0) > 0, plans
    # Outside a recall the connection plans as it did (a write's statements see their values).
    assert store.storage.query("SHOW plan_cache_mode") == [("auto",)]


def _stored(target: str) -> list[tuple[Any, ...]]:
    """Every entry as stored (but when it was written), with its keyword row and vector, in order."""
    from harness_mem.rows import COLUMN_NAMES

    columns = ", ".join(f"e.{name}" for name in COLUMN_NAMES if name != "updated_at")
    with MemoryStore(target, embedder=HashedEmbedder()) as opened:
        return opened.storage.query(
            f"SELECT {columns}, e.tokens::text, e.token_count, v.embedding::text FROM entries e"
            " LEFT JOIN entry_vectors v ON v.pk = e.pk ORDER BY e.pk")


def test_an_import_with_workers_stores_what_one_process_stores(postgres_server: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Twelve sessions interleaved, across batches and two imports (a session's first turn of a
    # batch, anywhere in it, has a stored turn before it), a line already stored in the middle of a
    # batch (dropped: the turn after it has another turn before it), personal data redacted before
    # anything leaves this process.
    import random

    from harness_mem.engines import postgres_tokens

    pick = random.Random(7)
    lines = [json.dumps({"id": f"t{i}", "text": f"turn {i} about {WORDS[i % 9]}, mail ann{i % 4}@example.com",
                         "role": "user", "session": f"s{pick.randrange(12)}",
                         "timestamp": f"2024-02-01T10:{i // 60 % 60:02d}:{i % 60:02d}Z"}) for i in range(600)]
    first, second = lines[:250], [*lines[250:310], lines[249], *lines[310:]]
    monkeypatch.setattr(postgres_tokens, "PARALLEL_TOKEN_ROWS", 40)  # with workers, a batch's tokens made there
    targets = {}
    for workers in (0, 1):
        targets[workers] = fresh_schema(postgres_server)
        with MemoryStore(targets[workers], embedder=HashedEmbedder()) as opened:
            for part in (first, second):
                report = import_jsonl(opened, part, workers=workers, batch_size=100)
                assert report.ok
    alone, together = _stored(targets[0]), _stored(targets[1])
    assert len(alone) == 600 and alone == together
    assert not [row for row in together if "@example.com" in repr(row)]  # redacted, tokens and all


def test_an_import_writes_a_batchs_vectors_and_previous_turns_in_a_statement_each(postgres_server: Any) -> None:
    with MemoryStore(fresh_schema(postgres_server), embedder=HashedEmbedder()) as opened:
        import_jsonl(opened, _lines(200), workers=0, batch_size=100)  # a table not analysed yet
        sent = Sent(opened)
        import_jsonl(opened, _lines(600)[200:], workers=0, batch_size=100)
        vectors = [sql for sql, _ in sent.statements if sql.startswith("INSERT INTO entry_vectors")]
        assert len(vectors) == 4  # a batch's in one statement: the trigger counting them runs once a batch
        looked_up = [(sql, params) for sql, params in sent.statements if "unnest(%s::text[], %s::text[]" in sql]
        assert len(looked_up) == 4  # a batch's sessions' turns before it, together
        sql, params = looked_up[-1]
        plan = "\n".join(row[0] for row in opened.storage.query("EXPLAIN " + sql, params))
        # One walk back along each session's index, not along every turn of the namespace.
        assert "entries_by_session" in plan and "entries_by_kind" not in plan, plan


def test_an_import_stores_each_vector_and_sentence_as_the_halves_of_what_was_embedded(postgres_server: Any) -> None:
    """Vectors go to the server as one binary array a batch (HalfVectors): each stored vector, and
    each sentence's, is its embedding rounded to halves as a search's question is (HalfVector)."""
    embedder = HashedEmbedder()
    said = ["I moved to Lisbon last spring for a new job. My sister still lives in Porto with her kids.",
            "The lake was calm this morning and we went out early. Nobody else was on the water at all."]
    lines = [json.dumps({"id": f"t{i}", "text": text, "role": "user", "session": "s"}) for i, text in enumerate(said)]
    with MemoryStore(fresh_schema(postgres_server), embedder=embedder) as opened:
        import_jsonl(opened, lines, workers=0)
        embedded = embed_entries(embedder, [(text, "user", "turn") for text in said])
        stored = dict(opened.storage.query(
            "SELECT e.id, halfvec_send(v.embedding) FROM entries e JOIN entry_vectors v ON v.pk = e.pk"))
        sentences = opened.storage.query(
            "SELECT e.id, p.start, p.stop, halfvec_send(p.embedding) FROM entries e JOIN entry_passages p ON p.pk = e.pk"
            " ORDER BY e.id, p.start")
    for i, embedding in enumerate(embedded):
        assert bytes(stored[f"t{i}"]) == postgres.HalfVector.of(embedding.vector)
        assert embedding.passages  # each turn says two things: its sentences are passages
        assert [(start, stop, bytes(sent)) for id_, start, stop, sent in sentences if id_ == f"t{i}"] == [
            (p.start, p.stop, postgres.HalfVector.of(p.vector)) for p in embedding.passages]


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_narrow_time_windows_vector_search_compares_its_rows_in_one_statement(store: MemoryStore, mode: str) -> None:
    # One day of the store's three (every row of it compared, exactly): the search counts the rows
    # that pass and compares them in one statement, and reads along what the graph's search reads
    # (windows, speakers, the hits' rows, the keyword counts). Asked apart, 7 round trips, not 1-3.
    window = {"since": "2024-01-02T00:00:00Z", "until": "2024-01-02T23:59:59Z"}
    store.recall("painting pottery", mode=mode, **window)  # the words' frequencies, kept
    sent = Sent(store)
    hits = store.recall("pottery painting", k=5, mode=mode, **window)
    assert len(hits) == 5 and all(h.entry.created_at.day == 2 for h in hits)
    assert sent.trips == (1 if mode == "semantic" else 3), [s for s, _ in sent.statements]
    assert sum("<=>" in sql for sql, _ in sent.statements) == (1 if mode == "semantic" else 2)
    # The same as comparing every row of the window by hand.
    exact = store.storage.query(
        "SELECT e.id FROM entry_vectors v JOIN entries e ON e.pk = v.pk WHERE e.created_at BETWEEN %s AND %s"
        " ORDER BY v.embedding <=> %s::halfvec, e.pk LIMIT 5",
        (1704153600000, 1704239999000, postgres.vector_literal(store.embed_queries(["pottery painting"])[0])))
    if mode == "semantic":
        assert [h.entry.id for h in hits] == [row[0] for row in exact]


def test_a_time_window_no_entry_passes_finds_nothing_and_a_wide_one_walks_the_graph(store: MemoryStore) -> None:
    assert store.recall("pottery painting", k=5, mode="semantic", since="2030-01-01T00:00:00Z") == []
    wide = store.recall("pottery painting", k=5, mode="semantic", since="2023-01-01T00:00:00Z")
    assert len(wide) == 5
    # Above EXACT_ROWS rows pass: the graph is walked (a smaller limit here makes this store large).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(postgres, "EXACT_ROWS", 100)
        sent = Sent(store)
        assert [h.entry.id for h in store.recall("pottery painting", k=5, mode="semantic",
                                                  since="2023-01-01T00:00:00Z")] == [h.entry.id for h in wide]
        assert any("nearest AS MATERIALIZED" in sql for sql, _ in sent.statements)


FILLER = ("The pipeline builds the image, runs the suite and deploys to staging before production. " * 6).strip()


def _nearest_read(sent: Sent) -> int:
    """How many of the walk's nearest the filters met in the search ``sent`` holds (its LIMIT)."""
    search = next(sql for sql, _ in sent.statements if "nearest AS MATERIALIZED" in sql)
    found = re.search(r"nearest AS MATERIALIZED \(SELECT \* FROM \(SELECT pk, embedding <=> %s::halfvec AS distance"
                      r" FROM entry_vectors ORDER BY distance LIMIT (\d+)\) w", search)
    assert found, search
    return int(found.group(1))


def _hits_reading_the_whole_walk(store: MemoryStore, question: str) -> list[tuple[str, float]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RecallReads, "hold_the_vectors", lambda self: False)
        return [(h.entry.id, h.score) for h in store.recall(question, k=5, mode="semantic")]


def test_a_vector_search_reads_a_quarter_more_of_its_nearest_than_it_needs(postgres_server: Any) -> None:
    # Where the namespaces recalled hold nearly every vector, the search reads what it needs of the
    # walk's nearest and a quarter more (4k at least: 20 here, where no entry keeps later windows),
    # not all of the walk's 600 (which a scan of every vector sorts); the hits are those of the whole walk.
    dsn = fresh_schema(postgres_server)
    with MemoryStore(dsn, embedder=StartReader(), namespace="big") as big, \
            MemoryStore(dsn, embedder=StartReader(), namespace="small") as small:
        import_jsonl(big, _lines(1000), workers=0)
        import_jsonl(small, _lines(60), workers=0)
        for store in (big, small):
            store.recall("warm up the connection", mode="semantic")
        sent = Sent(big)
        hits = [(h.entry.id, h.score) for h in big.recall("pottery painting", k=5, mode="semantic")]
        assert _nearest_read(sent) == 20 and len(hits) == 5
        assert hits == _hits_reading_the_whole_walk(big, "pottery painting")

        # The owner's recall of a namespace holding few of the vectors: most of the nearest are
        # another's, and the filters meet the whole walk; the 4k nearest would have been too few.
        sent = Sent(small)
        hits = [(h.entry.id, h.score) for h in small.recall("pottery painting", k=5, mode="semantic")]
        assert _nearest_read(sent) == postgres.HNSW_EF_SEARCH and sent.trips == 1
        assert len(hits) == 5 and {h.entry.namespace for h in small.recall("pottery painting", k=5, mode="semantic")} == {"small"}

        # An entry that keeps later windows may rise past the k-th by one of them: the search needs
        # k and the 200 entries whose windows it weighs, and reads a quarter more of the nearest.
        big.add(f"{FILLER} Maria adopted a greyhound called Biscuit. {FILLER}", id="long")
        assert big.storage.query("SELECT count(*) FROM entry_passages")[0][0] > 0
        big.recall("warm up the connection", mode="semantic")  # told no entry kept any: run again
        sent = Sent(big)
        hits = [(h.entry.id, h.score) for h in big.recall("pottery painting", k=5, mode="semantic")]
        assert _nearest_read(sent) == 5 + PASSAGE_CANDIDATES + (5 + PASSAGE_CANDIDATES) // 4 < postgres.HNSW_EF_SEARCH
        assert hits == _hits_reading_the_whole_walk(big, "pottery painting")


# A long entry whose first window is nearer the question than most notes (one word of it), and
# farther than the ~2 in 9 about pottery; a later window of it holds the question.
LONG = f"Pottery. {FILLER} Maria adopted a greyhound called Biscuit, her pottery greyhound called Biscuit. {FILLER}"
QUESTION = "pottery greyhound called Biscuit"


def _lookups(node: dict[str, Any], inside: bool = False) -> int:
    """How many entries the plan (as it ran) looked up under the filters: its reads of the entries'
    table in the CTEs that place the search's candidates (the hits' rows are read in another)."""
    inside = inside or node.get("Subplan Name") in ("CTE first", "CTE placed")
    own = int(node["Actual Loops"]) if inside and node.get("Relation Name") == "entries" else 0
    return own + sum(_lookups(child, inside) for child in node.get("Plans", ()))


def test_past_the_k_th_only_an_entry_rising_by_a_window_is_looked_up(postgres_server: Any) -> None:
    # The 200 entries after the k nearest are weighed by their windows, and only one whose window
    # rises into the k is looked up under the filters: one of another namespace, or superseded,
    # rises as well and is left out; the hits are those of the whole walk's (every one looked up).
    dsn = fresh_schema(postgres_server)
    with MemoryStore(dsn, embedder=StartReader(), namespace="big") as big, \
            MemoryStore(dsn, embedder=StartReader(), namespace="small") as small:
        import_jsonl(big, _lines(500), workers=0)
        big.add(LONG, id="long")  # among the 200 after the k: ~110 notes are about pottery
        big.add(LONG, id="old")
        big.supersede("old", "Mario has no dog.")
        small.add(LONG, id="elsewhere")
        big.recall("warm up the connection", mode="semantic")
        sent = Sent(big)
        hits = [(h.entry.id, h.score) for h in big.recall(QUESTION, k=5, mode="semantic")]
        assert hits[0][0] == "long" and not {"old", "elsewhere"} & {hit for hit, _ in hits}
        assert hits == _hits_reading_the_whole_walk(big, QUESTION)
        search, params = next((sql, params) for sql, params in sent.statements if "nearest AS" in sql)
        with big.storage.snapshot():
            plan = big.storage.query("EXPLAIN (ANALYZE, FORMAT JSON) " + search, params)[0][0][0]["Plan"]
    # The first 5 that pass, and the three that rose: not the 205.
    assert _rows_of(plan, "CTE tail") == PASSAGE_CANDIDATES
    assert _lookups(plan) == 5 + 3, plan


def test_a_namespace_holding_few_of_the_vectors_weighs_the_windows_of_its_own_next_entries(postgres_server: Any) -> None:
    # Most of the walk is another namespace's: past the k, the entries weighed by their windows are
    # the namespace's own next ones (each looked up), not the walk's next 200, of which a quarter
    # are its own. Its long entry ranks 68th of its own by its first window, ~290th of the walk.
    found = []
    for others in (1000, 0):
        dsn = fresh_schema(postgres_server)
        with MemoryStore(dsn, embedder=StartReader(), namespace="big") as big, \
                MemoryStore(dsn, embedder=StartReader(), namespace="small") as small:
            if others:
                import_jsonl(big, _lines(others), workers=0)
            import_jsonl(small, _lines(300), workers=0)
            small.add(LONG, id="long")
            small.recall("warm up the connection", mode="semantic")
            found.append([h.entry.id for h in small.recall(QUESTION, k=5, mode="semantic")])  # (scores: each store's counts)
    assert found[0][0] == "long"
    assert found[0] == found[1]
