"""Standalone statements from what someone said: the model-free half of fact extraction.

A turn like "I went to a LGBTQ support group yesterday and it was so powerful!" (Caroline, 8 May
2023) means nothing once read out of its conversation: whose group, which yesterday? Rewritten as
"Caroline went to a LGBTQ support group on 7 May 2023 and it was so powerful." it stands alone.
:func:`statements` does that for each sentence of a turn — first and second person become the
speakers' names, relative dates become dates — and scores how much it is worth keeping: durable
things (preferences, plans, decisions, attributes, events) about the speaker score high, greetings,
questions and small talk are dropped. No model is involved, so the rewrite is mechanical: it changes
who and when, never what.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date

from .timephrases import resolve_dates

__all__ = ["MAX_STATEMENT_CHARS", "Statement", "display_name", "normalised", "rewrite", "statements", "subjectless",
           "worth"]

#: A sentence longer than this is not a statement: a pasted log, a file or a run-on stream of text
#: has no one thing to say, and rewritten as a "fact" it would be as long as the turn.
MAX_STATEMENT_CHARS = 500

# Durable subjects: what a reader keeps from a conversation (LoCoMo's annotators kept events,
# plans, preferences, relations and attributes, and so do the memory papers).
_DURABLE = re.compile(
    r"\b(lov(?:e|es|ed|ing)|lik(?:e|es|ed)|enjoy\w*|prefer\w*|hat(?:e|es|ed)|favou?rite|passion\w*|dream\w*|"
    r"plan\w*|going to|gonna|want\w*|hop(?:e|es|ed|ing)|decid\w*|chose|choos\w*|start\w*|began|join\w*|"
    r"mov(?:e|ed|ing)|liv(?:e|es|ed|ing)|work\w*|job|career|bought|buy\w*|adopt\w*|got|went|visit\w*|"
    r"travel\w*|trip|finish\w*|graduat\w*|married|marry\w*|wedding|born|birthday|learn\w*|stud(?:y|ied|ying)|"
    r"class(?:es)?|volunteer\w*|hobby|hobbies|family|kids?|children|son|daughter|husband|wife|partner|"
    r"friends?|mom|dad|mother|father|sister|brother|dog|cat|pet|named|allergic|vegetarian|vegan|"
    r"painting|paint\w*|play\w*|read\w*|writ\w*|book|music|concert|festival|race|marathon|project|"
    r"business|company|school|college|degree|team|won|lost|award|camping|hik\w*|ran|run\w*|cook\w*)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|I'll|[Mm]y|me|[Mm]ine|[Mm]yself|[Ww]e|[Ww]e're|[Ww]e've|[Oo]ur|us)\b")
_SMALL_TALK = re.compile(
    r"^\W*(hey|hi|hello|hiya|yo|thanks|thank you|thx|bye|goodbye|see you|see ya|take care|talk soon|"
    r"wow|whoa|haha|lol|omg|aw+|oh|ooh|yay|yeah|yes|no|nope|ok|okay|sure|cool|nice|great|awesome|"
    r"amazing|congrats|congratulations|good luck|good to|glad|sounds|that's|that is|it's so|you're|you are)\b",
    re.IGNORECASE,
)
# Where a sentence ends; where one that goes on ", and I …" says a second thing of the speaker's;
# and where a statement made in passing ends a question: "I just got a Golden Retriever, any tips
# for walking him?" states something before it asks.
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)]*\s+(?=[\"'“(]*[A-Z0-9])|\n+|;\s+|"
                           r",\s+(?:and|but|plus)\s+(?=(?:I|I'm|I've|I'll|my|we|we're|we've|our)\b)|"
                           r"(?:,|\s+[-–—])\s+(?=(?:any|what|how|can|could|would|do|does|should|is|are|where|when|which|who)"
                           r"\b[^.!?]*\?\s*$)")
_ANNOTATION = re.compile(r"\[[^\]]{0,500}\]")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d+")
_STOP = frozenset(
    "a an the and or but if so to of in on at by for with from as is are was were be been being am do does did "
    "have has had i me my we our you your he she it its they them their this that these those there here what "
    "which who whom when where why how not no yes just really very so too also then than all any some much many "
    "more most can could would should will shall may might must get got go going gonna it's i'm i've i'd i'll "
    "that's you're we're they're don't didn't can't won't about into out up down over again still even ever "
    "like lot lots thing things stuff one way well oh yeah".split()
)

# Words after a first-person "I" that are not a present-tense verb to conjugate.
_KEEP_AFTER_I = frozenset(
    "was were had did could would should can might must may will shall am also just really still never always "
    "often usually sometimes actually totally definitely finally recently even only already kinda sorta "
    "went got made took saw felt thought found came ran bought brought taught left met won lost began gave "
    "wrote put kept knew told said sold spent heard became built drove ate sang swam chose read let set "
    "cut hit quit sent lent meant slept paid led fed held stood understood "
    "wore forgot learnt spoke broke drank drew fell flew froze grew hid hung lit rode rang rose shook shot shut "
    "sat sank slid spun stole stuck struck swore threw tore woke won dealt dreamt burnt spelt spilt bent caught "
    "fought sought thought bled fled "
    # not a verb: "I and my wife", "I too", "I myself"
    "and or but nor to of in at on with for from as so if too myself alone".split()
)
# Chat's contractions of a verb with "to" ("I wanna go", "I gotta run").
_WITH_TO = {"wanna": "wants to", "gonna": "is going to", "gotta": "has to"}
_ADVERBS = frozenset(
    "also just really still never always often usually sometimes actually totally definitely finally recently "
    "even only already kinda sorta truly absolutely seriously first once then ever almost".split()
)
# Words in "-ly" that are verbs; any other ("completely", "honestly") says how, and the verb follows.
_VERBS_IN_LY = frozenset("apply reply rely supply fly comply imply multiply ally bully tally rally".split())
_SELF = "\0SELF\0"  # the speaker, until their name goes in (a name may hold "I")
_IRREGULAR = {"have": "has", "do": "does", "go": "goes", "be": "is"}
# Negated forms after "I": the ones that change in the third person; the rest (didn't, can't,
# wasn't, won't…) read the same after a name.
_NEGATED = {"don't": "doesn't", "haven't": "hasn't", "am't": "isn't", "ain't": "isn't"}
# Verbs whose plain form ends in "ed", read as past tense otherwise ("I need" is not "I needed").
_PLAIN_IN_ED = frozenset("need feed bleed breed speed seed heed proceed succeed exceed embed shed shred wed weed "
                         "bed sled".split())


@dataclass(frozen=True)
class Statement:
    """One sentence of a turn, rewritten to stand alone, and how much it is worth keeping."""

    text: str
    turn_id: str
    speaker: str
    score: float
    said: str = ""  # the sentence as said (first person), without what opens it: what facts are read from
    listener: str | None = None  # who "you" was

    @property
    def words(self) -> list[str]:
        return content_words(self.text)


def content_words(text: str) -> list[str]:
    """The words of ``text`` that carry meaning (lower-case, stop words out)."""
    return list(_content_words(text))


# A sentence is weighed several times (is it a fact, of what kind, what is it worth): its words once.
@functools.lru_cache(maxsize=8192)
def _content_words(text: str) -> tuple[str, ...]:
    return tuple(w for w in (m.group(0).lower().replace("’", "'") for m in _WORD.finditer(text))
                 if w not in _STOP and len(w) > 1)


#: How an assistant's turns name their speaker, and what its "we" is.
ASSISTANT = "the assistant"
TEAM = "the team"


def display_name(role: str) -> str:
    """How a speaker is named in a statement: their name, or "the user" / "the assistant"."""
    return f"the {role}" if role in ("user", "assistant", "system") else role


def _third_person(verb: str) -> str:
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(lower) > 2 and lower.endswith("y") and lower[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _conjugate_after_i(match: re.Match[str]) -> str:
    """``I love`` → ``{name} loves``: the verb after a first-person subject, in the third person."""
    words = match.group("rest").split(" ")
    for i, word in enumerate(words):
        if word.lower() in _ADVERBS or (word.endswith("ly") and word.lower() not in _VERBS_IN_LY) \
                or (word in ("kind", "sort", "of") and "of" in words[i:i + 2]):
            continue  # "I just kind of went": the verb comes after "kind of"
        if "'" in word:
            words[i] = _NEGATED.get(word.lower(), word)
        elif word.lower() in _WITH_TO:
            words[i] = _WITH_TO[word.lower()]
        elif word.isalpha() and word.islower() and word not in _KEEP_AFTER_I \
                and (not word.endswith("ed") or word in _PLAIN_IN_ED):
            words[i] = _third_person(word)
        break
    return _SELF + " " + " ".join(words)


# Chat drops the subject ("Gonna try it", "Researching agencies"): it is the speaker.
_SUBJECTLESS = [
    (re.compile(r"^(?:Gonna|Going to)\b"), "is going to"),
    (re.compile(r"^Wanna\b"), "wants to"),
    (re.compile(r"^(?:Been)\b"), "has been"),
    (re.compile(r"^(?:Just|Also|Still|Finally|Recently)\b(?= [a-z]+(?:ed|ing)\b)"), None),
    # "Researching agencies" is the speaker doing it; "Painting is fun", "Creating a family for those
    # kids is so lovely" (a gerund as the subject, its verb further on) and "Something else" are not.
    (re.compile(r"^(?=(?!(?:Some|No|Any|Every)thing\b|Morning\b|Evening\b|Spring\b|Wedding\b|Building\b)"
                r"[A-Z][a-z]+ing\b(?!'s)(?![^.!?,;]*? (?:is|isn't|was|wasn't|are|were|has been|can be|makes?|helps?|"
                r"gives?|keeps?|feels?|sounds?|seems?|looks?|brings?|means?|can|could|will|would|should|might|may|must)\b)(?! (?:really|always|never)\b)"
                # "Speaking of Berlin, I …", "Walking home, we …": the subject comes after the phrase
                r"(?![^.!?,;]*, (?:(?:I|I'm|I've|I'd|I'll|we|we're|we've|my|our)\b|" + _SELF + ")))"), "is"),
]


# What opens a sentence without being part of what it states ("By the way,", "Big news:").
_OPENERS = re.compile(
    r"^(?:(?:ok(?:ay)?|so|well|oh|anyway|anyways|and|but|plus|also|honestly|actually|btw|by the way|fyi|"
    r"for context|for the record|for reference|just so you know|to be clear|heads up|in fact|"
    r"sorry|correction|update|big news|side note|news|good news|fun fact|change of plans?|quick update|(?:it )?turns out|remember(?: that)?|note(?: that)?|keep in mind(?: that)?|"
    r"just a reminder(?: that)?|reminder)\b[,:!]?\s+|speaking of (?:which|that|this),\s+|like,\s+)+",
    re.IGNORECASE,
)
# "Quick question: …", "Edit: …"; not a list item's name, which is its subject ("Tame Impala: dreamy
# psychedelic rock", "Spa 10: …", "Option A: …"): words all capitalised, or a number.
_HEADER = re.compile(r"^(?![A-Z][\w']*(?: [A-Z0-9][\w']*)+:|[^:]{0,25}\d[^:]{0,25}:)[A-Za-z][\w ']{0,24}:\s+(?=\S)")
# "Hey Joanna, …", "Wow, …", "Thanks, Maria, …": a greeting or reaction before what is said.
_GREETING = re.compile(r"^(?:hey|hi|hello|wow|whoa|cool|aw+|oh|ooh|yeah|yes|yep|haha|lol|great|nice|awesome|amazing|"
                       r"thanks|thank you|congrats)(?: [A-Z][a-z]+)?[,!.]\s+(?=\S)", re.IGNORECASE)
_I_THINK = re.compile(r"^I (?:think|guess|believe|feel like|suppose) (?:that )?(?=I\b|I'm\b|my\b|we\b)",
                      re.IGNORECASE)
_FILLERS = re.compile(r",? (?:you know|you see|ya know)\b,?", re.IGNORECASE)


def normalised(sentence: str) -> str:
    """The sentence without what opens it ("By the way,", "Big news:", "Honestly, I think") and its
    fillers ("you know"): what it states, still in the speaker's words."""
    s = sentence.strip().replace("’", "'")
    while True:
        before = s
        s = _I_THINK.sub("", _HEADER.sub("", _GREETING.sub("", _OPENERS.sub("", s))))
        if s == before:
            break
    s = _FILLERS.sub("", s)
    return s[:1].upper() + s[1:]


def subjectless(sentence: str) -> bool:
    """True when a sentence drops its subject, which is then the speaker ("Gonna try pottery",
    "Researching agencies now"; not "Painting is fun")."""
    return any(pattern.match(sentence) for pattern, _ in _SUBJECTLESS)


def _subject_added(sentence: str) -> str:
    for pattern, verb in _SUBJECTLESS:
        found = pattern.match(sentence)
        if found:
            rest = sentence[found.end():].lstrip()
            head = found.group(0).lower() if verb is None else verb
            return f"{_SELF} {head} {rest[:1].lower()}{rest[1:]}".replace("  ", " ")
    return sentence


def rewrite(sentence: str, speaker: str, listener: str | None) -> str:
    """``sentence`` with the speaker's and the listener's pronouns replaced by their names."""
    s = normalised(sentence)
    s = re.sub(r"^Let(?:'s| us) ", _SELF + " decided to ", s)  # "Let's go with Redis …": what was decided
    s = re.sub(r"\bI'm\b|\bI am\b", _SELF + " is", s)
    s = re.sub(r"\bI don't\b", _SELF + " doesn't", s)
    s = re.sub(r"\bI do not\b", _SELF + " does not", s)
    s = re.sub(r"\bI've\b|\bI have\b", _SELF + " has", s)
    s = re.sub(r"\bI'd\b", _SELF + " would", s)
    s = re.sub(r"\bI'll\b|\bI will\b", _SELF + " will", s)
    s = re.sub(r"\bI (?P<rest>(?:(?!I\b)[A-Za-z]+ ){0,3}(?!I\b)[A-Za-z]+(?:'[a-z]+)?)", _conjugate_after_i, s)
    s = re.sub(r"\b(?:[Mm]yself|[Oo]urselves)\b", "themselves", s)
    if speaker in (ASSISTANT, TEAM):  # an assistant's "we" is the team it works for: "we switched to argon2id"
        s = re.sub(r"\b(?:[Oo]ur|[Oo]urs)\b", f"{TEAM}'s", s)
        s = re.sub(r"\b[Ww]e're\b|\b[Ww]e are\b", f"{TEAM} is", s)
        s = re.sub(r"\b[Ww]e've\b", f"{TEAM} has", s)
        s = re.sub(r"\b[Ww]e'll\b", f"{TEAM} will", s)
        s = re.sub(r"\b[Ww]e'd\b", f"{TEAM} would", s)
        s = re.sub(r"\b[Ww]e\b|\bus\b", TEAM, s)
    # Named once; after that "their" and "them" ("Gina quit their job"), as a person would write it.
    s = re.sub(r"\b(?:[Mm]y|[Mm]ine|[Oo]ur|[Oo]urs)\b",
               lambda m: "their" if _SELF in s[:m.start()] else f"{speaker}'s", s)
    s = re.sub(r"\bme\b", lambda m: "them" if _SELF in s[:m.start()] or f"{speaker}'s" in s[:m.start()] else speaker, s)
    s = re.sub(r"\b[Ww]e're\b|\b[Ww]e are\b", f"{speaker} and others are", s)
    s = re.sub(r"\b[Ww]e've\b", f"{speaker} and others have", s)
    s = re.sub(r"\b[Ww]e'll\b", f"{speaker} and others will", s)
    s = re.sub(r"\b[Ww]e'd\b", f"{speaker} and others would", s)
    s = re.sub(r"\b[Ww]e\b", f"{speaker} and others", s)
    s = re.sub(r"\bus\b", f"{speaker} and others", s)
    if listener is not None:
        s = re.sub(r"\b[Yy]ou're\b|\b[Yy]ou are\b", f"{listener} is", s)
        s = re.sub(r"\b[Yy]ou've\b", f"{listener} has", s)
        s = re.sub(r"\b[Yy]ou'll\b", f"{listener} will", s)
        s = re.sub(r"\b[Yy]ou'd\b", f"{listener} would", s)
        s = re.sub(r"\b[Yy]our(?:s)?\b", f"{listener}'s", s)
        s = re.sub(r"\b[Yy]ou\b", listener, s)
    s = _subject_added(s).replace(_SELF, speaker)
    s = s.strip(" \"'“”")
    if s and s[-1] not in ".!?…":
        s += "."
    return s[:1].upper() + s[1:]


@functools.lru_cache(maxsize=8192)
def worth(sentence: str) -> float:
    """How much a sentence (as said) is worth keeping; 0 when it is not a statement worth a fact."""
    stripped = sentence.strip()
    words = content_words(stripped)
    if stripped.endswith("?") or len(words) < 3:
        return 0.0
    if _SMALL_TALK.match(stripped) and len(words) < 7:
        return 0.0
    score = min(len(words), 12) * 0.15
    score += 1.5 if _FIRST_PERSON.search(stripped) else 0.0
    score += min(len(_DURABLE.findall(stripped)), 3) * 0.6
    names = [w for w in _WORD.findall(stripped)[1:] if w[:1].isupper() and w not in ("I", "I'm", "I've", "I'd", "I'll")]
    score += min(len(names), 2) * 0.4
    score += 0.4 if re.search(r"\d", stripped) else 0.0
    score -= 1.0 if re.search(r"\byou\b", stripped, re.IGNORECASE) and not _FIRST_PERSON.search(stripped) else 0.0
    return max(score, 0.0)


def as_the_team(statement: Statement, said_on: date | None) -> Statement:
    """``statement`` as the team's: in a project, "We'll use Postgres for billing" and "Let's go
    with Redis" are what the team decided ("The team will use …"), not "The user and others will …"."""
    text = rewrite(statement.said, TEAM, statement.listener)
    if said_on is not None:
        text = resolve_dates(text, said_on)
    return Statement(text, statement.turn_id, TEAM, statement.score, statement.said, statement.listener)


def sentences(text: str) -> list[str]:
    """The sentences of a turn, annotations like ``[shares image: …]`` left out."""
    text = _ANNOTATION.sub(" ", text)
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def statements(text: str, *, turn_id: str, speaker: str, listener: str | None, said_on: date | None) -> list[Statement]:
    """Each sentence of a turn with something in it, rewritten to stand alone, in the order said;
    those scoring 0 (questions, small talk) belong in an account of the conversation, not in a fact.

    ``speaker`` and ``listener`` are the names "I" and "you" become (see :func:`display_name`);
    ``said_on`` is the date relative phrases are resolved against (None leaves them).
    """
    found = []
    for sentence in sentences(text):
        if len(sentence) > MAX_STATEMENT_CHARS or sentence.rstrip("*_# ").endswith(":"):
            continue  # ":" ends a list's heading ("Here are a few options:"), which says nothing alone
        said = normalised(sentence)
        score = worth(said)
        words = len(content_words(said))
        if score <= 0 and (words < 1 or (_SMALL_TALK.match(sentence) is not None and words < 4)):
            continue  # "Hey Mel!", "Wow.": nothing to keep even in an account of the conversation
        standalone = rewrite(said, speaker, listener)
        if said_on is not None:
            standalone = resolve_dates(standalone, said_on)
        found.append(Statement(standalone, turn_id, speaker, round(score, 3), said, listener))
    return found
