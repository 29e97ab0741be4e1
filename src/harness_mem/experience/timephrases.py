"""Relative time phrases resolved against the moment they were said.

"I went there yesterday", said on 8 May 2023, is only true of a date once it is read out of its
conversation: consolidation rewrites it as "on 7 May 2023". :func:`resolve_dates` does that for the
phrases people use most (yesterday, last Saturday, two weeks ago, next month, …); a phrase it does
not know is left as it was, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta

__all__ = ["format_day", "resolve_dates"]

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3}


def format_day(day: date) -> str:
    """``7 May 2023``: the form the resolved phrases use."""
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def _month(day: date, offset: int) -> str:
    index = day.year * 12 + day.month - 1 + offset
    return f"{_MONTHS[index % 12]} {index // 12}"


def _weekday_before(day: date, weekday: int) -> date:
    """The latest ``weekday`` strictly before ``day``."""
    return day - timedelta(days=(day.weekday() - weekday - 1) % 7 + 1)


def _weekday_after(day: date, weekday: int) -> date:
    return day + timedelta(days=(weekday - day.weekday() - 1) % 7 + 1)


def _count(word: str) -> int | None:
    word = word.lower()
    return int(word) if word.isdigit() else _NUMBERS.get(word)


_COUNT = r"(\d{1,3}|a couple of|couple of|a few|few|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
_UNIT = r"(day|week|month|year)s?"


def _ago(match: re.Match[str], day: date) -> str:
    count, unit = _count(match.group(1)), match.group(2).lower()
    if count is None:
        return match.group(0)
    vague = match.group(1).lower() in ("a few", "few", "a couple of", "couple of")
    if unit == "day":
        when = day - timedelta(days=count)
        return f"a few days before {format_day(day)}" if vague else f"on {format_day(when)}"
    if unit == "week":
        return f"{'a few' if vague else count} week{'s' if count > 1 or vague else ''} before {format_day(day)}"
    if unit == "month":
        return f"in {_month(day, -count)}" if not vague else f"a few months before {format_day(day)}"
    return f"in {day.year - count}" if not vague else f"a few years before {day.year}"


def _relative_day(word: str) -> Callable[[re.Match[str], date], str]:
    offset = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}[word]
    return lambda match, day: f"on {format_day(day + timedelta(days=offset))}"


def _named_weekday(match: re.Match[str], day: date) -> str:
    which, weekday = match.group(1).lower(), _WEEKDAYS.index(match.group(2).lower())
    when = _weekday_before(day, weekday) if which == "last" else _weekday_after(day, weekday)
    return f"on {match.group(2).capitalize()}, {format_day(when)}"


def _period(match: re.Match[str], day: date) -> str:
    which, unit = match.group(1).lower(), match.group(2).lower()
    offset = {"last": -1, "this": 0, "next": 1}[which]
    if unit == "month":
        return f"in {_month(day, offset)}"
    if unit == "year":
        return f"in {day.year + offset}"
    relation = {"last": "before", "this": "of", "next": "after"}[which]
    return f"the {unit} {relation} {format_day(day)}"


# Longest phrases first, so "last week" is not read as "last" + something else.
_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str], date], str]]] = [
    (re.compile(rf"\b{_COUNT}\s+{_UNIT}\s+ago\b", re.IGNORECASE), _ago),
    (re.compile(rf"(?:\bon\s+)?\b(last|next|this)\s+({'|'.join(_WEEKDAYS)})\b", re.IGNORECASE), _named_weekday),
    (re.compile(r"\b(last|next|this)\s+(week|weekend|month|year)\b", re.IGNORECASE), _period),
    (re.compile(r"\b(?:last night|yesterday)\b", re.IGNORECASE), _relative_day("yesterday")),
    (re.compile(r"\btomorrow\b", re.IGNORECASE), _relative_day("tomorrow")),
    (re.compile(r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b", re.IGNORECASE), _relative_day("today")),
]


def resolve_dates(text: str, said_on: date) -> str:
    """``text`` with its relative time phrases replaced by the dates they meant on ``said_on``."""
    for pattern, render in _RULES:
        text = pattern.sub(lambda match, render=render: render(match, said_on), text)  # type: ignore[misc]
    return text
