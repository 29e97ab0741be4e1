"""Derived entries ranked with their sources (sourced.py): a summary that condensed a detail away is
still found by the turn that said it, on either engine, within the recall's filters."""

from __future__ import annotations

import pytest

from harness_mem import sourced
from harness_mem.experience import consolidate
from harness_mem.sourced import ranked_with_sources
from harness_mem.store import MemoryStore

DERIVED = "consolidation"


def test_an_entry_is_ranked_by_the_better_of_its_words_and_its_best_cited_turn() -> None:
    own = [(10, 0.2), (11, 0.5)]        # 10: a summary whose words match little; 11: a fact that matches
    turns = {1: 0.9, 2: 0.1}            # turn 1 said what was asked; 10 cites it
    found = ranked_with_sources(own, turns, [(10, 1), (11, 2), (12, 1)])
    assert [pk for pk, _ in found.ranked] == [10, 12, 11]   # 12 matched nothing itself: it joins by turn 1
    assert found.ranked[0][1] == pytest.approx(sourced.SOURCE_SHARE * 0.9 + sourced.OWN_SHARE * 0.2)
    assert found.lifted_by == {10: 1, 12: 1}                # 11's own words beat its turn's


def test_of_two_entries_citing_the_same_turn_the_one_that_says_it_comes_first() -> None:
    found = ranked_with_sources([(20, 0.1), (21, 0.6)], {1: 0.8}, [(20, 1), (21, 1)])
    assert [pk for pk, _ in found.ranked] == [21, 20]


def test_an_entry_citing_no_ranked_turn_keeps_its_own_score() -> None:
    found = ranked_with_sources([(30, 0.4), (31, 0.3)], {5: 0.2}, [(31, 9)])
    assert found.ranked == [(30, 0.4), (31, 0.3)] and found.lifted_by == {}


def _session(store: MemoryStore) -> dict[str, str]:
    """Two turns and what consolidation would have kept of them: a summary that dropped the dog's
    name and breed, and a fact about something else."""
    store.add("I adopted a greyhound called Biscuit from the shelter on Tuesday.", id="t1", kind="turn",
              role="Ada", session="s1")
    store.add("We are repainting the kitchen a pale yellow this weekend.", id="t2", kind="turn",
              role="Bo", session="s1")
    store.add("Ada and Bo on 8 May 2023: Ada has a new pet. Bo is decorating.", id="summary:s1", kind="summary",
              session="s1", source=DERIVED, tags=["consolidated"], metadata={"source_turns": ["t1", "t2"]})
    store.add("Bo is repainting the kitchen yellow.", id="fact:kitchen", kind="fact", session="s1",
              source=DERIVED, tags=["consolidated"], metadata={"source_turns": ["t2"]})
    return {"summary": "summary:s1", "fact": "fact:kitchen"}


def test_a_derived_entry_is_found_by_the_turn_it_cites(engine_hashed_store: MemoryStore) -> None:
    store = engine_hashed_store
    _session(store)
    hits = store.recall("greyhound Biscuit", 5, mode="hybrid", derived=True, explain=True)
    assert hits[0].entry.id == "summary:s1"                      # its own words hold neither name
    assert hits[0].components is not None and hits[0].components["sources"]["score"] > 0
    assert hits[0].score > 0.5                                   # scored by the turn's evidence: an answer
    # The agent's recall over every lane: the turn that says it is a hit of its own, first.
    every = store.recall("greyhound Biscuit", 5, mode="hybrid", derived="both", sources=True)
    assert every[0].entry.id == "t1"


def test_without_the_sources_share_only_its_own_words_count(engine_hashed_store: MemoryStore,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _session(engine_hashed_store)
    monkeypatch.setattr(sourced, "SOURCE_SHARE", 0.0)
    hits = engine_hashed_store.recall("greyhound Biscuit", 5, mode="hybrid", derived=True, explain=True)
    assert all(h.components is not None and "sources" not in h.components for h in hits)


def test_the_recalls_filters_hold_for_an_entry_found_through_its_turn(engine_hashed_store: MemoryStore) -> None:
    store = engine_hashed_store
    ids = _session(store)
    assert all(h.entry.kind == "fact" for h in store.recall("greyhound Biscuit", 5, mode="hybrid", kind="fact"))
    assert store.recall("greyhound Biscuit", 5, mode="hybrid", derived=True, session="s2") == []
    assert store.recall("greyhound Biscuit", 5, mode="hybrid", derived=True, exclude_tags=["consolidated"]) == []
    store.supersede(ids["summary"], "Ada and Bo on 8 May 2023: Ada adopted a dog.")   # the old one is replaced
    found = store.recall("greyhound Biscuit", 5, mode="hybrid", derived=True)
    assert all(h.entry.id != ids["summary"] for h in found)
    # The correction is a version of the summary: it cites the same turn, and is found through it.
    assert "Ada and Bo on 8 May 2023: Ada adopted a dog." in [h.entry.content for h in found]
    store.forget(ids["fact"])
    assert [h.entry.content for h in store.recall("greyhound Biscuit", 5, mode="hybrid", derived=True)] == [
        "Ada and Bo on 8 May 2023: Ada adopted a dog."]
    store.forget("t1")  # forgetting the turn it restates takes it too
    assert store.recall("greyhound Biscuit", 5, mode="hybrid", derived=True) == []


def test_another_namespace_never_lends_its_turns(engine_target: str, hashed_embedder: object) -> None:
    with MemoryStore(engine_target, embedder=hashed_embedder, namespace="ada") as ada:  # type: ignore[arg-type]
        _session(ada)
    with MemoryStore(engine_target, embedder=hashed_embedder, namespace="bo") as bo:  # type: ignore[arg-type]
        bo.add("Bo thinks about pets.", id="summary:s1", kind="summary", session="s1", source=DERIVED,
               metadata={"source_turns": ["t1"]})
        hits = bo.recall("greyhound Biscuit", 5, mode="hybrid", derived=True, explain=True)
        assert all(h.components is not None and "sources" not in h.components for h in hits)


def test_a_consolidated_chat_answers_a_detail_from_its_summary_with_the_real_model(semantic_store: MemoryStore) -> None:
    store = semantic_store
    turns = [("Ada", "Guess what, I finally adopted a retired racing greyhound from the shelter, his name is Biscuit!"),
             ("Bo", "No way, that is amazing. How is he settling in?"),
             ("Ada", "He sleeps most of the day on the sofa and follows me around the flat."),
             ("Bo", "Meanwhile we are repainting the whole kitchen a pale yellow this weekend."),
             ("Ada", "Yellow sounds cheerful, send me a photo when it is done."),
             ("Bo", "Will do, my brother is coming over to help with the ceiling.")]
    for i, (role, text) in enumerate(turns):
        store.add(text, id=f"t{i}", kind="turn", role=role, session="s1", created_at=f"2023-05-08T10:0{i}:00")
    consolidate(store)
    hits = store.recall("What is the name of Ada's dog?", 3, derived=True, sources=True)
    assert hits and hits[0].entry.source == DERIVED
    assert "t0" in hits[0].entry.metadata["source_turns"]


def test_a_fact_is_found_by_its_own_words_not_by_the_rest_of_its_turn(engine_hashed_store: MemoryStore) -> None:
    store = engine_hashed_store
    store.add("I'm vegetarian, and I live in Lisbon now.", id="t1", kind="turn", role="Ada", session="s1")
    for id_, text in (("fact:diet", "Ada is vegetarian."), ("fact:home", "Ada lives in Lisbon now.")):
        store.add(text, id=id_, kind="fact", session="s1", source=DERIVED, metadata={"source_turns": ["t1"]})
    hits = store.recall("where does Ada live", 2, mode="hybrid", derived=True, explain=True)
    assert hits[0].entry.id == "fact:home"                   # the diet fact shares the turn, not the answer
    assert all(h.components is not None and "sources" not in h.components for h in hits)


def test_a_keyword_recall_ranks_a_summary_by_its_own_words(engine_hashed_store: MemoryStore) -> None:
    """BM25 in the turns' index and in the derived one are on no common scale: no lift by keyword."""
    _session(engine_hashed_store)
    assert engine_hashed_store.recall("greyhound Biscuit", 5, mode="keyword", derived=True) == []
