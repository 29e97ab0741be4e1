from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from engine_rows import keyword_rows, sql

from harness_mem import store as store_module
from harness_mem.errors import DuplicateIdError, InvalidInputError, NotFoundError
from harness_mem.jsonl import export_jsonl, import_jsonl
from harness_mem.models import new_id
from harness_mem.store import MemoryStore

# Every test here runs on both engines (none is about SQLite itself): ``store`` is conftest's
# ``engine_store``, and a test that opens stores of its own opens them at ``engine_target``.


@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    return engine_store


def test_add_returns_the_stored_entry_and_get_reads_it_back(store: MemoryStore) -> None:
    entry = store.add("we chose argon2id", tags=["decision", "security", "decision"], source="chat",
                      metadata={"ticket": 42})
    assert entry.kind == "note"
    assert entry.tags == ("decision", "security")
    assert entry.content_hash.startswith("h1:")
    assert store.get(entry.id) == entry


def test_kind_defaults_to_turn_when_a_role_is_given(store: MemoryStore) -> None:
    assert store.add("hello", role="user", session="s1").kind == "turn"
    assert store.add("hello", role="user", kind="fact").kind == "fact"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"content": ""}, "cannot be empty"),
        ({"content": "   \n"}, "cannot be empty"),
        ({"content": "x", "kind": "memo"}, "unknown kind 'memo'"),
        ({"content": "x", "tags": [1]}, "tags must be strings"),
        ({"content": "x", "metadata": [1, 2]}, "metadata must be a JSON object"),
        ({"content": "x", "metadata": {"f": object()}}, "not JSON-serialisable"),
        ({"content": "x", "created_at": "last tuesday-ish"}, "cannot read a time"),
        ({"content": "x", "ttl_days": -1}, "ttl_days must be a positive number"),
        ({"content": "bad \ud800 surrogate"}, "content is not valid Unicode"),
        ({"content": "x", "role": "user\udc00"}, "role is not valid Unicode"),
        ({"content": "x", "id": "id-\ud800"}, "id is not valid Unicode"),
        ({"content": "x", "tags": ["\ud800"]}, "tags is not valid Unicode"),
        ({"content": "x", "metadata": {"k": "\udfff"}}, "metadata is not valid Unicode"),
        ({"content": "x", "ttl_days": True}, "ttl_days must be a positive number"),
        ({"content": "x" * 1_000_001}, "limit is 1,000,000"),
    ],
)
def test_bad_input_is_refused_with_a_reason_and_nothing_is_written(
    store: MemoryStore, fields: dict[str, object], message: str
) -> None:
    fields = dict(fields)  # the parameters are shared by both engines' runs: not popped from
    content = fields.pop("content")
    with pytest.raises(InvalidInputError, match=message):
        store.add(content, **fields)  # type: ignore[arg-type]
    assert store.count() == 0


def test_ids_are_unique_per_namespace(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as a, \
            MemoryStore(engine_target, namespace="other", embedder=None) as b:
        a.add("first", id="x")
        with pytest.raises(DuplicateIdError, match="already exists"):
            a.add("second", id="x")
        assert a.add("second", id="x", on_conflict="ignore").content == "first"
        assert a.add("third", id="x", on_conflict="replace").content == "third"
        assert a.recall("first") == []  # the replaced text left the index too
        b.add("another tenant", id="x")  # same id, other namespace: fine
        assert a.get("x").content == "third" and b.get("x").content == "another tenant"


def test_namespaces_never_leak(engine_target: str) -> None:
    with MemoryStore(engine_target, namespace="alice", embedder=None) as alice, \
            MemoryStore(engine_target, namespace="bob", embedder=None) as bob:
        secret = alice.add("alice's launch codes are in the blue folder")
        assert bob.recall("launch codes") == []
        assert list(bob.list()) == []
        with pytest.raises(NotFoundError):
            bob.get(secret.id)
        assert bob.delete(secret.id) is False
        assert alice.get(secret.id).content.startswith("alice")


def test_generated_ids_sort_by_creation() -> None:
    ids = [new_id() for _ in range(2000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 26 for i in ids)


def test_delete_removes_entry_and_its_index_rows(store: MemoryStore) -> None:
    entry = store.add("the staging password rotates monthly")
    assert store.delete(entry.id) is True
    assert store.delete(entry.id) is False
    assert store.recall("staging password") == []
    assert keyword_rows(store) == 0
    with pytest.raises(NotFoundError):
        store.get(entry.id)


def test_expired_entries_are_never_returned(store: MemoryStore) -> None:
    past = datetime.now(UTC) - timedelta(days=1)
    gone = store.add("expired secret meeting", expires_at=past)
    kept = store.add("current secret meeting", ttl_days=30)
    assert [h.entry.id for h in store.recall("secret meeting")] == [kept.id]
    assert [e.id for e in store.list()] == [kept.id]
    assert [r["id"] for r in store.export()] == [kept.id]
    with pytest.raises(NotFoundError):
        store.get(gone.id)
    assert store.stats()["expired_pending_purge"] == 1
    assert store.purge_expired() == 1
    assert sql(store, "SELECT count(*) FROM entries") == [(1,)]


def test_add_many_writes_each_batch_in_one_transaction(store: MemoryStore) -> None:
    items = [{"text": f"turn {i}", "role": "user", "session": "s"} for i in range(10)]
    items[7] = {"text": ""}  # invalid: the batch it is in must not be written at all
    with pytest.raises(InvalidInputError):
        store.add_many(items, batch_size=5)
    assert store.count() == 5  # the first batch committed, the second never started
    reported: list[int] = []
    written = store.add_many(items, batch_size=5, on_invalid=lambda i, e: reported.append(i))
    assert reported == [7] and len(written) == 9


def test_a_batch_is_also_cut_by_its_characters(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "MAX_BATCH_CHARS", 100)
    items = [{"text": "x" * 60}, {"text": "y" * 60}, {"text": "z" * 60}, {"text": ""}]
    with pytest.raises(InvalidInputError):
        store.add_many(items, batch_size=1000)
    assert store.count() == 2  # 120 characters made a batch of its own, written before the bad item


def test_list_filters_and_orders(store: MemoryStore) -> None:
    base = datetime(2024, 5, 1, tzinfo=UTC)
    for i in range(6):
        store.add(f"msg {i}", role="user" if i % 2 else "assistant", session=f"conv-1:s{i // 3}",
                  tags=["even"] if i % 2 == 0 else ["odd"], created_at=base + timedelta(hours=i))
    assert [e.content for e in store.list(role="user")] == ["msg 1", "msg 3", "msg 5"]
    assert [e.content for e in store.list(session="conv-1:s1")] == ["msg 3", "msg 4", "msg 5"]
    assert len(list(store.list(session_prefix="conv-1:"))) == 6
    assert [e.content for e in store.list(tags=["even"], since=base + timedelta(hours=2))] == ["msg 2", "msg 4"]
    assert [e.content for e in store.list(newest_first=True, limit=2)] == ["msg 5", "msg 4"]
    assert [e.content for e in store.list(until="2024-05-01T01:00:00Z")] == ["msg 0", "msg 1"]


def test_export_then_import_rebuilds_an_identical_store(fresh_target: Callable[[], str]) -> None:
    with MemoryStore(fresh_target(), embedder=None) as source:
        source.add("note with everything", tags=["x", "y"], source="unit", metadata={"k": [1, "二"]},
                   created_at="2024-01-02T03:04:05.678Z", expires_at="2999-01-01T00:00:00Z")
        source.add("a turn", role="user", session="s-1", id="turn-1")
        source.add("咖啡 note", kind="fact")
        first = io.StringIO()
        export_jsonl(source, first)
    with MemoryStore(fresh_target(), embedder=None) as copy:
        report = import_jsonl(copy, first.getvalue().splitlines())
        assert (report.added, report.errors) == (3, [])
        again = import_jsonl(copy, first.getvalue().splitlines())
        assert (again.added, again.skipped) == (0, 3)  # idempotent by id
        second = io.StringIO()
        export_jsonl(copy, second)
    assert second.getvalue() == first.getvalue()


def test_import_keeps_good_lines_and_reports_every_bad_one(store: MemoryStore) -> None:
    lines = [
        b'{"id": "a", "text": "first good line", "role": "Caroline", "session": "c:1",'
        b' "timestamp": "1:56 pm on 8 May, 2023", "dia_id": "D1:1"}',
        b"{not json",
        b"",
        b"\xff\xfe broken bytes",
        b"[1, 2]",
        b'{"content": "second good line", "tags": "single-tag"}',
        b'{"text": "bad kind", "kind": "diary"}',
        b'{"id": "a", "text": "duplicate id is skipped"}',
        b'{"nothing": "here"}',
    ]
    report = import_jsonl(store, lines)
    assert report.added == 2 and report.skipped == 1 and report.lines == 9
    assert [(e.line, e.reason.split(" (")[0]) for e in report.errors] == [
        (2, "not valid JSON"),
        (4, "not valid UTF-8"),
        (5, "expected a JSON object, got list"),
        (7, "unknown kind 'diary' — use one of: note, turn, episode, fact, summary"),
        (9, 'no "text" or "content" field'),
    ]
    first = store.get("a")
    assert first.created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert first.metadata == {"dia_id": "D1:1"}  # unknown keys are kept, not dropped
    assert first.kind == "turn"


def test_import_reports_a_lone_surrogate_anywhere_in_a_line(store: MemoryStore) -> None:
    lines = [b'{"id": "ok", "text": "fine"}', b'{"text": "x", "session": "s\\ud800"}',
             b'{"text": "y", "metadata": {"note": "\\udc00"}}']
    report = import_jsonl(store, lines)
    assert report.added == 1
    assert [(e.line, e.reason) for e in report.errors] == [
        (2, "session is not valid Unicode (it contains a lone surrogate)"),
        (3, "metadata is not valid Unicode (it contains a lone surrogate)"),
    ]


def test_stats_counts_what_is_there(store: MemoryStore) -> None:
    store.add("a", role="user", session="s1")
    store.add("b", role="assistant", session="s1")
    store.add("c", kind="fact")
    stats = store.stats()
    assert stats["entries"] == 3
    assert stats["by_kind"] == {"fact": 1, "turn": 2}
    assert stats["by_role"] == {"assistant": 1, "user": 1}
    assert stats["sessions"] == 1
    assert stats["schema_version"] >= 1
    assert stats["file_bytes"] > 0
    json.dumps(stats)  # the CLI prints it as JSON


def test_reopening_keeps_everything(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as first:
        entry = first.add("persisted across opens")
    with MemoryStore(engine_target, embedder=None) as second:
        assert second.get(entry.id) == entry
        assert second.integrity_check() == []


def test_a_transaction_commits_its_writes_together_or_not_at_all(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        with pytest.raises(RuntimeError), store.transaction():
            store.add("first of two", id="a")
            with store.transaction():  # nested: joins the outer one
                store.add("second of two", id="b")
            raise RuntimeError("the caller changes its mind")
        assert store.count() == 0 and store.recall("two", mode="keyword") == []
        with store.transaction():
            store.add("first of two", id="a")
            store.add("second of two", id="b")
        assert {e.id for e in store.list()} == {"a", "b"}


def test_data_version_changes_when_any_connection_writes(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as reader, MemoryStore(engine_target, embedder=None) as writer:
        before = reader.data_version()
        assert reader.data_version() == before  # reading changes nothing
        writer.add("written by another connection")
        after = reader.data_version()
        assert after != before
        reader.add("written here")
        assert reader.data_version() != after


def test_an_entry_deleted_between_ranking_and_reading_does_not_break_recall(
    engine_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness_mem.recall import Recall

    with MemoryStore(engine_target, embedder=None) as store, MemoryStore(engine_target, embedder=None) as other:
        store.add("the deploy checklist lives in the wiki", id="doomed")
        store.add("the deploy runs on tuesdays", id="kept")
        read = Recall._entries_by_pk

        def delete_then_read(self: Recall, pks: list[int]) -> object:
            if other.count():
                other.delete("doomed")  # another connection commits in between
            return read(self, pks)

        monkeypatch.setattr(Recall, "_entries_by_pk", delete_then_read)
        hits = store.recall("deploy", mode="keyword")
        assert {h.entry.id for h in hits} == {"doomed", "kept"}  # the file as it was when ranking began
        assert other.count() == 1
        assert [h.entry.id for h in store.recall("deploy", mode="keyword")] == ["kept"]


@pytest.mark.parametrize("on_conflict", ["skip", "REPLACE", "", None, 1])
@pytest.mark.parametrize("write", ["add", "add_many", "add_prepared", "import_jsonl"])
def test_an_unknown_on_conflict_is_refused_and_never_overwrites(
    store: MemoryStore, write: str, on_conflict: object
) -> None:
    from harness_mem.rows import prepare_row

    store.add("the original", id="a")
    item = {"content": "an overwrite", "id": "a"}
    with pytest.raises(InvalidInputError, match="on_conflict must be one of 'error', 'ignore', 'replace'"):
        if write == "add":
            store.add("an overwrite", id="a", on_conflict=on_conflict)  # type: ignore[arg-type]
        elif write == "add_many":
            store.add_many([item], on_conflict=on_conflict)  # type: ignore[arg-type]
        elif write == "add_prepared":
            row = prepare_row(item, namespace=store.namespace, redactor=store.redactor)
            store.add_prepared([row], on_conflict=on_conflict)  # type: ignore[arg-type]
        else:
            import_jsonl(store, [json.dumps(item)], on_conflict=on_conflict)  # type: ignore[arg-type]
    assert store.get("a").content == "the original"


def _deep_list(depth: int) -> object:
    value: object = 1
    for _ in range(depth - 1):
        value = [value]
    return value


def _deep_dict(depth: int) -> dict[str, object]:
    value: dict[str, object] = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


_LOOP: dict[str, object] = {}
_LOOP["self"] = _LOOP


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"metadata": {"a": _deep_list(950)}}, "metadata is nested more than 64 levels deep — flatten it"),
        ({"metadata": {"a": _deep_list(3000)}}, "metadata is nested more than 64 levels deep — flatten it"),
        ({"metadata": _deep_dict(1100)}, "metadata is nested more than 64 levels deep — flatten it"),
        ({"metadata": _deep_dict(65)}, "metadata is nested more than 64 levels deep — flatten it"),
        ({"metadata": _LOOP}, "metadata is nested more than 64 levels deep"),
        ({"tags": _deep_list(3000)}, "tags is nested more than 64 levels deep"),
    ],
)
def test_deeply_nested_values_are_refused_as_bad_input(
    store: MemoryStore, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        store.add("deep", **fields)  # type: ignore[arg-type]
    refused: list[tuple[int, str]] = []
    written = store.add_many([{"content": "ok"}, {"content": "deep", **fields}, {"content": "ok too"}],
                             on_invalid=lambda index, exc: refused.append((index, str(exc))))
    assert [e.content for e in written] == ["ok", "ok too"]
    assert [index for index, _ in refused] == [1] and message.split(" —")[0] in refused[0][1]


def test_metadata_at_the_nesting_limit_is_stored(store: MemoryStore) -> None:
    assert store.add("deep", metadata=_deep_dict(64)).metadata == _deep_dict(64)


@pytest.mark.parametrize("k", [2**63, 2**62, 10**30, 1_000_001, 1.5, "10", True, None])
def test_a_k_that_is_not_a_sensible_count_is_refused(store: MemoryStore, k: object) -> None:
    store.add("hello world")
    with pytest.raises(InvalidInputError, match="k must be a whole number of hits, at most 1,000,000, not"):
        store.recall("hello", k=k)  # type: ignore[arg-type]


def test_the_largest_k_returns_every_hit(store: MemoryStore) -> None:
    store.add("hello world")
    assert len(store.recall("hello", k=1_000_000)) == 1 and store.recall("hello", k=0) == []
