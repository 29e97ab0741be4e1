"""A purge's rewrite is recoverable from any point of failure, and never shared (harness_mem.engines.
sqlite_rewrite): the next ``gc`` finishes or undoes what one cut short and says which, ``doctor``
reports a leftover, and a second rewrite of a file is refused with one line while one runs (real
SQLite files, real processes, a real small tmpfs)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_embedder import cli_process
from moved_rows import store_forgotten_rows

from harness_mem import steps
from harness_mem.engines import sqlite_rewrite
from harness_mem.errors import StorageError
from harness_mem.store import MemoryStore

STEP = 20
LATER = "forgottenafterwards"
ALREADY_RUNNING = ("Error: a rewrite of this file is already running (another gc or purge) — nothing was lost;"
                   " run `harness-mem gc` again when it has finished")


@pytest.fixture(autouse=True)
def one_chunk_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each step one chunk of STEP rows, so a step's number says where the rewrite is.
    monkeypatch.setattr(sqlite_rewrite, "ROWS", (STEP, STEP, STEP))
    monkeypatch.setattr(steps, "STEP_TARGET_S", 0.0)


def file_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name))


def rewrite_check(store: MemoryStore) -> dict[str, object]:
    return next(c for c in store.diagnose()["checks"] if c["name"] == "rewrite")


def forget_later_text(store: MemoryStore) -> None:
    """Text written and forgotten after the failure: it must leave the file with the next gc."""
    store.add(f"{LATER} note written after the rewrite failed", id="later")
    store.forget("later")


def triggers_left(store: MemoryStore) -> int:
    return int(store.db.conn.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'"
                                     " AND name LIKE '%rewrite%'").fetchone()[0])


# A purge whose rewrite meets an error at pause FAIL (in the entries' copy), and whose take-down of
# the copy is then killed at pause KILL (0: the error is let through, the process ends with it).
FAILED_THEN_KILLED = """
import os, sys
from harness_mem import steps
from harness_mem.engines import sqlite_rewrite
from harness_mem.store import MemoryStore
sqlite_rewrite.ROWS = (20, 20, 20)
steps.STEP_TARGET_S = 0.0
fail, kill = int(sys.argv[2]), int(sys.argv[3])
pauses = 0
def failing():
    global pauses
    pauses += 1
    if pauses == fail:
        raise OSError("injected: the copy fails here")
    if pauses == fail + kill and kill:
        os._exit(9)
    if pauses > fail and not kill:
        raise OSError("injected: the take-down fails too")
original = sqlite_rewrite.rewrite_tables
sqlite_rewrite.rewrite_tables = lambda conn, tables=sqlite_rewrite.TABLES, pause=None: original(conn, tables, pause=failing)
MemoryStore(sys.argv[1], embedder=None).purge()
"""


@pytest.mark.parametrize("kill", [0, 1, 2, 3])
def test_a_copy_whose_take_down_is_cut_short_stays_in_step_and_the_next_gc_finishes_it(tmp_path: Path, kill: int) -> None:
    db = tmp_path / "memory.db"
    markers = store_forgotten_rows(db, episode=True)
    with MemoryStore(db, embedder=None) as store:
        live = {entry.id: entry.content for entry in store.list(limit=1000)}
    failed = subprocess.run([sys.executable, "-c", FAILED_THEN_KILLED, str(db), "4", str(kill)], capture_output=True)
    assert failed.returncode == (9 if kill else 1), failed.stderr
    with MemoryStore(db, embedder=None) as store:
        assert sqlite_rewrite.leftovers(store.db.conn) == ["entries__rewrite"]
        assert triggers_left(store) == 3  # in step: every write since reaches the copy too
        assert rewrite_check(store)["ok"] is False
        assert "the next `harness-mem gc` finishes or undoes it" in str(rewrite_check(store)["detail"])
        forget_later_text(store)
        report = store.gc()
        assert report["rewrite_recovered"] == ["finished a rewrite cut short: the copy of entries was in step, and is completed"]
        assert sqlite_rewrite.leftovers(store.db.conn) == [] and triggers_left(store) == 0
        assert rewrite_check(store) == {"name": "rewrite", "ok": True, "detail": "none unfinished"}
        assert {entry.id: entry.content for entry in store.list(limit=1000)} == live
        assert store.integrity_check() == []
    data = file_bytes(db)
    assert LATER.encode() not in data
    assert [m for m in markers if m in data] == []


def test_a_copy_left_without_its_triggers_is_undone_by_the_next_gc(tmp_path: Path) -> None:
    # What an older take-down left when the disk filled as it emptied the copy: its triggers gone,
    # its rows there, out of step with the table from then on.
    db = tmp_path / "memory.db"
    markers = store_forgotten_rows(db, episode=True)
    failed = subprocess.run([sys.executable, "-c", FAILED_THEN_KILLED, str(db), "4", "1"], capture_output=True)
    assert failed.returncode == 9, failed.stderr
    with MemoryStore(db, embedder=None) as store:
        live = {entry.id: entry.content for entry in store.list(limit=1000)}
        for trigger in ("insert", "update", "delete"):
            store.db.conn.execute(f'DROP TRIGGER "entries__rewrite_{trigger}"')
        forget_later_text(store)
        store.purge()  # the copy is out of step: this purge undoes it rather than trusting it
        report = store.gc()
        assert report["rewrite_recovered"] == []  # the purge did it already
        assert sqlite_rewrite.leftovers(store.db.conn) == []
        assert {entry.id: entry.content for entry in store.list(limit=1000)} == live
        assert store.integrity_check() == []
    data = file_bytes(db)
    assert LATER.encode() not in data
    assert [m for m in markers if m in data] == []


def test_gc_says_it_undid_a_copy_out_of_step_and_doctor_reported_it(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    store_forgotten_rows(db)
    failed = subprocess.run([sys.executable, "-c", FAILED_THEN_KILLED, str(db), "4", "1"], capture_output=True)
    assert failed.returncode == 9, failed.stderr
    with MemoryStore(db, embedder=None) as store:
        for trigger in ("insert", "update", "delete"):
            store.db.conn.execute(f'DROP TRIGGER "entries__rewrite_{trigger}"')
        forget_later_text(store)
    doctor = cli_process("--db", str(db), "--embedder", "none", "doctor")
    assert doctor.returncode != 0
    assert "a rewrite was cut short and left entries__rewrite" in doctor.stdout.decode()
    result = cli_process("--db", str(db), "--embedder", "none", "gc", "--vacuum")
    assert result.returncode == 0, result.stderr
    assert ("undid a rewrite cut short: the copy of entries had lost its triggers (out of step, it could hold"
            " forgotten text), so it was deleted and made afresh") in result.stdout.decode().splitlines()
    assert LATER.encode() not in file_bytes(db)
    assert cli_process("--db", str(db), "--embedder", "none", "doctor").returncode == 0


# A purge whose rewrite stops at its first pause until the file GO appears (READY says it is there).
HELD_AT_A_PAUSE = """
import sys, time
from pathlib import Path
from harness_mem import steps
from harness_mem.engines import sqlite_rewrite
from harness_mem.store import MemoryStore
sqlite_rewrite.ROWS = (20, 20, 20)
steps.STEP_TARGET_S = 0.0
ready, go = Path(sys.argv[2]), Path(sys.argv[3])
def held():
    ready.touch()
    while not go.exists():
        time.sleep(0.05)
original = sqlite_rewrite.rewrite_tables
sqlite_rewrite.rewrite_tables = lambda conn, tables=sqlite_rewrite.TABLES, pause=None: original(conn, tables, pause=held)
MemoryStore(sys.argv[1], embedder=None).purge()
"""


@pytest.fixture
def held_rewrite(tmp_path: Path) -> Iterator[tuple[Path, Path, subprocess.Popen[bytes]]]:
    """A store whose purge's rewrite is held at a pause in another process: (db, go, process)."""
    db = tmp_path / "memory.db"
    store_forgotten_rows(db)
    ready, go = tmp_path / "ready", tmp_path / "go"
    holder = subprocess.Popen([sys.executable, "-c", HELD_AT_A_PAUSE, str(db), str(ready), str(go)],
                              stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert holder.poll() is None, holder.communicate()[1]
            assert time.monotonic() < deadline, "the rewrite never reached its first pause"
            time.sleep(0.05)
        yield db, go, holder
    finally:
        go.touch()
        holder.communicate(timeout=300)


def test_a_second_rewrite_is_refused_with_one_line_while_one_runs(held_rewrite: tuple[Path, Path, subprocess.Popen[bytes]]) -> None:
    db, go, holder = held_rewrite
    for command in (["gc"], ["gc", "--vacuum"], ["purge"], ["gc"]):
        result = cli_process("--db", str(db), "--embedder", "none", *command)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert result.stderr.decode().splitlines()[-1:] == [ALREADY_RUNNING], command  # after gc's progress
        assert "Traceback" not in result.stderr.decode(), command
    doctor = cli_process("--db", str(db), "--embedder", "none", "doctor", "--json")
    assert doctor.returncode == 0, doctor.stdout
    assert "rewrite" in doctor.stdout.decode() and "one running now" in doctor.stdout.decode()
    with MemoryStore(db, embedder=None) as store:  # in this process too, a second connection
        with pytest.raises(Exception, match="already running"):
            sqlite_rewrite.rewrite_tables(store.db.conn)
        store.add("written while the rewrite was held", id="beside")
    go.touch()
    stderr = holder.communicate(timeout=300)[1]
    assert holder.returncode == 0, stderr
    with MemoryStore(db, embedder=None) as store:
        assert sqlite_rewrite.leftovers(store.db.conn) == []
        assert store.get("beside").content == "written while the rewrite was held"
        assert store.gc()["rewrite_recovered"] == []
        assert store.integrity_check() == []


@pytest.mark.slow
@pytest.mark.parametrize("free", [0.3, 0.6, 1.0, 1.2])
def test_rewrites_that_fill_the_disk_leave_what_the_next_gc_finishes(tmp_path: Path, mount_point: Path, free: float) -> None:
    # ``free``: the space left beside the file, as a share of its size (1.2 was where a take-down
    # left a copy without triggers). Whatever fails on the small disk fails with its one line; moved
    # to a disk with room, one gc finishes it all and no forgotten text is left.
    built = tmp_path / "built" / "memory.db"
    built.parent.mkdir()
    markers = store_forgotten_rows(built, later=1000, pad=500)
    size_kib = int(built.stat().st_size * (1 + free)) // 1024
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mount_point)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a small file system here")
    db = mount_point / "memory.db"
    shutil.copy(built, db)
    for command in (["purge"], ["gc"]):
        result = cli_process("--db", str(db), "--embedder", "none", *command)
        # gc's progress lines first (one a phase), then the failure in one line
        lines = [line for line in result.stderr.decode().splitlines() if not line.startswith("gc: ")]
        assert result.returncode == 0 or (len(lines) == 1 and lines[0].startswith("Error: no space left to")
                                          and lines[0].endswith("free some space")), result.stderr
        if command == ["purge"]:
            with MemoryStore(db, embedder=None) as store, contextlib.suppress(StorageError):
                forget_later_text(store)  # unless the disk is too full to write it
    roomy = tmp_path / "roomy" / "memory.db"
    roomy.parent.mkdir()
    for part in mount_point.iterdir():
        if part.name != "memory.db-shm":
            shutil.copy(part, roomy.parent / part.name.replace(db.name, roomy.name))
    result = cli_process("--db", str(roomy), "--embedder", "none", "gc")
    assert result.returncode == 0, result.stderr
    assert cli_process("--db", str(roomy), "--embedder", "none", "doctor").returncode == 0
    data = file_bytes(roomy)
    assert LATER.encode() not in data
    assert [m for m in markers if m in data] == []
