"""What deleting and expiring leave in the file: secure_delete, ``gc``, and the daily purge on open.

Each proof writes text through the store with redaction off (so the raw words reach the file),
deletes or expires it, and then reads every byte of the database, its -wal and its -shm. The
proofs about what gc purges and the daily purge on open run on PostgreSQL too (``engine_target``),
where they read every value of the store's schema instead; those about SQLite's file itself
(secure_delete, its pages, VACUUM, the WAL and its readers) stay on SQLite.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from engine_rows import is_postgres, sql, stored_text, stored_values, vector_rows
from moved_rows import store_forgotten_rows
from pii import assert_absent

import harness_mem.db
from harness_mem import maintenance
from harness_mem.cli import cli
from harness_mem.db import connect
from harness_mem.engines import sqlite_rewrite
from harness_mem.errors import HarnessMemError, InvalidInputError
from harness_mem.models import now_ms
from harness_mem.store import MemoryStore

# Words found nowhere else in a store's file, so that finding one means the deleted text survived.
SECRETS = ["zebracorn flumadiddle-diagnosis", "quixoticvellum7731 wugsalary"]
PAST = "2020-01-01T00:00:00Z"
EMPTY = hashlib.sha256(b"").hexdigest()


def file_digest(db: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name)}


def raw_rows(db: Path | str) -> int:
    """Every row of ``entries``, read past the store (opening one could purge)."""
    if is_postgres(db):
        import psycopg

        with psycopg.connect(str(db)) as server:
            return int(server.execute("SELECT count(*) FROM entries").fetchone()[0])  # type: ignore[index]
    conn = connect(db, read_only=True).conn
    try:
        return int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
    finally:
        conn.close()


def test_every_connection_deletes_securely(store: MemoryStore) -> None:
    assert store.db.execute("PRAGMA secure_delete").fetchone()[0] == 1
    assert store.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # a new file frees pages incrementally


def test_deleted_text_is_gone_from_every_byte_after_gc(engine_target: str) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=None, redactor=None) as store:
        doomed = [store.add(text, role="user", session="s1") for text in SECRETS]
        store.add_many([{"text": f"filler note number {i} about deploys", "session": "s1", "role": "user"}
                        for i in range(300)])
        assert store.delete(doomed[0].id)
        assert store.forget(doomed[1].id) == 1  # a tombstone: its content goes at the next gc
        report = store.gc()
        assert report["forgotten_purged"] == 1 and report["wal_truncated"] and report["free_pages_after"] == 0
        assert store.count() == 300
        assert_absent([w for text in SECRETS for w in text.split()], stored_text(db_path))
    assert_absent([w for text in SECRETS for w in text.split()], stored_text(db_path))


def test_expired_text_is_purged_with_its_derived_rows_by_gc(engine_target: str) -> None:
    db_path = engine_target
    from fake_embedder import HashedEmbedder

    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        store.redactor = None  # the raw words must reach the file for the proof to mean anything
        for text in SECRETS:
            store.add(text, expires_at=PAST)
        kept = store.add("still wanted", ttl_days=30)
        assert raw_rows(db_path) == 3
        report = store.gc()
        assert report["expired_purged"] == 2 and report["tables"]["by_table"]["entries"]["rows"] == 1
        assert [h.entry.id for h in store.recall("still wanted", mode="semantic")] == [kept.id]
        assert vector_rows(store) == 1
    assert_absent([w for text in SECRETS for w in text.split()], stored_text(db_path))


def test_opening_purges_expired_entries_at_most_once_a_day(engine_target: str) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=None) as store:
        store.add("gone by morning", expires_at=PAST)
        store.add("here to stay")
    with MemoryStore(db_path, embedder=None) as store:  # the first open after it expired purges it
        assert raw_rows(db_path) == 1
        [(last,)] = sql(store, "SELECT value FROM settings WHERE key = ?", (maintenance.EXPIRY_KEY,))
        last = int(last)
        assert now_ms() - last < 60_000
        store.add("expired too", expires_at=PAST)
    with MemoryStore(db_path, embedder=None):  # within the day: left for later (recall hides it anyway)
        assert raw_rows(db_path) == 2
    with MemoryStore(db_path, embedder=None) as store, store.transaction():
        store.storage.set_setting(maintenance.EXPIRY_KEY, str(now_ms() - 2 * maintenance.EXPIRY_EVERY_MS))
    with MemoryStore(db_path, embedder=None):
        assert raw_rows(db_path) == 1


def test_nothing_expired_costs_no_write_on_open(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("no expiry here")
    before = file_digest(db_path)
    with MemoryStore(db_path, embedder=None) as store:
        assert store.db.execute("SELECT 1 FROM settings WHERE key = ?", (maintenance.EXPIRY_KEY,)).fetchone() is None
        assert store.db.conn.total_changes == 0
    assert file_digest(db_path) == before


def test_a_read_only_open_never_purges_or_writes(engine_target: str) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=None) as store:
        store.add("expired, but only a writer may purge it", expires_at=PAST)
        store.add("live")
    before = stored_values(db_path) if is_postgres(db_path) else file_digest(Path(db_path))
    with MemoryStore(db_path, embedder=None, read_only=True) as reader:
        assert [e.content for e in reader.list()] == ["live"]
        assert raw_rows(db_path) == 2
        with pytest.raises(HarnessMemError):
            reader.add("refused")
        with pytest.raises(InvalidInputError, match="gc changes the file"):
            reader.gc()
    if is_postgres(db_path):  # every value of the schema as it was (there is no file to look at)
        assert stored_values(db_path) == before
        return
    after = file_digest(Path(db_path))
    assert isinstance(before, dict)
    assert after["memory.db"] == before["memory.db"]
    assert after.get("memory.db-wal", before.get("memory.db-wal")) in (before.get("memory.db-wal"), EMPTY)
    with pytest.raises(HarnessMemError, match="no database at"):
        MemoryStore(Path(db_path).parent / "missing.db", read_only=True)


def test_gc_vacuums_an_older_file_only_when_asked(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:  # a file from before incremental vacuum
        store.db.execute("PRAGMA auto_vacuum = NONE")
        store.db.execute("VACUUM")
        assert store.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
        ids = [e.id for e in store.add_many([{"text": f"note {i} " + "padding " * 200} for i in range(200)])]
        for entry_id in ids:
            store.delete(entry_id)
        report = store.gc()
        assert report["auto_vacuum"] == "none" and report["vacuum"] == "none" and report["free_pages_after"] > 0
        report = store.gc(vacuum=True)
        assert report["vacuum"] == "full" and report["auto_vacuum"] == "incremental"
        assert report["free_pages_after"] == 0 and report["bytes_after"] < report["bytes_before"]
        assert store.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2


def test_the_size_report_names_every_table(store: MemoryStore) -> None:
    store.add_many([{"text": f"turn {i}", "role": "user", "session": "s"} for i in range(20)])
    sizes = store.gc()["tables"]
    assert sizes["by_table"]["entries"]["rows"] == 20
    assert {"entries", "entries_fts", "settings", "episodes", "skills"} <= set(sizes["by_table"])
    assert not any(name.startswith("entries_fts_") for name in sizes["by_table"])  # shadow tables fold in
    assert sizes["source"] == "pointer-map" and sizes["pages"] * sizes["page_size"] == sizes["file_bytes"]
    assert sizes["by_table"]["entries"]["bytes"] > 0  # the table with its indexes
    counted = sum(t["bytes"] for t in sizes["by_table"].values())
    assert counted + sizes["free_pages"] * sizes["page_size"] < sizes["file_bytes"]  # and the pointer map
    assert counted + (sizes["free_pages"] + 1) * sizes["page_size"] == sizes["file_bytes"]


def test_the_gc_command(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("old", expires_at=PAST)
        with store.transaction():  # as if the daily purge had just run: only gc collects it now
            store.db.execute("INSERT INTO settings (key, value) VALUES (?, ?)", (maintenance.EXPIRY_KEY, str(now_ms())))
    result = CliRunner().invoke(cli, ["--db", str(db_path), "--embedder", "none", "gc"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("1 expired and 0 forgotten entries purged; keyword index merged; WAL checkpointed and truncated")
    assert lines[1].startswith("file: ") and lines[2].split() == ["table", "rows", "bytes"]
    assert any(line.split()[:2] == ["entries", "0"] for line in lines[3:])
    # Each step named on stderr as it begins, with the count of entries the purge took.
    progress = result.stderr.splitlines()
    assert progress[0] == "gc: purging expired and forgotten entries"
    assert progress[1].startswith("gc: purging expired and forgotten entries, 1 purged, ") and progress[1].endswith("/s")
    assert progress[2:] == ["gc: merging the keyword index", "gc: rewriting the file"]
    result = CliRunner().invoke(cli, ["--db", str(db_path), "--embedder", "none", "gc", "--vacuum", "--json", "-q"],
                                catch_exceptions=False)
    report = json.loads(result.stdout)
    assert report["vacuum"] == "full" and report["expired_purged"] == 0 and result.stderr == ""


def forgotten_copies(db_path: Path, seed: int) -> list[int]:
    """Store rows of random length, correct half of them (a corrected row grows and moves, and
    SQLite rebuilds the pages around it), forget and purge the corrected ones; which of their
    markers are still somewhere in the file's bytes."""
    db_path.parent.mkdir()
    markers = store_forgotten_rows(db_path, seed=seed)
    with MemoryStore(db_path, embedder=None, redactor=None) as store:
        assert store.purge() == len(markers)
    data = b"".join(p.read_bytes() for p in db_path.parent.iterdir() if p.name.startswith(db_path.name))
    return [m for m in markers if m in data]


def test_purge_leaves_no_copy_a_page_rebuild_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # secure_delete zeroes a deleted row where it lies; when SQLite rebuilt a page earlier, an old
    # copy of the row can sit in the page's unused middle, which only rewriting the file clears.
    assert forgotten_copies(tmp_path / "a" / "memory.db", seed=8) == []
    monkeypatch.setattr(sqlite_rewrite, "rewrite", lambda conn, location="": None)
    left = forgotten_copies(tmp_path / "b" / "memory.db", seed=8)
    assert left, "no planted copy survived a purge without its rewrite: the proof above would mean nothing"


def test_gc_never_holds_writers_up_while_a_reader_stays_in_the_wal(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A TRUNCATE checkpoint holds the write lock while it waits for the readers in the log: a reader
    # that stays (a slow export, say) made gc hold every writer up for the whole busy timeout, and a
    # writer already waiting gave up with "database is locked". Here gc's patience is long, and a
    # writer that waits for gc until the reader leaves is the failure, however busy the machine.
    monkeypatch.setattr(harness_mem.db, "BUSY_TIMEOUT_MS", 120_000)  # each connection below, and gc's patience
    monkeypatch.setattr(harness_mem.db, "TRUNCATE_LONGEST_TRY_MS", 500)
    # The reader keeps no identity key: its list() then streams row by row (with one it reads a page
    # of rows ahead to reveal them together, and this small store would be read whole at once).
    with MemoryStore(db_path, embedder=None) as store, MemoryStore(db_path, embedder=None, identity_key=False) as reader, \
            MemoryStore(db_path, embedder=None) as writer:
        store.add_many([{"text": f"note {i} about the deploy"} for i in range(200)])
        listing = reader.list()
        next(listing)  # a read transaction in the log, left open
        report: dict[str, object] = {}
        collecting = threading.Thread(target=lambda: report.update(store.gc()))
        collecting.start()
        time.sleep(0.5)  # gc is trying to truncate the log by now
        writing = threading.Thread(target=lambda: writer.add("written while gc waits for the reader"))
        writing.start()
        writing.join(timeout=60)  # a failure detector: the write takes a fraction of a second
        held_up = writing.is_alive()
        listing.close()  # the reader leaves: gc's next try truncates the log, a held writer goes on
        collecting.join()
        writing.join()
        assert not held_up, "the writer waited for gc as long as the reader stayed in the log"
        assert report["wal_truncated"] is True
        assert Path(f"{db_path}-wal").stat().st_size == 0
        assert store.count() == 201


# A writer in its own process: adds an entry every 20 ms until the stop file appears, waiting for
# the write lock at most about a second (what gc promises), then prints what it wrote and what failed.
PATIENT_WRITER = """
import json, sys, time
from pathlib import Path
import harness_mem.db
harness_mem.db.BUSY_TIMEOUT_MS = 5000
from harness_mem.store import MemoryStore
path, stop = Path(sys.argv[1]), Path(sys.argv[2])
written, failed = [], []
with MemoryStore(path, embedder=None) as store:
    print("ready", flush=True)
    while not stop.exists():
        try:
            written.append(store.add(f"written beside gc {len(written)}").id)
        except Exception as exc:
            failed.append(f"{type(exc).__name__}: {exc}")
        time.sleep(0.02)
print(json.dumps({"written": written, "failed": failed}))
"""


#: Bulky notes of 50 kB: a file of about 290 MB, for the steps of a gc that purges nothing and for a
#: purge's rewrite (whose one-shot form held writers 6 s a GB). How long a writer waits is a
#: benchmark's question, not this test's: ``bench/bench_gc.py --beside-writer --mb 2000 --max-wait 1``
#: (``--hog N`` beside busy processes) runs it on larger files; ``test_steps.py`` checks that a step
#: ends at its time under the lock whatever the machine's speed.
BULKY = {"delete": 4000, "forget": 4000}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["delete", "forget"])
def test_gc_of_a_large_file_never_holds_a_writer_up(tmp_path: Path, how: str) -> None:
    # gc merged the keyword index in one transaction and handed free pages back in another: on a
    # 270 MB file a writer waited over a second for each ("database is locked" with this patience),
    # 8 s and more on a 2 GB file; a purge's VACUUM held it 6 s a GB. Every step is short now, with
    # a pause between for the writers, the purge's rewrite too (``forget``). The writer waits 5 s,
    # not the default 30: longer than any step, even one whose process waits for a core at load 10
    # (at 1 s, a step stretched by the load failed it); how short a step is under the lock is
    # test_steps.py's question and bench_gc.py's (--beside-writer --max-wait 1).
    import random
    import subprocess
    import sys

    db = tmp_path / "memory.db"
    rnd = random.Random(5)
    words = [f"w{i:05d}" for i in range(20_000)]
    with MemoryStore(db, embedder=None, redactor=None) as store:
        for start in range(0, BULKY[how], 500):  # bulky notes at the start of the file, deleted below
            store.add_many([{"text": f"bulky {start + i} " + "z" * 50_000, "session": "bulky"} for i in range(500)])
        for _ in range(8):
            store.add_many([{"text": " ".join(rnd.choices(words, k=100))} for _ in range(5000)])
        with store.transaction():
            for entry in list(store.list(session="bulky")):
                store.delete(entry.id) if how == "delete" else store.forget(entry.id)
        kept = store.count()
    assert db.stat().st_size > BULKY[how] * 50_000  # dead index rows to merge, pages to move and free
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", PATIENT_WRITER, str(db), str(stop)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        with MemoryStore(db, embedder=None) as store:
            report = store.gc()
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=120)
    found = json.loads(out.splitlines()[-1])
    if how == "delete":
        assert report["vacuum"] == "incremental" and report["free_pages_before"] > 40_000
    else:
        assert report["vacuum"] == "tables" and report["forgotten_purged"] == BULKY[how]
    assert found["failed"] == [] and len(found["written"]) > 10
    with MemoryStore(db, embedder=None) as store:
        assert store.count() == kept + len(found["written"])  # none lost
        assert all(store.get(entry_id) for entry_id in found["written"][-5:])


def deleted_names_left(db: Path) -> list[str]:
    """The pseudonyms of deleted entries' sessions (each session an e-mail, kept in ``identities`` with
    its sealed raw value) found in the file after ``gc``, an old copy planted beside each of them."""
    from moved_rows import INDEX_LEAF, TABLE_LEAF, plant_old_copies

    with MemoryStore(db, embedder=None) as store:
        ids = [store.add(f"note {i}", session=f"user{i:03d}@example.com", role="user").id for i in range(60)]
        store.add("a note that has expired", expires_at=PAST)  # gc has a purge to rewrite for
        doomed = ids[::20]  # a few: a page that loses many rows is rebuilt, and that clears its gaps
        names = [store.scope.key(store.get(entry_id).session) or "" for entry_id in doomed]
        assert all(name.startswith("<EMAIL") for name in names)
        store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    assert plant_old_copies(db, [n.encode() for n in names], leaves=(TABLE_LEAF, INDEX_LEAF), every=True) >= len(names)
    with MemoryStore(db, embedder=None) as store:
        assert all(store.delete(entry_id) for entry_id in doomed)
        assert store.gc()["expired_purged"] == 1
        assert store.get(ids[1]).session == "user001@example.com"  # the kept ones' names still read back
    data = b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))
    return [name for name in names if name.encode() in data]


def test_gc_leaves_no_copy_of_a_deleted_entrys_sealed_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sealed row of a name no entry holds any more goes at gc; a copy of it a page rebuild left
    # in the identities table goes with the rewrite, as the entries' own copies do.
    assert deleted_names_left(tmp_path / "a" / "memory.db") == []
    monkeypatch.setattr(sqlite_rewrite, "TABLES", ("entries", "episodes"))
    assert deleted_names_left(tmp_path / "b" / "memory.db"), "the proof above would mean nothing"
