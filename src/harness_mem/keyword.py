"""Keyword recall: what goes into the FTS5 index, and how user text becomes a safe MATCH.

User text never reaches MATCH raw. A query is cut into word tokens, stop words and one-letter
tokens are dropped, and each surviving token is double-quoted and OR-ed, so quotes, ``NEAR(``,
``*``, ``-`` or ``AND`` in a question are just words (or nothing) and cannot raise a syntax error.

CJK scripts have no spaces, and unicode61 would index a whole Chinese clause as one token. The
indexed text therefore spells every CJK run as its overlapping bigrams ("手冲咖啡" → "手冲 冲咖 咖啡"),
and a CJK query becomes its bigrams (so a sentence finds entries that share a word with it) plus
the phrase of all of them: a phrase of consecutive bigrams is exactly a substring match, so an
entry containing the whole query ranks first and a two-character word is found inside a longer run.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from functools import lru_cache

# Han (with extensions and compatibility ideographs), Hiragana and Katakana: scripts written without
# spaces. Hangul is spaced, so unicode61 handles it as it is.
CJK_RUN = re.compile(
    r"[\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]+"
)
_WORD = re.compile(r"\w+")

# Enough terms to express any real question; a 10 kB paste must not become a 2,000-term OR.
MAX_QUERY_TERMS = 48

STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before being
    below between both but by can could did didn't do does doesn't doing don't down during each few for
    from further had hadn't has hasn't have haven't having he her here hers herself him himself his how
    i if in into is isn't it it's its itself just let me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than that that's the
    their theirs them themselves then there these they this those through to too under until up very was
    wasn't we were weren't what what's when where which while who whom why will with would you your yours
    yourself yourselves s t d ll m o re ve y also ever did does get got go going like really would yes
    """.split()
)


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


#: Of the turn a reply answers, the index keeps the last this many words (about a sentence: what was
#: asked). A whole assistant reply of hundreds of words in front of every user turn buried the turn's
#: own words (LongMemEval dev, both roles: keyword R@5 .615 with the whole turn before, .728 with its
#: last 15 words; LoCoMo's short turns lose nothing: R@10 .710 either way).
REPLIED_WORDS = 15
#: ... and at most this many characters of them (a CJK run has no spaces to count words by).
REPLIED_CHARS = 120


def index_text(
    content: str,
    role: str | None = None,
    *,
    day: date | None = None,
    previous: tuple[str, str | None] | None = None,
) -> str:
    """The text the keyword index holds for an entry, CJK runs spelled as bigrams.

    ``"role: content"``; a transcript turn also gets its date and, when it replies to another
    speaker, the end of the turn it replies to (``previous``: its content and role)::

        [8 May 2023]
        Melanie: what did you do yesterday?
        Caroline: I went to a support group.

    Questions name the speaker, a day, or what the *other* person asked; the turn that answers rarely
    repeats them (on LoCoMo the context lifts keyword recall@10 from .65 to .71: bench/tune_hybrid.py).
    A turn after one by the same speaker replies to nothing there (a user's messages stored without
    the assistant's between them): it is indexed alone (LongMemEval dev, user turns: R@5 .803 → .856).
    """
    text = f"{role}: {content}" if role else content
    if previous is not None and previous[1] != role:
        words = previous[0].rsplit(maxsplit=REPLIED_WORDS)[-REPLIED_WORDS:]  # only the last words are cut
        asked = " ".join(words)[-REPLIED_CHARS:]
        text = (f"{previous[1]}: {asked}" if previous[1] else asked) + "\n" + text
    if day is not None:
        text = _day_line(day) + text
    if text.isascii():  # the common case, and far cheaper than the regex
        return text
    return CJK_RUN.sub(lambda m: " " + " ".join(_bigrams(m.group())) + " ", text)


_DAY_MS = 86_400_000


def entry_index_text(content: str, role: str | None, kind: str, session: str | None, created_ms: int,
                     previous: tuple[str, str | None] | None) -> str:
    """An entry's keyword-index text: a turn of a session carries its date and the turn before it."""
    if kind != "turn" or not session:
        return index_text(content, role)
    return index_text(content, role, day=_day(created_ms // _DAY_MS), previous=previous)


@lru_cache(maxsize=4096)
def _day(days_since_epoch: int) -> date:
    """The UTC date of a day number (``ms // _DAY_MS``): turns of one day share it, hence the cache."""
    return _EPOCH + timedelta(days=days_since_epoch)


_EPOCH = date(1970, 1, 1)


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")  # not %B: that follows the process's locale


@lru_cache(maxsize=4096)
def _day_line(day: date) -> str:
    return f"[{day.day} {_MONTHS[day.month - 1]} {day.year}]\n"


def query_terms(query: str) -> list[str]:
    """The FTS5 terms for a query, already quoted and safe to OR together (may be empty)."""
    words: list[str] = []
    phrases: list[str] = []
    for part in CJK_RUN.split(query):
        words.extend(w.lower() for w in _WORD.findall(part))
    for run in CJK_RUN.findall(query):
        if len(run) == 1:
            phrases.append(f'"{run}"*')  # a lone character: any bigram that starts with it
            continue
        # Each bigram on its own, so a CJK sentence finds entries sharing its words ("咖啡"),
        # and the whole run as a phrase, so an exact substring match ranks first.
        phrases.extend(f'"{bigram}"' for bigram in _bigrams(run))
        if len(run) > 2:
            phrases.append('"' + " ".join(_bigrams(run)) + '"')
    content_words = [w for w in words if len(w) > 1 and w not in STOP_WORDS]
    # A query made only of stop words ("who is she") still means something: keep them then.
    chosen = content_words or words
    terms = [f'"{w}"' for w in dict.fromkeys(chosen)] + list(dict.fromkeys(phrases))
    return terms[:MAX_QUERY_TERMS]


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH expression for ``query``, or None when it has nothing searchable."""
    terms = query_terms(query)
    return " OR ".join(terms) if terms else None


# A snippet looks for at most MAX_QUERY_TERMS query words, within the first SNIPPET_SCAN_CHARS
# characters of an entry: without these bounds an 80 kB query over a million-character entry costs
# a minute a hit. Within them, and for any entry shorter, the snippet is the same.
SNIPPET_SCAN_CHARS = 100_000


def snippet(content: str, query: str, width: int = 160) -> str:
    """About ``width`` characters of ``content`` around the first place a query word occurs."""
    if len(content) <= width:
        return content
    # Match a word's first five characters so that "painting" finds "paint" (the index stems too).
    needles = [w[:5] for w in (m.lower() for m in _WORD.findall(query)) if len(w) > 1 and w not in STOP_WORDS]
    needles += CJK_RUN.findall(query)
    needles = list(dict.fromkeys(needles))[:MAX_QUERY_TERMS]
    lowered = content[:SNIPPET_SCAN_CHARS].lower()
    first = len(lowered)
    for needle in needles:
        # Only an occurrence before the earliest found so far matters: search no further than that.
        found = lowered.find(needle, 0, first + len(needle) - 1)
        if found >= 0:
            first = found
    start = max(0, first - width // 3) if first < len(lowered) else 0
    end = min(len(content), start + width)
    start = max(0, end - width)
    text = content[start:end].strip()
    return ("…" if start > 0 else "") + text + ("…" if end < len(content) else "")
