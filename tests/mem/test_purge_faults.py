"""A purge is complete or still owed: a rewrite that fails (a full disk, a crash) is finished by the
next ``gc``, and the forgotten text leaves the file's bytes then (SQLite files, real processes)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_embedder import cli_process
from moved_rows import store_forgotten_rows

from harness_mem import maintenance
from harness_mem.models import now_ms
from harness_mem.store import MemoryStore

PAST = "2020-01-01T00:00:00Z"


def store_with_moved_rows(db: Path, *, later: int = 0, pad: int = 60) -> list[bytes]:
    """A store where half of 100 marked rows were corrected and then forgotten, with old copies of
    them in the unused middle of their pages (tests/moved_rows.py); ``later`` untouched notes of
    ``pad`` words after them. Returns the forgotten rows' markers."""
    return store_forgotten_rows(db, later=later, pad=pad)


def file_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name))


def left_in(db: Path, markers: list[bytes]) -> list[bytes]:
    data = file_bytes(db)
    return [m for m in markers if m in data]


def pending(db: Path) -> dict[str, int] | None:
    with MemoryStore(db, embedder=None, read_only=True) as store:
        value = store.storage.setting(maintenance.PURGE_PENDING_KEY)
    return None if value is None else dict(json.loads(value))


@pytest.mark.slow
def test_a_purge_that_fills_the_disk_says_so_and_the_next_gc_finishes_it(tmp_path: Path, mount_point: Path) -> None:
    built = tmp_path / "built" / "memory.db"
    built.parent.mkdir()
    markers = store_with_moved_rows(built, later=1000, pad=500)  # the entries: most of the file
    with MemoryStore(built, embedder=None) as store:
        live = store.count()
        entries_bytes = sum(part["bytes"] for part in store.stats()["sizes"]["parts"] if part["table"] == "entries")
    # Room for the purge's deletes and merges, not for the rewrite's copy of the entries.
    size_kib = (built.stat().st_size + entries_bytes * 2 // 3) // 1024
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mount_point)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a small file system here")
    db = mount_point / "memory.db"
    shutil.copy(built, db)
    result = cli_process("--db", str(db), "--embedder", "none", "purge")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"Error: no space left to rewrite {db} (a rewrite needs free space as large as the file) — nothing"
        " stored was lost, and the next `harness-mem gc` finishes the purge; free some space"
    ]
    roomy = tmp_path / "roomy" / "memory.db"  # the file, moved to a disk with room
    roomy.parent.mkdir()
    for part in mount_point.iterdir():
        if part.name != "memory.db-shm":
            shutil.copy(part, roomy.parent / part.name.replace(db.name, roomy.name))
    assert pending(roomy) == {"expired": 0, "forgotten": 50}
    assert left_in(roomy, markers), "no old copy survived the failed purge: the proof below would mean nothing"
    result = cli_process("--db", str(roomy), "--embedder", "none", "gc", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["forgotten_purged"] == 50 and report["vacuum"] == "tables"
    assert left_in(roomy, markers) == []
    assert pending(roomy) == {"expired": 0, "forgotten": 0}
    with MemoryStore(roomy, embedder=None) as store:
        assert store.count() == live  # what was not forgotten is all there


CRASH_BEFORE_THE_REWRITE = """
import os, sys
from harness_mem.engines import sqlite_rewrite
from harness_mem.store import MemoryStore
sqlite_rewrite.rewrite = lambda *args, **kwargs: os._exit(9)  # the process dies where the rewrite starts
MemoryStore(sys.argv[1], embedder=None).purge()
"""


def test_a_purge_killed_before_its_rewrite_is_finished_by_the_next_gc(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    markers = store_with_moved_rows(db)
    crashed = subprocess.run([sys.executable, "-c", CRASH_BEFORE_THE_REWRITE, str(db)], capture_output=True)
    assert crashed.returncode == 9, crashed.stderr
    assert pending(db) == {"expired": 0, "forgotten": 50}  # the deletes committed, the rewrite owed
    assert left_in(db, markers)
    with MemoryStore(db, embedder=None) as store:
        report = store.gc()
        assert report["forgotten_purged"] == 50 and report["vacuum"] == "tables"
        assert store.gc()["forgotten_purged"] == 0  # done once: the record is cleared
    assert left_in(db, markers) == []


def test_a_purge_killed_before_its_rewrite_is_finished_by_the_next_purge(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    markers = store_with_moved_rows(db)
    crashed = subprocess.run([sys.executable, "-c", CRASH_BEFORE_THE_REWRITE, str(db)], capture_output=True)
    assert crashed.returncode == 9, crashed.stderr
    with MemoryStore(db, embedder=None) as store:
        assert store.purge() == 0  # nothing left to delete, but the rewrite it owed is done
    assert left_in(db, markers) == []
    assert pending(db) == {"expired": 0, "forgotten": 0}


def test_gc_counts_and_rewrites_after_the_expiry_its_open_made(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with MemoryStore(db, embedder=None, redactor=None) as store:
        store.add_many([{"text": f"kept note {i}"} for i in range(20)])
        store.add_many([{"text": f"short-lived{i:03d}marker note", "expires_at": PAST} for i in range(30)])
        with store.transaction():  # the daily purge is due at the next open
            store.storage.set_setting(maintenance.EXPIRY_KEY, str(now_ms() - 2 * maintenance.EXPIRY_EVERY_MS))
    with MemoryStore(db, embedder=None) as store:  # this open purged them, before gc ran
        assert store.count() == 20
        report = store.gc()
    assert report["expired_purged"] == 30 and report["vacuum"] == "tables"
    assert pending(db) == {"expired": 0, "forgotten": 0}
