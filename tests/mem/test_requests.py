"""What a user asked an assistant for stays in the summary of that stretch of the conversation.

A question is no fact, but "Can you suggest some meditation apps to help me relax before bed?" is
often all a user says of themselves there; a later "any ideas for my evenings?" should find it.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from harness_mem import MemoryStore
from harness_mem.experience import consolidate
from harness_mem.experience.derive import SpokenTurn, derive
from harness_mem.experience.requests import request

DAY = date(2023, 5, 30)


@pytest.mark.parametrize(
    ("question", "reported"),
    [
        ("Can you suggest some meditation apps that I can use to help me relax before bed?",
         "The user asked the assistant to suggest some meditation apps that the user can use to help them relax"
         " before bed."),
        ("Could you please recommend a case for my iPhone 13 Pro?",
         "The user asked the assistant to recommend a case for the user's iPhone 13 Pro."),
        ("Do you have any recipes for making yogurt in a slow cooker?",
         "The user asked for recipes for making yogurt in a slow cooker."),
        ("Any tips for walking my dog in the rain?", "The user asked for tips for walking the user's dog in the rain."),
        ("What are some good companion plants for tomatoes?", "The user asked about companion plants for tomatoes."),
        ("How can I keep my sourdough starter alive?", "The user asked how to keep the user's sourdough starter alive."),
        ("What should I cook for my parents tomorrow?",
         "The user asked what to cook for the user's parents on 31 May 2023."),
    ],
)
def test_a_request_is_reported_in_the_third_person_with_its_dates(question: str, reported: str) -> None:
    found = request(question, turn_id="t", speaker="the user", listener="the assistant", said_on=DAY)
    assert found is not None and found.text == reported


@pytest.mark.parametrize("question", [
    "What do you think?", "Is that right?", "Can you explain that?", "Could you help?", "Why?",
    "I moved to Porto last month.",  # a statement is no request
])
def test_what_asks_nothing_of_the_assistant_is_not_a_request(question: str) -> None:
    assert request(question, turn_id="t", speaker="the user", listener="the assistant", said_on=DAY) is None


def _session(*said: tuple[str, str]) -> list[SpokenTurn]:
    return [SpokenTurn(f"t{n}", role, text, DAY) for n, (role, text) in enumerate(said)]


def test_a_summary_keeps_what_the_user_asked_for_and_no_fact_is_made_of_it() -> None:
    derived = derive(_session(
        ("user", "Can you suggest some meditation apps that I can use to help me relax before bed?"),
        ("assistant", "Here are a few: Headspace has sleep casts, Calm has stories read aloud, and Insight"
                      " Timer is free with a large library of guided sessions for the evening."),
    ))
    [summary] = [s.text for s in derived.segments]
    assert summary.startswith(
        "The user and the assistant on 30 May 2023: The user asked the assistant to suggest some meditation apps"
        " that the user can use to help them relax before bed.")
    assert "?" not in summary
    assert derived.facts == []


def test_questions_between_people_are_still_left_out() -> None:
    derived = derive(_session(
        ("Caroline", "Can you recommend a good book about adoption for me?"),
        ("Melanie", "Sure, I loved reading The Primal Wound last summer with my book club."),
    ))
    assert all("asked" not in s.text for s in derived.segments)


def test_recall_of_derived_entries_finds_the_session_a_request_was_made_in(tmp_path: Path) -> None:
    start = datetime(2023, 5, 30, 20, 0, tzinfo=UTC)
    sessions = {
        "evening": [("user", "Can you suggest some meditation apps that I can use to help me relax before bed?"),
                    ("assistant", "Here are a few: Headspace has sleep casts, Calm has stories read aloud, and"
                                  " Insight Timer is free with a large library of guided sessions.")],
        "kitchen": [("user", "Do you have any recipes for making yogurt in a slow cooker?"),
                    ("assistant", "Heat half a gallon of milk on low for two and a half hours, let it cool, stir in"
                                  " a cup of plain yogurt with live cultures and wrap the pot in towels overnight.")],
    }
    with MemoryStore(tmp_path / "m.db", embedder=None, redactor=None) as store:
        store.add_many([{"id": f"{session}-{n}", "content": text, "role": role, "session": session,
                         "created_at": start + timedelta(minutes=n)}
                        for session, turns in sessions.items() for n, (role, text) in enumerate(turns)])
        consolidate(store)
        for question, session, wanted in (("what helps me relax before bed?", "evening", "meditation apps"),
                                          ("any slow cooker ideas?", "kitchen", "recipes for making yogurt")):
            hits = store.recall(question, 3, derived=True)
            assert hits and hits[0].entry.session == session and wanted in hits[0].entry.content, \
                [h.entry.content for h in hits]
