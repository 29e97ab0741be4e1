"""``stats``: counts, the largest sessions, and the file's bytes by table and index (from its pointer map).

The sizes are checked against the file itself: the parts add up to its pages, and, where this
Python's own sqlite3 has the ``dbstat`` table, every b-tree's page count equals SQLite's (read in
another process: one process must not open a file through two SQLite libraries). The counts,
the largest sessions and the JSON's schema are checked on both engines (``engine_target``); the
bytes by page, pointer map and WAL are SQLite's file's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

import pytest
from click.testing import CliRunner
from engine_rows import is_postgres, sql
from fake_embedder import HashedEmbedder
from jsonschema import Draft202012Validator

import harness_mem.pages
from harness_mem import json_schema
from harness_mem.cli import cli
from harness_mem.engines import shown_location
from harness_mem.pages import count_pages
from harness_mem.store import MemoryStore

PAST = "2020-01-01T00:00:00Z"

# Run in a fresh interpreter with the standard library's sqlite3 only: pages per b-tree by dbstat,
# or null when that build lacks it.
DBSTAT = """
import json, sqlite3, sys
conn = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
try:
    rows = conn.execute("SELECT name, count(*) FROM dbstat GROUP BY name").fetchall()
except sqlite3.OperationalError:
    rows = None
print(json.dumps(rows and dict(rows)))
"""


def dbstat_pages(path: Path) -> dict[str, int] | None:
    out = subprocess.run([sys.executable, "-c", DBSTAT, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def fill(store: MemoryStore, sessions: dict[str, int], *, words: int = 30) -> None:
    rows = [{"text": f"turn {i} of {name}: " + "word " * words + "déjà vu", "role": "user", "session": name}
            for name, n in sessions.items() for i in range(n)]
    store.add_many(rows)


def test_sizes_add_up_to_the_file_and_match_sqlite(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        fill(store, {f"s{i}": 40 for i in range(20)}, words=60)
        store.add_many([{"text": "long " * 3000, "session": "big"}])  # overflow pages
        for entry in store.list(limit=200):
            store.delete(entry.id)  # free pages
        # Still open, nothing checkpointed: the newest pages are in the WAL, read over the file.
        assert Path(f"{db_path}-wal").stat().st_size > 0
        sizes = store.stats()["sizes"]
        parts = {part["name"]: part for part in sizes["parts"]}
        assert sizes["source"] == "pointer-map"
        assert sum(p["pages"] for p in parts.values()) == sizes["pages"]
        assert sum(p["bytes"] for p in parts.values()) == sizes["file_bytes"] == sizes["pages"] * sizes["page_size"]
        assert parts["free pages"]["pages"] == sizes["free_pages"] > 0
        assert parts["keyword index (entries_fts*)"]["table"] == "entries_fts"
        assert parts["vector index (entries_vec*)"]["kind"] == "vector index"
        assert not any(name.startswith(("entries_fts_", "entries_vec_")) for name in parts)  # shadows fold in
        assert parts["entries_by_session"] == {**parts["entries_by_session"], "kind": "index", "table": "entries"}
        assert [p["bytes"] for p in sizes["parts"]] == sorted((p["bytes"] for p in sizes["parts"]), reverse=True)

        theirs = dbstat_pages(db_path)
        if theirs is None:
            pytest.skip("this Python's sqlite3 has no dbstat to compare with")
        counted = count_pages(db_path, sizes["pages"])
        assert counted is not None
        roots = dict(store.db.execute("SELECT rootpage, name FROM sqlite_master WHERE rootpage > 0").fetchall())
        ours = {roots.get(root, "sqlite_schema"): n for root, n in counted.by_root.items()}
        assert ours == theirs
        assert counted.free == sizes["free_pages"]


def test_stats_reports_the_largest_sessions_and_bytes_per_entry(engine_store: MemoryStore) -> None:
    store = engine_store
    fill(store, {"small": 2, "beta": 5, "alpha": 5, "big": 7, "mid": 3, "tiny": 1})
    store.add_many([{"text": f"expired {i}", "session": "ghost", "expires_at": PAST} for i in range(9)])
    store.add("a note outside any session")
    report = store.stats()
    largest = report["largest_sessions"]
    assert [(s["session"], s["turns"]) for s in largest] == [("big", 7), ("alpha", 5), ("beta", 5), ("mid", 3),
                                                            ("small", 2)]
    text = "turn 0 of big: " + "word " * 30 + "déjà vu"
    assert largest[0]["content_bytes"] == sum(len(text.replace("0", str(i)).encode()) for i in range(7))
    assert report["entries"] == 24 and report["expired_pending_purge"] == 9
    assert report["bytes_per_entry"] == round(report["file_bytes"] / 24, 1)


def test_sessions_are_shown_as_stored(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None, redactor="default") as store:
        store.add_many([{"text": f"hello {i}", "role": "user", "session": "ada@example.com"} for i in range(3)])
        [largest] = store.stats()["largest_sessions"]
        [(stored,)] = sql(store, "SELECT DISTINCT session FROM entries")
        assert largest == {"session": stored, "turns": 3, "content_bytes": largest["content_bytes"]}
        assert "ada@example.com" not in json.dumps(store.stats())


def test_the_json_follows_its_schema_and_the_table_is_short(engine_target: str) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=None) as store:
        fill(store, {"one": 3, "two": 1})
    result = CliRunner().invoke(cli, ["--db", str(db_path), "stats", "--json"], catch_exceptions=False)
    report = json.loads(result.stdout)
    Draft202012Validator(json_schema("stats")).validate(report)
    texts = [f"turn {i} of one: " + "word " * 30 + "déjà vu" for i in range(3)]
    assert report["largest_sessions"][0] == {"session": "one", "turns": 3, "content_bytes": len("".join(texts).encode())}
    lines = CliRunner().invoke(cli, ["--db", str(db_path), "stats"], catch_exceptions=False).stdout.splitlines()
    assert lines[0].split() == ["path", shown_location(db_path)]
    start = lines.index(next(line for line in lines if line.startswith("largest sessions")))
    assert [line.split()[:2] for line in lines[start + 1:start + 3]] == [["one", "3"], ["two", "1"]]
    if is_postgres(db_path):
        return  # the bytes by table and index below are those of SQLite's file and its pointer map
    table = lines.index(next(line for line in lines if line.startswith("file by table and index")))
    names = [line[2:40].strip() for line in lines[table + 1:]]
    assert {"entries", "keyword index (entries_fts*)"} <= set(names)
    assert names[-2].endswith(" more") and names[-1] == "total (pointer-map)"
    assert len(names) == 10  # the largest 8, the others summed, the total


def test_a_read_only_store_reports_sizes_from_the_wal_without_writing(db_path: Path) -> None:
    writer = MemoryStore(db_path, embedder=None)
    try:
        writer.db.execute("PRAGMA wal_autocheckpoint = 0")
        fill(writer, {"s": 300})  # only in the WAL
        before = {p.name: p.read_bytes() for p in db_path.parent.iterdir() if p.name.startswith(db_path.name)}
        with MemoryStore(db_path, embedder=None, read_only=True) as reader:
            report = reader.stats()
        assert report["entries"] == 300 and report["largest_sessions"][0]["turns"] == 300
        sizes = report["sizes"]
        assert sizes["source"] == "pointer-map" and sum(p["pages"] for p in sizes["parts"]) == sizes["pages"]
        assert next(p for p in sizes["parts"] if p["name"] == "entries")["pages"] > 5
        after = {p.name: p.read_bytes() for p in db_path.parent.iterdir() if p.name.startswith(db_path.name)}
        assert after["memory.db"] == before["memory.db"] and after["memory.db-wal"] == before["memory.db-wal"]
    finally:
        writer.close()


def test_a_file_without_a_pointer_map_says_what_it_lacks(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:  # a file from before incremental vacuum
        store.db.execute("PRAGMA auto_vacuum = NONE")
        store.db.execute("VACUUM")
        fill(store, {"s": 10})
        sizes = store.stats()["sizes"]
    assert count_pages(db_path, sizes["pages"]) is None
    if sizes["source"] == "dbstat":  # a SQLite build with dbstat still tells
        assert sum(p["pages"] for p in sizes["parts"]) == sizes["pages"]
        return
    assert sizes["source"] == "pages" and sizes["parts"] == [] and sizes["pages"] > 0
    out = CliRunner().invoke(cli, ["--db", str(db_path), "stats"], catch_exceptions=False).stdout
    assert "(bytes by table need a file with a pointer map (`gc --vacuum` adds one)" in out


def test_not_a_database_has_no_pages(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 10)
    assert count_pages(junk, 1) is None
    assert count_pages(tmp_path / "missing.db", 1) is None


def test_a_wal_checkpointed_away_while_it_is_read_gives_no_counts(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process's `gc` truncates the WAL (wal_checkpoint(TRUNCATE)) after the reader listed
    # its frames: the pages it then reads come back short, and it says it has no answer.
    with MemoryStore(db_path, embedder=None) as store:
        store.db.execute("PRAGMA wal_autocheckpoint = 0")
        fill(store, {"s": 50})
        pages = store.stats()["sizes"]["pages"]
        copy = tmp_path / "copy" / "memory.db"  # the copies are cut, never the store's own files
        copy.parent.mkdir()
        copy.write_bytes(db_path.read_bytes())
        Path(f"{copy}-wal").write_bytes(Path(f"{db_path}-wal").read_bytes())
    assert count_pages(copy, pages) is not None
    listed = harness_mem.pages._wal_frames

    def then_truncated(wal_file: BinaryIO, page_size: int) -> dict[int, int]:
        frames = listed(wal_file, page_size)
        os.truncate(f"{copy}-wal", 0)
        return frames

    monkeypatch.setattr(harness_mem.pages, "_wal_frames", then_truncated)
    assert count_pages(copy, pages) is None


def test_reading_the_pages_keeps_sqlites_locks_on_the_file(db_path: Path) -> None:
    """Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
    included: the pages are read through a descriptor that stays open."""
    with MemoryStore(db_path, embedder=None) as store:
        store.add("hello")
        inode = f":{db_path.stat().st_ino} "

        def locks() -> list[str]:
            return [line.split(":", 1)[1] for line in Path("/proc/locks").read_text().splitlines() if inode in line]

        held = locks()
        assert held, "SQLite holds a lock on an open WAL-mode file"
        for _ in range(2):
            store.stats()
            assert count_pages(db_path, store.db.execute("PRAGMA page_count").fetchone()[0]) is not None
            assert locks() == held
