"""Scores in [0, 1] on one scale (harness_mem/scores.py): comparable across stores, modes and queries."""

from __future__ import annotations

import pytest

from harness_mem import MemoryStore
from harness_mem.bm25 import terms_held
from harness_mem.scores import coverage_of, in_order, relevance, term_weight

FACTS = [
    "Ada's home is a flat in Lisbon, in the old Alfama district.",
    "Ada works as a structural engineer designing bridges.",
    "Ada has a grey cat called Pixel.",
    "Ada plays the cello in an amateur orchestra on Thursdays.",
    "Ada's sister Marta lives in Porto and teaches chemistry.",
    "Ada is allergic to peanuts.",
    "Ada runs along the river every Sunday morning.",
    "Ada's favourite book is a history of the Portuguese discoveries.",
]
FILLER = ["The deploy to staging ran {n} tests and pushed image {n} to the registry.",
          "Invoice {n} was refunded after the customer's ticket about billing.",
          "The cron job {n} rotated the logs and restarted worker {n}."]


def test_the_same_hit_scores_alike_in_a_small_store_and_a_large_one(tmp_path: object) -> None:
    """BM25 of the answer moves by orders of magnitude with the store's size; its score does not."""
    found = []
    for name, filler in (("small", 0), ("large", 3000)):
        with MemoryStore(f"{tmp_path}/{name}.db", embedder=None) as store:
            store.add_many([{"content": f, "kind": "fact"} for f in FACTS])
            store.add_many([{"content": FILLER[n % 3].format(n=n)} for n in range(filler)])
            hit = store.recall("Which instrument does Ada play in the orchestra?", k=1, explain=True)[0]
            assert hit.entry.content == FACTS[3]
            found.append((hit.score, hit.components["keyword"]["score"]))  # type: ignore[index]
    (small, small_bm25), (large, large_bm25) = found
    assert large_bm25 > 3 * small_bm25  # the raw scale changes with the store
    assert small >= 0.5 and large >= 0.5 and abs(small - large) < 0.1


def test_scores_are_in_0_1_and_fall_along_the_hits(hashed_store: MemoryStore) -> None:
    hashed_store.add_many([{"content": f} for f in FACTS])
    for mode in ("keyword", "semantic", "hybrid"):
        hits = hashed_store.recall("Ada cello orchestra Thursday", k=8, mode=mode)  # type: ignore[arg-type]
        scores = [h.score for h in hits]
        assert hits and all(0.0 <= s <= 1.0 for s in scores), mode
        assert scores == sorted(scores, reverse=True), mode


@pytest.mark.real_model
def test_half_a_point_keeps_the_answer_and_drops_what_does_not_answer(semantic_store: MemoryStore) -> None:
    semantic_store.add_many([{"content": f, "kind": "fact"} for f in FACTS])
    for mode in ("hybrid", "semantic", "keyword"):
        answered = semantic_store.recall("What food is Ada allergic to?", k=3, mode=mode, min_score=0.5)  # type: ignore[arg-type]
        assert answered and answered[0].entry.content == FACTS[5], mode
        # Nothing here is about certificates: every hit falls below the line in every mode. (A question
        # about Ada that the store cannot answer is another matter: her other facts are on its topic.)
        question = "How do I rotate the TLS certificate on the load balancer?"
        unanswerable = semantic_store.recall(question, k=8, mode=mode)  # type: ignore[arg-type]
        assert max((h.score for h in unanswerable), default=0.0) < 0.5, (mode, [h.score for h in unanswerable])
        assert semantic_store.recall(question, mode=mode, min_score=0.5) == []  # type: ignore[arg-type]


@pytest.mark.real_model
def test_a_paraphrase_with_no_shared_word_still_scores_as_an_answer(semantic_store: MemoryStore) -> None:
    semantic_store.add_many([{"content": t} for t in ("a cat was sitting on the mat by the window",
                                                      "quarterly sales rose by twelve percent")])
    top = semantic_store.recall("a kitty resting on a rug", k=1, mode="semantic")[0]
    assert top.entry.content.startswith("a cat") and top.score >= 0.5


def _coverage(terms: list[str], weights: list[float], text: str) -> float:
    return coverage_of(terms_held(terms, text), weights)


def test_coverage_weighs_a_rare_word_over_a_common_one() -> None:
    terms = ['"ada"', '"cello"']
    weights = [term_weight(1000, 990), term_weight(1000, 3)]
    assert _coverage(terms, weights, "ada likes tea") < 0.15
    assert _coverage(terms, weights, "the cello lessons") > 0.85
    assert _coverage(terms, weights, "Ada's cello") == 1.0
    assert _coverage(['"paint"*'], [1.0], "she was painting") == 1.0  # a prefix term
    assert _coverage([], [], "anything") == 0.0


def test_a_term_is_held_by_its_stem_its_folded_form_and_a_phrase_in_any_order() -> None:
    assert terms_held(['"running"', '"cafe"', '"lake sunrise"'], "Runs to the café at sunrise by the lake") == (
        True, True, True)
    assert terms_held(['"paint"*', '"cello"', '"sunrise lake"'], "a painter's lake") == (True, False, False)


def test_a_hit_sharing_nothing_scores_low_in_every_mode() -> None:
    for mode in ("hybrid", "semantic", "keyword"):
        assert relevance(mode, 0.0, 0.1) < 0.05
        assert relevance(mode, 1.0, 0.8) > 0.95


def test_in_order_pools_the_runs_that_rise() -> None:
    assert in_order([0.9, 0.5, 0.7, 0.2]) == pytest.approx([0.9, 0.6, 0.6, 0.2])
    assert in_order([0.1, 0.3, 0.8]) == pytest.approx([0.4, 0.4, 0.4])
    assert in_order([]) == []
