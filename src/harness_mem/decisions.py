"""What states a decision: "we'll use Postgres for billing", "let's go with Redis", "Decision noted: …".

Read when a transcript is consolidated (a sentence that decides is a fact of kind ``decision``:
:func:`harness_mem.experience.facts.fact_kind`) and when a question asks what was decided (recall
lifts the turns that decide: :data:`harness_mem.fusion.DECISION_PRIOR`), so both read it alike.
"""

from __future__ import annotations

import re

from .passages import sentence_bounds

__all__ = ["opens_with_decision", "states_decision"]

# A sentence that opens by deciding. "Let's meet when I visit", "we'll catch up soon": what friends
# will do together, no decision.
_DECIDES = re.compile(
    r"^(?:(?:we(?:'ll| will| are going to|'re going to| shall)|let(?:'s| us))(?! (?:\w+ )?(?:meet|see|catch up|"
    r"hang out|talk|chat|grab|get together|go out|keep in touch|stay in touch|celebrate|visit|hope|plan|do (?:it|this|"
    r"that) again)\b)|we(?:'ve)? (?:decided|agreed|chose|picked|"
    r"settled on|switched|standardi[sz]ed)|I(?:'ve)? decided|we're (?:going with|switching|migrating|moving|using|"
    r"standardi[sz]ing|dropping|deprecating)|(?:we )?(?:go|going) with|switch(?:ing)? to|decision)\b",
    re.IGNORECASE,
)
# A sentence labelled as a decision: "Decision noted: sessions stay in Postgres.", "Agreed: …".
_LABELLED = re.compile(r"^(?:decision(?: noted| made| taken)?|decided|agreed|resolved|resolution)\s*[:—–]\s*\S",
                       re.IGNORECASE)


def opens_with_decision(sentence: str) -> bool:
    """True when ``sentence`` (as said, in the first person) opens by deciding or is labelled a decision."""
    sentence = sentence.strip()
    return _DECIDES.match(sentence) is not None or _LABELLED.match(sentence) is not None


def states_decision(text: str) -> bool:
    """True when a sentence of ``text`` (a turn, a note) records a decision and asks nothing: "I don't
    want JWTs. Let's keep server-side sessions.", "Decision noted: …"; not "Should we go with Redis?"."""
    return any(opens_with_decision(said) and not said.rstrip().endswith("?")
               for said in (text[start:stop] for start, stop in sentence_bounds(text)))
