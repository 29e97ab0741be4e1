"""remember, supersede, forget, purge, recent, sessions: the operations agents call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from engine_rows import in_transaction, sql

from harness_mem.cli import cli
from harness_mem.errors import InvalidInputError, NotFoundError
from harness_mem.store import MemoryStore

# Every test here but the one about the file's bytes runs on both engines: ``store`` and
# ``hashed_store`` are conftest's ``engine_store`` and ``engine_hashed_store``.


@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    return engine_store


@pytest.fixture
def hashed_store(engine_hashed_store: MemoryStore) -> MemoryStore:
    return engine_hashed_store


def ids(hits: list) -> list[str]:
    return [h.entry.id for h in hits]


# ---- remember -------------------------------------------------------------------------------------


def test_remember_stores_once_and_reports_redactions(hashed_store: MemoryStore) -> None:
    first = hashed_store.remember("ask ada@example.com about the deploy key", tags=["ops"])
    assert not first.deduped and first.redactions == {"EMAIL": 1}
    again = hashed_store.remember("  ask ada@example.com about the deploy key\n")  # same text once normalised
    assert again.deduped and again.id == first.id
    assert hashed_store.count() == 1
    other_kind = hashed_store.remember("ask ada@example.com about the deploy key", kind="fact")
    assert not other_kind.deduped and hashed_store.count() == 2
    assert "ada@example.com" not in hashed_store.get(first.id).content


# ---- corrections ----------------------------------------------------------------------------------


def test_supersede_keeps_history_and_recall_shows_the_current_fact(hashed_store: MemoryStore) -> None:
    old = hashed_store.remember("the deploy target is staging-us", tags=["deploy"])
    new = hashed_store.supersede(old.id, "the deploy target is staging-eu")
    assert new.supersedes == old.id and not new.deduped
    for mode in ("keyword", "semantic", "hybrid"):
        assert ids(hashed_store.recall("deploy target staging", mode=mode)) == [new.id], mode  # type: ignore[arg-type]
    everything = hashed_store.recall("deploy target staging", mode="keyword", include_superseded=True)
    assert set(ids(everything)) == {old.id, new.id}
    kept = hashed_store.get(old.id)
    assert kept.content == "the deploy target is staging-us" and kept.superseded_by == new.id
    assert kept.superseded_at is not None
    assert hashed_store.get(new.id).tags == ("deploy",)  # the correction keeps the old entry's tags
    assert [e.id for e in hashed_store.history(old.id)] == [old.id, new.id] == [e.id for e in hashed_store.history(new.id)]
    with pytest.raises(InvalidInputError, match=f"already superseded by '{new.id}'"):
        hashed_store.supersede(old.id, "a third version")
    with pytest.raises(NotFoundError):
        hashed_store.supersede("no-such-id", "text")
    # A superseded text can be remembered again: it is not a duplicate of anything current.
    assert not hashed_store.remember("the deploy target is staging-us").deduped


def test_semantic_recall_fills_k_past_superseded_entries(hashed_store: MemoryStore) -> None:
    kept = [hashed_store.remember(f"note {i} about the cache layer").id for i in range(6)]
    for old in kept[:4]:
        hashed_store.supersede(old, "replaced: " + hashed_store.get(old).content)
    hits = hashed_store.recall("note about the cache layer", k=6, mode="semantic")
    assert len(hits) == 6 and not set(ids(hits)) & set(kept[:4])


# ---- forget and purge -----------------------------------------------------------------------------


def turns(store: MemoryStore, session: str, texts: list[str]) -> list[str]:
    return [store.add(text, role="user" if i % 2 == 0 else "assistant", session=session,
                      created_at=f"2026-01-0{1 + i // 10}T10:{i % 10:02d}:00Z").id for i, text in enumerate(texts)]


def test_forget_hides_an_entry_everywhere_at_once(hashed_store: MemoryStore) -> None:
    t = turns(hashed_store, "s1", ["the vault code is kestrel", "noted, kestrel it is", "anything else?"])
    assert hashed_store.forget(t[0]) == 1
    for mode in ("keyword", "semantic", "hybrid"):
        assert t[0] not in ids(hashed_store.recall("vault code kestrel", mode=mode, k=10)), mode  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        hashed_store.get(t[0])
    assert t[0] not in [e.id for e in hashed_store.list()]
    # The next turn no longer carries the forgotten one's words in its index row.
    assert ids(hashed_store.recall("vault", mode="keyword")) == []
    hashed_store.reindex()  # a rebuild does not bring it back
    assert ids(hashed_store.recall("vault", mode="keyword")) == []
    assert hashed_store.count_missing_vectors() == 0
    with pytest.raises(NotFoundError):
        hashed_store.forget(t[0])  # already gone
    with pytest.raises(InvalidInputError, match="needs an id or a filter"):
        hashed_store.forget()


def test_forget_by_session_and_tag(hashed_store: MemoryStore) -> None:
    turns(hashed_store, "s1", ["a", "b", "c"])
    turns(hashed_store, "s2", ["d", "e"])
    hashed_store.add("tagged note", tags=["tmp"])
    assert hashed_store.forget(session="s1") == 3
    assert hashed_store.forget(tags=["tmp"]) == 1
    assert [e.content for e in hashed_store.list()] == ["d", "e"]


def file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def test_purge_removes_forgotten_text_from_the_bytes_of_the_file(db_path: Path) -> None:
    from fake_embedder import HashedEmbedder

    secret = "zanzibar quokkafeather 7731"
    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        for i in range(50):
            store.add(f"filler note number {i} about nothing much")
        t = turns(store, "s1", [f"remember {secret}", "ok, stored", "thanks"])
        store.remember(f"note: {secret}")
        assert store.forget(session="s1") == 3 and store.forget(tags=(), kind="note", since="1d") >= 1
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert b"quokkafeather" in file_bytes(db_path)  # forgotten is not yet gone: the proof can fail
        assert store.purge() >= 4
    raw = file_bytes(db_path)
    assert b"quokkafeather" not in raw and b"zanzibar" not in raw
    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        assert store.count() == 0 or all("quokka" not in e.content for e in store.list())
        assert store.integrity_check() == []
        with pytest.raises(NotFoundError):
            store.get(t[1])


def test_purge_takes_expired_entries_too(store: MemoryStore) -> None:
    store.add("short-lived", expires_at="2000-01-01T00:00:00Z")
    store.add("lasting")
    assert store.purge() == 1
    assert sql(store, "SELECT count(*) FROM entries") == [(1,)]


# ---- recent, context, sessions -------------------------------------------------------------------


def test_recent_is_newest_first(store: MemoryStore) -> None:
    for i in range(5):
        store.add(f"note {i}", created_at=f"2026-01-0{i + 1}T00:00:00Z")
    store.add("a fact", kind="fact", created_at="2026-01-09T00:00:00Z")
    assert [e.content for e in store.recent(3)] == ["a fact", "note 4", "note 3"]
    assert [e.content for e in store.recent(2, kind="note")] == ["note 4", "note 3"]
    with pytest.raises(InvalidInputError):
        store.recent(0)


def test_recall_context_and_min_score(store: MemoryStore) -> None:
    t = turns(store, "s1", ["hello", "where do we deploy?", "to the lisbon cluster", "thanks", "bye"])
    hit = store.recall("lisbon cluster", context=1, k=1)[0]
    i = t.index(hit.entry.id)  # the answer, or the turn after it (a turn is indexed with the one before)
    assert i in (2, 3) and [e.id for e in hit.context or ()] == [t[i - 1], t[i + 1]]
    assert hit.to_dict()["context"][1]["id"] == t[i + 1]
    wide = store.recall("lisbon cluster", context=2, k=1)[0]
    assert [e.id for e in wide.context or ()] == [t[j] for j in range(max(0, i - 2), min(5, i + 3)) if j != i]
    assert store.recall("lisbon cluster", min_score=hit.score + 1) == []
    with pytest.raises(InvalidInputError, match="context must be between"):
        store.recall("lisbon", context=99)


def test_recall_sessions_ranks_sessions_with_their_frame(store: MemoryStore) -> None:
    turns(store, "s1", ["hello", "let's plan the offsite", "the offsite is in porto", "great"])
    turns(store, "s2", ["the build is red", "fixing the flaky test", "green again"])
    turns(store, "s3", ["lunch?", "sure"])
    found = store.recall_sessions("where is the offsite", k=2)
    assert found[0].session == "s1" and found[0].turns == 4
    assert found[0].first.content == "hello" and found[0].last.content == "great"
    assert found[0].anchor.entry.content in {"let's plan the offsite", "the offsite is in porto"}
    assert found[0].anchor.entry.id in [e.id for e in found[0].around]
    assert [s.session for s in store.sessions()] == ["s1", "s2", "s3"] or len(store.sessions()) == 3
    assert [e.content for e in store.session_turns("s2", offset=1, limit=1)] == ["fixing the flaky test"]
    with pytest.raises(InvalidInputError):
        store.session_turns("s2", limit=0)


def test_recall_sessions_with_replaced_turns_frames_the_session_with_them(store: MemoryStore) -> None:
    # The only turn left in s1 is one a correction replaced (the correction itself was forgotten):
    # recalled with include_superseded, the session is framed by it instead of failing on an empty frame.
    old = turns(store, "s1", ["the offsite is in porto"])[0]
    store.forget(store.supersede(old, "the offsite is in lisbon").id)
    found = store.recall_sessions("offsite porto", include_superseded=True)
    assert [(s.session, s.turns, s.first.id, s.last.id) for s in found] == [("s1", 1, old, old)]
    assert [e.id for e in found[0].around] == [old]
    assert store.recall_sessions("offsite porto") == []


def test_recall_sessions_frames_sessions_as_they_are_after_another_process_wrote(
    engine_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another connection forgets one session and a turn of another between the ranking and the
    # frames: the emptied session is left out, the other framed without the forgotten turn.
    with MemoryStore(engine_target, embedder=None) as store, MemoryStore(engine_target, embedder=None) as other:
        gone = turns(store, "s1", ["the offsite is in porto", "porto in may"])
        kept = turns(store, "s2", ["offsite budget", "the offsite caterer", "booked"])
        ranked = store.recall

        def recall_then_forget(*args: object, **kwargs: object) -> object:
            hits = ranked(*args, **kwargs)  # type: ignore[arg-type]
            other.forget(session="s1")
            other.forget(kept[2])
            return hits

        monkeypatch.setattr(store, "recall", recall_then_forget)
        found = store.recall_sessions("offsite porto", k=2)
        assert [(s.session, s.turns, s.last.id) for s in found] == [("s2", 2, kept[1])]
        assert not {e.id for e in found[0].around} & {*gone, kept[2]}


# ---- the command line -----------------------------------------------------------------------------


def test_a_correction_to_the_same_text_is_no_new_version(hashed_store: MemoryStore) -> None:
    old = hashed_store.remember("ask ada@example.com about the deploy key", tags=["ops"])
    for text in ("ask ada@example.com about the deploy key", "  ask ada@example.com about the deploy key\n"):
        again = hashed_store.supersede(old.id, text)
        assert again.id == old.id and again.deduped and again.supersedes is None
    assert [e.id for e in hashed_store.history(old.id)] == [old.id] and hashed_store.count() == 1
    assert hashed_store.get(old.id).superseded_by is None
    # Anything else that changes is a version: the tags, or the text itself.
    retagged = hashed_store.supersede(old.id, "ask ada@example.com about the deploy key", tags=["ops", "keys"])
    assert retagged.id != old.id and not retagged.deduped
    assert [e.id for e in hashed_store.history(old.id)] == [old.id, retagged.id]


def test_cli_supersede_to_the_same_text_changes_nothing(engine_target: str) -> None:
    old_id = json.loads(run(engine_target, "add", "the standup is at 9:30", "--json").stdout)["id"]  # type: ignore[attr-defined]
    same = run(engine_target, "supersede", old_id, "the standup is at 9:30", "--json")
    assert same.exit_code == 0 and json.loads(same.stdout)["id"] == old_id  # type: ignore[attr-defined]
    assert json.loads(same.stdout)["deduped"] is True  # type: ignore[attr-defined]
    assert "→" not in run(engine_target, "get", old_id).stdout  # type: ignore[attr-defined]  # no history
    assert len(run(engine_target, "recent", "--json").stdout.splitlines()) == 1  # type: ignore[attr-defined]


def run(db: Path | str, *args: str) -> object:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def test_cli_supersede_forget_purge_and_sessions(engine_target: str) -> None:
    db_path = engine_target
    old = run(db_path, "add", "the standup is at 9:30", "--json")
    old_id = json.loads(old.stdout)["id"]  # type: ignore[attr-defined]
    new_id = run(db_path, "supersede", old_id, "the standup is at 10:00").stdout.strip()  # type: ignore[attr-defined]
    shown = run(db_path, "recall", "standup", "--json").stdout  # type: ignore[attr-defined]
    assert [json.loads(line)["id"] for line in shown.splitlines()] == [new_id]
    both = run(db_path, "recall", "standup", "--all-versions").stdout  # type: ignore[attr-defined]
    assert f"(replaced by {new_id})" in both
    assert f"history: {old_id} → {new_id} (this)" in run(db_path, "get", new_id).stdout  # type: ignore[attr-defined]
    run(db_path, "add", "s-1 first", "--session", "s-1", "--role", "user")
    run(db_path, "add", "s-1 second", "--session", "s-1", "--role", "assistant")
    assert "s-1  2 entries" in run(db_path, "sessions", "list").stdout  # type: ignore[attr-defined]
    assert "user: s-1 first" in run(db_path, "sessions", "show", "s-1").stdout  # type: ignore[attr-defined]
    assert "s-1" in run(db_path, "sessions", "recall", "second").stdout  # type: ignore[attr-defined]
    forgot = run(db_path, "forget", "--session", "s-1")
    assert forgot.stderr.startswith("Forgot 2 entries")  # type: ignore[attr-defined]
    assert run(db_path, "purge").stderr == "Purged 2 entries (forgotten or expired) from the file\n"  # type: ignore[attr-defined]
    missing = run(db_path, "sessions", "show", "s-1")
    assert missing.exit_code == 1  # type: ignore[attr-defined]
    assert [json.loads(line)["content"] for line in run(db_path, "recent", "--json").stdout.splitlines()] == [  # type: ignore[attr-defined]
        "the standup is at 10:00"]


def test_remember_can_expire_and_still_stores_once(hashed_store: MemoryStore) -> None:
    first = hashed_store.remember("the staging box is down until Friday", ttl_days=3)
    again = hashed_store.remember("the staging box is down until Friday", ttl_days=3)
    assert not first.deduped and again.deduped and again.id == first.id
    entry = hashed_store.get(first.id)
    assert entry.ttl_days == 3 and entry.expires_at is not None
    gone = hashed_store.remember("a note already past", expires_at="2000-01-01T00:00:00Z")
    with pytest.raises(NotFoundError):
        hashed_store.get(gone.id)
    # An expired copy is not a duplicate: the same text is stored again, live.
    assert not hashed_store.remember("a note already past").deduped


def test_remember_calls_the_model_outside_the_write_lock(engine_target: str) -> None:
    from fake_embedder import HashedEmbedder

    class LockWatcher(HashedEmbedder):
        store: MemoryStore | None = None

        def embed(self, texts):  # type: ignore[no-untyped-def]
            assert self.store is None or not in_transaction(self.store), "embedding under the write lock"
            return super().embed(texts)

    model = LockWatcher()
    with MemoryStore(engine_target, embedder=model) as store:
        model.store = store
        first = store.remember("the release train leaves on Thursdays")
        store.supersede(first.id, "the release train leaves on Wednesdays")
        assert model.calls == [1, 1]
        assert store.remember("the release train leaves on Wednesdays").deduped and model.calls == [1, 1]
