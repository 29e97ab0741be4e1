from __future__ import annotations

from pathlib import Path

import pytest

from harness_mem import fusion
from harness_mem.fusion import (
    COSINE_FLOOR,
    COSINE_SPREAD,
    KEYWORD_SPREAD,
    Candidate,
    fuse,
    gathers,
    informativeness,
    noise_floor,
    query_words,
    strip_names,
    weights,
)
from harness_mem.jsonl import import_jsonl
from harness_mem.store import MemoryStore

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_conversation.jsonl"


def test_strip_names_removes_names_and_possessives() -> None:
    assert strip_names("What did Caroline's sister tell caroline?", ["Caroline"]) == "What did sister tell ?"
    assert strip_names("Caroline", ["Caroline"]) == "Caroline"  # nothing would be left: keep the query
    assert strip_names("what about users", ["user"]) == "what about users"  # whole words only
    assert strip_names("no names here", []) == "no names here"


def test_query_words_are_lowercased_and_unique() -> None:
    assert query_words("Did Mel and mel's MEL go?") == ["did", "mel", "and", "s", "go"]


def test_keyword_and_cosine_combine_and_priors_reorder() -> None:
    others = [Candidate(pk, keyword=0.0, cosine=0.3, named=False, session=f"o{pk}") for pk in (3, 4, 5)]
    plain = [
        Candidate(1, keyword=10.0, cosine=0.3, named=False, session="a"),
        Candidate(2, keyword=0.0, cosine=0.6, named=False, session="b"),
        *others,
    ]
    keyword_weight, cosine_weight = weights(plain)
    # 1: the only keyword match, an ordinary cosine; 2: no keyword, the best cosine.
    assert keyword_weight * 1 + cosine_weight * 0.3 > cosine_weight * 0.6
    assert [pk for pk, _ in fuse(plain, 2)] == [1, 2]
    named = [plain[0], Candidate(2, keyword=0.0, cosine=0.6, named=True, session="b"), *others]
    assert [pk for pk, _ in fuse(named, 2)] == [2, 1]  # the speaker the question names comes first


def test_session_prior_lifts_the_neighbours_of_a_strong_hit() -> None:
    candidates = [
        Candidate(1, keyword=10.0, cosine=0.9, named=False, session="s1"),  # strong hit
        Candidate(2, keyword=0.0, cosine=0.30, named=False, session="s1"),  # its session-mate
        Candidate(3, keyword=0.0, cosine=0.35, named=False, session="s2"),  # alone in its session
    ]
    assert [pk for pk, _ in fuse(candidates, 3)] == [1, 2, 3]
    assert fuse([], 3) == []


# ---- adaptive weights: a signal that tells the candidates nothing apart cannot reorder the others

def test_informativeness_is_zero_for_near_equal_or_near_zero_scores() -> None:
    assert informativeness([], KEYWORD_SPREAD) == 0.0
    assert informativeness([4.0] * 20, KEYWORD_SPREAD) == 0.0  # a word in every entry, same length
    assert informativeness([1.2e-6, 0.8e-6, 1.0e-6, 1.1e-6], KEYWORD_SPREAD) < 1e-6  # idf floored away
    assert informativeness([12.0, 3.0, 2.0, 0.0, 0.0], KEYWORD_SPREAD) > 0.7  # one entry stands out
    assert informativeness([0.4, 0.4, 0.4], COSINE_SPREAD) == 0.0
    assert informativeness([0.7, 0.45, 0.4], COSINE_SPREAD) > 0.7


def test_a_keyword_signal_of_near_equal_scores_leaves_the_cosine_order() -> None:
    # Every entry holds the query's only indexed word: BM25 differs by entry length alone, by a
    # millionth. Max-normalised, that used to weigh as much as a real match.
    cosines = [0.52, 0.67, 0.55, 0.50, 0.54]
    noise = [1.18e-6, 0.79e-6, 1.11e-6, 1.05e-6, 0.99e-6]
    candidates = [Candidate(pk, keyword=kw, cosine=cos, named=False, session=None)
                  for pk, (kw, cos) in enumerate(zip(noise, cosines, strict=True), start=1)]
    assert weights(candidates)[0] < 1e-6
    assert [pk for pk, _ in fuse(candidates, 5)] == [2, 3, 5, 1, 4]  # by cosine


def test_an_informative_keyword_signal_still_counts() -> None:
    # One entry holds the query's rare word (a name, an error code): it wins over a closer cosine.
    candidates = [
        Candidate(1, keyword=9.0, cosine=0.45, named=False, session=None),
        Candidate(2, keyword=0.0, cosine=0.55, named=False, session=None),
        Candidate(3, keyword=0.5, cosine=0.40, named=False, session=None),
        Candidate(4, keyword=0.0, cosine=0.30, named=False, session=None),
    ]
    keyword_weight, cosine_weight = weights(candidates)
    assert 0.3 < keyword_weight < 0.45 and abs(keyword_weight + cosine_weight - 1) < 1e-9
    assert [pk for pk, _ in fuse(candidates, 4)][0] == 1


def test_a_cosine_counts_by_how_far_it_rises_above_the_query_s_noise_floor() -> None:
    # The keyword lane's best match says the detail in passing (a cosine near nothing); a turn about
    # the topic in general shares fewer of the words and has a higher cosine, still among the
    # lowest quarter of the candidates': that difference is noise, and the keyword lane decides.
    filler = [Candidate(pk, keyword=0.0, cosine=0.2 + pk / 100, named=False, session=None) for pk in range(10, 40)]
    candidates = [
        Candidate(1, keyword=19.0, cosine=0.01, named=False, session=None),
        Candidate(2, keyword=17.5, cosine=0.13, named=False, session=None),
        *filler,
    ]
    assert 0 < COSINE_FLOOR < 1
    floor = noise_floor([c.cosine for c in candidates])
    assert floor is not None and 0.13 < floor < 0.5
    assert [pk for pk, _ in fuse(candidates, 2)] == [1, 2]
    saved = fusion.COSINE_FLOOR
    try:
        fusion.COSINE_FLOOR = 0.0  # raw cosines: the 0.12 between them outweighs the keyword's lead
        assert noise_floor([c.cosine for c in candidates]) is None
        assert [pk for pk, _ in fuse(candidates, 2)] == [2, 1]
    finally:
        fusion.COSINE_FLOOR = saved


def test_above_the_floor_the_cosine_still_reorders() -> None:
    filler = [Candidate(pk, keyword=0.0, cosine=0.1, named=False, session=None) for pk in range(10, 20)]
    candidates = [
        Candidate(1, keyword=12.0, cosine=0.15, named=False, session=None),
        Candidate(2, keyword=11.0, cosine=0.60, named=False, session=None),  # about what was asked
        *filler,
    ]
    assert [pk for pk, _ in fuse(candidates, 2)] == [2, 1]


ADA = [
    "Ada's home is a flat in Lisbon, in the old Alfama district.",
    "Ada works as a structural engineer designing bridges.",
    "Ada has a grey cat called Pixel.",
    "Ada plays the cello in an amateur orchestra on Thursdays.",
    "Ada is allergic to peanuts.",
    "Ada's favourite food is grilled sardines.",
    "Ada studied mathematics at the University of Porto.",
    "Ada runs a half marathon every spring.",
    "Ada's sister Maria is a nurse in Madrid.",
    "Ada drives an old blue Volvo estate.",
    "Ada prefers tea to coffee, especially green tea.",
    "Ada is learning Japanese for a trip next year.",
    "Ada's birthday is on the 12th of March.",
    "Ada volunteers at an animal shelter on weekends.",
    "Ada reads science fiction novels before bed.",
    "Ada keeps a vegetable garden with tomatoes and beans.",
    "Ada once climbed Mount Kilimanjaro with friends.",
    "Ada is vegetarian except for fish.",
    "Ada's favourite film is Spirited Away.",
    "Ada collects vintage postcards from flea markets.",
]


@pytest.mark.slow
def test_a_name_in_every_fact_does_not_push_the_answer_down(semantic_store: MemoryStore) -> None:
    """The 20-fact store about one person: "Ada" is in every fact (no idf left) and "live" in none,
    so keyword scores are all ~1e-6 and must not reorder what the meaning ranks."""
    semantic_store.add_many([{"content": fact, "kind": "fact", "tags": ["Ada"]} for fact in ADA])
    keyword_scores = [h.components["keyword"]["score"]  # type: ignore[index]
                      for h in semantic_store.recall("where does Ada live?", k=20, mode="keyword", explain=True)]
    assert len(keyword_scores) == 20 and max(keyword_scores) < 1e-5  # the premise: no keyword evidence
    for mode in ("semantic", "hybrid"):
        hits = semantic_store.recall("where does Ada live?", k=3, mode=mode)
        assert hits[0].entry.content == ADA[0], mode
    # A word that only one fact holds is evidence, and hybrid follows it.
    assert semantic_store.recall("Ada's cello", k=1, mode="hybrid")[0].entry.content == ADA[3]


def test_a_question_that_gathers_over_sessions_gets_no_session_prior() -> None:
    assert gathers("How many plants did I buy this spring?")
    assert gathers("How much have I spent on coffee in total?")
    assert gathers("How many days passed between the wedding and the move?")
    assert not gathers("Where did Caroline travel in May?")
    # s1 holds one strong hit and a weaker session-mate; s2 and s3 hold the other sessions' evidence.
    candidates = [
        Candidate(1, keyword=10.0, cosine=0.9, named=False, session="s1"),
        Candidate(2, keyword=0.0, cosine=0.30, named=False, session="s1"),
        Candidate(3, keyword=0.0, cosine=0.36, named=False, session="s2"),
        Candidate(4, keyword=0.0, cosine=0.35, named=False, session="s3"),
    ]
    assert [pk for pk, _ in fuse(candidates, 2)] == [1, 2]  # one session's turns first
    assert [pk for pk, _ in fuse(candidates, 2, gathering=True)] == [1, 3]  # the next session's evidence


def test_a_question_that_gathers_keeps_the_turn_with_its_exact_terms_above_a_near_topic_one() -> None:
    # "How many bikes did I service in March?": the user said it in passing, in a turn about a ride
    # (all the rare words, a low cosine); a turn about bikes in general shares fewer of them and
    # reads closer in meaning. For such a question the exact words are the evidence.
    filler = [Candidate(pk, keyword=0.0, cosine=0.05 + pk / 200, named=False, session=f"f{pk}") for pk in range(10, 40)]
    candidates = [
        Candidate(1, keyword=13.2, cosine=0.29, named=False, session="ride"),
        Candidate(2, keyword=11.8, cosine=0.38, named=False, session="bikes"),
        *filler,
    ]
    assert fusion.GATHERING_KEYWORD_WEIGHT > fusion.KEYWORD_WEIGHT
    assert weights(candidates, gathering=True)[0] > weights(candidates)[0]
    assert [pk for pk, _ in fuse(candidates, 2, gathering=True)] == [1, 2]
    # Another kind of question keeps the weights that let meaning reorder close keyword matches.
    assert [pk for pk, _ in fuse(candidates, 2)] == [2, 1]


def test_a_questions_pronouns_name_the_chat_role_it_asks_about() -> None:
    assert fusion.pronoun_role("What did I buy at the market?") == "user"
    assert fusion.pronoun_role("Where's my passport? I'm sure I left it somewhere") == "user"
    assert fusion.pronoun_role("Which hotel did you recommend?") == "assistant"
    assert fusion.pronoun_role("Can you remind me what you said about bikes?") is None  # both: neither
    assert fusion.pronoun_role("Where did Caroline travel in May?") is None
    assert fusion.pronoun_role("iPhone battery tips") is None  # a word, not the pronoun
    assert fusion.pronoun_role("When can I ship to production?") is None  # what holds, not what was said
    assert fusion.pronoun_role("What should I cook with my tomatoes?") == "user"  # but "my" is theirs


def test_in_a_chat_a_first_person_question_finds_what_the_user_said(hashed_store: MemoryStore) -> None:
    # The assistant's reply repeats the question's words at length; the user said the fact once.
    hashed_store.add_many([
        {"content": "I bought a bike at the market on Sunday.", "role": "user", "session": "s1"},
        {"content": "A bike from the market on Sunday is a great buy: market bikes on Sunday are cheap,"
                    " and a Sunday market bike is a fine buy.", "role": "assistant", "session": "s1"},
        *({"content": f"unrelated chat number {i} about the weather", "role": role, "session": f"o{i}"}
          for i in range(6) for role in ("user", "assistant")),
    ])
    mine = hashed_store.recall("What did I buy at the market on Sunday?", k=2, mode="hybrid")
    assert mine[0].entry.role == "user"
    yours = hashed_store.recall("What did you say about the market on Sunday?", k=2, mode="hybrid")
    assert yours[0].entry.role == "assistant"


def test_a_question_about_a_decision_is_told_from_one_that_mentions_a_word() -> None:
    assert fusion.asks_decision("what did we decide about the auth refactor")
    assert fusion.asks_decision("What was the decision on the queue?")
    assert fusion.asks_decision("which limiter did we go with?")
    assert fusion.asks_decision("what have we settled on for billing")
    assert not fusion.asks_decision("when can I ship to production")
    assert not fusion.asks_decision("password hashing")
    assert not fusion.asks_decision("what did Ada go to see in Lisbon?")  # "go to", not "go with"


def test_a_question_about_a_decision_puts_the_turns_that_decide_above_the_one_that_raised_it(
        semantic_store: MemoryStore) -> None:
    """The sample conversation: "we need to plan the auth refactor" shares the question's words, the
    options reply its topic; the decision ("Let's keep server-side sessions…", "Decision noted: …")
    shares neither ("decide" and "decision" are different stems)."""
    import_jsonl(semantic_store, SAMPLE.read_bytes().splitlines())
    deciding = {"proj:2026-03-02:3", "proj:2026-03-02:4"}
    hits = semantic_store.recall("what did we decide about the auth refactor", k=3, mode="hybrid", explain=True)
    assert deciding & {hit.entry.id for hit in hits}
    decided = next(hit for hit in hits if hit.entry.id in deciding)
    assert decided.components is not None and decided.components["decision"]["score"] == fusion.DECISION_PRIOR
    # A question that asks no decision ranks as before: the prior is not there.
    plain = semantic_store.recall("the auth refactor", k=3, mode="hybrid", explain=True)
    assert all(hit.components is not None and "decision" not in hit.components for hit in plain)
