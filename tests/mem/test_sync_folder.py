"""Sync through a folder: devices that exchanged the same operations hold the same memory.

Real stores (SQLite files, and PostgreSQL schemas for the engine-wide cases) syncing through a real
folder: adds, corrections and forgets travel both ways and converge whatever the order; two
corrections of one entry made apart settle on the same current version everywhere; a forget is never
undone by an add that arrives late; a raw identity finds on one device what another wrote; a chunk
still being copied waits, a hostile one is quarantined and reported, a newer format refused; a copy
of a store's file cannot write its device; a sync killed mid-apply leaves whole chunks.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness_mem.cli import cli
from harness_mem.errors import InvalidInputError, SyncFormatError
from harness_mem.store import MemoryStore
from harness_mem.sync.folder import SyncFolder

EMAIL = "ada.lovelace@example.com"


def export(store: MemoryStore) -> list[dict[str, Any]]:
    """What a device holds, in a form two devices can be compared by."""
    return sorted(({k: v for k, v in line.items() if k not in {"pk"}} for line in store.export()),
                  key=lambda line: str(line["id"]))


def current(store: MemoryStore) -> dict[str, str]:
    return {entry.id: entry.content for entry in store.list()}


@pytest.fixture
def two(tmp_path: Path) -> tuple[MemoryStore, MemoryStore, Path]:
    folder = tmp_path / "Sync"
    a = MemoryStore(tmp_path / "laptop.db", embedder=None)
    b = MemoryStore(tmp_path / "desktop.db", embedder=None)
    yield a, b, folder
    a.close()
    b.close()


def test_two_devices_converge_on_adds_corrections_and_forgets(two: tuple[MemoryStore, MemoryStore, Path]) -> None:
    a, b, folder = two
    a.sync(folder)
    b.sync(folder)  # joins: takes the folder's salt while it is empty
    a.add("the deploy window is Tuesday", id="window", tags=["ops"])
    a.add_many([{"content": "I moved to Porto last month", "id": "t1", "session": "s1", "role": "user"},
                {"content": "noted, Porto it is", "id": "t2", "session": "s1", "role": "assistant"}])
    b.add("the staging database is on port 5433", id="port")
    a.sync(folder)
    b.sync(folder)
    a.sync(folder)
    b.supersede("window", "the deploy window is Thursday", id="window2")
    b.forget(session="s1")
    a.supersede("port", "the staging database is on port 5434", id="port2")
    b.sync(folder)
    a.sync(folder)
    b.sync(folder)
    assert current(a) == current(b) == {"window2": "the deploy window is Thursday",
                                        "port2": "the staging database is on port 5434"}
    assert export(a) == export(b)
    assert [e.id for e in a.history("window2")] == ["window", "window2"]  # the correction's history travelled
    report = a.sync(folder)
    assert (report.written, report.applied.applied) == (0, 0)  # nothing new: nothing done


def test_two_corrections_made_apart_settle_on_the_same_current_version(
        two: tuple[MemoryStore, MemoryStore, Path]) -> None:
    a, b, folder = two
    a.sync(folder)
    b.sync(folder)
    a.add("lunch is at noon", id="lunch")
    a.sync(folder)
    b.sync(folder)
    a.supersede("lunch", "lunch is at one", id="from-a")
    time.sleep(0.01)  # b's correction is the later one
    b.supersede("lunch", "lunch is at half past twelve", id="from-b")
    for store in (a, b, a):
        store.sync(folder)
    assert current(a) == current(b) == {"from-b": "lunch is at half past twelve"}
    assert export(a) == export(b)


def test_tags_changed_in_place_travel_and_the_latest_retag_wins_in_any_order(tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        a, b, c = stores
        a.add("we use uv for the venv", id="uv", session="s1", tags=["project:myproj"])
        a.sync(folder)
        b.sync(folder)
        b.storage.move_session_tag(b.namespace, "s1", "project:myproj", "project:github.com/b/myproj", family="project:")
        b.sync(folder)
        c.sync(folder)  # c reads b's retag together with a's add (b's chunk may come first)
        a.sync(folder)
        tags = [store.get("uv").tags for store in stores]
        assert tags == [("project:github.com/b/myproj",)] * 3
        assert export(a) == export(b) == export(c)
    finally:
        for store in stores:
            store.close()


def test_a_forget_is_never_undone_by_an_add_that_arrives_late(tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "a.db", embedder=None) as a, MemoryStore(tmp_path / "b.db", embedder=None) as b:
        a.sync(folder)
        b.sync(folder)
        a.add("the vault hint is qzlatemarker", id="hint", session="s9")
        a.sync(folder)
        b.sync(folder)
        b.forget(session="s9")
        b.sync(folder)
    # A third device finds b's forget complete and a's add still being copied (truncated): then whole.
    (chunk,) = [c for c in folder.rglob("*.jsonl.gz") if "qzlatemarker" in _chunk_text(c)]
    whole = chunk.read_bytes()
    chunk.write_bytes(whole[: len(whole) // 2])
    with MemoryStore(tmp_path / "c.db", embedder=None) as c:
        first = c.sync(folder)
        assert first.waiting == 1 and first.applied.forgotten == 0
        chunk.write_bytes(whole)
        c.sync(folder)
        assert current(c) == {}
        c.purge()
        c.gc()
    for path in tmp_path.glob("c.db*"):
        assert b"qzlatemarker" not in path.read_bytes(), path


def _chunk_text(path: Path) -> str:
    try:
        return gzip.decompress(path.read_bytes()).decode()
    except (OSError, EOFError):
        return ""


def test_forgotten_words_leave_the_receiving_file(two: tuple[MemoryStore, MemoryStore, Path], tmp_path: Path) -> None:
    a, b, folder = two
    a.sync(folder)
    b.sync(folder)
    for n in range(30):
        a.add(f"note {n}: the qzsyncmarker passphrase", id=f"n{n}")
    a.sync(folder)
    b.sync(folder)
    assert len(current(b)) == 30
    a.forget(kind="note")
    a.sync(folder)
    b.sync(folder)
    assert current(b) == {}
    b.purge()
    b.gc()
    b.close()
    for path in tmp_path.glob("desktop.db*"):
        assert b"qzsyncmarker" not in path.read_bytes(), path


def test_a_raw_identity_finds_on_one_device_what_another_wrote(two: tuple[MemoryStore, MemoryStore, Path]) -> None:
    a, b, folder = two
    a.sync(folder)
    b.sync(folder)
    a.add(f"write to {EMAIL} about the invoice", session=f"user {EMAIL}", id="mail")
    a.sync(folder)
    b.sync(folder)
    (found,) = b.list(session=f"user {EMAIL}")
    assert found.id == "mail" and found.session == f"user {EMAIL}"  # the sealed value travelled: b shows it
    assert EMAIL not in "".join(_chunk_text(c) for c in folder.rglob("*.gz"))


def test_a_store_with_entries_cannot_join_a_folder_salted_otherwise(two: tuple[MemoryStore, MemoryStore, Path]) -> None:
    a, b, folder = two
    a.sync(folder)
    b.add("b wrote this before it ever synced", id="early")
    with pytest.raises(InvalidInputError, match="join it with a new, empty store"):
        b.sync(folder)
    assert current(b) == {"early": "b wrote this before it ever synced"}


def test_a_chunk_still_copying_waits_and_a_hostile_one_is_quarantined(tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "a.db", embedder=None) as a:
        a.sync(folder)
        a.add("a good note", id="good")
        a.sync(folder)
    root = SyncFolder(folder)
    hostile = "f" * 32
    for lines in ([b"not json at all"], [json.dumps({"v": 2, "op": "add"}).encode()]):
        data = gzip.compress(b"\n".join(lines) + b"\n")
        name = hashlib.sha256(data).hexdigest()
        (root.root / "devices" / hostile / "chunks").mkdir(parents=True, exist_ok=True)
        (root.root / "devices" / hostile / "chunks" / f"{name}.jsonl.gz").write_bytes(data)
        manifest = root.root / "devices" / hostile / "manifest.json"
        listed = json.loads(manifest.read_text())["chunks"] if manifest.exists() else []
        manifest.write_text(json.dumps({"chunks": [*listed, {"name": name, "operations": 1}]}))
    with MemoryStore(tmp_path / "b.db", embedder=None) as b:
        report = b.sync(folder)
        assert current(b) == {"good": "a good note"}
        assert len(report.quarantined) == 2
        assert "is not JSON" in report.quarantined[0] and "newer harness-mem" in report.quarantined[1]
        assert b.sync(folder).quarantined == []  # reported once, never applied in part
        (line,) = [c for c in b.diagnose()["checks"] if c["name"] == "sync"]  # doctor keeps saying so
        assert not line["ok"] and "2 chunks of another device quarantined, not applied" in line["detail"]
        assert f"device {hostile[:12]}: chunk " in line["detail"]
        assert "is not JSON" in line["detail"] or "newer harness-mem" in line["detail"]
    doctor = CliRunner().invoke(cli, ["--db", str(tmp_path / "b.db"), "doctor"])
    assert doctor.exit_code != 0 and "2 chunks of another device quarantined" in doctor.output
    (root.root / "FORMAT").write_text("harness-mem sync 2\n")
    with pytest.raises(SyncFormatError, match="newer harness-mem"):
        SyncFolder(folder)


def test_a_copy_of_a_stores_file_cannot_write_its_device(tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "a.db", embedder=None) as a:
        a.sync(folder)
    shutil.copy(tmp_path / "a.db", tmp_path / "copy.db")
    with MemoryStore(tmp_path / "a.db", embedder=None) as a:
        a.add("written by the original", id="orig")
        a.sync(folder)
    with MemoryStore(tmp_path / "copy.db", embedder=None) as copy:
        copy.add("written by the copy", id="copy")
        with pytest.raises(InvalidInputError, match="is a copy of device"):
            copy.sync(folder)
    with MemoryStore(tmp_path / "a.db", embedder=None) as a:
        a.sync(folder)  # the original goes on


def test_the_cli_syncs_and_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, folder = str(tmp_path / "a.db"), str(tmp_path / "b.db"), str(tmp_path / "Sync")
    assert runner.invoke(cli, ["--db", a, "--embedder", "none", "add", "a note from a", "--id", "n"]).exit_code == 0
    done = runner.invoke(cli, ["--db", a, "sync", folder])
    assert done.exit_code == 0 and "wrote 1 · applied 0" in done.stderr
    done = runner.invoke(cli, ["--db", b, "--embedder", "none", "sync", folder, "--json"])
    assert done.exit_code == 0 and json.loads(done.stdout)["applied"] == 1
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    refused = runner.invoke(cli, ["--db", b, "sync", str(a_file)])
    assert refused.exit_code == 2 and "is a file" in refused.stderr


SYNCER = textwrap.dedent("""
    import sys
    from harness_mem.store import MemoryStore
    with MemoryStore(sys.argv[1], embedder=None) as store:
        print("ready", flush=True)
        store.sync(sys.argv[2])
""")


def test_a_sync_killed_mid_apply_leaves_whole_chunks_and_the_next_one_finishes(tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "a.db", embedder=None) as a:
        a.sync(folder)
        for chunk in range(20):
            a.add_many([{"content": f"entry {chunk}-{i}", "id": f"e{chunk}-{i}"} for i in range(100)])
            a.sync(folder)
        expected = export(a)
    target = tmp_path / "b.db"
    syncer = subprocess.Popen([sys.executable, "-c", SYNCER, str(target), str(folder)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert syncer.stdout is not None and syncer.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120  # a failure detector, not a speed goal
        while time.monotonic() < deadline and syncer.poll() is None:
            with MemoryStore(target, embedder=None) as b:
                if b.count() >= 300:
                    break
            time.sleep(0.02)
    finally:
        syncer.send_signal(signal.SIGKILL)
        syncer.wait(timeout=60)
        if syncer.stdout is not None:
            syncer.stdout.close()
    with MemoryStore(target, embedder=None) as b:
        assert b.count() % 100 == 0  # whole chunks, or none of one
        b.sync(folder)
        assert export(b) == expected


def test_two_devices_converge_on_postgresql_too(fresh_target: Any, engine: str, tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    with MemoryStore(fresh_target(), embedder=None) as a, MemoryStore(fresh_target(), embedder=None) as b:
        a.sync(folder)
        b.sync(folder)
        a.add("the deploy window is Tuesday", id="window")
        a.sync(folder)
        b.sync(folder)
        b.supersede("window", "the deploy window is Thursday", id="window2")
        a.add("the staging port is 5432", id="port", session="s1", tags=["project:myproj"])
        time.sleep(0.01)  # b's words for the same id are the later ones
        b.add("the staging port is 5433", id="port", session="s1", tags=["project:myproj"])
        b.storage.move_session_tag(b.namespace, "s1", "project:myproj", "project:github.com/b/myproj",
                                   family="project:")
        b.sync(folder)
        a.sync(folder)
        b.sync(folder)
        assert current(a) == current(b) == {"window2": "the deploy window is Thursday",
                                            "port": "the staging port is 5433"}
        assert export(a) == export(b) and a.get("port").tags == ("project:github.com/b/myproj",)
        assert [(f.entry_id, f.added) for f in a.conflicts()] == [("port", True)] and a.conflicts() == b.conflicts()
        kept = {e.id: e.content for e in a.list(include_superseded=True) if e.id.startswith("port~fork-")}
        assert list(kept.values()) == ["the staging port is 5432"]
        a.forget("port")
        a.sync(folder)
        b.sync(folder)
        assert not [e for e in b.list(include_superseded=True) if e.id.startswith("port")]


def test_a_forget_leaves_the_words_in_no_chunk_of_the_folder(two: tuple[MemoryStore, MemoryStore, Path]) -> None:
    a, b, folder = two
    a.sync(folder)
    b.sync(folder)
    b.add("the qzchunkmarker vault hint", id="hint")
    b.add("a note that stays", id="stays")
    b.sync(folder)
    a.sync(folder)
    assert any("qzchunkmarker" in _chunk_text(c) for c in folder.rglob("*.jsonl.gz"))
    a.forget("hint")  # forgotten on the device that did not write it
    a.sync(folder)
    report = b.sync(folder)  # b learns of it, and rewrites its own chunk without the words
    assert report.compacted == 1 and "rewritten without forgotten words" in report.summary()
    assert not any("qzchunkmarker" in _chunk_text(c) for c in folder.rglob("*.jsonl.gz"))
    for store in (a, b):
        store.purge()
        store.gc()
    with MemoryStore(folder.parent / "fresh.db", embedder=None) as fresh:  # a device that joins later
        fresh.sync(folder)
        assert current(fresh) == {"stays": "a note that stays"}
    files = [p for p in folder.parent.rglob("*") if p.is_file()]
    assert not [p for p in files if b"qzchunkmarker" in p.read_bytes()]


def test_status_and_conflicts_say_where_each_device_is_and_what_forked(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, folder = str(tmp_path / "a.db"), str(tmp_path / "b.db"), str(tmp_path / "Sync")
    for db in (a, b):
        assert runner.invoke(cli, ["--db", db, "--embedder", "none", "sync", folder]).exit_code == 0
    runner.invoke(cli, ["--db", a, "add", "lunch is at noon", "--id", "lunch"])
    for db in (a, b):
        runner.invoke(cli, ["--db", db, "sync", folder])
    assert runner.invoke(cli, ["--db", a, "supersede", "lunch", "lunch is at one"]).exit_code == 0
    time.sleep(0.01)  # b's correction is the later one
    assert runner.invoke(cli, ["--db", b, "supersede", "lunch", "lunch is at half past twelve"]).exit_code == 0
    runner.invoke(cli, ["--db", a, "add", "not written yet"])
    runner.invoke(cli, ["--db", b, "sync", folder])
    shown = runner.invoke(cli, ["--db", a, "sync", folder, "--status"])
    assert shown.exit_code == 0
    mine, theirs = sorted(shown.stdout.splitlines(), key=lambda line: "this store" not in line)
    assert "this store" in mine and "3 operations to write" in mine  # a correction, its new version, a note
    assert "0 of 1 chunk applied" in theirs  # b's chunk (its correction) not read yet
    planned = runner.invoke(cli, ["--db", a, "sync", folder, "--dry-run"])
    assert planned.stderr == "Would write 3 operations and read 2 operations from 1 device\n"
    assert runner.invoke(cli, ["--db", a, "sync", folder, "--status"]).stdout == shown.stdout  # nothing changed
    for db in (a, b, a):
        runner.invoke(cli, ["--db", db, "sync", folder])
    with MemoryStore(b, embedder=None) as store:
        (current_version,) = [e for e in store.list() if "lunch" in e.content]
    assert current_version.content == "lunch is at half past twelve"
    listings = [runner.invoke(cli, ["--db", db, "conflicts"]).stdout for db in (a, b)]
    assert listings[0] == listings[1]  # every device sees the same fork, the same version current
    (line,) = listings[0].splitlines()
    assert line.startswith(f"lunch: corrected apart as {current_version.id}, ")
    assert line.endswith(f"— {current_version.id} is current")
    missing = runner.invoke(cli, ["--db", a, "sync", str(tmp_path / "nowhere"), "--status"])
    assert missing.exit_code == 1 and "holds no harness-mem sync folder" in missing.stderr


def test_two_processes_syncing_one_store_at_once_apply_each_chunk_once(tmp_path: Path) -> None:
    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "a.db", embedder=None) as a:
        a.sync(folder)
        for chunk in range(10):
            a.add_many([{"content": f"entry {chunk}-{i}", "id": f"e{chunk}-{i}"} for i in range(50)])
            a.sync(folder)
        expected = export(a)
    target = tmp_path / "b.db"
    with MemoryStore(target, embedder=None) as b:
        b.sync(folder)  # b exists and has joined; now two processes sync it at once
        b.forget(session=None, kind="note", since="2000-01-01")
    script = "import sys\nfrom harness_mem.store import MemoryStore\nwith MemoryStore(sys.argv[1], embedder=None) as s:\n" \
             "    s.sync(sys.argv[2])\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with MemoryStore(tmp_path / "a.db", embedder=None) as a:
        a.add_many([{"content": f"late {i}", "id": f"late{i}"} for i in range(50)])
        a.sync(folder)
        expected = export(a)
    runs = [subprocess.Popen([sys.executable, "-c", script, str(target), str(folder)], env=env,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
    with MemoryStore(target, embedder=None) as b:
        late = [line for line in export(b) if str(line["id"]).startswith("late")]
        assert late == [line for line in expected if str(line["id"]).startswith("late")]
        assert b.count() == 50  # the 500 b forgot stay forgotten; the 50 late ones arrived once


def test_a_sync_into_a_full_folder_says_so_in_one_line_and_the_next_one_finishes(tmp_path: Path,
                                                                                mount_point: Path) -> None:
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], capture_output=True)
    assert mounted.returncode == 0, mounted.stderr  # the tests run as root, as CI does
    folder = mount_point / "Sync"
    runner = CliRunner()
    a = str(tmp_path / "a.db")
    with MemoryStore(a, embedder=None) as store:
        store.add_many([{"content": os.urandom(600).hex(), "id": f"e{i}"} for i in range(400)])  # ~480 kB, no compressing
    full = runner.invoke(cli, ["--db", a, "sync", str(folder)])
    assert full.exit_code == 1 and len(full.stderr.strip().splitlines()) == 1, full.stderr
    assert "No space left on device" in full.stderr and "sync again" in full.stderr
    assert not list(folder.rglob(".tmp-*"))  # no half-written file left behind
    subprocess.run(["umount", str(mount_point)], check=True)
    with MemoryStore(a, embedder=None) as store:
        report = store.sync(folder)  # the same folder path, on the real disk now
        assert report.written == 400
    with MemoryStore(tmp_path / "b.db", embedder=None) as other:
        other.sync(folder)
        assert other.count() == 400


def test_a_large_apply_redacts_in_a_worker_what_it_would_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh device's large apply shares the redaction of incoming words with a worker process:
    what it stores is what scrubbing here stores, in order, secrets redacted either way."""
    from harness_mem.sync import incoming

    folder = tmp_path / "Sync"
    lines = [{"content": f"note {i}: call {EMAIL} about port {i}", "id": f"n{i}"} for i in range(60)]
    with MemoryStore(tmp_path / "laptop.db", embedder=None) as laptop:
        laptop.add_many(lines)
        laptop.sync(folder)
    monkeypatch.setattr(incoming, "BATCH", 7)
    with MemoryStore(tmp_path / "here.db", embedder=None) as here:
        here.sync(folder)
        expected = export(here)
    monkeypatch.setattr(incoming, "PARALLEL_MIN", 10)
    with MemoryStore(tmp_path / "shared.db", embedder=None) as shared:
        shared.sync(folder)
        assert export(shared) == expected
    assert len(expected) == 60 and not [line for line in expected if EMAIL in line["content"]]


def test_a_forget_by_id_spares_an_add_of_that_id_made_after_it_on_every_device(tmp_path: Path) -> None:
    """One device forgets an id while another, not knowing, writes that id again later: the forget
    reaches what was added before it, never the later add — on the device that forgot (its tombstone
    makes room), on the one that wrote it, and on one that reads the two in either order."""
    folder = tmp_path / "Sync"
    stores = [MemoryStore(tmp_path / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        stores[1].add("the old wording", id="note")
        stores[1].forget("note")
        time.sleep(0.01)  # written after the forget, by a device that has not heard of it
        stores[0].add("the new wording", id="note")
        for store in (*stores, *stores):
            store.sync(folder)
        assert [current(store) for store in stores] == [{"note": "the new wording"}] * 3
        assert export(stores[0]) == export(stores[1]) == export(stores[2])
    finally:
        for store in stores:
            store.close()


def test_a_sync_on_a_terminal_shows_a_bar_over_the_operations_it_applies(tmp_path: Path) -> None:
    """The bar counts operations applied (not bytes read) and ends full; a real process on a pseudo-terminal."""
    import pty

    folder = tmp_path / "Sync"
    with MemoryStore(tmp_path / "a.db", embedder=None) as a:
        a.sync(folder)
        a.add_many([{"content": f"note {i}", "id": f"n{i}"} for i in range(300)])
        a.sync(folder)
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "harness_mem", "--db", str(tmp_path / "b.db"), "--embedder", "none",
               "sync", str(folder)]
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower,
                             env={**os.environ, "COLUMNS": "120"})
    os.close(follower)
    shown = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        shown += data
    os.close(leader)
    assert child.wait(timeout=300) == 0
    text = shown.decode()
    assert "Applying" in text and "100%" in text
    assert "Synced with" in text and "applied 300" in text


def test_promote_on_a_syncing_store_is_refused_in_one_line_and_moves_nothing(
        two: tuple[MemoryStore, MemoryStore, Path], tmp_path: Path) -> None:
    a, b, folder = two
    a.add("the pager rota is weekly", id="rota")
    for store in (a, b):
        store.sync(folder)
    with pytest.raises(InvalidInputError, match="does not travel") as refused:
        a.promote("rota", to="team")
    assert "\n" not in str(refused.value)
    a.close()
    shown = CliRunner().invoke(cli, ["--db", str(tmp_path / "laptop.db"), "promote", "rota", "--to", "team"])
    assert shown.exit_code == 1 and "does not travel" in shown.stderr and len(shown.stderr.splitlines()) == 1
    with MemoryStore(tmp_path / "laptop.db", embedder=None) as again:
        assert current(again) == current(b) == {"rota": "the pager rota is weekly"}
        with MemoryStore(tmp_path / "laptop.db", namespace="team", embedder=None) as team:
            assert current(team) == {}
