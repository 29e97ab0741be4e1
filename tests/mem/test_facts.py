"""Which statements are facts (experience/facts.py), and corrections in any phrasing, through a real store."""

from __future__ import annotations

from datetime import date

import pytest

from harness_mem import MemoryStore
from harness_mem.experience import consolidate
from harness_mem.experience.facts import correction, fact_about, fact_kind, restates, revises
from harness_mem.experience.statements import statements


@pytest.mark.parametrize(
    ("said", "kind"),
    [
        ("I'm vegetarian.", "diet"),
        ("I live in Lisbon.", "home"),
        ("I work at Google.", "work"),
        ("I am allergic to peanuts.", "allergy"),
        ("My birthday is on 4 March.", "date"),
        ("I prefer tea over coffee.", "preference"),
        ("I have a golden retriever named Biscuit.", "pet"),
        ("My brother Tom is a pilot.", "family"),
        ("I was diagnosed with type 2 diabetes last year.", "health"),
        ("Last Saturday I ran a charity race for mental health.", "activity"),
        ("We'll use Postgres for billing.", "decision"),
        ("Let's go with Redis for the session cache.", "decision"),
        ("Decision noted: server-side sessions stay, stored in Postgres.", "decision"),   # labelled so
        ("Agreed: releases are cut on Mondays.", "decision"),
        ("Never push directly to main.", "convention"),
        ("Don't touch the legacy billing module, it's frozen until Q3.", "convention"),
        ("The staging database is on port 5433.", "setup"),
        ("The auth service is owned by the platform team.", "setup"),
        ("Ada lives in Lisbon.", "home"),                       # a named person, said by someone else
    ],
)
def test_a_durable_statement_is_a_fact_however_short(said: str, kind: str) -> None:
    assert fact_kind(said, listener="Bob") == kind


@pytest.mark.parametrize(
    "said",
    [
        "Where do you live these days?",          # a question
        "Have you ever been to Japan",            # a question without its mark
        "If I lived in Paris, I'd cycle everywhere.",   # a hypothetical
        "I wish I could play the piano.",         # a wish
        "Maybe I'll learn to surf someday.",
        "Feels like just yesterday I put this dress on.",   # a figure of speech
        "I'm on cloud nine.",
        "You're making a difference, Caroline!",  # about the listener
        "Bob, you moved to Oslo last year, didn't you?",
        "I'm so proud of you.",
        "I 100% agree, Caroline.",                # a reaction
        "I know exactly how that feels.",
        "Thanks so much!",
        "Let's see what happens.",                # the moment's business
        "Agreed. That sounds like a plan!",       # agreement, no decision said
        "I'll be back in five minutes.",
        "Run the auth tests again.",
        "It works on my machine.",                # not the speaker's subject
        "Check out my painting for the art show!",    # a request of the moment
        "Creating a family for those kids is so lovely.",   # a gerund subject: said of no one
        "Bob lives in Oslo.",                     # the listener, named: said about them, not by them
        "I'll definitely take those tips into consideration.",   # what one makes of the advice just given
        "I love these ideas!",
        "As for activities, I'm open to suggestions.",
        "I like the suggested schedule.",
        "That's a great idea, especially since I work remotely.",
        "I'm loving this list!",                  # the list just given, not a job ("l-ist")
        "It's always exciting to meet like-minded people and make new friends.",   # a remark: no one's rule
    ],
)
def test_questions_hypotheticals_figures_reactions_and_talk_about_the_listener_are_not(said: str) -> None:
    assert fact_kind(said, listener="Bob") is None


def test_a_fact_anywhere_in_a_turn_is_found_and_rewritten_to_stand_alone() -> None:
    found = statements("Thanks! By the way, I'm allergic to peanuts.", turn_id="t", speaker="Ada", listener="Bob",
                       said_on=date(2026, 3, 4))
    facts = [s for s in found if fact_kind(s.said, listener="Bob")]
    assert [s.text for s in facts] == ["Ada is allergic to peanuts."]
    (moved,) = statements("Big news: I moved to Porto last month.", turn_id="t", speaker="Ada", listener="Bob",
                          said_on=date(2026, 3, 4))
    assert moved.text == "Ada moved to Porto in February 2026."
    assert fact_about(moved.text, "Ada", "home") == ("ada/home", "porto")


@pytest.mark.parametrize(
    ("text", "subject", "kind", "about"),
    [
        ("Priya and others relocated to Berlin in March 2026.", "Priya", "home", ("priya/home", "berlin")),
        ("Priya is not vegetarian anymore.", "Priya", "diet", ("priya/diet", "not vegetarian")),
        ("Kenji is at Stripe now.", "Kenji", "work", ("kenji/work", "stripe")),
        ("Kenji left Google.", "Kenji", "event", ("kenji/work", "left")),
        ("Jon is a dance teacher now.", "Jon", "work", ("jon/work", "dance teacher")),
        ("Bob is not allergic to peanuts after all.", "Bob", "allergy", ("bob/allergy/peanuts", "no")),
        ("Ada's birthday is on 4 March.", "Ada", "date", ("ada/birthday", "4 march")),
        ("Nate has three turtles now.", "Nate", "possession", ("nate/has/turtle", "three")),
        ("The user and others will use MySQL for billing instead.", "the user", "decision",
         ("the-user/uses/billing", "mysql")),
    ],
)
def test_what_a_fact_sets_is_read_whatever_the_phrasing(text: str, subject: str, kind: str,
                                                        about: tuple[str, str]) -> None:
    assert fact_about(text, subject, kind) == about


def test_corrections_by_value_and_by_restating() -> None:
    assert correction("Actually it's the 5th, not the 4th.") == ("4", "5")
    assert correction("Make the retry count five, not three.") == ("three", "five")
    assert correction("It's not that simple.") is None
    assert revises("From now on deploys go out on Thursdays.") and not revises("Deploys go out on Thursdays.")
    assert restates("The user's deploys go out on Tuesdays.", "From now on deploys go out on Thursdays.", "the user")
    assert restates("The team's deploys go out on Tuesdays.", "From now on deploys go out on Thursdays.", "the team")
    assert not restates("Ada loves hiking in the Alps.", "Ada adopted a dog from the shelter now.", "Ada")


def say(store: MemoryStore, day: str, speaker: str, text: str) -> None:
    session = f"{speaker}:{day}"
    store.add_many([{"content": "Hi!", "role": "Bob", "session": session, "created_at": f"{day}T10:00:00Z"},
                    {"content": text, "role": speaker, "session": session, "created_at": f"{day}T10:00:01Z"}])


def current(store: MemoryStore) -> list[str]:
    return [e.content for e in store.list(kind="fact") if e.superseded_by is None]


def test_plain_statements_become_facts_and_corrections_in_any_phrasing_supersede(engine_store: MemoryStore) -> None:
    store = engine_store
    say(store, "2026-01-05", "Ada", "I live in Lisbon. I'm vegetarian. My birthday is on 4 March.")
    say(store, "2026-01-05", "Kenji", "I work at Google.")
    consolidate(store)
    assert set(current(store)) == {"Ada lives in Lisbon.", "Ada is vegetarian.", "Ada's birthday is on 4 March.",
                                   "Kenji works at Google."}
    say(store, "2026-03-01", "Ada", "Big news: I moved to Porto last month. I'm not vegetarian anymore. "
                                    "Actually my birthday is the 5th, not the 4th.")
    say(store, "2026-03-01", "Kenji", "I left Google; I'm at Stripe now.")
    report = consolidate(store)
    assert report.facts_updated >= 4
    assert set(current(store)) == {"Ada moved to Porto in February 2026.", "Ada is not vegetarian anymore.",
                                   "Ada's birthday is on 5 March.", "Kenji is at Stripe now."}
    # The old value is history: no recall finds it as current, whatever it is asked.
    assert not [h for h in store.recall("where does Ada live in Lisbon", 10, kind="fact") if "Lisbon" in h.entry.content]
    assert store.recall("Ada Porto", 1, kind="fact")[0].entry.content == "Ada moved to Porto in February 2026."
    then = {h.entry.content for h in store.recall("Ada", 10, kind="fact", as_of="2026-02-01")}
    assert {"Ada lives in Lisbon.", "Ada is vegetarian.", "Ada's birthday is on 4 March."} <= then
    assert not then & set(current(store))     # what holds now was not true then


def test_what_a_speaker_said_with_we_is_corrected_later_in_any_phrasing(engine_store: MemoryStore) -> None:
    # A project's "we"/"let's" is the team's fact; a later change of it by the same speaker, said
    # without "we", must still replace it. "We live in Munich" is a home, not a service's setup.
    store = engine_store
    say(store, "2026-01-05", "user", "Let's keep the retry count at three.")
    say(store, "2026-01-06", "user", "Our deploys go out on Tuesdays.")
    say(store, "2026-01-07", "Priya", "We live in Munich.")
    consolidate(store)
    assert set(current(store)) == {"The team decided to keep the retry count at three.",
                                   "The team's deploys go out on Tuesdays.", "Priya and others live in Munich."}
    say(store, "2026-03-15", "user", "Actually, make the retry count five, not three.")
    say(store, "2026-03-16", "user", "From now on deploys go out on Thursdays.")
    say(store, "2026-04-02", "Priya", "We relocated to Berlin last month.")
    consolidate(store)
    assert set(current(store)) == {"The team decided to keep the retry count at five.",
                                   "From now on deploys go out on Thursdays.",
                                   "Priya and others relocated to Berlin in March 2026."}


def test_a_value_that_changes_back_and_forth_keeps_consolidating(engine_store: MemoryStore) -> None:
    store = engine_store
    for n, city in enumerate(["Lisbon", "Porto", "Lisbon", "Porto", "Oslo"], start=1):
        say(store, f"2026-0{n}-05", "Ada", f"I live in {city} now.")
        report = consolidate(store)
        assert report.notes == [] and [c for c in current(store) if "lives" in c] == [f"Ada lives in {city} now."]
    assert len(store.history(next(e.id for e in store.list(kind="fact") if e.superseded_by is None))) == 5


def test_two_things_said_in_one_sentence_are_two_facts_so_a_move_keeps_the_diet(engine_store: MemoryStore) -> None:
    store = engine_store
    say(store, "2026-01-05", "Ada", "Thanks for the recipe! By the way, I'm vegetarian, and I live in Lisbon now.")
    say(store, "2026-03-02", "Ada", "I moved to Porto last month.")
    consolidate(store)
    assert set(current(store)) == {"Ada is vegetarian.", "Ada moved to Porto in February 2026."}


def test_a_statement_made_in_passing_before_a_question_is_a_fact() -> None:
    found = statements("I just got a Golden Retriever, any tips for walking him?", turn_id="t", speaker="the user",
                       listener="assistant", said_on=None)
    assert [(s.text, fact_kind(s.said, listener="assistant")) for s in found] == [
        ("The user just got a Golden Retriever.", "pet"), ("Any tips for walking him?", None)]


@pytest.mark.parametrize(("said", "is_chatter"), [
    ("That charity race sounds great, Mel.", True),      # said to Melanie, by a short form of her name
    ("Man, sorry to hear that, Melanie.", True),
    ("I moved to Porto, Mel.", False),                   # news about the speaker all the same
    ("I went with my friend, Anna.", False),             # someone else's name
])
def test_words_that_end_by_calling_the_listener_by_name_are_said_to_them(said: str, is_chatter: bool) -> None:
    from harness_mem.experience.facts import chatter

    assert chatter(said, "Melanie") is is_chatter


@pytest.mark.parametrize(("said", "left_for_later"), [
    ("Remind me next week to delete the old retry wrapper.", True),
    ("Next week I need to migrate the billing tables.", True),
    ("We still need to write the migration for the cookie names.", True),
    ("I will look at the flaky test tomorrow.", True),
    ("TODO: remove the feature flag after the launch.", True),
    ("I'll review it tomorrow morning.", False),         # what "it" is was said before
    ("We switched to argon2id last month.", False),
    ("I will always use pytest.", False),
])
def test_an_open_thread_leaves_something_named_for_later(said: str, left_for_later: bool) -> None:
    from harness_mem.experience.facts import open_thread

    assert open_thread(said) is left_for_later


def test_a_text_states_a_decision_when_one_of_its_sentences_does() -> None:
    from harness_mem.decisions import states_decision

    assert states_decision("I don't want JWTs in the browser. Let's keep server-side sessions, but move them.")
    assert states_decision("Decision noted: server-side sessions stay, stored in Postgres.")
    assert not states_decision("Morning. We need to plan the auth refactor this week; the tokens are a mess.")
    assert not states_decision("Options: signed JWTs, or keep server-side sessions and add rotation.")
    assert not states_decision("Should we go with Redis? Going with Redis means another server?")
