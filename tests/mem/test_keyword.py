from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_mem.keyword import (
    _WORD,
    CJK_RUN,
    REPLIED_CHARS,
    REPLIED_WORDS,
    STOP_WORDS,
    index_text,
    match_expression,
    query_terms,
    snippet,
)
from harness_mem.store import MemoryStore

HOSTILE_QUERIES = [
    '"', '""', '"unbalanced', "NEAR(", 'NEAR("a" "b", 2)', "*", "auth*", "-", "-auth", "AND", "OR", "NOT",
    "a AND OR NOT b", "(", ")", "((auth)", "col:auth", "content:auth", "^auth", "{auth}", "auth + refactor",
    "🙂", "🔥 auth 🔥", "\x00", "\\", "'", "%", "_", "auth\nrefactor", "\u200b", "x" * 10_000,
    "auth " * 2_000, "手机 * NEAR(咖啡", "ɑuth rèfactor",
]


# Every test here that ranks a store runs on both engines: ``store`` is conftest's ``engine_store``.
@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    return engine_store


@pytest.fixture
def filled(store: MemoryStore) -> MemoryStore:
    store.add("refactor the auth module today", role="user", session="s1")
    store.add("starting the auth refactor now", role="assistant", session="s1")
    store.add("用户喜欢喝手冲咖啡，不加糖", tags=["pref"])
    store.add("用户对花生过敏", tags=["health"])
    return store


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_any_query_returns_results_or_none_never_an_error(filled: MemoryStore, query: str) -> None:
    hits = filled.recall(query)
    assert isinstance(hits, list)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_generated_text_never_breaks_match(filled: MemoryStore, query: str) -> None:
    filled.recall(query)  # must not raise


def test_hostile_query_still_finds_its_words(filled: MemoryStore) -> None:
    assert filled.recall('NEAR("auth" AND refactor*')[0].entry.content.startswith(("refactor", "starting"))


def test_stop_words_do_not_drown_the_query(store: MemoryStore) -> None:
    for i in range(30):
        store.add(f"what is the weather like in the city {i}")
    target = store.add("Caroline painted a sunrise by the lake")
    hits = store.recall("What did Caroline paint in the morning by the lake?", k=3)
    assert hits[0].entry.id == target.id
    assert query_terms("what is the") == ['"what"', '"is"', '"the"']  # only stop words: keep them


def test_the_speaker_is_indexed_with_the_text(store: MemoryStore) -> None:
    turn = store.add("I love pottery classes", role="Melanie", session="conv:1")
    store.add("I love cooking classes", role="Caroline", session="conv:1")
    assert store.recall("What does Melanie love?", k=1)[0].entry.id == turn.id
    assert index_text("hi", "Melanie") == "Melanie: hi"


def test_cjk_text_is_searchable_including_two_character_words(filled: MemoryStore) -> None:
    assert [h.entry.content for h in filled.recall("咖啡")] == ["用户喜欢喝手冲咖啡，不加糖"]
    assert [h.entry.content for h in filled.recall("我平时喝什么咖啡？")][0] == "用户喜欢喝手冲咖啡，不加糖"
    assert [h.entry.content for h in filled.recall("花生")] == ["用户对花生过敏"]
    assert filled.recall("帮我订明天去上海的机票") == []  # unrelated: the allergy note must not come back
    assert index_text("手冲咖啡") == " 手冲 冲咖 咖啡 "


def test_cjk_glued_to_latin_text(store: MemoryStore) -> None:
    entry = store.add("部署用Kubernetes集群")
    assert store.recall("kubernetes")[0].entry.id == entry.id
    assert store.recall("集群")[0].entry.id == entry.id


def test_match_expression_quotes_every_term() -> None:
    assert match_expression('auth" OR x NEAR(') == '"auth" OR "near"'
    assert match_expression("🙂 *") is None
    assert len(query_terms(" ".join(f"word{i}" for i in range(5000)))) == 48


def test_filters_combine_and_apply_before_the_top_k_cut(store: MemoryStore) -> None:
    for i in range(50):
        store.add(f"deploy note number {i} about the deploy pipeline deploy", role="assistant", session="a:1")
    wanted = [store.add(f"deploy remark {i}", role="user", session="b:1", tags=["ops"]) for i in range(3)]
    hits = store.recall("deploy", k=3, role="user", tags=["ops"], session_prefix="b:")
    assert sorted(h.entry.id for h in hits) == sorted(e.id for e in wanted)
    assert store.recall("deploy", k=5, kind="fact") == []


def test_hits_carry_entry_score_and_snippet(store: MemoryStore) -> None:
    long_text = "filler " * 200 + "the migration to postgres sessions finished" + " filler" * 200
    entry = store.add(long_text)
    hit = store.recall("postgres sessions", explain=True)[0]
    assert hit.entry.id == entry.id and 0.5 < hit.score < 1  # every word of the question, alone in the store
    assert "postgres sessions" in hit.snippet and len(hit.snippet) <= 162
    assert hit.components is not None and hit.components["keyword"]["rank"] == 1
    assert hit.components["keyword"]["score"] > 0 and hit.components["coverage"]["score"] == 1.0


def test_snippet_is_whole_content_when_short() -> None:
    assert snippet("short text", "text") == "short text"


def _unbounded_snippet(content: str, query: str, width: int = 160) -> str:
    """The snippet rule without its bounds: every query word, over the whole entry."""
    if len(content) <= width:
        return content
    needles = [w for w in (m.lower() for m in _WORD.findall(query)) if len(w) > 1 and w not in STOP_WORDS]
    needles += CJK_RUN.findall(query)
    lowered = content.lower()
    positions = [p for p in (lowered.find(n[:5]) for n in needles) if p >= 0]
    start = max(0, min(positions) - width // 3) if positions else 0
    end = min(len(content), start + width)
    start = max(0, end - width)
    text = content[start:end].strip()
    return ("…" if start > 0 else "") + text + ("…" if end < len(content) else "")


_SNIPPET_WORDS = st.sampled_from(["auth", "refactor", "painting", "paint", "the", "a", "咖啡", "手冲", "x", "Auth",
                                  "module", "zebra", "!", "postgres"])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(content=st.lists(_SNIPPET_WORDS, max_size=200).map(" ".join),
       query=st.lists(_SNIPPET_WORDS, max_size=20).map(" ".join), width=st.sampled_from([20, 160]))
def test_a_snippet_of_a_normal_query_and_entry_is_the_unbounded_one(content: str, query: str, width: int) -> None:
    assert snippet(content, query, width) == _unbounded_snippet(content, query, width)


def test_a_huge_query_over_huge_entries_makes_snippets_quickly() -> None:
    words = [f"w{i:05d}x" for i in range(12_000)]  # no entry contains any of them: every search scans all
    query = " ".join(words)  # 96 kB
    entry = ("lorem ipsum dolor " * 60_000)[:1_000_000]
    started = time.process_time()  # CPU time: a busy machine does not stretch it
    for _ in range(10):
        assert snippet(entry, query) == entry[:160].strip() + "…"
    assert time.process_time() - started < 5  # unbounded: about ten seconds an entry
    late = "a" * 500_000 + " needle " + "b" * 499_000
    assert snippet(late, "needle").startswith("aaaa")  # past the scanned part: the start of the entry


def test_better_matches_rank_first(store: MemoryStore) -> None:
    store.add("auth")
    both = store.add("auth refactor plan")
    store.add("refactor")
    assert store.recall("auth refactor")[0].entry.id == both.id


def test_a_turn_is_indexed_with_its_date_and_the_turn_before_it(store: MemoryStore) -> None:
    store.add("Where did you travel in May?", role="Melanie", session="c:1", created_at="2023-05-08T13:56:00Z")
    reply = store.add("Lisbon, for the conference.", role="Caroline", session="c:1",
                      created_at="2023-05-08T13:57:00Z")
    # The reply never says "travel" or "May", but the question before it does.
    assert reply.id in [h.entry.id for h in store.recall("Where did Caroline travel?", k=2)]
    assert store.recall("8 May 2023", k=5)  # the session date is searchable


def test_deleting_a_turn_removes_its_text_from_the_next_turns_index(store: MemoryStore) -> None:
    first = store.add("the vault code is zanzibar", role="user", session="s")
    store.add("noted", role="assistant", session="s")
    assert len(store.recall("zanzibar")) == 2  # the reply carries the turn before it
    store.delete(first.id)
    assert store.recall("zanzibar") == []
    assert store.reindex()["keyword_rows"] == 1
    assert store.recall("zanzibar") == []


def test_a_reply_carries_only_the_end_of_the_turn_it_answers() -> None:
    long_reply = " ".join(f"word{i}" for i in range(200)) + " so which city do you prefer?"
    text = index_text("Porto, for the food.", "user", previous=(long_reply, "assistant"))
    # The question at the end of a long reply is kept; its first hundreds of words are not.
    assert text == f"assistant: {' '.join(long_reply.split()[-REPLIED_WORDS:])}\nuser: Porto, for the food."
    assert "word0 " not in text and "which city do you prefer?" in text
    cjk = index_text("好的", "user", previous=("我们" * 500, "assistant"))  # no spaces: cut by characters
    assert cjk.count("我们") == REPLIED_CHARS // 2
    # Two messages of the same speaker in a row: the second replies to nothing there.
    assert index_text("and book the hotel", "user", previous=("find me a flight", "user")) == "user: and book the hotel"


def test_a_users_next_message_is_found_by_its_own_words_not_the_last_ones(store: MemoryStore) -> None:
    # A session stored without the assistant's replies: each user turn follows another user turn.
    store.add("I adopted a greyhound called Biscuit last spring", role="user", session="chat")
    later = store.add("my sister moved to Tromsø for her job at the university", role="user", session="chat")
    hits = store.recall("greyhound", k=5, mode="keyword")
    assert [h.entry.id for h in hits if h.entry.id == later.id] == []  # not dragged along by the turn before
