"""``HarnessMemStore`` against LangGraph's own ``InMemoryStore`` (no embeddings configured): the same
script of operations on both, the same keys, namespaces and values, and the intended differences
named where they show (a query ranks, a redacted value, created_at kept by a re-put, a namespace
left empty by deletes, TTL, identities)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from harness_mem import MemoryStore
from harness_mem.integrations.langgraph import HarnessMemStore, decode_namespace, encode_namespace

PUTS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [  # grouped by namespace: see test_search
    (("docs",), "k1", {"title": "harbour report", "color": "red", "score": 5.5, "meta": {"lang": "en"}}),
    (("docs",), "k2", {"title": "lighthouse survey", "color": "blue", "score": 3, "meta": {"lang": "fr"}}),
    (("docs",), "k3", {"title": "tide tables", "color": "red", "score": 2, "meta": {"lang": "en"}}),
    (("docs", "drafts"), "d1", {"title": "harbour draft", "color": "green", "score": 4}),
    (("docs", "drafts"), "d2", {"title": "pier notes", "color": "red", "score": 9}),
    (("users", "ada"), "prefs", {"theme": "dark", "score": 1}),
    (("users", "bob"), "prefs", {"theme": "light", "score": 7}),  # the same key in another namespace
    (("users", "bob", "v1"), "old", {"theme": "sepia", "score": 0}),
    (("cache", "embeddings", "v1"), "c1", {"title": "slash/in value", "score": 6}),
    # Every item has a score: the reference raises on $gt over a missing field.
    (("a/b", "c\\d"), "x", {"title": "labels holding the separator and the escape", "score": 1}),
]

FILTERS: list[dict[str, Any]] = [
    {"color": "red"},
    {"color": {"$eq": "blue"}},
    {"score": {"$gt": 4.99}},
    {"score": {"$gte": 3}, "color": "red"},
    {"score": {"$ne": 3}},
    {"score": {"$lt": 3}},
    {"score": {"$lte": 3}},
    {"meta": {"lang": "en"}},
    {"title": "no such title"},
]


@pytest.fixture
def stores(engine_target: str) -> Iterator[tuple[InMemoryStore, HarnessMemStore]]:
    with MemoryStore(engine_target, embedder=None) as memory:
        yield InMemoryStore(), HarnessMemStore(memory)


@pytest.fixture
def ours(db_path: Path) -> Iterator[HarnessMemStore]:
    with MemoryStore(db_path, embedder=None) as memory:
        yield HarnessMemStore(memory)


def fill(*targets: BaseStore) -> None:
    for target in targets:
        for namespace, key, value in PUTS:
            target.put(namespace, key, value)


def shown(items: list[Any] | Item | None) -> Any:
    """What the comparison looks at: namespace, key and value (times and scores are compared apart)."""
    if items is None:
        return None
    if isinstance(items, Item):
        return (items.namespace, items.key, items.value)
    return [shown(item) if isinstance(item, Item) else item for item in items]


def test_get_search_filters_and_pages_match_the_reference(stores: tuple[InMemoryStore, HarnessMemStore]) -> None:
    reference, store = stores
    fill(reference, store)
    for namespace, key, _ in PUTS:
        assert shown(store.get(namespace, key)) == shown(reference.get(namespace, key))
    assert store.get(("docs",), "missing") is None and reference.get(("docs",), "missing") is None
    assert store.get(("users", "ada"), "old") is None  # a key of another namespace is not here
    for prefix in [(), ("docs",), ("docs", "drafts"), ("users",), ("users", "bob"), ("a/b",), ("nowhere",), ("doc",)]:
        # Both list in put order: the reference by namespace then key, this store by first put,
        # which is the same order because PUTS is grouped by namespace.
        assert shown(store.search(prefix, limit=50)) == shown(reference.search(prefix, limit=50)), prefix
        for spec in FILTERS:
            assert shown(store.search(prefix, filter=spec, limit=50)) == shown(
                reference.search(prefix, filter=spec, limit=50)), (prefix, spec)
        for limit, offset in [(2, 0), (2, 2), (3, 4), (4, 9), (1, 50), (0, 0)]:
            assert shown(store.search(prefix, limit=limit, offset=offset)) == shown(
                reference.search(prefix, limit=limit, offset=offset)), (prefix, limit, offset)
            assert shown(store.search(prefix, filter={"score": {"$gte": 2}}, limit=limit, offset=offset)) == shown(
                reference.search(prefix, filter={"score": {"$gte": 2}}, limit=limit, offset=offset))
    # Without a query neither store scores.
    assert {item.score for item in store.search(())} == {None} == {item.score for item in reference.search(())}


def test_list_namespaces_matches_the_reference(stores: tuple[InMemoryStore, HarnessMemStore]) -> None:
    reference, store = stores
    fill(reference, store)
    cases: list[dict[str, Any]] = [
        {}, {"prefix": ("users",)}, {"prefix": ("users", "*")}, {"prefix": ("docs",)}, {"suffix": ("v1",)},
        {"suffix": ("*", "v1")}, {"prefix": ("users",), "suffix": ("v1",)}, {"prefix": ("*", "bob")},
        {"max_depth": 1}, {"max_depth": 2}, {"prefix": ("docs",), "max_depth": 1}, {"limit": 2, "offset": 1},
        {"limit": 3, "offset": 0, "max_depth": 2}, {"offset": 20}, {"prefix": ("a/b", "c\\d")}, {"prefix": ("a",)},
    ]
    for case in cases:
        assert store.list_namespaces(**case) == reference.list_namespaces(**case), case
    assert ("a/b", "c\\d") in store.list_namespaces()  # the separator and the escape round-trip


def test_delete_and_replace(stores: tuple[InMemoryStore, HarnessMemStore]) -> None:
    reference, store = stores
    fill(reference, store)
    first, theirs_first = store.get(("docs",), "k1"), reference.get(("docs",), "k1")
    assert first is not None and theirs_first is not None
    time.sleep(0.005)  # past the millisecond this store's times are kept in
    for target in (reference, store):
        target.delete(("docs",), "k2")
        target.delete(("docs",), "never-there")
        target.put(("docs",), "k1", {"title": "harbour report, revised", "score": 8})
    assert shown(store.search(("docs",), limit=50)) == shown(reference.search(("docs",), limit=50))
    assert store.get(("docs",), "k2") is None and reference.get(("docs",), "k2") is None
    revised = store.get(("docs",), "k1")
    assert revised is not None and revised.value == {"title": "harbour report, revised", "score": 8}
    # Intended: a re-put keeps the first created_at (as PostgresStore does; InMemoryStore starts
    # it again) and moves updated_at.
    assert revised.created_at == first.created_at and revised.updated_at > first.updated_at
    theirs = reference.get(("docs",), "k1")
    assert theirs is not None and theirs.created_at > theirs_first.created_at
    # Intended: a namespace whose last item went is no longer listed; InMemoryStore keeps listing it.
    for target in (reference, store):
        target.delete(("users", "ada"), "prefs")
    assert ("users", "ada") in reference.list_namespaces(prefix=("users",))
    assert store.list_namespaces(prefix=("users",)) == [
        ns for ns in reference.list_namespaces(prefix=("users",)) if ns != ("users", "ada")]


def batch_script() -> list[Any]:
    return [
        PutOp(("batch",), "b1", {"n": 1}),
        GetOp(("batch",), "b1"),  # reads run before the batch's writes: None on both
        GetOp(("docs",), "k1"),
        SearchOp(("docs",), {"color": "red"}, 10, 0),
        ListNamespacesOp((MatchCondition("prefix", ("users",)),), None, 10, 0),
        PutOp(("batch",), "b1", {"n": 2}),  # the last put of a key wins
        PutOp(("batch",), "b2", {"n": 3}),
        PutOp(("docs",), "k3", None),
    ]


def test_batch_and_abatch_match_the_reference(stores: tuple[InMemoryStore, HarnessMemStore]) -> None:
    reference, store = stores
    fill(reference, store)
    ours, theirs = store.batch(batch_script()), reference.batch(batch_script())
    assert [shown(r) for r in ours] == [shown(r) for r in theirs]
    assert ours[1] is None and ours[5] is None
    assert shown(store.search(("batch",))) == shown(reference.search(("batch",))) == [
        (("batch",), "b1", {"n": 2}), (("batch",), "b2", {"n": 3})]

    async def both() -> tuple[list[Any], list[Any]]:
        script = [GetOp(("batch",), "b1"), SearchOp(("docs",), None, 10, 0), PutOp(("batch",), "b3", {"n": 4}),
                  ListNamespacesOp(None, 1, 10, 0)]
        return await store.abatch(script), await reference.abatch(script)

    ours, theirs = asyncio.run(both())
    assert [shown(r) for r in ours] == [shown(r) for r in theirs]
    assert shown(asyncio.run(store.aget(("batch",), "b3"))) == (("batch",), "b3", {"n": 4})
    assert shown(asyncio.run(store.asearch(("batch",), filter={"n": {"$gte": 3}}))) == shown(
        asyncio.run(reference.asearch(("batch",), filter={"n": {"$gte": 3}})))


def test_a_query_ranks_by_keyword_where_the_reference_lists_everything(ours: HarnessMemStore) -> None:
    reference = InMemoryStore()
    fill(reference, ours)
    hits = ours.search(("docs",), query="harbour")
    # Intended: recall keeps the matches, ranked and scored; InMemoryStore without embeddings
    # ignores the query (every item, unscored). Ours are among theirs.
    assert {item.key for item in hits} == {"k1", "d1"}
    theirs = reference.search(("docs",), query="harbour", limit=50)
    assert {(i.namespace, i.key) for i in hits} <= {(i.namespace, i.key) for i in theirs}
    assert {item.score for item in theirs} == {None}
    scores = [item.score for item in hits]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert [i.key for i in ours.search(("docs",), query="harbour", filter={"color": "green"})] == ["d1"]
    assert len(ours.search(("docs",), query="harbour", limit=1)) == 1
    assert [i.key for i in ours.search(("docs",), query="harbour", limit=1, offset=1)] == [hits[1].key]


def test_index_fields_and_index_false(ours: HarnessMemStore) -> None:
    ours.put(("notes",), "hidden", {"text": "the harbour wall"}, index=False)
    ours.put(("notes",), "titled", {"title": "mooring", "body": "the harbour wall"}, index=["title"])
    ours.put(("notes",), "whole", {"body": "the harbour wall"})
    assert [i.key for i in ours.search(("notes",), query="harbour")] == ["whole"]  # body not indexed in "titled"
    assert [i.key for i in ours.search(("notes",), query="mooring")] == ["titled"]
    assert ours.search(("notes",), query="wall", filter={"text": "the harbour wall"}) == []  # index=False: no query finds it
    hidden = ours.get(("notes",), "hidden")
    assert hidden is not None and hidden.value == {"text": "the harbour wall"}  # get and a plain search do
    assert [i.key for i in ours.search(("notes",))] == ["hidden", "titled", "whole"]


def test_ttl_is_kept_refreshed_and_configured(ours: HarnessMemStore) -> None:
    reference = InMemoryStore()
    with pytest.raises(NotImplementedError):  # the reference does not keep a TTL
        reference.put(("t",), "a", {"n": 1}, ttl=60)
    ours.put(("t",), "a", {"n": 1}, ttl=60)
    entry = ours.store.get(encode_namespace(("t",)) + "a")
    assert entry.ttl_days == pytest.approx(60 / 1440) and entry.expires_at is not None
    assert abs(entry.expires_at - (datetime.now(UTC) + timedelta(minutes=60))) < timedelta(seconds=5)
    time.sleep(0.01)
    ours.get(("t",), "a", refresh_ttl=False)
    assert ours.store.get(entry.id).expires_at == entry.expires_at  # a read that does not refresh changes nothing
    ours.get(("t",), "a")  # LangGraph's default: refresh on read
    renewed = ours.store.get(entry.id).expires_at
    assert renewed is not None and renewed > entry.expires_at
    time.sleep(0.01)
    ours.search(("t",), refresh_ttl=True)
    searched = ours.store.get(entry.id).expires_at
    assert searched is not None and searched > renewed
    ours.put(("t",), "brief", {"n": 2}, ttl=0.0002)  # 12 ms
    time.sleep(0.05)
    assert ours.get(("t",), "brief") is None and [i.key for i in ours.search(("t",))] == ["a"]
    ours.delete(("t",), "a")
    assert ours.list_namespaces(prefix=("t",)) == []  # an expired item leaves no namespace behind


def test_the_ttl_config_gives_the_default_ttl_and_the_refresh_default(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as memory:
        store = HarnessMemStore(memory, ttl={"default_ttl": 30, "refresh_on_read": False})
        store.put(("t",), "a", {"n": 1})
        store.put(("t",), "forever", {"n": 2}, ttl=None)
        entry = memory.get(encode_namespace(("t",)) + "a")
        assert entry.ttl_days == pytest.approx(30 / 1440)
        assert memory.get(encode_namespace(("t",)) + "forever").expires_at is None
        time.sleep(0.01)
        store.get(("t",), "a")
        assert memory.get(entry.id).expires_at == entry.expires_at  # refresh_on_read=False
        store.get(("t",), "a", refresh_ttl=True)
        assert memory.get(entry.id).expires_at > entry.expires_at  # type: ignore[operator]


def test_a_value_holding_pii_round_trips_with_nothing_raw_stored(
        stores: tuple[InMemoryStore, HarnessMemStore], engine_target: str) -> None:
    reference, store = stores
    value = {"email": "ada@example.com", "note": "call +1 415 555 0123", "n": 3, "phone": 14155550123,
             "nested": {"ok": [1, "two"], "bob@example.org": True}}
    for target in (reference, store):
        target.put(("people",), "ada", value)
        target.put(("people",), "bob", {"email": "bob@example.org"})
    got, theirs = store.get(("people",), "ada"), reference.get(("people",), "ada")
    assert got is not None and theirs is not None
    assert got.value == theirs.value == value  # an int that reads as a phone number too
    for spec in ({"email": "ada@example.com"}, {"phone": 14155550123}, {"email": {"$ne": "bob@example.org"}}):
        assert [i.key for i in store.search(("people",), filter=spec)] \
            == [i.key for i in reference.search(("people",), filter=spec)] == ["ada"], spec
    # Stored, the strings the redactor changes are pseudonyms (the indexed text: labels), with the
    # raw values sealed; a handle without the key reads the pseudonyms, and its filters still match.
    with store.store.stored_forms():
        [entry] = [e for e in store.store.list() if e.metadata.get("n") == 3]
    stored = json.dumps([entry.content, entry.metadata])
    for raw in ("ada@example.com", "415 555 0123", "14155550123", "bob@example.org"):
        assert raw not in stored
    assert entry.metadata["email"].startswith("<EMAIL:") and entry.metadata["phone"].startswith("<PHONE:")
    with MemoryStore(engine_target, embedder=None, identity_key=False) as keyless:
        [item] = HarnessMemStore(keyless).search(("people",), filter={"email": "ada@example.com"})
        assert item.value["email"] == entry.metadata["email"] and item.value["n"] == 3


PHONE_LABEL = "+1 415 555 0123"
EMAIL_KEY = "ada@example.com"


def test_identities_in_a_namespace_and_a_key_round_trip(stores: tuple[InMemoryStore, HarnessMemStore]) -> None:
    reference, store = stores
    for target in (reference, store):
        # LangGraph itself refuses an e-mail as a label (its dots), on every store.
        with pytest.raises(InvalidNamespaceError):
            target.put(("users", EMAIL_KEY), "prefs", {"theme": "dark"})
        target.put(("users", PHONE_LABEL), EMAIL_KEY, {"theme": "dark"})
    assert shown(store.get(("users", PHONE_LABEL), EMAIL_KEY)) == shown(reference.get(("users", PHONE_LABEL), EMAIL_KEY))
    assert shown(store.search(("users",))) == shown(reference.search(("users",)))
    assert store.list_namespaces() == reference.list_namespaces() == [("users", PHONE_LABEL)]
    assert store.list_namespaces(prefix=("users", PHONE_LABEL)) == store.list_namespaces(suffix=(PHONE_LABEL,)) \
        == [("users", PHONE_LABEL)]
    # Stored, they are pseudonyms: the raw label and key are nowhere in the rows.
    with store.store.stored_forms():
        rows = str([(e.id, e.session, e.tags) for e in store.store.list()])
    assert PHONE_LABEL not in rows and EMAIL_KEY not in rows and "<PHONE:" in rows and "<EMAIL:" in rows


def test_identities_without_the_key_come_back_as_pseudonyms_and_still_match(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as memory:
        HarnessMemStore(memory).put(("users", PHONE_LABEL), EMAIL_KEY, {"theme": "dark"})
    with MemoryStore(db_path, embedder=None, identity_key=False) as keyless:
        store = HarnessMemStore(keyless)
        [item] = store.search(("users", PHONE_LABEL))
        assert item.namespace[1].startswith("<PHONE:") and item.key.startswith("<EMAIL:")
        assert item.value == {"theme": "dark"}  # the memory itself is intact
        assert store.list_namespaces(prefix=("users", PHONE_LABEL)) == [item.namespace]
        assert store.get(("users", PHONE_LABEL), EMAIL_KEY) is not None


def test_without_a_redactor_identities_round_trip(db_path: Path) -> None:
    reference = InMemoryStore()
    with MemoryStore(db_path, embedder=None, redactor=None) as memory:
        store = HarnessMemStore(memory)
        for target in (reference, store):
            target.put(("users", PHONE_LABEL), EMAIL_KEY, {"email": EMAIL_KEY})
        assert shown(store.search(("users",))) == shown(reference.search(("users",)))
        assert store.list_namespaces() == reference.list_namespaces() == [("users", PHONE_LABEL)]


def test_bad_namespaces_and_filters_are_refused(ours: HarnessMemStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        ours.batch([PutOp(("a.b",), "k", {"n": 1})])  # a label cannot address ("a", "b"), even batched directly
    with pytest.raises(InvalidNamespaceError):
        ours.batch([PutOp((), "k", {"n": 1})])
    with pytest.raises(ValueError, match="a list is not a filter value"):
        ours.search(("docs",), filter={"tags": ["a", "b"]})
    with pytest.raises(ValueError, match="unknown operator"):
        ours.search(("docs",), filter={"n": {"$regex": "x"}})


def test_namespace_paths_are_prefix_free_and_read_back() -> None:
    for namespace in [("a",), ("a", "b"), ("a/b",), ("a\\", "b"), ("\\/", "/\\"), ("users", "x y")]:
        assert decode_namespace(encode_namespace(namespace)) == namespace
    assert not encode_namespace(("ab",)).startswith(encode_namespace(("a",)))
    assert not encode_namespace(("a/b",)).startswith(encode_namespace(("a",)))
    assert encode_namespace(("a", "b")).startswith(encode_namespace(("a",)))


def test_importing_harness_mem_imports_no_framework() -> None:
    import subprocess
    import sys

    code = "import sys, harness_mem; print(any(m.split('.')[0] == 'langgraph' for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_with_an_embedder_a_query_is_hybrid_and_index_false_stays_out(db_path: Path, hashed_embedder: Any) -> None:
    with MemoryStore(db_path, embedder=hashed_embedder) as memory:
        store = HarnessMemStore(memory)
        store.put(("docs",), "a", {"text": "harbour wall repairs"})
        store.put(("docs",), "b", {"text": "harbour wall repairs"}, index=False)
        store.put(("docs",), "c", {"text": "tide tables for june"})
        hits = store.search(("docs",), query="harbour wall")
        assert "b" not in [i.key for i in hits] and hits[0].key == "a" and hits[0].score is not None
        assert [i.key for i in store.search(("docs",))] == ["a", "b", "c"]


# Paraphrases: each question shares no content word with the item that answers it.
PARAPHRASES = {
    "a": ("The user is allergic to peanuts", "what foods should I avoid giving them"),
    "b": ("We deploy the billing service on Tuesdays", "when do releases of the invoicing system happen"),
    "e": ("The team standup is at 9:30 every weekday", "what time is the morning meeting"),
    "f": ("The user's daughter plays the cello", "which instrument is their kid learning"),
}
OTHERS = ["The office wifi password rotates every month", "Ada's favourite programming language is OCaml"]


def test_scores_are_the_cosines_an_embedding_inmemorystore_gives(engine_target: str, embedder: Any) -> None:
    """With the same model, a query scores each item as LangGraph's own store does (cosine), so a
    threshold a LangGraph user picks keeps a correct paraphrase; harness-mem's calibrated score would
    drop it (0.02-0.05, on the scale where 0.5 reads like an answer)."""
    reference = InMemoryStore(index={"dims": embedder.dim, "embed": lambda texts: embedder.embed(list(texts)).tolist(),
                                     "fields": ["text"]})
    with MemoryStore(engine_target, embedder=embedder) as memory:
        store = HarnessMemStore(memory, index_fields=["text"])
        items = {key: text for key, (text, _) in PARAPHRASES.items()} | {f"o{i}": t for i, t in enumerate(OTHERS)}
        for target in (reference, store):
            for key, text in items.items():
                target.put(("facts",), key, {"text": text})
        calibrated = []
        for key, (_, question) in PARAPHRASES.items():
            theirs = {item.key: item.score for item in reference.search(("facts",), query=question, limit=10)}
            ours = store.search(("facts",), query=question, limit=10)
            assert ours[0].key == key == max(theirs, key=lambda k: theirs[k] or 0.0)
            for item in ours:  # int8 vectors in the index: within a hundredth of the float cosine
                assert item.score == pytest.approx(theirs[item.key], abs=0.01), (question, item.key)
            assert ours[0].score is not None and ours[0].score > 0.2  # a LangGraph user's threshold keeps it
            calibrated.append(memory.recall(question, k=1, tags=["langgraph"])[0].score)
            assert calibrated[-1] < ours[0].score
    # On harness-mem's own scale they read as unlikely answers, and a cosine threshold drops some.
    assert max(calibrated) < 0.5 and min(calibrated) < 0.1
