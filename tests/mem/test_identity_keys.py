"""One key per team, or a clear refusal (harness_mem.keyfiles, harness_mem.rotation): the store's
identity key handed from one machine to another under a passphrase (two config directories are
two machines), and rotated on SQLite (resumed after a kill -9) and on PostgreSQL."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from engine_rows import sqlite_file

from harness_mem.cli import cli as mem_cli
from harness_mem.errors import IdentityKeyError, InvalidInputError
from harness_mem.store import MemoryStore

EMAIL = "ada@example.com"
PHONE = "+44 20 7946 0958"
PASSPHRASE = "correct horse battery staple"


def run(*args: str, config: Path, env: dict[str, str] | None = None) -> Result:
    """A harness-mem command on the "machine" whose config directory is ``config`` (in this process:
    the machine is its environment)."""
    environ: dict[str, str | None] = {"HARNESS_MEM_IDENTITY_KEY": None, "HARNESS_MEM_KEY_PASSPHRASE": None,
                                      "HARNESS_MEM_CONFIG": str(config), **(env or {})}
    return CliRunner(env=environ).invoke(mem_cli, list(args), catch_exceptions=False)


def one_line_error(done: Result, starts: str) -> None:
    assert done.exit_code == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"Error: {starts}"), done.stderr


# Rows in a store whose key is rotated: with small_rekey_steps, three steps' worth.
ROWS = 60


def fill(store: MemoryStore, n: int) -> None:
    store.add_many([{"text": f"note about zz{i}zz", "id": f"n{i}-{EMAIL}", "session": f"user{i % 7}@example.com",
                     "role": EMAIL if i % 2 else "user", "tags": [PHONE, "plain"], "metadata": {"who": EMAIL}}
                    for i in range(n)])


def check_round_trips(store: MemoryStore, n: int) -> None:
    found = list(store.list(session="user3@example.com", limit=n))
    assert len(found) == len([i for i in range(n) if i % 7 == 3])
    assert {e.session for e in found} == {"user3@example.com"}
    entry = store.get(f"n3-{EMAIL}")
    assert (entry.session, entry.role, entry.tags, entry.metadata) == (
        "user3@example.com", EMAIL, (PHONE, "plain"), {"who": EMAIL})
    assert store.recall("zz3zz", k=1)[0].entry.id == f"n3-{EMAIL}"
    assert len(list(store.list(role=EMAIL, limit=n))) == n // 2


def stored_pseudonyms(path: Path) -> set[str]:
    """Every pseudonym the file's entries and sealed identities hold in an identity field."""
    import re

    with sqlite_file(path) as conn:
        rows = conn.execute("SELECT namespace, id, role, session, tags, metadata FROM entries").fetchall()
        rows += conn.execute("SELECT namespace, stored, '', '', '', '' FROM identities").fetchall()
    return {p for row in rows for value in row if value for p in re.findall(r"<[A-Z_]+:[0-9a-f]{12}>", value)}


def key_id_of(path: Path) -> str:
    with sqlite_file(path) as conn:
        return str(conn.execute("SELECT value FROM settings WHERE key = 'identities.key_id'").fetchone()[0])


@pytest.fixture
def machines(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two machines' config directories and a passphrase file."""
    secret = tmp_path / "passphrase"
    secret.write_text(PASSPHRASE + "\n")
    return tmp_path / "machine-a", tmp_path / "machine-b", secret


def test_a_key_exported_on_one_machine_and_imported_on_another_reads_and_writes_identities(
        db_path: Path, tmp_path: Path, machines: tuple[Path, Path, Path]) -> None:
    a, b, secret = machines
    db = ("--db", str(db_path), "--embedder", "none")
    assert run(*db, "add", "the call went well", "--session", EMAIL, config=a).exit_code == 0
    [key_path] = (a / "keys").iterdir()
    wrapped = tmp_path / "team.key"
    exported = run(*db, "key", "export", str(wrapped), "--passphrase-file", str(secret), config=a)
    assert exported.exit_code == 0, exported.stderr
    assert stat.S_IMODE(wrapped.stat().st_mode) == 0o600
    document = json.loads(wrapped.read_text())
    assert document["key_id"] == key_id_of(db_path) and document["kdf"]["name"] == "scrypt"
    assert key_path.read_text().strip() not in wrapped.read_text() + exported.stdout + exported.stderr

    # Machine B, before: doctor and status say it lacks the key and how to get it; reads show pseudonyms.
    for command in (("doctor",), ("key", "status")):
        lacking = run(*db, *command, config=b)
        assert lacking.exit_code == 1 and "harness-mem key import FILE" in lacking.stdout, lacking.stdout
    assert EMAIL not in run(*db, "list", config=b).stdout
    one_line_error(run(*db, "add", "another", "--session", EMAIL, config=b), "this store's pseudonyms are keyed")

    imported = run(*db, "key", "import", str(wrapped), "--passphrase-file", str(secret), config=b)
    assert imported.exit_code == 0, imported.stderr
    assert "It is the key of" in imported.stdout
    installed = b / "keys" / key_path.name
    assert installed.read_text() == key_path.read_text()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o600 and stat.S_IMODE(installed.parent.stat().st_mode) == 0o700
    again = run(*db, "key", "import", str(wrapped), "--passphrase-file", str(secret), config=b)
    assert again.exit_code == 0 and "Already had" in again.stdout  # idempotent

    # Machine B, after: it reads the raw identities and writes new ones.
    assert run(*db, "doctor", config=b).exit_code == 0
    status = run(*db, "key", "status", config=b)
    assert status.exit_code == 0 and str(installed) in status.stdout
    assert run(*db, "add", "another call", "--session", EMAIL, config=b).exit_code == 0
    listed = run(*db, "list", "--session", EMAIL, "--json", config=b)
    assert listed.exit_code == 0, listed.stderr
    assert [json.loads(line)["session"] for line in listed.stdout.splitlines()] == [EMAIL, EMAIL]


def test_a_wrong_passphrase_a_tampered_file_or_an_existing_file_is_one_line_and_writes_nothing(
        db_path: Path, tmp_path: Path, machines: tuple[Path, Path, Path]) -> None:
    a, b, secret = machines
    db = ("--db", str(db_path), "--embedder", "none")
    assert run(*db, "add", "the call went well", "--session", EMAIL, config=a).exit_code == 0
    wrapped = tmp_path / "team.key"
    # The passphrase from the environment, as a script gives it.
    assert run(*db, "key", "export", str(wrapped), config=a, env={"HARNESS_MEM_KEY_PASSPHRASE": PASSPHRASE}).exit_code == 0
    original = wrapped.read_text()

    one_line_error(run(*db, "key", "export", str(wrapped), "--passphrase-file", str(secret), config=a),
                   f"{wrapped} exists — give --force")
    assert wrapped.read_text() == original
    one_line_error(run(*db, "key", "export", str(tmp_path / "no-passphrase.key"), config=a), "no passphrase")
    assert not (tmp_path / "no-passphrase.key").exists()

    wrong = run(*db, "key", "import", str(wrapped), config=b, env={"HARNESS_MEM_KEY_PASSPHRASE": "not the passphrase"})
    one_line_error(wrong, f"{wrapped} does not open with that passphrase")
    document = json.loads(original)
    sealed = bytearray(document["sealed"].encode())
    sealed[5] = ord("A") if sealed[5] != ord("A") else ord("B")
    other_id = {**document, "key_id": "0" * 16}
    for tampered in ({**document, "sealed": sealed.decode()}, other_id, {**document, "kdf": {**document["kdf"], "n": 2}}):
        wrapped.write_text(json.dumps(tampered))
        one_line_error(run(*db, "key", "import", str(wrapped), "--passphrase-file", str(secret), config=b),
                       f"{wrapped} does not open with that passphrase")
    wrapped.write_text("not json at all")
    one_line_error(run(*db, "key", "import", str(wrapped), "--passphrase-file", str(secret), config=b),
                   f"{wrapped} is not a wrapped identity key")
    assert not b.exists()  # nothing written on machine B

    assert run(*db, "key", "export", str(wrapped), "--force", "--passphrase-file", str(secret), config=a).exit_code == 0
    assert run(*db, "key", "import", str(wrapped), "--passphrase-file", str(secret), config=b).exit_code == 0


def test_rotation_keeps_every_round_trip_and_the_old_key_writes_nothing(
        db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_rekey_steps: int) -> None:
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "machine-a"))
    monkeypatch.delenv("HARNESS_MEM_IDENTITY_KEY", raising=False)
    with MemoryStore(db_path, embedder=None) as store:
        fill(store, ROWS)
        old_id = key_id_of(db_path)
        old_key = (tmp_path / "machine-a" / "keys" / f"{old_id}.key").read_text().strip()
        before = stored_pseudonyms(db_path)
        done = store.rotate_identity_key()
        assert (done.old_id, done.new_id) == (old_id, key_id_of(db_path)) and done.new_id != old_id
        assert done.old_key_file is not None and done.old_key_file.exists()  # kept until the user deletes it
        check_round_trips(store, ROWS)
        store.add("a later call", session=EMAIL)  # this handle goes on with the new key
    after = stored_pseudonyms(db_path)
    assert before and after and not before & after
    data = db_path.read_bytes()
    assert not [p for p in before if p.encode() in data]  # no old pseudonym left anywhere in the file
    with MemoryStore(db_path, embedder=None) as store:
        check_round_trips(store, ROWS)
        assert [e.content for e in store.list(session=EMAIL)] == ["a later call"]

    # A process with the old key alone (its file, or the variable) can no longer write identity values.
    old_machine = tmp_path / "old-machine"
    (old_machine / "keys").mkdir(parents=True)
    (old_machine / "keys" / f"{old_id}.key").write_text(old_key + "\n")
    db = ("--db", str(db_path), "--embedder", "none")
    one_line_error(run(*db, "add", "x", "--session", EMAIL, config=old_machine), "this store's pseudonyms are keyed")
    one_line_error(run(*db, "add", "x", "--session", EMAIL, config=old_machine,
                       env={"HARNESS_MEM_IDENTITY_KEY": old_key}), "this store's pseudonyms are keyed")
    with sqlite_file(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == ROWS + 1


def test_a_rotation_killed_midway_is_finished_by_the_next_run(db_path: Path, tmp_path: Path,
                                                              small_rekey_steps: int) -> None:
    config = tmp_path / "machine-a"
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEM_IDENTITY_KEY"}
    env["HARNESS_MEM_CONFIG"] = str(config)
    killer = f"""
import os, signal
from harness_mem.engines import sqlite_rekey
from harness_mem.store import MemoryStore
from pathlib import Path
import sys
sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parent.parent)!r}]  # this file, its helpers
from test_identity_keys import ROWS, fill

sqlite_rekey.ROWS_PER_STEP = {small_rekey_steps}

def crash(done, total):
    if done >= {small_rekey_steps}:
        os.kill(os.getpid(), signal.SIGKILL)

with MemoryStore({str(db_path)!r}, embedder=None) as store:
    fill(store, ROWS)
    store.rotate_identity_key(progress=crash)
"""
    killed = subprocess.run([sys.executable, "-c", killer], env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr
    with sqlite_file(db_path) as conn:
        settings = dict(conn.execute("SELECT key, value FROM settings WHERE key IN"
                                     " ('identities.rotating_from', 'pseudonyms.rekeyed_to')").fetchall())
    assert settings["identities.rotating_from"] and settings["pseudonyms.rekeyed_to"] == f"entries {small_rekey_steps}"
    db = ("--db", str(db_path), "--embedder", "none")
    status = run(*db, "key", "status", config=config)
    assert status.exit_code == 1 and "harness-mem key rotate" in status.stdout
    # Writing a name meanwhile is refused, even with the new key: its rows could clash with the rewrite.
    one_line_error(run(*db, "add", "x", "--session", EMAIL, config=config), "this store's identity key is being rotated")
    copied = tmp_path / "copy.db"  # a copy would carry half-rotated pseudonyms
    one_line_error(run("copy", str(db_path), str(copied), config=config), f"{db_path}: its identity key is being rotated")
    finished = run(*db, "key", "rotate", config=config)
    assert finished.exit_code == 0, finished.stderr
    assert f"Identity key {settings['identities.rotating_from']} -> {key_id_of(db_path)}" in finished.stdout
    assert run(*db, "key", "status", config=config).exit_code == 0
    os.environ["HARNESS_MEM_CONFIG"], saved = str(config), os.environ["HARNESS_MEM_CONFIG"]
    try:
        with MemoryStore(db_path, embedder=None) as store:
            check_round_trips(store, ROWS)
    finally:
        os.environ["HARNESS_MEM_CONFIG"] = saved


def test_rotation_on_postgres_keeps_every_round_trip_and_refuses_the_old_key(
        postgres_server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    import psycopg
    from postgres_server import PostgresServer

    assert isinstance(postgres_server, PostgresServer)
    schema = f"k_{uuid.uuid4().hex[:8]}"
    with postgres_server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = postgres_server.dsn + f"?options=-csearch_path%3D{schema},public"
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "machine-a"))
    monkeypatch.delenv("HARNESS_MEM_IDENTITY_KEY", raising=False)

    def sessions_stored() -> set[str]:
        with psycopg.connect(dsn) as conn:
            return {str(s) for (s,) in conn.execute("SELECT DISTINCT session FROM entries")}

    alice = f"alice_{schema}"
    postgres_server.create_role(alice)
    as_alice = postgres_server.dsn_for(user=alice) + f"?options=-csearch_path%3D{schema},public"
    namespace = f"team {EMAIL}"
    with MemoryStore(dsn, embedder=None, namespace=namespace) as store:
        fill(store, ROWS)
        store.grant(alice)
        old_key = next((tmp_path / "machine-a" / "keys").iterdir()).read_text().strip()
        before = sessions_stored()
        with MemoryStore(as_alice, embedder=None, namespace=namespace) as confined, \
                pytest.raises(InvalidInputError, match="connect as its owner"):
            confined.rotate_identity_key()
        done = store.rotate_identity_key()
        check_round_trips(store, ROWS)
    assert not before & sessions_stored()
    for target in (dsn, as_alice):  # a new handle finds its namespace, the confined role's too
        with MemoryStore(target, embedder=None, namespace=namespace) as store:
            check_round_trips(store, ROWS)

    # A second process holding the old key, or another one, is refused identity writes.
    for other in (old_key, os.urandom(32).hex()):
        refused = run("--db", dsn, "--namespace", namespace, "--embedder", "none", "add", "x", "--session", EMAIL,
                      config=tmp_path / "machine-b", env={"HARNESS_MEM_IDENTITY_KEY": other})
        one_line_error(refused, "this store's pseudonyms are keyed")
    monkeypatch.setenv("HARNESS_MEM_IDENTITY_KEY", old_key)
    # Refused on open (the namespace holds an e-mail), before anything is written.
    with pytest.raises(IdentityKeyError, match="not the one given"), \
            MemoryStore(dsn, embedder=None, namespace=namespace) as store:
        store.add("x", session=EMAIL)
    assert done.new_id != done.old_id


def test_a_handle_opened_before_a_rotation_writes_no_name_under_the_old_key(
        db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "machine-a"))
    monkeypatch.delenv("HARNESS_MEM_IDENTITY_KEY", raising=False)
    with MemoryStore(db_path, embedder=None) as before, MemoryStore(db_path, embedder=None) as rotating:
        before.add("a first call", session=EMAIL)  # its redactor and sealer now hold the old key
        rotating.rotate_identity_key()
        with pytest.raises(IdentityKeyError, match="rotated since this handle opened it"):
            before.add("a second call", session=EMAIL)
        assert [e.content for e in rotating.list(session=EMAIL)] == ["a first call"]
    with MemoryStore(db_path, embedder=None) as store:
        assert [e.content for e in store.list(session=EMAIL)] == ["a first call"]


def test_export_asks_for_the_passphrase_twice_on_a_terminal(db_path: Path, tmp_path: Path,
                                                            machines: tuple[Path, Path, Path]) -> None:
    import pty
    import select

    a, b, secret = machines
    db = ("--db", str(db_path), "--embedder", "none")
    assert run(*db, "add", "the call went well", "--session", EMAIL, config=a).exit_code == 0
    environ = {k: v for k, v in os.environ.items() if k not in ("HARNESS_MEM_IDENTITY_KEY", "HARNESS_MEM_KEY_PASSPHRASE")}
    environ["HARNESS_MEM_CONFIG"] = str(a)
    controller, terminal = pty.openpty()
    wrapped = tmp_path / "team.key"
    exporting = subprocess.Popen([sys.executable, "-m", "harness_mem", *db, "key", "export", str(wrapped)],
                                 stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ,
                                 start_new_session=True)
    try:
        said = b""
        for prompt in (b"Passphrase", b"Repeat for confirmation"):  # typed once each prompt is up
            while prompt not in said:
                ready, _, _ = select.select([exporting.stderr], [], [], 300)
                chunk = os.read(exporting.stderr.fileno(), 4096) if ready else b""  # type: ignore[union-attr]
                assert chunk, f"no {prompt!r} prompt: {said!r}"
                said += chunk
            os.write(controller, f"{PASSPHRASE}\n".encode())
        out, rest = exporting.communicate(timeout=300)
        err = (said + rest).decode()
    finally:
        if exporting.poll() is None:  # a prompt that never came: the test fails, the process goes
            exporting.kill()
            exporting.communicate()
        os.close(terminal)
        os.close(controller)
    assert exporting.returncode == 0, err
    assert err.count("Passphrase") == 1 and "Repeat for confirmation" in err and PASSPHRASE not in out.decode() + err
    assert run(*db, "key", "import", str(wrapped), "--passphrase-file", str(secret), config=b).exit_code == 0
