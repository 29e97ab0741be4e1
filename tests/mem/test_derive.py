"""Consolidation's derived entries, piece by piece: dates, standalone statements, topic cuts."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from harness_mem.experience.derive import SpokenTurn, derive, fact_id
from harness_mem.experience.facts import FACT_SCORE
from harness_mem.experience.segments import TURNS_PER_SEGMENT, cut_points, segment
from harness_mem.experience.statements import rewrite, statements
from harness_mem.experience.timephrases import resolve_dates

MONDAY = date(2023, 5, 8)  # 8 May 2023 was a Monday


@pytest.mark.parametrize(
    ("said", "meant"),
    [
        ("I went there yesterday", "I went there on 7 May 2023"),
        ("We met last night", "We met on 7 May 2023"),
        ("I ran a race last Saturday", "I ran a race on Saturday, 6 May 2023"),
        ("we talked on last Monday", "we talked on Monday, 1 May 2023"),   # the Monday before, not today
        ("see you next Friday", "see you on Friday, 12 May 2023"),
        ("I quit two weeks ago", "I quit 2 weeks before 8 May 2023"),
        ("it broke 3 days ago", "it broke on 5 May 2023"),
        ("a few days ago I moved", "a few days before 8 May 2023 I moved"),
        ("I start next month", "I start in June 2023"),
        ("I graduated last year", "I graduated in 2022"),
        ("the trip was last month", "the trip was in April 2023"),
        ("a month ago", "in April 2023"),
        ("I'm baking tomorrow", "I'm baking on 9 May 2023"),
        ("I finished it this morning", "I finished it on 8 May 2023"),
        ("camping last weekend", "camping the weekend before 8 May 2023"),
        ("no date here at all", "no date here at all"),
        ("in December 2022", "in December 2022"),                               # absolute: left alone
    ],
)
def test_relative_dates_become_the_dates_they_meant(said: str, meant: str) -> None:
    assert resolve_dates(said, MONDAY) == meant


def test_a_new_year_is_crossed_both_ways() -> None:
    assert resolve_dates("last month", date(2024, 1, 15)) == "in December 2023"
    assert resolve_dates("next month", date(2023, 12, 31)) == "in January 2024"


@pytest.mark.parametrize(
    ("sentence", "standalone"),
    [
        ("I went to a support group and it was so powerful.", "Caroline went to a support group and it was so powerful."),
        ("I love painting with my kids!", "Caroline loves painting with their kids!"),  # named once
        ("I really enjoy hiking", "Caroline really enjoys hiking."),
        ("I'm a counselor now", "Caroline is a counselor now."),
        ("I've adopted a dog", "Caroline has adopted a dog."),
        ("I watch movies and I go swimming", "Caroline watches movies and Caroline goes swimming."),
        ("Your painting is lovely", "Melanie's painting is lovely."),
        ("You're right about me", "Melanie is right about Caroline."),
        ("Our trip was fun", "Caroline's trip was fun."),
        ("Researching adoption agencies now", "Caroline is researching adoption agencies now."),  # no subject: hers
        ("Gonna try pottery next", "Caroline is going to try pottery next."),
        ("Painting is relaxing for me", "Painting is relaxing for Caroline."),   # a gerund subject stays
        ("Creating a family for those kids is so lovely", "Creating a family for those kids is so lovely."),
        ("Something else came up", "Something else came up."),
        ("I need a break", "Caroline needs a break."),                   # a plain verb ending in "ed"
        ("He suggested novels I haven't read yet", "He suggested novels Caroline hasn't read yet."),
        ("I wasn't there and I didn't go", "Caroline wasn't there and Caroline didn't go."),
        ("Speaking of which, I met Alex at a festival", "Caroline met Alex at a festival."),
        ("Speaking of Berlin, I've got a friend there", "Speaking of Berlin, Caroline has got a friend there."),
        ("I just kind of went for it", "Caroline just kind of went for it."),        # not "kinds ofs"
        ("I completely encourage it", "Caroline completely encourages it."),     # not "completelies"
        ("I first watched it in 2019", "Caroline first watched it in 2019."),
        ("I apply for grants", "Caroline applies for grants."),
        ("I wore it and I wanna wear it again", "Caroline wore it and Caroline wants to wear it again."),
        ("I and my wife learnt a lot", "Caroline and their wife learnt a lot."),      # "I and" is no verb
        ("Taking a step back can help", "Taking a step back can help."),          # a gerund subject, a modal verb
        ("Like, on my last trip I brought 7 shirts", "On Caroline's last trip Caroline brought 7 shirts."),
    ],
)
def test_first_and_second_person_become_names(sentence: str, standalone: str) -> None:
    assert rewrite(sentence, "Caroline", "Melanie") == standalone


def test_statements_keep_durable_things_and_drop_small_talk() -> None:
    said = statements(
        "Hey Mel! Good to see you! Did you finish the mural? I went to a LGBTQ support group yesterday and it was "
        "so powerful.", turn_id="t1", speaker="Caroline", listener="Melanie", said_on=MONDAY,
    )
    worth = [s for s in said if s.score > 0]
    assert [s.text for s in worth] == ["Caroline went to a LGBTQ support group on 7 May 2023 and it was so powerful."]
    assert worth[0].turn_id == "t1" and worth[0].score >= FACT_SCORE
    # A question is part of the conversation's account, never a fact.
    assert [(s.text, s.score) for s in said if s.score == 0] == [("Did Melanie finish the mural?", 0.0)]
    assert statements("Thanks! Wow.", turn_id="t", speaker="A", listener="B", said_on=None) == []
    # A list's heading says nothing without its items ("Options:." was once a summary's sentence).
    listed = statements("Here are a few options to consider:\nSpa Day for One: a massage and a facial.",
                        turn_id="t", speaker="the assistant", listener="the user", said_on=None)
    assert [s.text for s in listed] == ["A massage and a facial."]


def test_a_sentence_that_opens_in_the_first_person_counts_as_the_speakers_own() -> None:
    # "My …", "We …", "Our …" open a sentence capitalised: they are the speaker's as much as "… my …".
    for said, standalone in [("My favorite character is Aragorn, he grows so much.",
                              "John's favorite character is Aragorn, he grows so much."),
                             ("We adopted a puppy named Max at the shelter.",
                              "John and others adopted a puppy named Max at the shelter.")]:
        (statement,) = statements(said, turn_id="t", speaker="John", listener="Tim", said_on=None)
        assert statement.text == standalone and statement.score >= FACT_SCORE


def test_cut_points_fall_in_the_deepest_valleys() -> None:
    # Two flat plateaus with a deep valley between turn 4 and turn 5.
    likeness = [0.9, 0.9, 0.85, 0.9, 0.1, 0.88, 0.9, 0.9, 0.92]
    assert cut_points(likeness) == [5]
    assert cut_points([0.5] * 8) == []                                   # no valley: one segment
    assert cut_points([0.9, 0.1, 0.9, 0.9, 0.9, 0.9], min_turns=3) == []  # a cut would leave 2 turns


def test_a_session_is_cut_where_its_subject_changes_by_words_or_vectors() -> None:
    cooking = ["I bake sourdough bread every weekend", "sourdough bread needs a starter and flour",
               "my starter bread flour rises overnight", "the bread crust from sourdough flour is best"]
    football = ["the football match went to penalties", "our football team won the league match",
                "the striker scored in the football match", "football penalties decided the league"]
    texts = cooking + football
    assert [list(r) for r in segment(texts)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    vectors = np.array([[1.0, 0.05 * i] for i in range(4)] + [[0.05 * i, 1.0] for i in range(4)], dtype=np.float32)
    assert [list(r) for r in segment(texts, vectors)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [list(r) for r in segment(texts[:3])] == [[0, 1, 2]]   # too short to cut
    assert segment([]) == []


def test_a_session_gets_at_most_one_segment_per_four_turns() -> None:
    # Every third gap is a deep valley: plain TextTiling would cut a 24-turn session into eight.
    likeness = [0.1 if i % 3 == 2 else 0.9 for i in range(23)]
    assert len(cut_points(likeness)) == 7
    assert cut_points(likeness, most=2) == sorted(cut_points(likeness, most=2)) and len(cut_points(likeness, most=2)) == 2
    vectors = np.array([[1.0, 0.0] if (i // 3) % 2 == 0 else [0.0, 1.0] for i in range(24)], dtype=np.float32)
    parts = segment([f"turn {i}" for i in range(24)], vectors)
    assert len(parts) == 24 // TURNS_PER_SEGMENT and all(len(p) >= 3 for p in parts)
    assert [i for p in parts for i in p] == list(range(24))  # every turn in one segment, in order
    assert len(segment([f"turn {i}" for i in range(7)], vectors[:7])) == 1  # under eight turns: not cut


def chat() -> list[SpokenTurn]:
    lines = [
        ("Caroline", "Hey Mel! How have you been?"),
        ("Melanie", "Good! I'm swamped with the kids and work. What's new with you?"),
        ("Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
        ("Melanie", "Wow, that sounds amazing. Did you meet anyone?"),
        ("Caroline", "I met a counselor there and I plan to study counseling next year."),
        ("Melanie", "That's great! Bye for now."),
    ]
    return [SpokenTurn(f"t{i}", role, text, MONDAY) for i, (role, text) in enumerate(lines, start=1)]


def test_derive_writes_summaries_and_facts_that_cite_their_turns() -> None:
    derivation = derive(chat())
    (part,) = derivation.segments  # six turns: too short to cut
    assert part.source_turns == ("t1", "t2", "t3", "t4", "t5", "t6")
    # Who and when, then what was said of substance, in far fewer words than the turns.
    assert part.text.startswith("Caroline and Melanie on 8 May 2023: ")
    assert "Caroline plans to study counseling in 2024" in part.text
    assert len(part.text.split()) <= 0.4 * sum(len(t.content.split()) for t in chat())
    assert "?" not in part.text and "Hey Mel" not in part.text     # no questions, no greetings
    facts = {f.text: f.source_turns for f in derivation.facts}
    assert facts["Caroline went to a LGBTQ support group on 7 May 2023 and it was so powerful."] == ("t2", "t3")
    # It answers Melanie's question, so the question is one of its sources.
    assert facts["Caroline met a counselor there and Caroline plans to study counseling in 2024."] == ("t4", "t5")


def test_an_assistant_states_no_facts_and_what_the_user_said_comes_first_in_the_segment() -> None:
    turns = [SpokenTurn("u", "user", "I moved to Porto last month and I love the food there.", MONDAY),
             SpokenTurn("a", "assistant", "I recommend visiting the Livraria Lello bookshop in Porto, "
                        "then a walk down to the river for the tram and the bridge at sunset.", MONDAY)]
    derivation = derive(turns)
    assert [f.text for f in derivation.facts] == [
        "The user moved to Porto in April 2023 and the user loves the food there."
    ]
    assert derivation.segments[0].text == (
        "The user and the assistant on 8 May 2023: The user moved to Porto in April 2023 and the user loves the food there."
    )


def test_an_assistant_states_the_projects_facts_when_asked_or_speaking_for_the_team() -> None:
    turns = [SpokenTurn("q", "user", "How do deploys work here again? I always forget.", MONDAY),
             SpokenTurn("a1", "assistant", "Deploys go out on Tuesdays and Thursdays after 2 pm via the deploy-bot.",
                        MONDAY),
             SpokenTurn("u", "user", "Good. Write that down somewhere, people keep asking.", MONDAY),
             SpokenTurn("a2", "assistant", "We switched the session store to Postgres last week.", MONDAY),
             SpokenTurn("a3", "assistant", "The site is deployed and answers 200.", MONDAY)]
    facts = {f.text: f.source_turns for f in derive(turns).facts}
    assert facts == {
        "Deploys go out on Tuesdays and Thursdays after 2 pm via the deploy-bot.": ("q", "a1"),  # answers a question
        "The team switched the session store to Postgres the week before 8 May 2023.": ("a2",),  # "we": the team
    }  # the log of its own work is no fact, nor is a task given for now


def test_a_summary_of_a_chat_with_an_assistant_is_what_the_user_said_and_a_little_of_the_advice() -> None:
    advice = "\n".join(f"**Spa {n}**: a lovely day spa in town with massages, facials and a quiet garden for"
                      f" {n} hours of rest." for n in range(2, 32))
    turns = [SpokenTurn("u", "user", "My sister loves pampering herself. I got her a spa gift card last year and"
                        " she loved it. Can you recommend spas around $100?", MONDAY),
             SpokenTurn("a", "assistant", "Here are some options:\n" + advice, MONDAY),
             SpokenTurn("u2", "user", "I'll go with a gift set of oils, since my sister likes to try new scents.",
                        MONDAY)]
    (summary,) = derive(turns).segments
    said = summary.text.split(": ", 1)[1]
    assert "The user got her a spa gift card in 2022" in said and "The user will go with a gift set of oils" in said
    assert "options:" not in said                           # a list's heading is no statement
    advised = [sentence for sentence in said.split(". ") if "spa in town" in sentence]
    assert 1 <= len(advised) <= 4                           # some of the advice, not the whole list
    assert len(said.split()) < 0.35 * sum(len(t.content.split()) for t in turns)


def test_friends_meeting_up_is_their_plan_not_a_teams_decision() -> None:
    turns = [SpokenTurn("b", "Bo", "Let's meet when I visit in June. We'll use Postgres for billing.", MONDAY),
             SpokenTurn("a", "Ada", "Sounds great!", MONDAY)]
    facts = [f.text for f in derive(turns).facts]
    assert "The team will use Postgres for billing." in facts                   # a decision, the team's
    assert not any("team" in fact and "meet" in fact for fact in facts)          # was "The team decided to meet …"


def test_an_assistants_general_advice_is_no_ones_convention_but_its_answers_in_a_project_are_facts() -> None:
    asked = SpokenTurn("q", "user", "Any tips for a moist chocolate cake? I'm baking one for my sister.", MONDAY)
    advice = SpokenTurn("a", "assistant", "Make sure to not overmix the batter. Store it in the freezer for up to "
                        "2 months. Patagonia uses organic cotton in their products.", MONDAY)
    assert [(f.text, f.source_turns) for f in derive([asked, advice]).facts] == [
        ("The user is baking one for their sister.", ("q",))]  # only what the user said of themselves
    port = [SpokenTurn("q", "user", "What port does staging listen on?", MONDAY),
            SpokenTurn("a", "assistant", "The staging server listens on port 5433.", MONDAY)]
    assert derive(port).facts == []  # a question in passing, not known to be about a project of the user's
    assert [(f.text, f.source_turns) for f in derive(port, in_project=True).facts] == [
        ("The staging server listens on port 5433.", ("q", "a"))]  # a coding agent's session: the project's setup


@pytest.mark.parametrize("said", ["Write that down somewhere, people keep asking.", "Pin the clock in that test.",
                                  "Run the auth tests again.", "Push and open a PR."])
def test_a_task_for_now_is_neither_a_fact_nor_in_a_summary(said: str) -> None:
    turns = [SpokenTurn("u1", "user", "I work at Google.", MONDAY), SpokenTurn("u2", "user", said, MONDAY)]
    derivation = derive(turns)
    assert [f.text for f in derivation.facts] == ["The user works at Google."]
    assert derivation.segments[0].text.endswith(": The user works at Google.")


@pytest.mark.parametrize("said", ["Run the linter before every commit.", "Always open a PR for changes to billing.",
                                  "Add type hints to every new function."])
def test_an_instruction_that_holds_from_now_on_is_a_convention(said: str) -> None:
    assert [f.source_turns for f in derive([SpokenTurn("u", "user", said, MONDAY)]).facts] == [("u",)]


def test_a_fact_said_again_in_the_same_words_gets_the_same_id() -> None:
    assert fact_id("Caroline loves hiking.") == fact_id("caroline LOVES hiking!")
    assert fact_id("Caroline loves hiking.") != fact_id("Caroline hates hiking.")


@pytest.mark.parametrize(
    ("content", "ordinary"),
    [
        ("I love " + "a" * 999_000, 0),                                   # one run-on sentence: no fact
        ("I love hiking with my dog. " + "x" * 998_000 + ". I moved to Porto last month.", 2),
        pytest.param(" ".join(f"I moved to city number {i} last month." for i in range(25_000)), 25_000,
                     marks=pytest.mark.slow),                              # a million characters of facts
    ],
)
def test_a_huge_turn_gives_facts_of_a_sentence_and_a_bounded_summary(content: str, ordinary: int) -> None:
    derivation = derive([SpokenTurn("t", "user", content, MONDAY)])
    assert bool(derivation.facts) == bool(ordinary), "sentences of ordinary length are still read"
    assert all(len(f.text) <= 1000 for f in derivation.facts)
    assert all(len(s.text.split()) <= 420 for s in derivation.segments)
    assert all(len(s.text) <= 8000 for s in derivation.segments)


def test_a_heading_before_a_statement_goes_but_a_list_items_name_stays() -> None:
    from harness_mem.experience.statements import normalised

    assert normalised("Quick question: where is the staging database?") == "Where is the staging database?"
    assert normalised("Side Note: I'm vegan.") == "I'm vegan."
    assert normalised("Big news: I moved to Porto.") == "I moved to Porto."
    # The name is what the rest is said of: without it, "Dreamy psychedelic rock …" says nothing.
    assert normalised("Tame Impala: dreamy psychedelic rock with lush synths.").startswith("Tame Impala:")
    assert normalised("Spa 10: a quiet day spa in town.").startswith("Spa 10:")
    assert normalised("Option A: keep server-side sessions.").startswith("Option A:")
