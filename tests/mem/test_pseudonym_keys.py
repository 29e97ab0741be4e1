"""Pseudonyms nobody can reverse from a copy (harness_mem.pseudonyms): the attack on a copied file and
on a confined PostgreSQL role, an older store rekeyed in place (and resumed after a crash), and a
process without the key refused before it writes anything."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from engine_rows import sqlite_file

from harness_mem.cli import cli as mem_cli
from harness_mem.errors import IdentityKeyError, InvalidInputError
from harness_mem.redaction import Redactor
from harness_mem.store import MemoryStore

EMAIL = "ada@example.com"
PHONE = "+44 20 7946 0958"


def phone_guesses(count: int) -> Iterator[str]:
    """``count`` numbers (up to 100,000) around the true one, the true one among them."""
    true_at = 60_958  # +44 20 7946 0958 in the numbering below
    start = min(max(true_at - count // 2, 0), 100_000 - count)
    for n in range(start, start + count):
        yield f"+44 20 794{n // 10_000} {n % 10_000:04d}"


def email_guesses(count: int) -> Iterator[str]:
    """``count`` addresses (a multiple of 10) around the true one, the true one among them."""
    for name in ("ada", "ada.lovelace", "alovelace", "lovelace", "a.lovelace"):
        for domain in ("example.com", "example.org"):
            yield f"{name}@{domain}"
            yield from (f"{name}{n}@{domain}" for n in range(count // 10 - 1))


# How many numbers an attack guesses: a thousand around the true one prove what a hundred thousand
# do (every guess but the true one misses either way); the full-size attack runs in the slow job.
ATTACK_SIZES = [1_000, pytest.param(100_000, marks=pytest.mark.slow, id="100000")]


def guessed(secret: str, stored: set[str], *, numbers: int = 1_000, emails: int = 0) -> list[str]:
    """The guesses (``numbers`` phone numbers and ``emails`` addresses) whose pseudonym, made with the
    project's own redactor and the secret in the store, is one the store holds (as a whole value, or
    inside one)."""
    redactor = Redactor.default(secret=secret)
    inside = {p for value in stored for p in re.findall(r"<[A-Z_]+:[0-9a-f]{12}>", value)}
    guesses = [*phone_guesses(numbers), *email_guesses(emails)]
    return [g for g in guesses if redactor.pseudonymise(g).text in stored | inside]


def file_secret(path: Path) -> str:
    with sqlite_file(path) as conn:
        return str(conn.execute("SELECT value FROM settings WHERE key = 'redaction.secret'").fetchone()[0])


def stored_values(path: Path) -> set[str]:
    """Every identity value as the file stores it (tags one by one)."""
    import json

    with sqlite_file(path) as conn:
        rows = conn.execute("SELECT namespace, id, role, session, tags FROM entries").fetchall()
        stored = {v for row in rows for v in row[:4] if v}
        stored |= {t for row in rows for t in json.loads(row[4])}
        stored |= {s for (s,) in conn.execute("SELECT stored FROM identities")}
    return stored


def keyless(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This process has no identity key: an empty config directory, no variable."""
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "no-keys-here"))
    monkeypatch.delenv("HARNESS_MEM_IDENTITY_KEY", raising=False)


def old_store(path: Path, namespace: str = "default") -> MemoryStore:
    """A store keyed the way older versions keyed it (by the in-file secret alone): made new, then
    told it is older before anything is written, and opened without rekeying."""
    MemoryStore(path, embedder=None).close()
    with sqlite_file(path) as conn:
        conn.execute("DELETE FROM settings WHERE key = 'pseudonyms.keyed'")
    store = MemoryStore(path, embedder=None, namespace=namespace, rekey=False)
    assert store.pseudonym_keying == "inside"
    return store


@pytest.mark.parametrize("numbers", ATTACK_SIZES)
def test_a_copy_of_the_file_without_the_key_tests_no_guess(db_path: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, numbers: int) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("called about the invoice", session=PHONE, tags=[PHONE])
        assert store.pseudonym_keying == "outside"
    copy = tmp_path / "copy.db"
    shutil.copy(db_path, copy)
    keyless(monkeypatch, tmp_path)
    stored = stored_values(copy)
    assert guessed(file_secret(copy), stored, numbers=numbers) == []  # the true one among the guesses
    with MemoryStore(copy, embedder=None) as opened:  # the project's own lookup refuses, in one line
        with pytest.raises(IdentityKeyError, match="keyed with identity key [0-9a-f]{16}, which is not here") as refused:
            opened.scope.key(PHONE)
        assert "\n" not in str(refused.value)
        assert [e.session for e in opened.list()] == [s for s in stored if s.startswith("<PHONE:")]


@pytest.mark.parametrize("numbers", ATTACK_SIZES)
def test_a_copied_langgraph_store_without_the_key_gives_no_label_back(db_path: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch, numbers: int) -> None:
    from harness_mem.integrations.langgraph import HarnessMemStore

    with MemoryStore(db_path, embedder=None) as memory:
        HarnessMemStore(memory).put(("users", PHONE), EMAIL, {"theme": "dark"})
    copy = tmp_path / "copy.db"
    shutil.copy(db_path, copy)
    keyless(monkeypatch, tmp_path)
    stored = stored_values(copy)
    assert any(PHONE[:3] not in v and "<PHONE:" in v for v in stored)
    # numbers and a tenth as many addresses, label and key among them
    assert guessed(file_secret(copy), stored, numbers=numbers, emails=numbers // 10) == []
    with MemoryStore(copy, embedder=None, identity_key=False) as keyless_store:
        with pytest.raises(IdentityKeyError):
            keyless_store.scope.key(PHONE)  # what recovered the label before, in 959 tries
        store = HarnessMemStore(keyless_store)
        [item] = store.search(("users",))  # reads work: the label and key as their pseudonyms
        assert item.namespace[1].startswith("<PHONE:") and item.value == {"theme": "dark"}
        with pytest.raises(IdentityKeyError):
            store.search(("users", PHONE))


@pytest.mark.parametrize("numbers", ATTACK_SIZES)
def test_the_same_guesses_find_the_number_in_an_older_store(db_path: Path, numbers: int) -> None:
    # The control: keyed by the in-file secret alone, the same search finds it.
    with old_store(db_path) as store:
        store.add("called about the invoice", session=PHONE)
    assert guessed(file_secret(db_path), stored_values(db_path), numbers=numbers) == [PHONE]


def test_a_confined_postgres_role_without_the_key_tests_no_guess(postgres_server: object, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    from postgres_server import PostgresServer

    assert isinstance(postgres_server, PostgresServer)
    tag = uuid.uuid4().hex[:8]
    schema, alice = f"k_{tag}", f"alice_{tag}"
    with postgres_server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    postgres_server.create_role(alice)
    options = f"?options=-csearch_path%3D{schema},public"
    with MemoryStore(postgres_server.dsn + options, namespace="team-a", embedder=None) as admin:
        admin.add("called about the invoice", session=PHONE, tags=[EMAIL])
        admin.grant(alice)
    keyless(monkeypatch, tmp_path)
    with postgres_server.connect(user=alice) as conn:  # what the role can read: the secret and the rows
        conn.execute(f"SET search_path = {schema}, public")
        [(secret,)] = conn.execute("SELECT value FROM settings WHERE key = 'redaction.secret'").fetchall()
        stored = {str(s) for (s,) in conn.execute("SELECT session FROM entries")}
    assert stored and all(s.startswith("<PHONE:") for s in stored)
    assert guessed(str(secret), stored) == []
    with MemoryStore(postgres_server.dsn_for(user=alice) + options, namespace="team-a", embedder=None) as store:
        with pytest.raises(IdentityKeyError, match="which is not here"):
            store.add("another call", session="+44 20 7946 0959")
        assert [e.session for e in store.list()] == sorted(stored)  # reads work, pseudonyms shown


def test_a_writer_without_the_key_is_refused_before_writing_and_loses_nothing(db_path: Path, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("first call", session=PHONE)
    keyless(monkeypatch, tmp_path)
    with MemoryStore(db_path, embedder=None) as store:
        for write in (lambda: store.add("second call", session=EMAIL),
                      lambda: store.add_many([{"text": "a", "tags": [EMAIL]}]),
                      lambda: list(store.list(session=PHONE))):
            with pytest.raises(IdentityKeyError, match="HARNESS_MEM_IDENTITY_KEY"):
                write()
        store.add("nothing personal here", session="plain-session")  # no pseudonym to make: written
        assert store.stats()["entries"] == 2
    monkeypatch.undo()
    with MemoryStore(db_path, embedder=None) as store:
        assert [e.session for e in store.list(session=PHONE)] == [PHONE]


def test_an_older_store_opened_without_its_key_is_left_as_it_is_and_refuses_names(
        db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with old_store(db_path) as store:
        store.add("first call", session=PHONE)
    keyless(monkeypatch, tmp_path)
    with MemoryStore(db_path, embedder=None) as store:
        assert store.pseudonym_keying == "inside"  # not rekeyed: its key is not here
        with pytest.raises(IdentityKeyError):  # and no name is written that its key could not seal
            store.add("second call", session=EMAIL)
        store.add("nothing personal", session="plain")
        assert store.stats()["entries"] == 2
    assert "run `harness-mem migrate` where its identity key is" in caplog.text
    with MemoryStore(db_path, embedder=None, read_only=True) as reader:  # a reader keys as the file does
        assert [e.content for e in reader.list(session=PHONE)] == ["first call"]


# Rows in an older store: with small_rekey_steps, three steps' worth, as a large store has.
ROWS = 60


def fill_old(store: MemoryStore, n: int) -> None:
    store.add_many([{"text": f"note about zz{i}zz", "id": f"n{i}-{EMAIL}", "session": f"user{i % 7}@example.com",
                     "role": EMAIL if i % 2 else "user", "tags": [PHONE, "plain"], "metadata": {"who": EMAIL}}
                    for i in range(n)])


def check_migrated(path: Path, n: int, namespace: str) -> None:
    with MemoryStore(path, embedder=None, namespace=namespace) as store:
        assert store.pseudonym_keying == "outside"
        found = list(store.list(session="user3@example.com", limit=n))
        assert len(found) == len([i for i in range(n) if i % 7 == 3])
        entry = store.get(f"n3-{EMAIL}")
        assert (entry.session, entry.role, entry.tags, entry.metadata) == (
            "user3@example.com", EMAIL, (PHONE, "plain"), {"who": EMAIL})
        assert store.recall("zz3zz", k=1)[0].entry.id == f"n3-{EMAIL}"
        assert len(list(store.list(role=EMAIL, limit=n))) == n // 2
    assert guessed(file_secret(path), stored_values(path)) == []


def test_an_older_store_is_rekeyed_on_open_and_finds_what_it_held(db_path: Path, small_rekey_steps: int) -> None:
    namespace = f"team {EMAIL}"
    with old_store(db_path, namespace) as store:
        fill_old(store, ROWS)
    before = stored_values(db_path)
    check_migrated(db_path, ROWS, namespace)
    after = stored_values(db_path)
    assert not before & after - {"plain", "user"}  # every pseudonym was rewritten
    text = db_path.read_bytes()
    assert not [v for v in before if v.startswith("<") and v.encode() in text]  # no page keeps an old one


def test_a_rekeying_interrupted_midway_is_finished_by_the_next_run(db_path: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   small_rekey_steps: int) -> None:
    with old_store(db_path) as store:
        fill_old(store, ROWS)

    def crash(done: int, total: int) -> None:
        if done >= small_rekey_steps:
            raise KeyboardInterrupt

    with MemoryStore(db_path, embedder=None, rekey=False) as store, pytest.raises(KeyboardInterrupt):
        store.rekey_pseudonyms(progress=crash)
    with sqlite_file(db_path) as conn:
        assert dict(conn.execute("SELECT key, value FROM settings WHERE key LIKE 'pseudonyms.%'").fetchall()) == {
            "pseudonyms.keyed": "rekeying", "pseudonyms.rekeyed_to": f"entries {small_rekey_steps}"}
    with monkeypatch.context() as keyless_here:
        keyless(keyless_here, tmp_path)
        with MemoryStore(db_path, embedder=None) as store:  # midway, without the key: refused, nothing touched
            with pytest.raises(IdentityKeyError):
                store.add("x", session=EMAIL)
            assert store.stats()["entries"] == ROWS
    check_migrated(db_path, ROWS, "default")


def test_two_processes_rekeying_at_once_key_each_pseudonym_once(db_path: Path, small_rekey_steps: int) -> None:
    with old_store(db_path) as store:
        fill_old(store, ROWS)
    with MemoryStore(db_path, embedder=None, rekey=False) as first, \
            MemoryStore(db_path, embedder=None, rekey=False) as second:
        overtaken = []

        def overtake(done: int, total: int) -> None:  # between two of its steps, the other one finishes it all
            if not overtaken:
                overtaken.append(second.rekey_pseudonyms())

        first.rekey_pseudonyms(progress=overtake)
        assert overtaken and overtaken[0] > 0
        assert first.rekey_pseudonyms() == 0  # nothing left to do, and nothing keyed twice
    check_migrated(db_path, ROWS, "default")


def test_a_handle_opened_before_another_rekeyed_the_store_refuses_names(db_path: Path) -> None:
    with old_store(db_path) as store:
        fill_old(store, 10)
    with MemoryStore(db_path, embedder=None, rekey=False) as stale:
        with MemoryStore(db_path, embedder=None) as rekeying:  # another handle rekeys it
            assert rekeying.pseudonym_keying == "outside"
        for act in (lambda: stale.add("x", session="carol@example.com"),
                    lambda: list(stale.list(session="user5@example.com"))):
            with pytest.raises(IdentityKeyError, match="rekeyed since this handle opened it"):
                act()
        stale.add("nothing personal", session="plain")
    check_migrated(db_path, 10, "default")


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """A harness-mem command in this process, with no identity key in the environment."""
    no_key: dict[str, str | None] = {"HARNESS_MEM_IDENTITY_KEY": None}
    return CliRunner(env={**no_key, **(env or {})}).invoke(mem_cli, list(args), catch_exceptions=False)


def test_cli_doctor_says_which_kind_migrate_rekeys_and_a_keyless_write_is_one_line(db_path: Path,
                                                                                   tmp_path: Path) -> None:
    with old_store(db_path) as store:
        fill_old(store, 50)
    db = ("--db", str(db_path), "--embedder", "none")
    doctor = cli(*db, "doctor")
    assert doctor.exit_code == 0 and "pseudonyms: pseudonyms keyed by a secret inside the store" in doctor.stdout
    migrated = cli(*db, "migrate")
    assert migrated.exit_code == 0, migrated.stderr
    assert "Rekeying pseudonyms" in migrated.stderr and "Pseudonyms keyed outside the store" in migrated.stdout
    doctor = cli(*db, "doctor")
    assert "pseudonyms: pseudonyms keyed outside the store" in doctor.stdout
    refused = cli(*db, "add", "a call", "--session", EMAIL,
                  env={"HARNESS_MEM_CONFIG": str(tmp_path / "no-keys-here")})
    assert refused.exit_code == 1
    [line] = refused.stderr.strip().splitlines()[-1:]
    assert line.startswith("Error: this store's pseudonyms are keyed with identity key") and "Traceback" not in refused.stderr
    check_migrated(db_path, 50, "default")


def test_an_older_postgres_store_is_rekeyed_by_its_owner_and_its_confined_role_follows(
        postgres_server: object, caplog: pytest.LogCaptureFixture) -> None:
    import uuid

    import psycopg
    from postgres_server import PostgresServer

    assert isinstance(postgres_server, PostgresServer)
    tag = uuid.uuid4().hex[:8]
    schema, alice = f"o_{tag}", f"alice_{tag}"
    with postgres_server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    postgres_server.create_role(alice)
    options = f"?options=-csearch_path%3D{schema},public"
    owner, as_alice = postgres_server.dsn + options, postgres_server.dsn_for(user=alice) + options
    namespace = f"team {EMAIL}"
    MemoryStore(owner, embedder=None, namespace=namespace).close()
    with postgres_server.connect() as conn:
        conn.execute(f"DELETE FROM {schema}.settings WHERE key = 'pseudonyms.keyed'")
    with MemoryStore(owner, embedder=None, namespace=namespace, rekey=False) as store:  # written the older way
        assert store.pseudonym_keying == "inside"
        fill_old(store, ROWS)
        store.grant(alice)
    # A confined role leaves it be, and cannot read its in-file secret (there the pseudonyms' only
    # key): it cannot make its namespace's pseudonym, so it cannot open it until the owner rekeys.
    with pytest.raises(IdentityKeyError, match="confined role may not read"):
        MemoryStore(as_alice, embedder=None, namespace=namespace)
    assert "as the store's owner" in caplog.text
    bob = f"bob_{tag}"  # confined to a namespace with no personal data in its name: it opens, and reads
    postgres_server.create_role(bob)
    with MemoryStore(owner, embedder=None, namespace="plain", rekey=False) as store:
        store.grant(bob)
    with MemoryStore(postgres_server.dsn_for(user=bob) + options, embedder=None, namespace="plain") as store:
        assert store.pseudonym_keying == "inside" and store.count() == 0
        with pytest.raises(InvalidInputError, match="connect as its owner"):
            store.rekey_pseudonyms()

    def stored_sessions() -> set[str]:
        with psycopg.connect(owner) as conn:
            return {str(s) for (s,) in conn.execute("SELECT DISTINCT session FROM entries")}

    before = stored_sessions()
    with MemoryStore(owner, embedder=None, namespace=namespace) as store:  # the owner's open rekeys it
        assert store.pseudonym_keying == "outside"
    assert not before & stored_sessions()
    for target in (owner, as_alice):  # the confined role's namespace was rekeyed with its rows
        with MemoryStore(target, embedder=None, namespace=namespace) as store:
            assert len(list(store.list(session="user3@example.com", limit=ROWS))) == len(
                [i for i in range(ROWS) if i % 7 == 3])
            entry = store.get(f"n3-{EMAIL}")
            assert (entry.role, entry.tags, entry.namespace) == (EMAIL, (PHONE, "plain"), namespace)
            assert store.recall("zz3zz", k=1)[0].entry.id == f"n3-{EMAIL}"
