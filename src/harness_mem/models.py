"""The records harness_mem hands out and takes in, and the small rules around them.

Every record that crosses the library's edge is a pydantic model built on :class:`Record`: what the
store hands out (:class:`Entry`, :class:`Hit`) and what it takes in (:class:`ImportLine`: an import
line, or the fields of ``MemoryStore.add``). A record is built like a dataclass (positional
arguments in field order work), and a bad value raises :class:`InvalidInputError` with one line that
names the field, not a pydantic traceback. Each model's JSON schema is ``Model.json_schema()``
(:mod:`harness_mem.schema` lists them by name).

Rows read back from the file were checked when they were written: :meth:`Record.trusted` builds a
record from them without validating again, so reads pay only for what they read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    StrictInt,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    model_serializer,
)
from pydantic_core import ErrorDetails

from .errors import InvalidInputError

__all__ = [
    "HASH_PREFIX",
    "KINDS",
    "MAX_CONTENT_CHARS",
    "MAX_NESTING",
    "MAX_TTL_DAYS",
    "VISIBLE_CHARACTER",
    "MigrationStatus",
    "Entry",
    "FilePart",
    "FileSizes",
    "Hit",
    "HitRecord",
    "Remembered",
    "SessionHit",
    "SessionSize",
    "SessionSummary",
    "StoreStats",
    "ImportLine",
    "Kind",
    "Record",
    "check_kind",
    "check_nesting",
    "clean_tags",
    "content_hash",
    "dumps",
    "counted",
    "format_time",
    "has_visible_text",
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

# An entry is a memory, not a document store: past this, callers should split or summarise.
MAX_CONTENT_CHARS = 1_000_000
MAX_TTL_DAYS = 3_000_000  # about 8,000 years: past the last date a timestamp can name
# How deep a value (metadata, an import line) may nest: lists and objects within each other, the
# outermost counting as one. Real metadata stays within a handful; far deeper, the code that walks
# it (redaction, JSON, SQLite's json functions) runs out of stack, so it is refused up front.
MAX_NESTING = 64


# ---- records -----------------------------------------------------------------------------------


class Record(BaseModel):
    """A pydantic model that behaves like the frozen dataclass it replaces.

    * Positional arguments fill the fields in order (at most :attr:`positional` of them, when set).
    * A value that fails validation raises :attr:`error` (:class:`InvalidInputError` unless a
      subclass says otherwise) with a one-line message naming the field; :meth:`explain` writes it.
    * :meth:`check` validates a mapping the same way; :meth:`trusted` skips validation.
    * Unknown fields are refused, as a dataclass refuses an unknown keyword.
    """

    # Serialised, every field is present: the schema of what a record dumps to says so.
    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_serialization_defaults_required=True)

    positional: ClassVar[int | None] = None  # None: every field may be given positionally
    error: ClassVar[type[InvalidInputError]] = InvalidInputError

    def __init__(self, /, *args: Any, **data: Any) -> None:
        if args:
            names = list(type(self).model_fields)[: self.positional]
            if len(args) > len(names):
                raise TypeError(f"{type(self).__name__}() takes at most {len(names)} positional arguments")
            for name, value in zip(names, args, strict=False):
                if name in data:
                    raise TypeError(f"{type(self).__name__}() got multiple values for {name!r}")
                data[name] = value
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise self.error(type(self).explain(exc)) from None

    # Validation does not need this __init__ (it only maps arguments and rewords errors): marked as
    # pydantic marks its own, model_validate and check() skip it instead of validating twice.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def check(cls, data: Mapping[str, Any]) -> Self:
        """``data`` validated into a record; raises :attr:`error` with a one-line message."""
        if not isinstance(data, dict):
            data = dict(data)  # a model validates dicts; any mapping is welcome
        try:
            return cls.__pydantic_validator__.validate_python(data)  # type: ignore[no-any-return]
        except ValidationError as exc:
            raise cls.error(cls.explain(exc)) from None

    @classmethod
    def trusted(cls, values: dict[str, Any]) -> Self:
        """A record of values known to be valid (every field given), without validating them.

        What ``model_construct`` does, minus its per-field work: rows read back from the file
        were checked on their way in, and a list or a recall builds thousands of these.
        """
        record = object.__new__(cls)
        _set(record, "__dict__", values)
        _set(record, "__pydantic_fields_set__", set(values))
        _set(record, "__pydantic_extra__", None)
        _set(record, "__pydantic_private__", None)
        return record

    @classmethod
    def json_schema(cls, mode: Literal["validation", "serialization"] = "validation") -> dict[str, Any]:
        """The record's JSON schema (draft 2020-12): as it is validated, or as it serialises to JSON."""
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", **cls.model_json_schema(mode=mode)}

    @classmethod
    def explain(cls, exc: ValidationError) -> str:
        """The first error of ``exc`` as one line that names the field."""
        error = exc.errors(include_url=False)[0]
        loc = error["loc"]
        field = cls._field_of(loc[0]) if loc and isinstance(loc[0], str) else ""
        if error["type"] == "string_unicode":  # a lone surrogate, which UTF-8 (and SQLite) cannot hold
            return f"{field} is not valid Unicode (it contains a lone surrogate)"
        return cls.message(field, error) or describe_error(error, _where(field, loc[1:]))

    @classmethod
    def message(cls, field: str, error: ErrorDetails) -> str | None:
        """A subclass's own wording for an error of ``field``; None for the general one."""
        return None

    @classmethod
    def _field_of(cls, key: str) -> str:
        """The field a key of the input fills (keys may be aliases: ``text`` fills ``content``)."""
        fields = cls.model_fields
        if key in fields:
            return key
        for name, info in fields.items():
            alias = info.validation_alias
            choices = alias.choices if isinstance(alias, AliasChoices) else [alias or info.alias]
            if key in choices:
                return name
        return key


_set = object.__setattr__


def _where(field: str, rest: tuple[int | str, ...]) -> str:
    return field + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in rest)


_NOUNS = {
    "string": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
    "list": "a list", "tuple": "a list", "set": "a list", "frozenset": "a list", "dict": "an object",
    "datetime": "a time", "date": "a date", "model": "an object", "dataclass": "an object",
    "decimal": "a number", "bytes": "bytes", "none": "null",
}
_LIMITS = {
    "greater_than": ("greater than", "gt"), "greater_than_equal": ("at least", "ge"),
    "less_than": ("less than", "lt"), "less_than_equal": ("at most", "le"),
}


def describe_error(error: ErrorDetails, where: str) -> str:
    """One pydantic error as a sentence about ``where`` (a field, or a path such as ``tags[0]``)."""
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])  # our own checks raise messages that already name the field
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        return f"unknown field {where!r}"
    if kind in ("literal_error", "enum"):
        return f"{where} must be one of {ctx.get('expected')}, not {value!r}"
    if kind in _LIMITS:
        words, key = _LIMITS[kind]
        return f"{where} must be {words} {ctx.get(key)}, not {value!r}"
    if kind == "string_too_long":
        return f"{where} is {len(value):,} characters; the limit is {ctx.get('max_length'):,}"
    if kind == "too_long":
        return f"{where} has too many items; the limit is {ctx.get('max_length'):,}"
    noun = _NOUNS.get(kind.rsplit("_", 1)[0]) if kind.endswith(("_type", "_parsing")) else None
    if noun is not None:
        return f"{where} must be {noun}, not {type(value).__name__}"
    return f"{where}: {error['msg'][:1].lower()}{error['msg'][1:]}"


def _json_time(moment: datetime) -> str:
    return format_time(moment)  # format_time is defined further down


# Times are datetimes in Python and ``2024-05-01T12:00:00.000Z`` strings in JSON.
Time = Annotated[
    datetime,
    PlainSerializer(_json_time, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class Entry(Record):
    """One memory: a note, a transcript turn, an episode, a fact or a summary."""

    id: str
    content: str
    kind: Kind = "note"
    namespace: str = "default"
    role: str | None = None
    session: str | None = None
    tags: tuple[str, ...] = ()
    source: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: Time = Field(default_factory=lambda: datetime.now(UTC))
    expires_at: Time | None = None
    content_hash: str = ""
    # Kinds redacted on write (name → count); None: written with redaction off.
    redactions: dict[str, int] | None = None
    # Set when a correction replaced this entry (``MemoryStore.supersede``): by which entry, and when.
    superseded_by: str | None = None
    superseded_at: Time | None = None
    # When it was written (a replace writes it again); None in an entry not read from a store.
    updated_at: Time | None = None
    # The time to live it was written with, in days: what ``refresh_ttl`` renews its expiry by.
    ttl_days: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` reads it back unchanged."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        """The entry :meth:`to_dict` wrote; raises :class:`InvalidInputError` naming a bad field."""
        return cls.check(data)

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or datetime.now(UTC))


class Hit(Record):
    """A recalled entry with its relevance score and a snippet of the match.

    ``score`` is in [0, 1] on one scale for every mode and store: an estimate of how likely the hit
    is to hold what the query asks (:mod:`harness_mem.scores`), falling along the order of the hits.
    ``components`` is filled when recall is asked to explain itself: for each retriever that
    found the entry, its rank (1-based; None outside its list) and raw score (BM25, cosine, the
    fused hybrid score), and the coverage of the query's words the score was calibrated from.

    Serialised, a hit is flat: the entry's fields with the hit's beside them (:class:`HitRecord`).
    That one shape is what ``recall --json``, the MCP server's recall, the memory tools and
    ``harness-mem schema hit`` all give.
    """

    positional: ClassVar[int | None] = 5

    entry: Entry
    score: float
    snippet: str = ""
    components: dict[str, dict[str, float | int | None]] | None = None
    #: With ``recall(context=N)``: the turns around a turn hit in its session, in order (not hits).
    context: tuple[Entry, ...] | None = None
    #: With ``recall(sources=True)``: the turns a derived hit (a fact, a summary) came from.
    sources: tuple[Entry, ...] | None = None
    #: The entry's content was clipped for a list (a tool's answer): ``get_memory`` has all of it.
    truncated: bool = False

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> HitRecord:
        # Returned as a HitRecord, so that the schema of what a hit serialises to is HitRecord's.
        fields = dict(self.entry.__dict__)
        fields.update(score=self.score, snippet=self.snippet, components=self.components, context=self.context,
                      sources=self.sources, truncated=self.truncated)
        return HitRecord.trusted(fields)

    @classmethod
    def json_schema(cls, mode: Literal["validation", "serialization"] = "validation") -> dict[str, Any]:
        """As validated: the nested fields; as serialised: :class:`HitRecord`'s flat shape."""
        return HitRecord.json_schema(mode) if mode == "serialization" else super().json_schema(mode)

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON shape (:class:`HitRecord`): the entry's fields with ``score``, ``snippet``,
        ``components``, ``context``, ``sources`` and ``truncated`` beside them."""
        return self.model_dump(mode="json")


class HitRecord(Entry):
    """The JSON shape of a :class:`Hit`: the entry's fields, flat, with the hit's beside them."""

    score: float = Field(description="relevance in [0, 1], the same scale in every mode and store: how likely the hit"
                                     " holds what was asked")
    snippet: str = Field("", description="the matched words in context, when recall made one")
    components: dict[str, dict[str, float | int | None]] | None = Field(
        None, description="with explain: each retriever's rank and raw score")
    context: tuple[Entry, ...] | None = Field(
        None, description="with context=N: the turns around this one in its session, in order")
    sources: tuple[Entry, ...] | None = Field(
        None, description="for what consolidation derived (a fact, a summary): the turns it came from")
    truncated: bool = Field(False, description="content was clipped here: get_memory shows all of it")


class Remembered(Record):
    """What ``remember`` (or ``supersede``) did: the id, and whether anything was written."""

    id: str
    deduped: bool = Field(False, description="an exact duplicate was already stored: this is its id")
    redactions: dict[str, int] = Field(default_factory=dict, description="what redaction replaced, by kind")
    supersedes: str | None = Field(None, description="the id of the entry this one corrected")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class SessionSummary(Record):
    """One session (conversation) in a namespace: its size and time span."""

    session: str
    turns: int
    started_at: Time
    ended_at: Time


class SessionHit(Record):
    """A session ranked by ``recall_sessions``: where it best matches, and what frames it."""

    session: str
    score: float
    anchor: Hit = Field(description="the session's best-matching entry")
    around: tuple[Entry, ...] = Field((), description="the anchor with the turns just before and after it, in order")
    first: Entry
    last: Entry
    turns: int
    started_at: Time
    ended_at: Time

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class FilePart(Record):
    """Part of a store's file: a table, an index, a virtual table with its shadow tables, free pages."""

    name: str = Field(description='the table or index; a virtual table as "keyword index (entries_fts*)"')
    kind: Literal["table", "index", "keyword index", "vector index", "virtual table", "free", "file"] = Field(
        description="file: the file's own pages (its pointer map)")
    table: str | None = Field(description="the table it belongs to (an index's table, a shadow table's owner)")
    pages: int
    bytes: int


class FileSizes(Record):
    """A store's file by what holds it. ``parts`` add up to ``file_bytes``; they are empty when the
    SQLite build cannot tell (a file without a pointer map, and no ``dbstat``)."""

    source: Literal["pointer-map", "dbstat", "pages"] = Field(
        description="where the sizes come from: the file's pointer map, SQLite's dbstat, or page totals only")
    page_size: int
    pages: int
    free_pages: int
    file_bytes: int = Field(description="pages × page size: the database file as committed, the WAL included")
    parts: tuple[FilePart, ...] = Field(description="largest first")


class SessionSize(Record):
    """A session's size: its live entries and the UTF-8 bytes of their content."""

    session: str = Field(description="the session id as stored (pseudonymised when the store pseudonymises)")
    turns: int
    content_bytes: int


class StoreStats(Record):
    """What ``MemoryStore.stats`` reports about a store's namespace and its file."""

    path: str
    namespace: str
    entries: int = Field(description="live entries of the namespace (not expired)")
    by_kind: dict[str, int]
    by_role: dict[str, int]
    sessions: int
    expired_pending_purge: int
    redacted: dict[str, int] = Field(description="kinds redacted on write, with their counts")
    written_without_redaction: int
    namespaces: list[str]
    schema_version: int
    file_bytes: int = Field(description="the database file and its WAL, as on disk")
    bytes_per_entry: float | None = Field(description="file_bytes / entries (None when there are none)")
    largest_sessions: tuple[SessionSize, ...] = Field(description="the five with the most entries")
    sizes: FileSizes


# ---- what comes in -----------------------------------------------------------------------------


def _moment(field: str) -> BeforeValidator:
    """A time the caller gave for ``field`` (ISO-8601, an age like ``7d``, Unix seconds, a datetime),
    range-checked. An empty value means "not given": ``created_at`` is then now."""

    def read(value: Any) -> datetime | None:
        return read_time(value, field) if value else None

    return BeforeValidator(read)


# Python's str.isspace() counts U+001C–U+001F as space too; Rust's \s does not.
_NOT_ALL_SPACE = r"[^\s\x1c-\x1f]"
# A character that shows: not a space, not a control character (C0, DEL, C1) and not an invisible
# format character (soft hyphen, zero-width space and joiners, direction marks, word joiner, BOM).
# Four-digit escapes, which the Rust and Python engines and JSON Schema all read alike.
VISIBLE_CHARACTER = (
    r"[^\s\u0000-\u001f\u007f-\u009f\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]"
)
_VISIBLE = re.compile(VISIBLE_CHARACTER)


def has_visible_text(value: str) -> bool:
    """Whether ``value`` holds a character that shows: a memory of only spaces, NULs or other
    control characters says nothing and is refused."""
    return _VISIBLE.search(value) is not None


def _optional_kind(value: Any) -> Any:
    return value or None  # an empty kind means "the default for the item"


def _tag_list(value: Any) -> Any:
    return (value,) if isinstance(value, str) else value  # one tag may come bare


_TIME_SCHEMA = {
    "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}],
    "description": "ISO-8601 (2024-05-01T12:00:00Z; no zone means UTC), an age back from now (30m, 24h, 7d, 2w), "
                   "or Unix seconds; within years 1-9999",
}
_InTime = Annotated[datetime | None, WithJsonSchema(_TIME_SCHEMA)]


def _line_schema(schema: dict[str, Any]) -> None:
    """The JSON schema of a line: ``text`` may stand for ``content`` and ``timestamp`` for ``created_at``."""
    props = schema["properties"]
    props["text"] = {**props["content"], "description": "the same as content (content wins when both are given)"}
    props["timestamp"] = {**props["created_at"], "description": "the same as created_at (created_at wins)"}
    schema.pop("required", None)
    schema["anyOf"] = [{"required": ["content"]}, {"required": ["text"]}]


class ImportLine(Record):
    """A new entry as it comes in: one JSONL import line, or the fields given to ``MemoryStore.add``.

    A line may carry other keys: the JSONL reader keeps them in the entry's ``metadata`` before
    the line gets here, and this model ignores keys it does not know. Values are checked, not yet
    normalised: ``prepare_row`` strips and de-duplicates tags, fills the defaults and redacts.
    Fields are in the order they are checked, so the first error of a line is the one reported.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", json_schema_extra=_line_schema)

    content: Annotated[
        StrictStr,
        Field(validation_alias=AliasChoices("content", "text"), max_length=MAX_CONTENT_CHARS,
              pattern=VISIBLE_CHARACTER, description="the entry's text"),
    ]
    role: StrictStr | None = Field(None, description="who said it (user, assistant, tool …); makes the kind a turn")
    session: StrictStr | None = Field(None, description="the conversation or run it belongs to")
    kind: Annotated[Kind | None, BeforeValidator(_optional_kind)] = Field(
        None, description="default: turn when a role is given, else note"
    )
    # Empty: not given. Blank: refused.
    id: StrictStr | None = Field(
        None, pattern=f"^$|{_NOT_ALL_SPACE}", description="unique in the namespace; default: a new ULID"
    )
    created_at: Annotated[_InTime, _moment("created_at")] = Field(
        None, validation_alias=AliasChoices("created_at", "timestamp")
    )
    tags: Annotated[
        tuple[StrictStr, ...] | None,
        BeforeValidator(_tag_list),
        WithJsonSchema({"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}, {"type": "null"}]}),
    ] = Field(None, description="a list of tags (or one, as a string); stripped, duplicates dropped")
    source: StrictStr | None = None
    metadata: dict[Any, Any] | None = Field(None, description="any JSON object")
    expires_at: Annotated[_InTime, _moment("expires_at")] = None
    ttl_days: Annotated[float, Field(strict=True, gt=0, lt=MAX_TTL_DAYS)] | None = Field(
        None, description="expire this many days from now, and renew by as much on a read that asks"
        " (with expires_at too, as an export writes them: that expiry is kept)"
    )
    updated_at: Annotated[_InTime, _moment("updated_at")] = Field(
        None, description="when it was last written (an export carries it over); default: now"
    )
    redactions: dict[StrictStr, StrictInt] | None = Field(
        None, description="counts of kinds already redacted (an export carries them over)"
    )
    namespace: StrictStr | None = Field(None, description="default: the store's namespace")

    @classmethod
    def message(cls, field: str, error: ErrorDetails) -> str | None:
        kind, value = error["type"], error.get("input")
        if field == "content":
            if kind == "string_too_long":
                return (f"content is {len(value):,} characters; the limit is {MAX_CONTENT_CHARS:,}"
                        " — split it into several entries")
            if kind == "string_pattern_mismatch":
                return "an entry's content cannot be empty (or only spaces and control characters)"
            return "an entry needs its text as a string in 'content' (or 'text')"
        if field == "kind" and kind == "literal_error":
            return unknown_kind(value)
        if field == "id":
            return f"an id must be a non-empty string, not {value!r}"
        if field == "tags":
            if len(error["loc"]) > 1:
                return f"tags must be strings, got {value!r}"
            return f"tags must be a list of strings, not {type(value).__name__}"
        if field == "metadata":
            return f"metadata must be a JSON object, not {type(value).__name__}"
        if field == "ttl_days":
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return f"ttl_days {value!r} is too far ahead — at most {MAX_TTL_DAYS:,} days"
            return f"ttl_days must be a positive number, not {value!r}"
        if field == "redactions":
            return 'redactions must be an object of counts, like {"EMAIL": 1}'
        return None


def check_nesting(value: Any, what: str, limit: int = MAX_NESTING) -> None:
    """Raise :class:`InvalidInputError` when ``value`` nests lists and objects (dicts, lists, tuples)
    more than ``limit`` deep.

    It walks with its own stack, never recursing, so any depth can be checked; a value that
    contains itself counts as too deep.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            raise InvalidInputError(f"{what} is nested more than {limit} levels deep — flatten it")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))


def content_hash(content: str | bytes) -> str:
    data = content.encode("utf-8") if isinstance(content, str) else content
    return HASH_PREFIX + hashlib.sha256(data).hexdigest()


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise InvalidInputError(unknown_kind(kind))
    return kind


def unknown_kind(kind: Any) -> str:
    return f"unknown kind {kind!r} — use one of: {', '.join(KINDS)}"


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
        try:
            return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
        except (OverflowError, ValueError):  # the age reaches back past what a datetime can hold
            raise InvalidInputError(
                f"cannot read a time from {value!r} — an age must reach back no further than year 1"
            ) from None
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
    """Whole milliseconds since the epoch, rounded down (naive times are UTC).

    Integer arithmetic on the timedelta: exact for every datetime, where a float timestamp loses
    microseconds far from now (and could round 9999-12-31T23:59:59.9999 up into year 10000).
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MS


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def now_ms() -> int:
    return time.time_ns() // 1_000_000  # what to_ms(datetime.now(UTC)) gives, in a tenth of the time


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def read_time(value: Any, field: str) -> datetime:
    """The time ``value`` names (see :func:`parse_time`), refused cleanly unless within years 1–9999 UTC.

    A time outside that range would be stored, then fail every read as a UTC datetime.
    """
    moment = parse_time(value)
    # Aware datetimes compare in UTC without overflowing, even a zone's width past year 1 or 9999.
    if not _FIRST <= moment <= _LAST:
        raise InvalidInputError(f"{field} {value!r} is out of range — use a time within years 1–9999 (UTC)")
    return moment


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 entry``, ``3 entries``: a count with its noun agreeing (for messages and reports)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


_FIRST = datetime(1, 1, 1, tzinfo=UTC)
_LAST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

# allow_nan=False: NaN and Infinity are not JSON, and SQLite's json_valid() refuses them.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(value: Any) -> str:
    """Canonical compact JSON: sorted keys, no spaces, real Unicode."""
    return _CANONICAL.encode(value)


@dataclass(frozen=True)
class MigrationStatus:
    """One migration of a set as a store records it (``migrate --list``)."""

    set_name: str
    number: int
    name: str
    applied_at: str | None  # when it was applied or skipped; None while pending
    skipped: bool = False  # recorded as done without running (see Retired)
    retired: str | None = None  # why it no longer runs everywhere, when it is retired
    known: bool = True  # False: the file records it, but this code does not ship it

    @property
    def state(self) -> str:
        """``applied``, ``skipped`` or ``pending``."""
        if self.applied_at is None:
            return "pending"
        return "skipped" if self.skipped else "applied"

    def to_dict(self) -> dict[str, object]:
        return {
            "set": self.set_name, "number": self.number, "name": self.name, "state": self.state,
            "at": self.applied_at, "retired": self.retired, "known": self.known,
        }
