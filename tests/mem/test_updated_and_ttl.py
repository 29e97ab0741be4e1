"""``updated_at`` (when an entry was written) and ``refresh_ttl`` (a read that renews a time to live),
on both engines: what framework stores (LangGraph's items) keep for each item."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from harness_mem import MemoryStore
from harness_mem.errors import NotFoundError

DAY = timedelta(days=1)


def test_updated_at_is_when_the_entry_was_written_and_a_replace_moves_it(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        before = datetime.now(UTC) - timedelta(seconds=1)
        old = store.add("said long ago", id="n1", created_at="2020-05-01T10:00:00Z")
        assert old.created_at == datetime(2020, 5, 1, 10, tzinfo=UTC)
        assert old.updated_at is not None and old.updated_at >= before  # written now, said then
        assert store.get("n1").updated_at == old.updated_at
        time.sleep(0.01)
        replaced = store.add("said long ago, corrected", id="n1", created_at="2020-05-01T10:00:00Z", on_conflict="replace")
        assert replaced.updated_at is not None and replaced.updated_at > old.updated_at
        assert [e.updated_at for e in store.list()] == [replaced.updated_at]


def test_refresh_ttl_renews_an_expiry_by_the_time_to_live_it_was_written_with(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        written = store.add("a short-lived harbour note", id="t1", ttl_days=2)
        store.add("a lasting harbour note", id="k1")
        assert written.ttl_days == 2 and written.expires_at is not None
        time.sleep(0.02)
        plain = store.get("t1")
        assert plain.expires_at == written.expires_at  # a read that does not ask changes nothing
        renewed = store.get("t1", refresh_ttl=True)
        assert renewed.expires_at is not None and renewed.expires_at > written.expires_at
        assert abs(renewed.expires_at - (datetime.now(UTC) + 2 * DAY)) < timedelta(seconds=5)
        assert store.get("t1").expires_at == renewed.expires_at  # stored
        time.sleep(0.02)
        hits = store.recall("harbour note", k=5, mode="keyword", refresh_ttl=True)
        by_id = {hit.entry.id: hit.entry for hit in hits}
        assert by_id["t1"].expires_at is not None and by_id["t1"].expires_at > renewed.expires_at
        assert by_id["k1"].expires_at is None and by_id["k1"].ttl_days is None  # no time to live: none given
        listed = {e.id: e for e in store.list(refresh_ttl=True)}
        assert listed["t1"].expires_at is not None and listed["t1"].expires_at >= by_id["t1"].expires_at
        assert store.get("t1").expires_at == listed["t1"].expires_at


def test_an_expired_entry_is_not_brought_back_by_a_refresh(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        store.add("gone soon", id="g1", ttl_days=0.05 / 86_400)  # 50 ms
        time.sleep(0.1)
        with pytest.raises(NotFoundError):
            store.get("g1", refresh_ttl=True)
        assert store.storage.renew_expiry(store.namespace, ["g1"], int(time.time() * 1000)) == {}


def test_an_export_carries_updated_at_and_the_time_to_live(engine_target: str, tmp_path: object) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        store.add("kept a while", id="e1", ttl_days=3, created_at="2024-01-02T03:04:05Z")
        exported = list(store.export())
    with MemoryStore(engine_target, embedder=None, namespace="copy") as copy:
        copy.add_many([{**line, "namespace": "copy"} for line in exported])
        again = copy.get("e1")
    line = exported[0]
    assert again.updated_at is not None and again.updated_at.isoformat().startswith(line["updated_at"][:19])
    assert again.ttl_days == 3 and again.expires_at is not None
    assert again.expires_at.isoformat().startswith(line["expires_at"][:19])  # the expiry kept, not renewed
