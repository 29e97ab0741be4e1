"""RedactingMemory and GuardedMemory over a list-backed fake Memory, and over the real store.

The wrappers are generic over the Memory protocol, so a tiny in-test fake is enough for their
rules; two tests at the end run them over a real MemoryStore and read the database file's bytes.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_mem.errors import BlockedError, InvalidInputError, WriteRefusedError
from harness_mem.models import Entry, Hit
from harness_mem.protocols import Memory
from harness_mem.redaction import Action, Redactor, luhn_ok
from harness_mem.redaction.guarded import GuardedMemory, RedactingMemory, jaccard, similarity_tokens

SECRET = b"test-secret"


class ListMemory:
    """A Memory kept in a list; recall ranks by shared characters (crude, but works for CJK too)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.added: list[dict[str, Any]] = []
        self.recalls: list[tuple[str, int, dict[str, Any]]] = []

    def add(self, content: str, **fields: Any) -> Entry:
        self.added.append(fields)
        entry = Entry(
            id=f"e{len(self.entries) + 1}",
            content=content,
            kind=fields.get("kind", "note"),
            namespace=fields.get("namespace", "default"),
            role=fields.get("role"),
            session=fields.get("session"),
            tags=tuple(fields.get("tags") or ()),
            source=fields.get("source"),
            metadata=dict(fields.get("metadata") or {}),
        )
        self.entries.append(entry)
        return entry

    def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
        self.recalls.append((query, k, filters))
        namespace = filters.get("namespace", "default")
        scored = [(len(set(query) & set(e.content)), e) for e in self.entries if e.namespace == namespace]
        scored = [pair for pair in scored if pair[0] > 0]
        scored.sort(key=lambda pair: -pair[0])
        return [Hit(entry=e, score=float(score)) for score, e in scored[:k]]


class BrokenRecall(ListMemory):
    def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
        raise RuntimeError("index is corrupt")


@pytest.fixture
def inner() -> ListMemory:
    return ListMemory()


@pytest.fixture
def guarded(inner: ListMemory) -> GuardedMemory:
    return GuardedMemory(inner, Redactor.hygiene(secret=SECRET))


def contents(memory: ListMemory) -> list[str]:
    return [e.content for e in memory.entries]


# ---- both satisfy the protocol ---------------------------------------------------------------------


def test_wrappers_are_memories(inner: ListMemory) -> None:
    assert isinstance(inner, Memory)
    assert isinstance(RedactingMemory(inner), Memory)
    assert isinstance(GuardedMemory(inner), Memory)
    assert isinstance(GuardedMemory(RedactingMemory(inner)), Memory)  # they compose


def test_default_redactors(inner: ListMemory) -> None:
    assert RedactingMemory(inner).redactor.policy.name == "default"
    assert GuardedMemory(inner).redactor.policy.name == "hygiene"


# ---- RedactingMemory ---------------------------------------------------------------------------------


def test_redacting_scrubs_content_tags_source_and_metadata(inner: ListMemory) -> None:
    memory = RedactingMemory(inner, Redactor.default(secret=SECRET))
    entry = memory.add(
        "手机13800138000, card 4111 1111 1111 1111",
        tags=["user:a@b.com", "plain"],
        source="https://x.io/?token=abc123",
        metadata={"contact": {"email": "c@d.com"}, "n": 7},
    )
    assert entry.content == "手机<PHONE>, card **** **** **** 1111"
    assert entry.tags == ("user:<EMAIL>", "plain")
    assert entry.source == "https://x.io/?token=<SECRET>"
    assert entry.metadata == {"contact": {"email": "<EMAIL>"}, "n": 7}


def test_redacting_never_drops_even_with_a_blocking_policy(inner: ListMemory) -> None:
    memory = RedactingMemory(inner, Redactor.hygiene(secret=SECRET))
    entry = memory.add("spent ¥199 with key AKIAIOSFODNN7EXAMPLE")
    assert entry.content == "spent <MONEY> with key <API_KEY>"
    assert contents(inner) == ["spent <MONEY> with key <API_KEY>"]


def test_redacting_keeps_money_by_default(inner: ListMemory) -> None:
    assert RedactingMemory(inner).add("spent $199 today").content == "spent $199 today"


def test_redacting_passes_identifiers_and_other_fields_through(inner: ListMemory) -> None:
    memory = RedactingMemory(inner)
    memory.add("hi a@b.com", kind="turn", role="user", session="user-13800138000", id="x1", namespace="ns")
    assert inner.added == [
        {"kind": "turn", "role": "user", "session": "user-13800138000", "id": "x1", "namespace": "ns"}
    ]


def test_redacting_recall_passes_through(inner: ListMemory) -> None:
    memory = RedactingMemory(inner)
    memory.add("the deploy is on friday")
    hits = memory.recall("deploy friday", 3, namespace="default")
    assert [h.entry.content for h in hits] == ["the deploy is on friday"]
    assert inner.recalls[-1] == ("deploy friday", 3, {"namespace": "default"})


def test_redacting_records_counts_when_asked(inner: ListMemory) -> None:
    memory = RedactingMemory(inner, counts_key="redactions")
    entry = memory.add("a@b.com c@d.com 13800138000", metadata={"x": 1})
    assert entry.metadata == {"x": 1, "redactions": {"EMAIL": 2, "PHONE": 1}}
    assert memory.add("nothing to see").metadata == {}


# ---- GuardedMemory: masking, blocking and refusals, each one reported --------------------------


def test_guarded_masks_cards(guarded: GuardedMemory, inner: ListMemory) -> None:
    assert guarded.add("card 4111111111111111 on file").content == "card ************1111 on file"


def test_guarded_labels_emails(guarded: GuardedMemory) -> None:
    assert guarded.add("write to alice@example.com").content == "write to <EMAIL>"


def test_guarded_keeps_numbers_failing_luhn(guarded: GuardedMemory) -> None:
    assert guarded.add("order 1234567890123456 shipped").content == "order 1234567890123456 shipped"


@pytest.mark.parametrize("text", ["it cost ¥199", "budget USD 250", "午饭花了35元"])
def test_guarded_refuses_money_and_says_so(guarded: GuardedMemory, inner: ListMemory, text: str) -> None:
    with pytest.raises(WriteRefusedError) as info:
        guarded.add(text)
    assert info.value.reason == "policy"
    assert info.value.counts == {"MONEY": 1}
    assert "MONEY" in str(info.value) and "hygiene" in str(info.value)
    assert inner.entries == [] and inner.added == []  # nothing stored, nothing pretended


def test_guarded_refuses_secrets(guarded: GuardedMemory, inner: ListMemory) -> None:
    with pytest.raises(WriteRefusedError) as info:
        guarded.add("deploy key AKIAIOSFODNN7EXAMPLE and password=hunter2")
    assert info.value.reason == "policy"
    assert info.value.counts == {"API_KEY": 1, "SECRET": 1}
    # The message names kinds, never values.
    assert "AKIA" not in str(info.value) and "hunter2" not in str(info.value)
    assert inner.entries == []


def test_guarded_refuses_blocked_metadata(guarded: GuardedMemory, inner: ListMemory) -> None:
    with pytest.raises(WriteRefusedError, match="MONEY"):
        guarded.add("lunch notes", metadata={"cost": "¥35"})
    assert inner.entries == []


def test_guarded_dedups_on_redacted_text(guarded: GuardedMemory, inner: ListMemory) -> None:
    first = guarded.add("contact alice@example.com about the quarterly report")
    with pytest.raises(WriteRefusedError) as info:
        guarded.add("contact bob@example.org about the quarterly report")  # same once redacted
    assert info.value.reason == "duplicate"
    assert info.value.duplicate_of == first.id
    assert first.id in str(info.value)
    assert contents(inner) == ["contact <EMAIL> about the quarterly report"]


def test_guarded_drops_near_duplicates(guarded: GuardedMemory, inner: ListMemory) -> None:
    guarded.add("the user prefers dark mode in every editor they use")
    with pytest.raises(WriteRefusedError, match="near-duplicate"):
        guarded.add("the user prefers dark mode in every editor")
    guarded.add("the build fails on python 3.13 because of numpy")  # different: stored
    assert len(inner.entries) == 2


def test_guarded_blocked_substrings_case_insensitive(inner: ListMemory) -> None:
    guarded = GuardedMemory(
        inner, Redactor.hygiene(secret=SECRET), blocked_substrings=["Project Falcon", "ACME"]
    )
    with pytest.raises(WriteRefusedError) as info:
        guarded.add("status of PROJECT falcon is green")
    assert info.value.reason == "blocked-substring"
    assert "falcon" not in str(info.value).lower()  # the list itself may be sensitive
    assert "#1" in str(info.value)
    with pytest.raises(WriteRefusedError, match="#2"):
        guarded.add("notes", tags=["acme-corp"])
    with pytest.raises(WriteRefusedError, match="blocked"):
        guarded.add("notes", metadata={"customer": {"name": "Acme Ltd"}})
    assert inner.entries == []
    guarded.add("an unrelated note")
    assert len(inner.entries) == 1


def test_refusals_are_blocked_errors(guarded: GuardedMemory) -> None:
    with pytest.raises(BlockedError):
        guarded.add("paid £20")


# ---- GuardedMemory: CJK duplicates, a failing recall, dedup settings ---------------------------


def test_guarded_dedups_chinese(guarded: GuardedMemory, inner: ListMemory) -> None:
    guarded.add("用户喜欢喝手冲咖啡，不加糖也不加奶")
    with pytest.raises(WriteRefusedError, match="near-duplicate"):
        guarded.add("用户喜欢喝手冲咖啡，不加糖也不加牛奶")
    guarded.add("用户对花生过敏，点餐时要注意")
    assert len(inner.entries) == 2


def test_a_failing_recall_means_not_a_duplicate(caplog: pytest.LogCaptureFixture) -> None:
    inner = BrokenRecall()
    guarded = GuardedMemory(inner, Redactor.hygiene(secret=SECRET))
    guarded.add("the same sentence twice")
    guarded.add("the same sentence twice")
    assert len(inner.entries) == 2
    assert "recall failed" in caplog.text


def test_dedup_can_be_turned_off(inner: ListMemory) -> None:
    guarded = GuardedMemory(inner, Redactor.hygiene(secret=SECRET), dedup_threshold=None)
    guarded.add("the same sentence twice")
    guarded.add("the same sentence twice")
    assert len(inner.entries) == 2
    assert inner.recalls == []


def test_dedup_uses_recall_k_and_the_write_namespace(inner: ListMemory) -> None:
    guarded = GuardedMemory(inner, Redactor.hygiene(secret=SECRET), recall_k=3)
    guarded.add("a note about caching layers", namespace="team-a")
    guarded.add("a note about caching layers", namespace="team-b")  # other tenant: not a duplicate
    assert len(inner.entries) == 2
    assert inner.recalls[-1] == ("a note about caching layers", 3, {"namespace": "team-b"})


def test_short_texts_are_never_duplicates(guarded: GuardedMemory, inner: ListMemory) -> None:
    guarded.add("ok")
    guarded.add("ok")  # no token of three characters: nothing to compare
    assert len(inner.entries) == 2


def test_threshold_boundary(inner: ListMemory) -> None:
    guarded = GuardedMemory(inner, Redactor.hygiene(secret=SECRET), dedup_threshold=0.5)
    guarded.add("alpha beta gamma delta")
    with pytest.raises(WriteRefusedError):
        guarded.add("alpha beta gamma epsilon zeta")  # 3 shared of 6: exactly 0.5
    guarded.add("alpha beta omega epsilon zeta")  # 2 of 7
    assert len(inner.entries) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dedup_threshold": 0}, "dedup_threshold"),
        ({"dedup_threshold": 1.5}, "dedup_threshold"),
        ({"recall_k": 0}, "recall_k"),
    ],
)
def test_bad_settings_are_refused(inner: ListMemory, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        GuardedMemory(inner, **kwargs)


def test_guarded_passes_fields_and_recall_through(guarded: GuardedMemory, inner: ListMemory) -> None:
    guarded.add("deploys happen on friday", kind="fact", role="assistant", session="s1", tags=("ops",))
    assert inner.added[-1] == {"kind": "fact", "role": "assistant", "session": "s1", "tags": ("ops",)}
    assert [h.entry.content for h in guarded.recall("friday deploys", 2)] == ["deploys happen on friday"]


def test_guarded_with_a_custom_redactor(inner: ListMemory) -> None:
    redactor = Redactor.default(secret=SECRET).add_detector("codename", r"(?i)falcon", Action.BLOCK)
    guarded = GuardedMemory(inner, redactor)
    assert guarded.add("spent $5").content == "spent $5"  # default policy: money kept
    with pytest.raises(WriteRefusedError, match="CODENAME"):
        guarded.add("falcon ships next week")


# ---- similarity ----------------------------------------------------------------------------------------


def test_similarity_tokens() -> None:
    assert similarity_tokens("The API is OK, ok? Deploying!") == {"the", "api", "deploying"}
    assert similarity_tokens("手冲咖啡 and <EMAIL>") == {"手冲", "冲咖", "咖啡", "and", "email"}
    assert similarity_tokens("猫") == {"猫"}


def test_jaccard() -> None:
    a, b = frozenset({"x", "y"}), frozenset({"y", "z"})
    assert jaccard(a, b) == pytest.approx(1 / 3)
    assert jaccard(a, a) == 1.0
    assert jaccard(frozenset(), frozenset()) == 0.0


# ---- over the real store: nothing unredacted reaches the file ------------------------------------------


def _luhn_card(body: str) -> str:
    return body + next(d for d in string.digits if luhn_ok(body + d))


pii = st.one_of(
    st.from_regex(r"[a-z]{3,10}\.[a-z]{3,10}@[a-z]{3,10}\.(com|org|io)", fullmatch=True),
    st.from_regex(r"1[3-9][0-9]{9}", fullmatch=True),
    st.from_regex(r"4[0-9]{14}", fullmatch=True).map(_luhn_card),
    st.from_regex(r"sk-proj-[A-Za-z0-9]{40}", fullmatch=True),
    st.from_regex(r"AKIA[A-Z0-9]{16}", fullmatch=True),
)


def _file_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(pii, min_size=1, max_size=6, unique=True))
def test_property_redacting_store_file_never_holds_raw_values(fresh_target: Callable[[], str],
                                                               values: list[str]) -> None:
    from engine_rows import is_postgres, stored_values

    from harness_mem.store import MemoryStore

    target = fresh_target()  # a schema of its own on PostgreSQL; on SQLite a file (of a new folder)
    with MemoryStore(target, embedder=None) as store:
        memory = RedactingMemory(store, Redactor.default(secret=SECRET))
        for i, value in enumerate(values):
            memory.add(
                f"turn {i}: 用户的联系方式{value}，请记下 ({value})",
                tags=[f"about:{value}"],
                metadata={"raw": value, "nested": [value]},
            )
        assert memory.recall("联系方式", 10)
    data = stored_values(target) if is_postgres(target) else _file_bytes(Path(target).parent)
    for value in values:
        assert value.encode() not in data


def test_guarded_over_the_real_store(engine_target: str) -> None:
    from engine_rows import written

    from harness_mem.store import MemoryStore

    with MemoryStore(engine_target, embedder=None) as store:
        guarded = GuardedMemory(store, Redactor.hygiene(secret=SECRET))
        first = guarded.add("email alice@example.com about the quarterly infra budget review")
        with pytest.raises(WriteRefusedError) as info:
            guarded.add("email bob@example.org about the quarterly infra budget review")
        assert info.value.reason == "duplicate" and info.value.duplicate_of == first.id
        with pytest.raises(WriteRefusedError, match="policy"):
            guarded.add("the budget is USD 250000")
        assert [e.content for e in store.list()] == ["email <EMAIL> about the quarterly infra budget review"]
    assert b"alice@example.com" not in written(engine_target)  # the file's folder, or the schema
