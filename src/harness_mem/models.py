"""The records the store hands out: :class:`Entry` and :class:`Hit`, and the small rules around them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from .errors import InvalidInputError

__all__ = [
    "HASH_PREFIX",
    "KINDS",
    "Entry",
    "Hit",
    "Kind",
    "check_kind",
    "clean_tags",
    "content_hash",
    "dumps",
    "format_time",
    "from_ms",
    "new_id",
    "now_ms",
    "parse_time",
    "to_ms",
]

Kind = Literal["note", "turn", "episode", "fact", "summary"]
KINDS: tuple[str, ...] = ("note", "turn", "episode", "fact", "summary")

# Versioned so that a change of algorithm is detectable in stored rows.
HASH_PREFIX = "h1:"


@dataclass(frozen=True)
class Entry:
    """One memory: a note, a transcript turn, an episode, a fact or a summary."""

    id: str
    content: str
    kind: str = "note"
    namespace: str = "default"
    role: str | None = None
    session: str | None = None
    tags: tuple[str, ...] = ()
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    expires_at: datetime | None = None
    content_hash: str = ""
    redactions: dict[str, int] | None = None  # kinds redacted on write; None: written with redaction off

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` reads it back unchanged."""
        data = asdict(self)
        data["tags"] = list(self.tags)
        data["created_at"] = format_time(self.created_at)
        data["expires_at"] = format_time(self.expires_at) if self.expires_at else None
        return data

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or datetime.now(UTC))


@dataclass(frozen=True)
class Hit:
    """A recalled entry with its relevance score (higher is better) and a snippet of the match.

    ``components`` is filled when recall is asked to explain itself: for each retriever that
    found the entry, its rank (1-based) and raw score.
    """

    entry: Entry
    score: float
    snippet: str = ""
    components: dict[str, dict[str, float | int | None]] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"score": self.score, **self.entry.to_dict(), "snippet": self.snippet}
        if self.components is not None:
            data["components"] = self.components
        return data


def content_hash(content: str | bytes) -> str:
    data = content.encode("utf-8") if isinstance(content, str) else content
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise InvalidInputError(f"unknown kind {kind!r} — use one of: {', '.join(KINDS)}")
    return kind


def clean_tags(tags: Any) -> tuple[str, ...]:
    """Tags as a tuple of unique, stripped, non-empty strings in first-seen order."""
    if tags is None:
        return ()
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, (list, tuple, set, frozenset)):
        raise InvalidInputError(f"tags must be a list of strings, not {type(tags).__name__}")
    seen: dict[str, None] = {}
    for tag in tags:
        if not isinstance(tag, str):
            raise InvalidInputError(f"tags must be strings, got {tag!r}")
        tag = tag.strip()
        if tag:
            seen.setdefault(tag, None)
    return tuple(seen)


# ---- ids ---------------------------------------------------------------------------------------

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_last_id_ms = 0
_last_id_random = 0


def new_id() -> str:
    """A 26-character ULID: sortable by creation time, unique without coordination.

    Within one millisecond the random part is incremented, so ids made by one process stay in
    creation order.
    """
    global _last_id_ms, _last_id_random
    ms = time.time_ns() // 1_000_000
    if ms <= _last_id_ms:
        ms = _last_id_ms
        _last_id_random = (_last_id_random + 1) & ((1 << 80) - 1)
    else:
        _last_id_random = int.from_bytes(os.urandom(10), "big")
    _last_id_ms = ms
    value = (ms << 80) | _last_id_random
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


# ---- time --------------------------------------------------------------------------------------

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(value: str | datetime | int | float, *, now: datetime | None = None) -> datetime:
    """A point in time from a datetime, Unix seconds, an ISO-8601 string, or an age like ``7d``.

    Ages count back from now (``30m``, ``24h``, ``7d``, ``2w``). Naive times are taken as UTC.
    """
    if isinstance(value, str):
        try:  # the common case first: an ISO-8601 stamp (3.11 reads a trailing Z too)
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        except ValueError:
            pass
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):  # NaN, or beyond the years datetime can hold
            raise InvalidInputError(f"cannot read a time from {value!r} — seconds since 1970, within years 1–9999") from None
    if not isinstance(value, str):
        raise InvalidInputError(f"cannot read a time from {value!r}")
    text = value.strip()
    relative = _RELATIVE.match(text.lower())
    if relative:
        seconds = float(relative.group(1)) * _UNIT_SECONDS[relative.group(2)]
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        parsed = _parse_spoken(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# Chat exports often stamp turns the way people say them: "1:56 pm on 8 May, 2023".
_SPOKEN_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B %Y", "%B %d, %Y", "%d %B, %Y")


def _parse_spoken(text: str) -> datetime:
    for fmt in _SPOKEN_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    raise InvalidInputError(
        f"cannot read a time from {text!r} — use ISO-8601 (2024-05-01T12:00:00Z) or an age (7d, 24h)"
    )


def to_ms(moment: datetime) -> int:
    """Whole milliseconds since the epoch, rounded down.

    Rounding to whole microseconds first makes the float exact for any date within centuries of now.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1_000_000) // 1000


def now_ms() -> int:
    return to_ms(datetime.now(UTC))


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# allow_nan=False: NaN and Infinity are not JSON, and SQLite's json_valid() refuses them.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(value: Any) -> str:
    """Canonical compact JSON: sorted keys, no spaces, real Unicode."""
    return _CANONICAL.encode(value)
