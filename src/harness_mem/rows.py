"""The ``entries`` row: how an item becomes one (checked, redacted, normalised) and an Entry again.

Writes carry rows, not :class:`Entry` objects: an import needs only the row, and :func:`entry_from_row`
makes the entry from it exactly as a read does. :func:`prepare_row` runs once per imported line, so
the common case (a plain turn: no tags, source, metadata or expiry) only pays for checks it needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from .errors import InvalidInputError, WriteRefusedError
from .models import (
    KINDS,
    Entry,
    check_kind,
    clean_tags,
    content_hash,
    dumps,
    from_ms,
    new_id,
    now_ms,
    parse_time,
    to_ms,
)
from .redaction import Redactor

COLUMNS = (
    "pk, id, namespace, kind, content, role, session, tags, source, metadata, created_at, expires_at,"
    " content_hash, redactions"
)
PLACEHOLDERS = ", ".join("?" * len(COLUMNS.split(",")))

# An entry is a memory, not a document store: past this, callers should split or summarise.
MAX_CONTENT_CHARS = 1_000_000

# Keys whose absence lets prepare_row skip a step.
_OPTIONAL_STEPS = frozenset({"tags", "source", "metadata", "expires_at", "ttl_days", "redactions"})


class Row(NamedTuple):
    """An ``entries`` row, columns in :data:`COLUMNS` order; ``pk`` is None in a new row (SQLite numbers it)."""

    pk: int | None
    id: str
    namespace: str
    kind: str
    content: str
    role: str | None
    session: str | None
    tags: str  # JSON
    source: str | None
    metadata: str  # JSON
    created_at: int  # ms
    expires_at: int | None  # ms
    content_hash: str
    redactions: str | None  # JSON; NULL when written with redaction off


def prepare_row(item: Mapping[str, Any] | Entry, *, namespace: str, redactor: Redactor | None) -> Row:
    """The row ``item`` will be stored as: checked, then redacted before anything is stored or indexed.

    ``item`` is an :class:`Entry` or a mapping with the keyword arguments of ``MemoryStore.add``
    (``content`` or ``text``); ``namespace`` is the default when the item names none. Raises
    :class:`InvalidInputError` for a bad item and :class:`WriteRefusedError` when the redaction
    policy blocks it.
    """
    if isinstance(item, Entry):
        item = {**item.to_dict(), "namespace": item.namespace}
    get = item.get
    content = get("content") if "content" in item else get("text")
    if not isinstance(content, str):
        raise InvalidInputError("an entry needs its text as a string in 'content' (or 'text')")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInputError(
            f"content is {len(content):,} characters; the limit is {MAX_CONTENT_CHARS:,} — split it into several entries"
        )
    if not content or content.isspace():
        raise InvalidInputError("an entry's content cannot be empty")
    role, session = _optional_str(item, "role"), _optional_str(item, "session")
    kind = get("kind") or ("turn" if role else "note")
    if kind not in KINDS:
        check_kind(kind)
    entry_id = get("id") or new_id()
    if not isinstance(entry_id, str) or not entry_id.strip():
        raise InvalidInputError(f"an id must be a non-empty string, not {entry_id!r}")
    created = get("created_at")
    created_ms = _time_ms(created, "created_at") if created else now_ms()
    tags: tuple[str, ...] = ()
    source: str | None = None
    metadata: Any = {}
    metadata_json = "{}"
    expires_ms: int | None = None
    carried: Any = None
    if not _OPTIONAL_STEPS.isdisjoint(item.keys()):
        tags, source = clean_tags(get("tags")), _optional_str(item, "source")
        metadata = get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a JSON object, not {type(metadata).__name__}")
        if metadata:
            try:
                metadata_json = dumps(metadata)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"metadata is not JSON-serialisable ({exc})") from None
            metadata = json.loads(metadata_json)  # a plain JSON copy, for the redactor to walk
        expires_ms = _expiry(get("expires_at"), get("ttl_days"))
        carried = get("redactions")  # counts an export carries over
    redactions_json: str | None = None
    if redactor is not None:
        redactions: dict[str, int] = {}
        if carried:
            if not isinstance(carried, Mapping) or not all(isinstance(n, int) for n in carried.values()):
                raise InvalidInputError("redactions must be an object of counts, like {\"EMAIL\": 1}")
            redactions.update(carried)
        body = redactor.scrub(content)
        extras = redactor.scrub_value([list(tags), source, metadata]) if tags or source or metadata else None
        if body.spans or (extras is not None and extras.counts):
            for counts in (body.counts, extras.counts if extras else {}):
                for kind_found, n in counts.items():
                    redactions[kind_found] = redactions.get(kind_found, 0) + n
        if body.blocked or (extras and extras.blocked):
            raise WriteRefusedError(
                f"the redaction policy refuses to store this entry (found: {', '.join(sorted(redactions))})",
                reason="policy", counts=redactions,
            )
        content = body.text
        if extras is not None:
            scrubbed_tags, source, metadata = extras.value
            tags = clean_tags(scrubbed_tags)
            if metadata:
                metadata_json = dumps(metadata)
        redactions_json = dumps(redactions) if redactions else "{}"
    try:
        digest = content_hash(content)
    except UnicodeEncodeError:
        raise InvalidInputError("content is not valid Unicode (it contains a lone surrogate)") from None
    row = Row(
        None, entry_id, _optional_str(item, "namespace") or namespace, kind, content, role, session,
        dumps(list(tags)) if tags else "[]", source, metadata_json, created_ms, expires_ms, digest, redactions_json,
    )
    _check_encodable(row)
    return row


def entry_from_row(row: Sequence[Any]) -> Entry:
    """The :class:`Entry` of a stored row (columns in :data:`COLUMNS` order)."""
    return Entry(
        id=row[1],
        namespace=row[2],
        kind=row[3],
        content=row[4],
        role=row[5],
        session=row[6],
        tags=tuple(json.loads(row[7])),
        source=row[8],
        metadata=json.loads(row[9]),
        created_at=from_ms(row[10]),
        expires_at=from_ms(row[11]) if row[11] is not None else None,
        content_hash=row[12],
        redactions=json.loads(row[13]) if row[13] is not None else None,
    )


def _expiry(expires: Any, ttl_days: Any) -> int | None:
    if ttl_days is not None:
        if not isinstance(ttl_days, (int, float)) or isinstance(ttl_days, bool) or not ttl_days > 0:
            raise InvalidInputError(f"ttl_days must be a positive number, not {ttl_days!r}")
        if ttl_days >= _MAX_TTL_DAYS:
            raise InvalidInputError(f"ttl_days {ttl_days!r} is too far ahead — at most {_MAX_TTL_DAYS:,} days")
        return now_ms() + int(ttl_days * 86_400_000)
    return _time_ms(expires, "expires_at") if expires else None


_MAX_TTL_DAYS = 3_000_000  # about 8,000 years: past the last date a timestamp can name


def _time_ms(value: Any, field: str) -> int:
    """Milliseconds since the epoch of a time the caller gave, refused cleanly when out of range."""
    try:
        ms = to_ms(parse_time(value))
    except InvalidInputError:
        raise
    except (OverflowError, OSError, ValueError):  # a datetime at the edge of year 1 or 9999
        ms = _LAST_MS + 1
    if not _FIRST_MS <= ms <= _LAST_MS:  # it would be stored, then fail every read as a UTC datetime
        raise InvalidInputError(f"{field} {value!r} is out of range — use a time within years 1–9999 (UTC)")
    return ms


_FIRST_MS = to_ms(datetime(1, 1, 1, tzinfo=UTC))
_LAST_MS = to_ms(datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC))


def _optional_str(item: Mapping[str, Any], key: str) -> str | None:
    value = item.get(key)
    if value is None or value.__class__ is str:
        return value or None
    raise InvalidInputError(f"{key} must be a string, not {type(value).__name__}")


_TEXT_FIELDS = ("id", "namespace", "role", "session", "tags", "source", "metadata")  # content: hashed


def _check_encodable(row: Row) -> None:
    """Refuse a lone surrogate (JSON can spell one, ``"\\ud800"``) in a text field: SQLite stores UTF-8."""
    for field in _TEXT_FIELDS:
        value = getattr(row, field)
        if value is not None and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInputError(f"{field} is not valid Unicode (it contains a lone surrogate)") from None
