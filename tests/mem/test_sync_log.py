"""The sync log's outbox: once a store syncs, every write logs its operation in its own transaction.

On both engines: a store that never synced logs nothing; starting the log logs what the store
holds; each write path (add, a batch, an import, a correction, forget by id and by filter, delete,
a renewed time to live) logs exactly its operation, consolidation's entries none; a write that fails
or rolls back logs nothing; the log carries pseudonyms, never the raw values behind them; forgetting
empties an entry's ``add`` (on SQLite, down to the file's bytes). A real process killed while writing
leaves each entry with its operation. The operation format: its hash, its schema, what it refuses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from harness_mem.cli import cli
from harness_mem.errors import DuplicateIdError, SyncFormatError
from harness_mem.experience import consolidate
from harness_mem.jsonl import import_jsonl
from harness_mem.storage import is_derived
from harness_mem.store import MemoryStore
from harness_mem.sync import outbox
from harness_mem.sync.clock import Stamp, next_stamp
from harness_mem.sync.operations import Operation, parse_operation

EMAIL = "ada.lovelace@example.com"


def logged(store: MemoryStore) -> list[Operation | None]:
    """The store's log in the order it was written; None for an ``add`` emptied by a forget."""
    rows = store.storage.logged_operations(0, 100_000)
    operations = [None if text is None else parse_operation(json.loads(text)) for _, _, text in rows]
    for (_, op_hash, _), operation in zip(rows, operations, strict=True):
        assert operation is None or operation.hash == op_hash  # the identity is the canonical JSON's hash
    return operations


def started(store: MemoryStore) -> str:
    device, _ = outbox.start(store.storage, is_derived)
    return device


def test_a_store_that_never_synced_logs_nothing(engine_store: MemoryStore) -> None:
    store = engine_store
    store.add("the deploy window is Tuesday", id="a")
    store.supersede("a", "the deploy window is Thursday")
    store.forget("a")
    assert outbox.device(store.storage) is None
    assert logged(store) == []


def test_starting_the_log_logs_what_the_store_holds_once(engine_store: MemoryStore) -> None:
    store = engine_store
    store.add("we use argon2 for password hashing", id="hash", session="s1", role="assistant",
              created_at="2026-01-01T10:00:00Z")
    store.add("the staging database is on port 5433", id="port")
    fixed = store.supersede("port", "the staging database is on port 5434")
    store.add("an idea we dropped", id="gone")
    store.forget("gone")
    device, count = outbox.start(store.storage, is_derived)
    operations = [op for op in logged(store) if op is not None]
    assert count == len(operations) == 4  # three adds (both versions of the port) and the correction
    assert {op.device for op in operations} == {device}
    assert {(op.op, op.id) for op in operations} == {
        ("add", "hash"), ("add", "port"), ("add", fixed.id), ("supersede", "port")}
    first = next(op for op in operations if op.id == "hash")
    assert first.stamp.wall == 1767261600000  # an entry logged later keeps its own time
    assert first.body.entry.session == "s1" and first.body.entry.role == "assistant"  # type: ignore[union-attr]
    assert outbox.start(store.storage, is_derived) == (device, 0)  # a second start changes nothing


def test_every_write_path_logs_its_operation(engine_store: MemoryStore, tmp_path: Path) -> None:
    store = engine_store
    device = started(store)
    store.add("the deploy window is Tuesday", id="window", tags=["ops"])
    store.add_many([{"content": "turn one", "id": "t1", "session": "s1", "role": "user"},
                    {"content": "turn two", "id": "t2", "session": "s1", "role": "assistant"}])
    lines = tmp_path / "import.jsonl"
    lines.write_text(json.dumps({"content": "imported note", "id": "imp"}) + "\n", encoding="utf-8")
    import_jsonl(store, lines.read_text(encoding="utf-8").splitlines())
    store.supersede("window", "the deploy window is Thursday", id="window2")
    store.forget("t1")
    store.forget(session="s1")
    store.add("short-lived", id="ttl", ttl_days=3)
    store.get("ttl", refresh_ttl=True)
    store.delete("imp")
    operations = logged(store)
    kinds = [(op.op, op.id) if op is not None else None for op in operations]
    # The adds of t1, t2 and imp were emptied when they were forgotten or deleted.
    assert kinds == [("add", "window"), None, None, None, ("add", "window2"),
                     ("supersede", "window"), ("forget", "t1"), ("forget", "t2"), ("add", "ttl"),
                     ("expiry", "ttl"), ("forget", "imp")]
    by_id = {(op.op, op.id): op for op in operations if op is not None}
    assert by_id[("supersede", "window")].body.new_id == "window2"  # type: ignore[union-attr]
    assert by_id[("forget", "t1")].body.selector is None  # type: ignore[union-attr]
    assert by_id[("forget", "t2")].body.selector == {"session": "s1"}  # type: ignore[union-attr]
    assert by_id[("add", "window")].body.entry.tags == ["ops"]  # type: ignore[union-attr]
    stamps = [op.stamp for op in operations if op is not None]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # the clock only moves on
    assert {op.device for op in operations if op is not None} == {device}


def test_tags_changed_in_place_log_a_tag_operation(engine_store: MemoryStore) -> None:
    """The one path that changes tags in place (a session's turns given to their repository) logs
    each retagged entry's whole new list, as any other write logs its operation."""
    store = engine_store
    started(store)
    store.add_many([{"content": "turn one", "id": "t1", "session": "s1", "role": "user", "tags": ["project:myproj"]},
                    {"content": "turn two", "id": "t2", "session": "s1", "role": "user", "tags": ["project:myproj"]}])
    moved = store.storage.move_session_tag(store.namespace, "s1", "project:myproj", "project:github.com/a/myproj",
                                           family="project:")
    assert moved == 2
    tagged = [op for op in logged(store) if op is not None and op.op == "tag"]
    assert [(op.id, op.body.tags) for op in tagged] == [  # type: ignore[union-attr]
        ("t1", ["project:github.com/a/myproj"]), ("t2", ["project:github.com/a/myproj"])]


def test_consolidation_derives_and_logs_nothing(engine_store: MemoryStore) -> None:
    store = engine_store
    started(store)
    store.add_many([{"content": "I moved to Porto last month.", "id": "u1", "session": "s1", "role": "user",
                     "created_at": "2026-01-01T10:00:00Z"},
                    {"content": "Congratulations on the move!", "id": "a1", "session": "s1", "role": "assistant",
                     "created_at": "2026-01-01T10:01:00Z"}])
    before = logged(store)
    consolidate(store)
    assert [entry for entry in store.list(kind=["fact", "summary"])], "consolidation derived nothing to test with"
    assert logged(store) == before


def test_a_write_that_fails_or_rolls_back_logs_nothing(engine_store: MemoryStore) -> None:
    store = engine_store
    started(store)
    store.add("kept", id="kept")
    with pytest.raises(DuplicateIdError):
        store.add_many([{"content": "new", "id": "new"}, {"content": "again", "id": "kept"}])
    with pytest.raises(RuntimeError), store.transaction():
        store.add("rolled back", id="rolled")
        raise RuntimeError("the caller gave up")
    assert [op.id for op in logged(store) if op is not None] == ["kept"]
    assert {e.id for e in store.list()} == {"kept"}


def test_the_log_holds_pseudonyms_and_sealed_values_never_the_raw_ones(engine_store: MemoryStore) -> None:
    store = engine_store
    started(store)
    store.add(f"write to {EMAIL} about the invoice", session=f"user-{EMAIL}", id="mail")
    (text,) = [text for _, _, text in store.storage.logged_operations()]
    assert text is not None and EMAIL not in text and "<EMAIL:" in text
    (operation,) = [op for op in logged(store) if op is not None]
    assert "<EMAIL:" in operation.body.entry.session  # type: ignore[union-attr]
    # The raw session travels sealed, so a device holding the identity key can read it back.
    sealed = operation.body.identities  # type: ignore[union-attr]
    assert [s.stored for s in sealed] == [operation.body.entry.session]  # type: ignore[union-attr]


def test_forgetting_empties_the_logged_add(engine_store: MemoryStore) -> None:
    store = engine_store
    started(store)
    store.add("the vault passphrase hint is qzlogmarker", id="hint")
    store.add("an expiring qzlogmarker note", id="brief", expires_at="2020-01-01T00:00:00Z")
    store.forget("hint")
    store.purge()
    texts = [text for _, _, text in store.storage.logged_operations()]
    assert not any(text and "qzlogmarker" in text for text in texts), texts
    assert len(texts) == 3  # the two adds keep their hashes (a replay is recognised), the forget is logged


def test_forgotten_words_leave_the_sqlite_file(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        started(store)
        for n in range(50):
            store.add(f"note {n} keeps the qzbytemarker passphrase", id=f"n{n}")
        store.forget(tags=None, kind="note")
        store.purge()
        store.gc()
    for path in db_path.parent.glob(db_path.name + "*"):
        assert b"qzbytemarker" not in path.read_bytes(), path


WRITER = textwrap.dedent("""
    import sys
    from harness_mem.store import MemoryStore
    with MemoryStore(sys.argv[1], embedder=None) as store:
        print("ready", flush=True)
        n = 0
        while True:
            store.add_many([{"content": f"entry {n} {i}", "id": f"e{n}-{i}"} for i in range(20)])
            n += 1
""")


def test_a_writer_killed_mid_write_leaves_every_entry_with_its_operation(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        started(store)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        with MemoryStore(db_path, embedder=None) as store:
            deadline = time.monotonic() + 120  # a failure detector, not a speed goal
            while store.count() < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
        if writer.stdout is not None:
            writer.stdout.close()
    with MemoryStore(db_path, embedder=None) as store:
        entries = {e.id for e in store.list()}
        assert len(entries) >= 200
        assert {op.id for op in logged(store) if op is not None} == entries


def test_the_clock_moves_on_when_the_wall_clock_steps_back() -> None:
    assert next_stamp(None, now_ms=1000) == Stamp(1000, 0)
    assert next_stamp(Stamp(1000, 0), now_ms=1000) == Stamp(1000, 1)
    assert next_stamp(Stamp(5000, 3), now_ms=1000) == Stamp(5000, 4)  # behind another device's clock
    assert next_stamp(Stamp(5000, 3), now_ms=6000) == Stamp(6000, 0)


def test_an_operation_is_its_canonical_json_checked_by_its_schema(engine_store: MemoryStore) -> None:
    store = engine_store
    started(store)
    store.add("a note in ünïcode", id="n1", metadata={"b": 1, "a": [1, 2]})
    (text,) = [text for _, _, text in store.storage.logged_operations()]
    assert text is not None
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    schema = json.loads(CliRunner().invoke(cli, ["schema", "sync-op"]).output)
    jsonschema.validate(data, schema)
    assert parse_operation(data).canonical().decode() == text


@pytest.mark.parametrize(("change", "message"), [
    ({"v": 2}, "made by a newer harness-mem"),
    ({"op": "add"}, "body"),
    ({"device": "not-hex"}, "device"),
    ({"hlc": [-1, 0]}, "hlc"),
    ({"body": {"new_id": "x", "valid_from": 1, "extra": 1}}, "body"),
])
def test_a_malformed_operation_is_refused_in_one_line(change: dict[str, object], message: str) -> None:
    good = {"v": 1, "op": "supersede", "ns": "default", "id": "a", "hlc": [1, 0], "device": "0" * 32,
            "body": {"new_id": "b", "valid_from": 1}}
    parse_operation(good)
    with pytest.raises(SyncFormatError) as refused:
        parse_operation({**good, **change})
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_doctor_says_whether_the_store_syncs_and_as_which_device(engine_store: MemoryStore) -> None:
    store = engine_store
    (line,) = [c for c in store.diagnose()["checks"] if c["name"] == "sync"]
    assert line["ok"] and line["detail"] == "not syncing (no log kept)"
    device = started(store)
    store.add("logged", id="n1")
    (line,) = [c for c in store.diagnose()["checks"] if c["name"] == "sync"]
    assert line["ok"] and line["detail"].startswith(f"device {device}, logging every write (latest at ")
