"""What a person asked an assistant for, as a note of the conversation says it.

A question is never a fact, and a summary holds no questions. But in a conversation with an
assistant, what the user asks for is often all they said about themselves in that stretch: "Can
you suggest some meditation apps that I can use to help me relax before bed?" tells a later reader
that they wind down with meditation in the evening, and "Do you have any tips for my iPhone 13
Pro?" which phone they own. Dropping the question drops that. :func:`request` turns such a question
into reported speech ("The user asked the assistant to suggest some meditation apps that the user
can use to help them relax before bed."), which a segment's summary keeps beside what was stated.

Only requests are reported — asking the assistant to do something, for something, or how to do
something — not every question: "What do you think?" or "Is that right?" says nothing of the asker.
Between people (no assistant) questions stay out, as before: "How's your dog?" is small talk.
"""

from __future__ import annotations

import re
from datetime import date

from .statements import Statement, rewrite
from .timephrases import resolve_dates

__all__ = ["request"]

# "Can you suggest …", "Could you please help me …": the assistant is asked to do something.
_DO = re.compile(r"^(?:please )?(?:can|could|would|will) you (?:please |maybe |also |possibly )?(?P<ask>[a-z]+\b.+)$",
                 re.IGNORECASE)
# "Do you have any recipes for …", "Do you know of a good …", "Any tips for walking him": asked for something.
_FOR = re.compile(r"^(?:(?:do|would) you (?:have|know(?: of)?|recommend)|are there|is there|any|got any) "
                  r"(?:any |some |a few |good |other |more )*(?P<ask>\w.+)$", re.IGNORECASE)
# "What are some good companion plants for tomatoes?", "Which brands are best for …": asked about something.
_ABOUT = re.compile(r"^(?:what|which) (?:are|is|would be) (?:some |the |a |any )?(?:good |best |other |popular )*"
                    r"(?P<ask>\w.+)$", re.IGNORECASE)
# "How can I assess …", "How do I keep …", "What should I serve …": asked how to do something.
_HOW = re.compile(r"^(?P<wh>how|what|where|when) (?:can|could|should|do) I (?P<ask>[a-z]+\b.+)$", re.IGNORECASE)
# What a request asks of the assistant alone, with nothing of the asker in it.
_EMPTY = re.compile(r"^(?:be|you|it|that|this|explain (?:that|this|it)|elaborate|clarify|repeat|help)\W*$", re.IGNORECASE)
#: Each pattern, in the order tried, with how its request is reported.
_REPORTED = ((_DO, "asked {listener} to"), (_HOW, "asked"), (_FOR, "asked for"), (_ABOUT, "asked about"))


def request(said: str, *, turn_id: str, speaker: str, listener: str, said_on: date | None) -> Statement | None:
    """``said`` (a question, as :func:`.statements.normalised` gives it) as reported speech when it
    asks ``listener`` for something, else None."""
    if not said.rstrip().endswith("?"):
        return None
    question = said.strip().rstrip("?").strip()
    for pattern, verb in _REPORTED:
        found = pattern.match(question)
        if found and not _EMPTY.match(found["ask"]):
            wh = found.groupdict().get("wh")
            how = "" if wh is None else f"{wh.lower()} to "
            text = f"{speaker} {verb.format(listener=listener)} {how}{_reported(found['ask'], speaker, listener)}"
            text = text[:1].upper() + text[1:] + "."
            if said_on is not None:
                text = resolve_dates(text, said_on)
            return Statement(text, turn_id, speaker, 0.0, said, listener)
    return None


def _reported(words: str, speaker: str, listener: str) -> str:
    """A fragment of the question with "I", "my", "you" as names, lower-cased and unpunctuated."""
    text = rewrite(words, speaker, listener).rstrip(".")
    return text[:1].lower() + text[1:] if not text[:2].isupper() else text
