"""Identities that round-trip: ids, sessions, roles, tags, the namespace and metadata values come back as written,
sealed with a key kept outside the store, and never raw in it (harness_mem.identities)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from engine_rows import stored_text, written
from pii import assert_absent

from harness_mem.copying import copy_store
from harness_mem.errors import IdentityKeyError, InvalidInputError
from harness_mem.identities import KEY_ID_SETTING, IdentityKey, key_file
from harness_mem.jsonl import import_jsonl
from harness_mem.store import MemoryStore

EMAIL = "ada@example.com"
PHONE = "+44 20 7946 0958"
RAW = [EMAIL, "7946 0958"]


def write_identities(store: MemoryStore) -> str:
    """One entry whose every identity field holds PII; returns its id."""
    return store.add("met about the launch", id=f"note {EMAIL}", session=f"user-{EMAIL}", role=f"caller {PHONE}",
                     tags=[f"owner:{EMAIL}", "plain"]).id


def test_every_read_gives_identity_fields_back_as_written_and_the_store_holds_none(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None, namespace=f"team {EMAIL}") as store:
        entry_id = write_identities(store)
        assert entry_id == f"note {EMAIL}"
        fields = ("id", "session", "role", "tags", "namespace")
        expected = (f"note {EMAIL}", f"user-{EMAIL}", f"caller {PHONE}", (f"owner:{EMAIL}", "plain"), f"team {EMAIL}")
        got = store.get(entry_id)
        assert tuple(getattr(got, f) for f in fields) == expected
        for entry in (*store.list(), store.recall("launch", k=1)[0].entry, *store.session_turns(f"user-{EMAIL}"),
                      *store.history(entry_id), *store.list(tags=[f"owner:{EMAIL}"], role=f"caller {PHONE}")):
            assert tuple(getattr(entry, f) for f in fields) == expected
        assert [s.session for s in store.sessions()] == [f"user-{EMAIL}"]
        assert store.recall_sessions("launch", k=1)[0].session == f"user-{EMAIL}"
        corrected = store.supersede(entry_id, "met about the launch, moved to May")
        assert store.get(corrected.id).session == f"user-{EMAIL}" and store.history(entry_id)[0].superseded_by == corrected.id
    assert_absent(RAW, stored_text(engine_target))


def test_the_key_lives_outside_the_file_in_a_private_file(db_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path_factory.mktemp("elsewhere") / "config"  # not in the store's folder, which the proof reads
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(config))
    with MemoryStore(db_path, embedder=None) as store:
        store.add("no identity to seal", session="plain-session")
        assert not config.exists()  # nothing sensitive among the identities: no key is made
        write_identities(store)
        key_id = store.storage.setting(KEY_ID_SETTING)
    assert key_id is not None
    path = key_file(key_id, config)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert_absent([path.read_text().strip()], written(db_path))  # the key is nowhere in the store


def test_losing_the_key_loses_the_names_never_the_memories(db_path: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "config"))
    with MemoryStore(db_path, embedder=None) as store:
        entry_id = write_identities(store)
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "elsewhere"))  # another machine, or the key deleted
    with MemoryStore(db_path, embedder=None) as store:
        [entry] = store.list()
        assert entry.content == "met about the launch" and entry.session is not None
        assert entry.session.startswith("<EMAIL:") and EMAIL not in entry.id
        assert store.get(entry.id).id == entry.id  # the stored id finds it
        # The raw id cannot: its pseudonym is keyed with the missing key (harness_mem.pseudonyms).
        with pytest.raises(IdentityKeyError, match="which is not here"):
            store.get(entry_id)
        with pytest.raises(IdentityKeyError, match="HARNESS_MEM_IDENTITY_KEY"):
            store.add("written without the key", session=f"user-{EMAIL}")
        store.add("written without the key", session="user-plain")
        assert not (tmp_path / "elsewhere").exists()  # no new key over the store's own
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "config"))
    with MemoryStore(db_path, embedder=None) as store:  # the key back: the names are back
        assert {e.session for e in store.list()} == {f"user-{EMAIL}", "user-plain"}


METADATA = {"owner": EMAIL, "note": f"call {PHONE} after six", "phone": 14155550123, "n": 3, "ok": True,
            "contacts": [{EMAIL: "primary"}, "none"], "price": 1.5}


def test_metadata_values_come_back_as_written_and_the_store_holds_none(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        entry = store.add("met about the launch", metadata=METADATA)
        assert entry.metadata == METADATA  # an int the redactor reads as a phone number comes back an int
        assert store.get(entry.id).metadata == METADATA
        assert store.recall("launch", k=1)[0].entry.metadata == METADATA
        assert [e.metadata for e in store.list(metadata={"owner": EMAIL, "phone": 14155550123})] == [METADATA]
        with store.stored_forms():
            stored = store.get(entry.id).metadata
        assert stored["owner"].startswith("<EMAIL:") and stored["phone"].startswith("<PHONE:")
        assert stored["n"] == 3 and list(stored["contacts"][0]) != [EMAIL]  # a key is kept like a value
    assert_absent([*RAW, "14155550123"], stored_text(engine_target))


def test_a_metadata_value_without_its_key_reads_as_its_pseudonym(db_path: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        entry_id = store.add("met", metadata={"owner": EMAIL, "n": 1}).id
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "elsewhere"))
    with MemoryStore(db_path, embedder=None) as keyless:
        metadata = keyless.get(entry_id).metadata
        assert metadata["owner"].startswith("<EMAIL:") and metadata["n"] == 1
        assert [e.id for e in keyless.list(metadata={"owner": metadata["owner"]})] == [entry_id]  # by its stored value
        with pytest.raises(IdentityKeyError):  # not by its raw value: its pseudonym cannot be made here
            list(keyless.list(metadata={"owner": EMAIL}))


def test_a_credential_in_metadata_is_scrubbed_as_the_policy_says_never_sealed(db_path: Path) -> None:
    from harness_mem.errors import WriteRefusedError
    from harness_mem.redaction import Redactor

    token = "ghp_" + "a1B2" * 9
    with MemoryStore(db_path, embedder=None) as store:
        assert store.add("deploy", metadata={"token": token, "owner": EMAIL}).metadata == {
            "token": "<API_KEY>", "owner": EMAIL}
        assert len(list(store.storage.every_sealed_identity())) == 1  # the owner's, not the token's
        store.redactor = Redactor.hygiene()
        with pytest.raises(WriteRefusedError):
            store.add("deploy again", metadata={"token": token})
        assert store.count() == 1
    assert_absent([token], stored_text(db_path))


def test_gc_keeps_the_sealed_metadata_of_what_stays(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        kept = store.add("stays", metadata={"owner": EMAIL})
        gone = store.add("goes", metadata={"owner": "bob@example.org"})
        store.forget(gone.id)
        store.purge()
        assert len(list(store.storage.every_sealed_identity())) == 1
        assert store.get(kept.id).metadata == {"owner": EMAIL}


def test_a_key_the_caller_passes_opens_the_store_anywhere(db_path: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    key = os.urandom(32)
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "none"))
    with MemoryStore(db_path, embedder=None, identity_key=key) as store:
        write_identities(store)
    assert not (tmp_path / "none").exists()
    with MemoryStore(db_path, embedder=None, identity_key=os.urandom(32)) as wrong:
        assert EMAIL not in str(next(wrong.list()).session)  # another key opens nothing
    code = ("import sys; from harness_mem.store import MemoryStore\n"
            "with MemoryStore(sys.argv[1], embedder=None) as s: print(next(s.list()).session)")
    shown = subprocess.run([sys.executable, "-c", code, str(db_path)], capture_output=True, text=True, check=True,
                           env={**os.environ, "HARNESS_MEM_IDENTITY_KEY": key.hex()}).stdout.strip()
    assert shown == f"user-{EMAIL}"


def test_a_bad_key_is_one_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="64 hex digits"):
        IdentityKey.parse("not a key")
    with pytest.raises(InvalidInputError, match="32 bytes"):
        IdentityKey.parse(b"short")


def test_without_a_key_or_redaction_nothing_is_sealed(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None, identity_key=False) as store:
        write_identities(store)
        assert next(store.list()).session.startswith("<EMAIL:")  # type: ignore[union-attr]
        assert store.storage.every_sealed_identity() is not None and not list(store.storage.every_sealed_identity())


def test_a_credential_is_never_sealed(db_path: Path) -> None:
    token = "ghp_" + "a1B2" * 9
    with MemoryStore(db_path, embedder=None) as store:
        store.add("deploy", session=f"ci {token}")
        assert token not in str(next(store.list()).session)
        assert not list(store.storage.every_sealed_identity())


def test_one_namespace_never_opens_another_namespaces_names(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None, namespace="a") as a:
        a.add("in a", session=f"user-{EMAIL}")
        stored = a.scope.key(f"user-{EMAIL}")
    with MemoryStore(engine_target, embedder=None, namespace="b") as b:
        b.add("in b", session=stored)  # the pseudonym itself, passed in: it maps to itself
        assert [e.session for e in b.list()] == [stored]  # b never sealed a raw value behind it
        assert b.count(session=f"user-{EMAIL}") == 1  # and the raw value still finds b's own entry


def test_purge_and_gc_take_the_sealed_names_of_what_is_gone(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        kept = store.add("stays", session=f"keep-{EMAIL}")
        gone = store.add("goes", session=f"drop-{EMAIL}", tags=[f"t {PHONE}"])
        deleted = store.add("deleted", session=f"del-{EMAIL}")
        assert len(list(store.storage.every_sealed_identity())) == 4
        store.forget(gone.id)
        store.delete(deleted.id)
        store.purge()
        assert {row.stored for _, row in store.storage.every_sealed_identity()} == {store.scope.key(kept.session)}
        assert store.get(kept.id).session == f"keep-{EMAIL}"


def test_an_import_with_worker_processes_seals_what_the_workers_saw(db_path: Path) -> None:
    lines = [f'{{"text": "turn {i}", "session": "user-{i % 3}-{EMAIL}", "role": "user"}}' for i in range(60)]
    with MemoryStore(db_path, embedder=None) as store:
        report = import_jsonl(store, lines, batch_size=10, workers=1)
        assert report.added == 60
        assert {e.session for e in store.list()} == {f"user-{n}-{EMAIL}" for n in range(3)}
    assert_absent(RAW, stored_text(db_path))


def test_a_copy_takes_the_sealed_names_along(db_path: Path, tmp_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        write_identities(store)
    copy_store(db_path, tmp_path / "copy.db")
    with MemoryStore(tmp_path / "copy.db", embedder=None) as copy:
        assert next(copy.list()).session == f"user-{EMAIL}"
    assert_absent(RAW, stored_text(tmp_path / "copy.db"))


def test_a_config_directory_that_cannot_be_written_refuses_names_and_keeps_the_memories(
        db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the config directory would be")
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(blocked))
    with MemoryStore(db_path, embedder=None) as store:
        store.add("still stored", session="plain")
        # No key can be made, so no pseudonym either (harness_mem.pseudonyms): refused before writing.
        with pytest.raises(IdentityKeyError, match="none can be made"):
            store.add("not stored", session=f"user-{EMAIL}")
        assert [e.content for e in store.list()] == ["still stored"]
    with MemoryStore(db_path, embedder=None, identity_key="ab" * 32) as store:  # a key given: written
        entry = store.add("stored with the key", session=f"user-{EMAIL}")
        assert entry.session == f"user-{EMAIL}"
    assert_absent(RAW, stored_text(db_path))


def test_a_name_written_again_after_its_seal_was_purged_is_sealed_again(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        first = store.add("first", session=f"user-{EMAIL}")
        store.forget(first.id)
        store.purge()  # the only entry holding the name is gone, and its seal with it
        assert not list(store.storage.every_sealed_identity())
        store.add("again", session=f"user-{EMAIL}")  # the same handle, the same name
    with MemoryStore(db_path, embedder=None) as reopened:
        assert [e.session for e in reopened.list()] == [f"user-{EMAIL}"]
