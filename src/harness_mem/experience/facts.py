"""Which statements are facts, what each one is about, and which ones correct an earlier one.

A fact is something a reader would still want to know next month: where someone lives or works,
what they eat or cannot, their health, family and pets, dates that come back (birthdays,
anniversaries), plans, what they like and own, and in a project its decisions, conventions and
setup ("we'll use Postgres for billing", "never push to main", "the CI runs on GitHub Actions").
Length says nothing about it — "I'm vegetarian." is a fact, "That sounds like so much fun." is not —
so :func:`fact_kind` reads the sentence as said and recognises the *kind* of durable statement it
makes, with its subject: the speaker (I, my, we, our, or no subject in chat), a named person
("Ada lives in Lisbon."), or the project ("Our deploys go out on Tuesdays.", an instruction that
holds from now on). What is never a fact of the speaker is turned down first, however durable its
words: questions, hypotheticals and wishes ("if I lived in Paris…"), figures of speech ("feels like
yesterday"), what is said to or about the listener ("you're making a difference"), and reactions
("I 100% agree"). A sentence of no recognised kind can still be an event worth keeping, if its
score (:func:`.statements.worth`) says it carries enough.

:func:`fact_about` then says what a fact sets, for the kinds where a later statement replaces an
earlier one (where someone lives, works, what they eat, a partner's name, a birthday, whether they
like something, how many of something they have, what a project uses for what): ``("ada/home",
"porto")``. :func:`correction` reads a correction by its values alone ("actually it's the 5th, not
the 4th"), and :func:`revises` says whether a sentence presents itself as a change ("…now",
"…anymore", "from now on", "instead"): consolidation looks for the fact either one replaces.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..decisions import opens_with_decision
from .statements import content_words, normalised, subjectless, worth

__all__ = ["FACT_SCORE", "chatter", "correction", "fact_about", "fact_kind", "frame_words", "open_thread", "restates",
           "revises"]

#: A statement of no recognised kind becomes a fact from this score up (an event with content).
FACT_SCORE = 2.6

_YOU = re.compile(r"\b(?:you|your|yours|you're|you've|you'll|you'd|yourself|yourselves|ya|u)\b", re.IGNORECASE)
# "You" that asks the listener to do something durable is the speaker's preference, not about them.
_YOU_AS_PREFERENCE = re.compile(r"\b(?:rather|prefer(?: that)?|want|like) you\b|^please\b", re.IGNORECASE)
_QUESTION_START = re.compile(
    r"^(?:do|does|did|have|has|had|are|is|was|were|can|could|would|will|should|shall|may|might|"
    r"what|where|when|why|how|who|whom|whose|which|any|anything)\b(?! I\b(?! \w+ you))",
    re.IGNORECASE,
)
_HYPOTHETICAL = re.compile(
    r"^(?:if|imagine|suppose|supposing|what if|assuming|in case|even if|unless|say)\b|\bI wish\b|\bwish I\b|"
    r"\b(?:maybe|perhaps|possibly|probably|someday|some day|one day|might|could|may be)\b|"
    r"\bI(?:'d| would) (?!rather\b|never\b|prefer\b)\w+|\bwould have\b|\bif\b[^.]*\bwould\b|\bwhether\b",
    re.IGNORECASE,
)
_FIGURATIVE = re.compile(
    r"\b(?:feels?|felt|seems?|seemed|looks?|looked|sounds?|sounded) like\b|\bit'?s like\b|\bas if\b|\bas though\b|"
    r"\bdream come true\b|\bcloud nine\b|\bover the moon\b|\bdying to\b|\bheart (?:is|was) \w+ing\b|\btime fl(?:ies|ew)\b|"
    r"\btime stood\b|\beat a horse\b|\bblown away\b|\bin heaven\b|\bon fire\b|\bworld is\b",
    re.IGNORECASE,
)
# Reactions and the moment's business: never a fact, whatever else the sentence holds.
_NEVER = re.compile(
    r"^I(?:'m| am|'ve| have|'ll| will)? (?:\w+ly |so |just |too |kinda |all |\d+% )*(?:agree|disagree|understand|see|know|"
    r"guess|bet|hear|feel|couldn't agree|can imagine|can't imagine|can't wait|cannot wait|need help|have a question|"
    r"got a question|'m not sure|not sure|don't know|do not know|don't understand|confused|be back|'ll be back|"
    r"got to (?:run|go)|gotta (?:run|go)|have to (?:run|go)|must (?:run|go)|looking at|checking|trying|testing|"
    r"wonder|remember when|was just thinking|all ears|rooting|touched|sorry|glad|happy for|proud of|thankful|"
    r"grateful|appreciate|thank)\b",
    re.IGNORECASE,
)
# What one says to the other in a chat, as a request of the moment: "Check out my painting!"
_REQUEST = re.compile(
    r"^(?:check (?:out|it out)|look at|take a look|come (?:over|see|by|join)|tell me|send me|enjoy|have (?:fun|a (?:great|good|nice))|"
    r"stay (?:safe|strong|tuned)|hang in|say hi|give it a|try it|don't forget|remember to|let me know|hit me up|"
    r"drop me|see you|keep (?:it up|up|going|me posted)|hope)\b",
    re.IGNORECASE,
)
# A task handed to the listener for now ("Write that down somewhere", "Remind me next week …", "Run
# the tests again"): the conversation's business. An instruction that holds from now on ("Run the
# linter before every commit", "Never push to main") is a convention, not a task.
_TASK = re.compile(
    r"^(?:please\s+|now\s+|ok(?:ay)?,?\s+|and\s+|also,?\s+|then\s+)?(?:write|note|run|rerun|re-run|commit|"
    r"push|open|close|fix|add|create|make|update|change|rename|delete|remove|pin|draft|send|show|give|find|explain|"
    r"summari[sz]e|build|deploy|merge|revert|install|help|go ahead|continue|proceed|repeat|undo|retry|restart|"
    r"start|stop|print|list|write up|look into|dig into|ping|email|call|book|schedule|set up)\b",
    re.IGNORECASE,
)
_FROM_NOW_ON = re.compile(r"\b(?:always|never|every|each time|whenever|from now on|by default|going forward|"
                          r"before (?:any|each|every)|after (?:any|each|every))\b", re.IGNORECASE)
_LETS_FOR_NOW = re.compile(
    r"^let(?:'s| us) (?:see|try|look|check|go ahead|do (?:it|this|that)|talk|get (?:started|going|back)|start|wait|"
    r"figure|think|find|hope|move on|continue|proceed|debug|investigate|run|test|dig|focus|review|recap|chat|catch up|"
    r"pause|stop|break|wrap|call it|pick (?:this|it) up|resume|leave (?:it|this))\b|"
    r"^let me\b|\bwe'll (?:see|talk|figure|find out|get there|manage|be fine|catch up|try|chat)\b",
    re.IGNORECASE,
)

# What someone makes of the advice they were just given ("I'll definitely try those tips", "I love
# these ideas!", "I'm open to other suggestions", "That's a great idea"): the conversation's business.
# Kept as facts, these say nothing of the speaker and share every word of the next "any tips?" or
# "can you suggest …": they outrank what was said of substance. "I like the idea of a hat" is a
# preference (the idea *of* something), and "I'm looking for some ideas" a request.
_ABOUT_THE_ADVICE = re.compile(
    r"\b(?:those|these|your|the|that|this|other|more|any|such|all the) (?:\w+ )?(?:tips|suggestions?|ideas|"
    r"recommendations?|advice|pointers|options|steps|resources|list)\b(?! (?:of|for|on|about)\b)|"
    r"\bopen to (?:\w+ )?(?:suggestions|ideas|recommendations|advice)\b|"
    r"\b(?:the|your|those|these|that) (?:suggested|recommended|proposed) \w+|"
    r"^(?:that|this|it)(?:'s| is| was| sounds| seems) (?:\w+ )?(?:a )?(?:\w+ )?(?:idea|suggestion|tip|plan|option)\b",
    re.IGNORECASE,
)

# The kinds of durable statement, each a pattern over the sentence as said; the first that matches
# names the kind. The personal ones need the speaker (or a named person) as their subject.
_PERSONAL: list[tuple[str, str]] = [
    ("identity", r"\bmy name is\b|\bI'?m called\b|\bcall me\b|\bmy pronouns\b|\b\d{1,3} years old\b|"
                 r"\b(?:morning|night|people|dog|cat|beach|city|outdoors|coffee|tea) person\b|\bintrovert|\bextrovert|"
                 r"\bnight owl\b|\bearly (?:bird|riser)\b|\bleft-handed\b|\bright-handed\b|"
                 r"\b(?:scared|afraid|terrified|frightened) of\b|\bphobia\b|\b(?:religious|christian|muslim|jewish|"
                 r"hindu|buddhist|atheist)\b"),
    ("home", r"\b(?:live|lives|living|lived|moved|move|moving|relocat\w+|based|settled|stay(?:ing)?) "
             r"(?:\w+ )?(?:in|to|near|at|with|back to)\b|\b(?:grew up|am from|'m from|originally from|born (?:in|on))\b"),
    ("diet", r"\b(?:vegetarian|vegan|pescatarian|keto|paleo|gluten[- ]free|kosher|halal|lactose|dairy[- ]free|eat meat|"
             r"eat fish|(?:don't|do not|never) (?:eat|drink)|sober|teetotal|alcohol|caffeine)\b"),
    ("allergy", r"\ballerg(?:y|ies|ic)\b|\bintoleran(?:t|ce)\b"),
    ("health", r"\b(?:diagnos\w+|diabet\w+|asthma|pregnan\w+|surgery|injur\w+|broke my|sprain\w+|disease|disorder|"
               r"therapy|therapist|medication|colou?r ?blind|quit smoking|cancer|migraines?|doctor|blood pressure|"
               r"anxiety|depression|adhd|autis\w+|dyslexi\w+|wheelchair|hearing|vision|glasses)\b"),
    ("work", r"\b(?:work|works|working|worked)\b(?! out)|\b(?:job|career|employer|boss|manager|colleagues?|coworkers?|"
             r"office|shift|promot\w+|hired|fired|laid off|retir\w+|intern\w*|salary|startup|company|business|store|shop|"
             r"bakery|studio|clinic|practice|client|freelanc\w*|self-employed)\b|"
             r"\b(?:I'?m|I am|be|been|become|became|as) (?:an? |the )?(?:[\w-]+ ){0,2}(?:[\w-]{3,}(?:er|or|ist|ian|ant|ent)|nurse|chef|"
             r"pilot|doctor|student|teacher|lawyer|engineer|designer|developer|scientist|writer|artist|manager|"
             r"counsell?or|coach|banker|analyst)\b(?! (?:of|about))|\bI (?:teach|own|run|manage|founded|co-?founded)\b|"
             r"\bI'?m at [A-Z]"),
    ("family", r"\b(?:wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|spouse|son|sons|daughters?|kids?|children|"
               r"child|baby|babies|mom|mum|dad|mother|father|parents|sister|sisters|brother|brothers|siblings?|"
               r"grand(?:mother|father|ma|pa|parents|kids?|children|son|daughter)|aunt|uncle|cousins?|niece|nephew|"
               r"in-laws?|married|engaged|divorc\w+|wedding|anniversary|single|dating)\b"),
    ("pet", r"\b(?:dogs?|cats?|pupp(?:y|ies)|kittens?|pets?|turtles?|snakes?|hamsters?|parrots?|horses?|rabbits?|"
            r"retrievers?|fish|guinea pigs?|lizards?|birds?)\b"),
    ("date", r"\bbirthday\b|\bborn\b|\bname day\b"),
    ("preference", r"\b(?:prefer\w*|favou?rite|(?:don't|do not|never) want|love|loves|loved|like|likes|enjoy\w*|hate|hates|dislike\w*|adore|"
                   r"can't stand|cannot stand|rather|fan of|into|passion\w*|obsessed)\b"),
    ("language", r"\b(?:speak|speaks|fluent|native language|mother tongue)\b"),
    ("education", r"\b(?:study|studies|studying|studied|degree|master'?s|bachelor'?s|phd|graduat\w+|school|college|"
                  r"university|course|scholarship|exams?|learning|learned|learnt|major(?:ing)?|thesis)\b"),
    ("possession", r"\b(?:own|owns|bought|buy|buying|drive|drives|rent|rents|signed a lease|have (?:a|an|one|two|three|"
                   r"four|five|\d+)|has (?:a|an|one|two|three|four|five|\d+)|got (?:a|an) new)\b"),
    ("habit", r"\b(?:usually|always|never|every (?:day|week|morning|night|month|year|weekend)|each (?:day|week)|daily|"
              r"weekly|on (?:mondays|tuesdays|wednesdays|thursdays|fridays|saturdays|sundays|weekends)|gave (?:\w+ )?up|"
              r"took (?:\w+ )?up|started|stopped|quit)\b"),
    ("activity", r"\b(?:play\w*|paint\w*|hik\w+|run|running|marathons?|races?|yoga|train|training|volunteer\w*|"
                 r"read\w*|writ\w+|cook\w*|bak\w+|garden\w*|knit\w*|climb\w*|swim\w*|cycl\w+|danc\w+|sing\w*|"
                 r"tournament|orchestra|band|club|group|team|gym|work out|workout|camping|fishing|photograph\w*|"
                 r"pottery|surf\w*|ski\w*|chess|guitar|piano|violin|cello|drums)\b"),
    ("plan", r"\b(?:going to|gonna|planning|plan to|plans to|about to|getting|moving|flying|travel\w*|trip|visit\w*|"
             r"vacation|holiday|leaving for|heading to|next (?:week|month|year|spring|summer|fall|autumn|winter))\b"),
    ("event", r"\b(?:went|won|lost|joined|began|finished|signed|adopted|opened|launched|sold|visited|attended|"
              r"completed|celebrated|turned \d+|had (?:a|my|our)|got (?:a|my|our|engaged|married|promoted|into))\b"),
    ("tool", r"\b(?:I|we) (?:use|run on|am on|'m on|deploy|host|build|test)\b|\bI'?m (?:on|using|running) [A-Z0-9]|"
             r"\bmy (?:editor|shell|os|laptop|machine|setup|stack|ide|terminal|keyboard)\b"),
]
_PERSONAL_COMPILED = [(kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in _PERSONAL]
# A named person's home or work, said by someone else: "Ada lives in Lisbon."
_NAMED = re.compile(r"^(?:[A-Z][a-z]+)(?: [A-Z][a-z]+)? (?:now )?(?:lives|moved|works|is working|is based|grew up)\b")
_NAMED_NOT = frozenset("It This That There Here He She They Everyone Someone Nobody Everybody What".split())

# A convention of a project: "from now on …", "never push to main", "use pytest, not unittest",
# "keep secrets in Vault" (a decision is read by harness_mem.decisions).
_CONVENTION = re.compile(
    r"\b(?:from now on|going forward|henceforth|by default|as a rule|every time|whenever|always|never|"
    r"don't ever|do not ever|make sure (?:to|that)|must always|must never)\b|"
    r"^(?:please )?(?:use|prefer|avoid|rate[- ]limit|limit|cap|default to|pin|require|name|tag|store|put|keep)\b"
    r"(?=.*\b(?:for|in|at|to|under|below|above|over|instead|not|per|with|as|on)\b)",
    re.IGNORECASE,
)
# A statement about the project's setup: "The staging database is on port 5433.", "The CI runs on
# GitHub Actions.", "Tests live under tests/unit.", "The auth service is owned by the platform team."
# Its subject is a thing, not a pronoun, and it names something technical or says who owns what.
# A sentence whose subject is no one ("It's always exciting to …", "There's never enough time"): a
# remark, not a rule anyone keeps.
_IMPERSONAL = re.compile(r"^(?:it|that|this|there|life|everything|nothing)(?:'s| is| was| can be| will be)\b",
                         re.IGNORECASE)
_SETUP = re.compile(
    r"^(?!(?:it|this|that|these|those|there|here|he|she|they|what|which|who|everyone|everything|nothing|life|"
    r"time|i|my|me|you|your|his|her|their)\b)(?:(?:the|our|all|every|each|max|min|default) )?"
    r"[\w./-]+(?: [\w./-]+){0,4}? (?:is|are|runs?|uses?|lives?|"
    r"talks?|goes|go|sits?|listens?|points?|needs?|depends?|deploys?|ships?|builds?|reads?|writes?|calls?|"
    r"must|should|has to|have to|needs to|need to)\b",
    re.IGNORECASE,
)
_TECHNICAL = re.compile(r"\d|(?<!^)\b\w*[A-Z]|\w[/._]\w|\b(?:is|are) (?:called|named)\b|\bmust\b|\b(?:should|has to|have to|"
                        r"needs? to) (?:always |never )?(?:be|stay|run|use)\b|\buses?\b")
# "We live in Munich" is where people live, not where a service does ("The config lives in /etc").
_WE_LIVE = re.compile(r"^(?:we|we all|we both|we've|we have) (?:still |now )?(?:live|lived|been living)\b", re.IGNORECASE)
_SETUP_OWNED = re.compile(r"\b(?:owned|maintained|managed|hosted|deployed|stored|configured|kept|served) (?:by|on|in|at)\b")
# "Don't touch the legacy billing module", "Please don't add dependencies without asking."
_PROHIBITION = re.compile(r"^(?:please )?(?:don't|do not|never) (?!worry|mind|be\b|panic|forget\b|hesitate)\w+ \w+",
                          re.IGNORECASE)
# The speaker is the subject: the sentence opens with them, perhaps after a phrase of time or place
# ("Last Saturday I ran a race"), not with another subject ("It works on my machine").
_SPEAKER_SUBJECT = re.compile(
    r"^(?:(?!(?:it|that|this|these|those|there|he|she|they|you|what|which|who|night|nothing|everything)\b)"
    r"[\w',-]+ ){0,5}?(?:I|I'm|I've|I'd|I'll|my|me and|we|we're|we've|we'll|we'd|our|us)\b",
    re.IGNORECASE,
)


# Kinds a word or two can state ("I'm vegan.", "I'm left-handed."); the others need something they
# are about: "I always forget." is no habit.
_SHORT_KINDS = frozenset({"identity", "home", "work", "diet", "allergy", "health", "family", "pet", "date"})
_HOW_OFTEN = frozenset("always never usually often sometimes rarely really just also still".split())


def chatter(s: str, listener: str | None) -> bool:
    """True for a question, a hypothetical or wish, a figure of speech, a reaction (to the advice
    just given too), or what is said to or about the listener: part of a conversation, never what a
    note of it keeps."""
    s = normalised(s)
    if s.rstrip().endswith("?") or _QUESTION_START.match(s):
        return True
    if _HYPOTHETICAL.search(s) or _FIGURATIVE.search(s):
        return True
    if _YOU.search(s) and not _YOU_AS_PREFERENCE.search(s):
        return True
    if listener and (_opens_with(s, listener) or _closes_with_name(s, listener)):
        return True
    if _TASK.match(s) and not _FROM_NOW_ON.search(s):
        return True
    return bool(_NEVER.match(s) or _LETS_FOR_NOW.search(s) or _REQUEST.match(s) or _ABOUT_THE_ADVICE.search(s))


# Something left for later: a reminder, a to-do, a next step, what still has to happen, what someone
# will do at a later time ("Remind me next week to …", "We still need to write the migration", "I'll
# look at the flaky test tomorrow").
_LATER = (r"(?:later|tomorrow|tonight|soon|next (?:week|month|sprint|time|step|release)|this (?:week|afternoon|evening)|"
          r"on (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|after (?:the|this|that) \w+|"
          r"before (?:the|we|I) \w+|by (?:monday|tuesday|wednesday|thursday|friday|the end of))")
_OPEN_THREAD = re.compile(
    r"^(?:remind (?:me|us)|todo\b|to do:|next steps?:|follow[- ]up:)|^" + _LATER + r",? (?:I|we)(?:'ll| will| need| have| must)\b|"
    r"\b(?:still (?:need|have|has|needs) to|"
    r"(?:need|needs|have|has) to \w+ .*\b" + _LATER + r"|(?:will|'ll|going to|plan(?:s|ning)? to) \w+ .*\b"
    + _LATER + r")",
    re.IGNORECASE,
)


# "I'll review it tomorrow": what "it" is was said before; alone, the thread names nothing.
_UNNAMED_OBJECT = re.compile(r"\b(?:will|'ll|to) \w+ (?:it|that|this|them|those|these)\b", re.IGNORECASE)


def open_thread(sentence: str) -> bool:
    """True when ``sentence`` (as said) leaves something for later: a reminder, a to-do, a next
    step, what still has to be done, what someone will do at a later time — and names it."""
    said = normalised(sentence)
    if _UNNAMED_OBJECT.search(said):
        return False
    return bool(_OPEN_THREAD.search(sentence.strip()) or _OPEN_THREAD.search(said))


_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'll|I'd|my|we|we're|we've|our)\b")
_VOCATIVE_END = re.compile(r",\s+([A-Z][a-z]{2,})\s*[.!…]*\s*$")


def _closes_with_name(s: str, name: str) -> bool:
    """True when ``s`` ends by calling the listener by name, or by a short form of it ("That charity
    race sounds great, Mel."): words said to them, not a note about anyone."""
    found = _VOCATIVE_END.search(s)
    return (found is not None and name.lower().startswith(found.group(1).lower())
            and not _FIRST_PERSON.search(s))  # "I moved to Porto, Mel." is news all the same


def _opens_with(s: str, name: str) -> bool:
    """True when ``s`` opens with the word(s) ``name`` (a string test: no pattern per name)."""
    head = s[:len(name)]
    return head.lower() == name.lower() and not s[len(name):len(name) + 1].isalnum()


def fact_kind(sentence: str, *, listener: str | None = None) -> str | None:
    """The kind of durable statement ``sentence`` (as said, in the first person) makes — ``home``,
    ``work``, ``diet``, ``decision``, ``convention``, ``setup``, ``event`` … — or None when it is not
    a fact of the speaker's (see the module docstring). ``listener`` is who "you" is, by name."""
    s = normalised(sentence)
    if len(content_words(s)) < 1 or chatter(s, listener):
        return None
    if opens_with_decision(s) or opens_with_decision(sentence):  # the label is dropped as a heading
        return "decision"
    if _TASK.match(s):  # not chatter, so it holds from now on: "Run the linter before every commit."
        return "convention"
    convention = _CONVENTION.search(s)
    # "we always squash merge", not "I always forget" nor "It's always nice to meet new people"
    if convention and len(content_words(s[convention.end():])) >= 2 and not _IMPERSONAL.match(s):
        return "convention"
    if _PROHIBITION.match(s):
        return "convention"
    named = _NAMED.match(s)
    if named and s.split(" ", 1)[0] not in _NAMED_NOT:
        return "home" if re.search(r"\b(?:lives|moved|based|grew up)\b", named.group(0)) else "work"
    if _SETUP.match(s) and not re.match(r"I\b", s) and not _WE_LIVE.match(s) \
            and (_TECHNICAL.search(s) or _SETUP_OWNED.search(s)):
        return "setup"
    if _SPEAKER_SUBJECT.match(s) or subjectless(s):
        for kind, pattern in _PERSONAL_COMPILED:
            if pattern.search(s) and (kind in _SHORT_KINDS or len(_said_of(s)) >= 2):
                return kind
    return "event" if worth(s) >= FACT_SCORE else None


def _said_of(s: str) -> list[str]:
    return [w for w in content_words(s) if w not in _HOW_OFTEN]


# Words that present a statement as a change. Not "now" or "again" alone: chat says them all the
# time ("I'm painting a lot now"), and each revision costs a search of the speaker's facts. The
# common changes (home, work, diet, likes …) are read by :func:`fact_about` whatever their words.
_REVISES = re.compile(
    r"\b(?:anymore|any more|no longer|instead|from now on|going forward|henceforth|change of plans?|"
    r"changed (?:to|it to)|switched (?:to|over to)|not \w+ but)\b",
    re.IGNORECASE,
)


def revises(sentence: str) -> bool:
    """True when a sentence presents what it says as a change ("from now on …", "… instead")."""
    return _REVISES.search(sentence) is not None


def frame_words(text: str, speaker: str) -> str:
    """What a fact is about, without its speaker and the words that mark a change: the words to
    look its earlier version up by."""
    return " ".join(_frame(text, speaker))


# "It's the 5th, not the 4th", "My birthday is the 5th, not the 4th", "Make the retry count five, not
# three": a value said again with the wrong one it replaces (one word each; "I like cats, not dogs"
# has no such head and is a statement).
_CORRECTION = re.compile(
    r"^(?:(?:it|that|my [\w ]+?|our [\w ]+?|the [\w ]+?)(?:'s| is| was| are)|make (?:it|that|them|the [\w ]+?)|it should be|"
    r"I meant)\b.*?(?P<right>[\w.'-]+),?\s+not\s+(?:the |a |an )?(?P<wrong>[\w.'-]+)\W*$",
    re.IGNORECASE,
)
_ORDINAL = re.compile(r"^(?:the )?(\d{1,2})(?:st|nd|rd|th)$", re.IGNORECASE)


def correction(sentence: str) -> tuple[str, str] | None:
    """``("4", "5")`` for "Actually it's the 5th, not the 4th": the value said wrong before and the
    right one, for the speaker's current fact holding the first; None when the sentence is not such
    a correction."""
    found = _CORRECTION.match(normalised(sentence))
    if found is None:
        return None
    wrong, right = (_value(found.group(g)) for g in ("wrong", "right"))
    return (wrong, right) if wrong and right and wrong.lower() != right.lower() else None


def _value(text: str) -> str:
    text = text.strip(" .!,")
    ordinal = _ORDINAL.match(text)
    return ordinal.group(1) if ordinal else re.sub(r"^(?:the|a|an) ", "", text, flags=re.IGNORECASE)


# ---- what a fact sets --------------------------------------------------------------------------

_VALUE = r"(?P<value>[A-Z][\w'’&-]*(?:[ -](?:[A-Z][\w'’&-]*|de|da|do|of|on|upon|am|im))*)"
_WHO = r"{who}(?: and others)?"
_NUMBER = r"(?P<value>a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d{1,3})"
_DIETS = r"vegetarian|vegan|pescatarian|keto|paleo|flexitarian"
# What a fact sets about its subject, a later fact setting the same thing to something else replaces
# it: (attribute, pattern over the rewritten fact). ``value`` is what it is set to; ``thing``, when
# the pattern has one, is part of the attribute ("allergy/peanuts").
_ATTRIBUTES: list[tuple[str, str]] = [
    ("home", _WHO + r" (?:now |currently )?(?:lives|live|is living|are living|has moved|have moved|moved|"
                    r"is moving|are moving|relocated|has relocated|have relocated|is based|are based|is staying|settled)(?: back)? (?:in|to) " + _VALUE),
    ("work", _WHO + r" (?:now |currently |just )?(?:works|is working|has worked|started working|got a job|has a new job|"
                    r"started a new job|is employed|is now|is) (?:at|for|with) " + _VALUE),
    ("work", _WHO + r" (?:now |currently |just )?(?:works|is working) as (?:an? |the )?(?P<value>[\w -]+?)"
                    r"(?: now| at .*| for .*| in .*)?[.!]?$"),
    ("work", _WHO + r" (?:just )?(?P<value>left|quit|lost) (?:their |the )?(?:job|position|company|[A-Z][\w&.-]*)"),
    ("work", _WHO + r" (?:is |has )?(?P<value>retired|unemployed|between jobs)\b"),
    ("diet", _WHO + r" (?:is |has become |became )(?P<value>(?:not |no longer )?(?:" + _DIETS + r"))\b"),
    ("diet", _WHO + r" (?:now |again )?(?P<value>eats meat|eats fish)\b"),
    ("partner", r"{who}'s (?:partner|husband|wife|boyfriend|girlfriend|fianc[ée]e?|spouse)(?:'s name)?"
                r" (?:is|is named|is called) " + _VALUE),
    ("birthday", r"{who}'s birthday is (?:on )?(?P<value>[\w ]+?)[.!]?$"),
    ("allergy/{thing}", _WHO + r" (?:is )?(?P<value>not |no longer )?(?:allergic to|intolerant to) "
                               r"(?P<thing>[\w -]+?)(?: after all| anymore| now)?[.!]?$"),
    ("favourite/{thing}", r"{who}'s (?:new )?favou?rite (?P<thing>[\w -]+?) is (?:now )?(?P<value>.+?)(?: now)?[.!]?$"),
    ("has/{thing}", _WHO + r" (?:now )?(?:has|owns) " + _NUMBER + r" (?P<thing>[a-z]+?)s?(?: now)?[.!]?$"),
    ("uses/{thing}", _WHO + r" (?:will|are going to|is going to|agreed to|decided to)? ?(?:use|go with|switch to) "
                            r"(?P<value>[\w.+#-]+(?: [\w.+#-]+)?) (?:for|as) (?:the )?(?P<thing>[\w -]+?)(?: instead| now| from now on)?[.!]?$"),
]
_OCCUPATION = _WHO + r" is (?:now |currently )?(?:an? |the )(?P<value>[\w -]+?)(?: now)?(?: (?:at|for|in|with) .*)?[.!]?$"
_LIKES = (
    r"^{who} (?:really |truly |absolutely |just |also |still |totally )?"
    r"(?P<negated>no longer |doesn't |does not |don't |stopped )?(?:really )?"
    r"(?P<verb>likes?|loves?|enjoys?|prefers?|hates?|dislikes?|liking|loving|enjoying) (?P<thing>[\w' -]{3,60}?)[.!]?$"
)
_OBJECT_ENDS = re.compile(
    r"\b(?:in|on|at|with|since|because|when|while|for|and|but|so|as|from|during|after|before|anymore|now|over|than)\b"
)
_HEDGES = frozenset("anymore now lot much too really either more so these days at all".split())


@dataclass(frozen=True)
class _Patterns:
    attributes: list[tuple[str, re.Pattern[str]]]
    occupation: list[tuple[str, re.Pattern[str]]]
    likes: re.Pattern[str]


@functools.cache
def _compiled(words: int) -> _Patterns:
    """The patterns above for a subject of ``words`` words, compiled once: the subject is any such
    name (``who``), checked against the fact's speaker after a match, so a conversation with
    thousands of speakers compiles nothing more."""
    who = r"(?<![\w'’])(?P<who>[A-Za-z][\w'’-]*" + r"(?: [A-Za-z][\w'’-]*)" * (words - 1) + ")"

    def compiled(pattern: str) -> re.Pattern[str]:
        return re.compile(pattern.replace("{who}", who))

    return _Patterns([(attribute, compiled(p)) for attribute, p in _ATTRIBUTES], [("work", compiled(_OCCUPATION))],
                     compiled(_LIKES))


def _key(words: str) -> str:
    return "-".join(content_words(words)) or "-".join(words.lower().split())


def fact_about(text: str, subject: str, kind: str | None = None) -> tuple[str, str] | None:
    """What a fact sets and to what: ``("caroline/home", "porto")``, ``("caroline/likes/hiking",
    "no")``; None when it is not one of the changes recognised without a model (then it is only
    ever added, never merged, unless it corrects by its values: see :func:`correction`). ``kind``
    is the statement's (:func:`fact_kind`): a ``work`` statement "Jon is a dance teacher now." sets
    what Jon does."""
    person = "-".join(subject.lower().split())
    patterns = _compiled(len(subject.split()))
    for attribute, pattern in patterns.attributes + (patterns.occupation if kind == "work" else []):
        found = next((m for m in pattern.finditer(text) if m.group("who").lower() == subject.lower()), None)
        if found:
            thing = found.groupdict().get("thing")
            if "{thing}" in attribute and not (thing and _key(thing)):
                continue
            key = attribute.format(thing=_key(thing or ""))
            value = " ".join((found.group("value") or "yes").lower().strip(" .!,").split())
            return f"{person}/{key}", "no" if key.startswith("allergy/") and value in ("not", "no longer") else value
    liking = patterns.likes.match(text)
    if liking and liking.group("who").lower() == subject.lower():
        # What is liked is the object, up to where the sentence goes on about where, when or why.
        head = _OBJECT_ENDS.split(liking.group("thing"), maxsplit=1)[0]
        thing = "-".join(w for w in content_words(head) if w not in _HEDGES)
        negative = liking.group("negated") or liking.group("verb").startswith(("hate", "dislike"))
        if thing:
            return f"{person}/likes/{thing}", "no" if negative else "yes"
    return None


# Words that say a statement is a change, not what it is about.
_CHANGE_WORDS = frozenset("now anymore instead forward henceforth again actually changed switched "
                          "days longer plan plans change".split())


def _frame(text: str, speaker: str) -> set[str]:
    name = set(content_words(speaker))
    return {w.removesuffix("'s") for w in content_words(text)} - name - _CHANGE_WORDS - {"others", "their"}


def restates(old: str, new: str, speaker: str) -> bool:
    """True when ``new`` says what ``old`` said with one thing changed: the same words but for at
    most two on each side, and more of them shared than changed ("The user's deploys go out on
    Tuesdays." and "From now on deploys go out on Thursdays.")."""
    before, after = _frame(old, speaker), _frame(new, speaker)
    shared, dropped, added = before & after, before - after, after - before
    return bool(shared) and bool(dropped or added) and len(dropped) <= 2 and len(added) <= 2 \
        and len(shared) >= max(len(dropped), len(added))
