"""The ``entries`` row: how an item becomes one (checked, redacted, normalised) and an Entry again.

Writes carry rows, not :class:`Entry` objects: an import needs only the row, and :func:`entry_from_row`
makes the entry from it exactly as a read does. :func:`prepare_row` runs once per imported line (in
a worker process for a large import): :class:`~harness_mem.models.ImportLine` validates the item,
and the common case (a plain turn: no tags, source, metadata or expiry) skips the steps it does not need.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import InvalidInputError, WriteRefusedError
from .models import (
    MAX_CONTENT_CHARS,
    Entry,
    ImportLine,
    check_nesting,
    clean_tags,
    content_hash,
    dumps,
    from_ms,
    new_id,
    now_ms,
    to_ms,
)
from .redaction import Action, Redaction, Redactor

if TYPE_CHECKING:
    from .identities import Sealer

COLUMNS = (
    "pk, id, namespace, kind, content, role, session, tags, source, metadata, created_at, expires_at,"
    " content_hash, redactions, superseded_by, superseded_at, forgotten_at, updated_at, ttl_ms"
)
COLUMN_NAMES = tuple(name.strip() for name in COLUMNS.split(","))
PLACEHOLDERS = ", ".join("?" * len(COLUMN_NAMES))

__all__ = [
    "COLUMNS", "COLUMN_NAMES", "MAX_CONTENT_CHARS", "PLACEHOLDERS", "Row", "StoredMetadata", "entry_from_row", "identity", "identity_tags",
    "prepare_row", "stored_metadata",
]

BULK_BATCH_SIZE = 5000  # imports: fewer, larger transactions (each commit also flushes an FTS5 segment)
MAX_BATCH_CHARS = 32_000_000  # a batch is held in memory until written: bound its text, not only its count


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
    superseded_by: str | None = None  # the id of the entry that corrected this one
    superseded_at: int | None = None  # ms
    forgotten_at: int | None = None  # ms; a tombstone until purged
    updated_at: int | None = None  # ms; when it was written (None: its created_at)
    ttl_ms: int | None = None  # the time to live it was written with, which a refresh renews


def identity(value: str | None, redactor: Redactor | None) -> str | None:
    """An identity field (id, session, role, namespace, each tag) as it is stored and looked up.

    The rule: identity fields pass the same redactor as content, but as keyed pseudonyms
    (:meth:`Redactor.pseudonymise`), never labels: ``user-ada@example.com`` is stored as
    ``user-<EMAIL:…>``, two sessions stay two, and every lookup (get by id, ``--session``, a
    role filter, ``--tag``) applies this function to its key, so the raw value still finds the row. Without a
    redactor (redaction turned off) values are stored and looked up as given.
    """
    if value is None or redactor is None:
        return value
    return redactor.pseudonymise(value).text


def identity_tags(tags: Any, redactor: Redactor | None) -> tuple[str, ...]:
    """Tags as they are stored and looked up: cleaned (:func:`~harness_mem.models.clean_tags`),
    each then an identity value (:func:`identity`), as :func:`prepare_row` stores them."""
    cleaned = clean_tags(tags)
    if redactor is None or not cleaned:
        return cleaned
    return clean_tags([identity(tag, redactor) or tag for tag in cleaned])


class StoredMetadata(NamedTuple):
    """Metadata as :func:`stored_metadata` stores it, what it found (by kind), and whether the policy refuses it."""

    value: Any
    counts: dict[str, int]
    blocked: bool


def stored_metadata(value: Any, redactor: Redactor, sealer: Sealer | None = None) -> StoredMetadata:
    """``value`` (an entry's metadata, or a metadata filter) as it is stored and looked up.

    Metadata values are the caller's data, read back by code (a LangGraph item's value is its
    metadata), so they follow the identity rule (:func:`identity`) rather than content's: each string
    (dict keys too) and each int that the redactor changes is stored as its keyed pseudonym, a
    filter on the raw value finds it, and ``sealer`` seals the raw value so reads give it back as
    written (:mod:`harness_mem.identities`). Two exceptions keep the policy's word: a string holding a
    credential is scrubbed as the policy says (a label or mask, never sealed), and one holding a kind the
    policy blocks makes the entry refused (``blocked``).
    """
    counts: dict[str, int] = {}
    blocked = False
    policed: frozenset[str] | None = None  # the kinds the policy scrubs even here: credentials, blocked kinds

    def leaf(raw: str | int) -> str | int:
        nonlocal blocked, policed
        text = raw if isinstance(raw, str) else str(raw)
        found = redactor.pseudonymise(text)
        if not found.spans:
            return raw
        if policed is None:
            policed = frozenset(d.kind for d in redactor.detectors
                                if d.secret or redactor.policy.action_for(d.kind) is Action.BLOCK)
        if any(span.kind in policed for span in found.spans):
            found = redactor.scrub(text)
            blocked = blocked or found.blocked
        elif sealer is not None:
            sealer.note(raw, found)
        for kind, n in found.counts.items():
            counts[kind] = counts.get(kind, 0) + n
        return found.text

    def walk(obj: Any) -> Any:
        if isinstance(obj, bool) or obj is None or isinstance(obj, float):
            return obj
        if isinstance(obj, str | int):
            return leaf(obj)
        if isinstance(obj, Mapping):
            out: dict[Any, Any] = {}
            for key, item in obj.items():
                stored = leaf(key) if isinstance(key, str) else key
                # Two keys stored alike (one address in two spellings) must not overwrite each other.
                base, n = stored, 2
                while stored in out:
                    stored, n = f"{base}#{n}", n + 1
                if stored != base and sealer is not None:
                    sealer.note(key, Redaction(str(stored)))
                out[stored] = walk(item)
            return out
        if isinstance(obj, list | tuple):
            return [walk(item) for item in obj]
        return obj

    return StoredMetadata(walk(value), counts, blocked)


def prepare_row(item: Mapping[str, Any] | Entry, *, namespace: str, redactor: Redactor | None,
                content_scrubbed: bool = False, sealer: Sealer | None = None) -> Row:
    """The row ``item`` will be stored as: checked, then redacted before anything is stored or indexed.

    ``item`` is an :class:`Entry` or a mapping with the keyword arguments of ``MemoryStore.add``
    (``content`` or ``text``), validated as an :class:`ImportLine`; ``namespace`` is the default
    when the item names none. ``content_scrubbed`` says ``redactor`` already scrubbed the content
    (a transcript turn, scrubbed whole before it was cut): it is not scrubbed again, while the
    identity fields, source and metadata still are. ``sealer`` seals the raw value of each identity
    field the redactor changes (:mod:`harness_mem.identities`). Raises :class:`InvalidInputError` for a bad item (one line, naming the
    field) and :class:`WriteRefusedError` when the redaction policy blocks it.
    """
    if isinstance(item, Entry):
        item = item.to_dict()
    for key, value in item.items():
        if isinstance(value, _NESTED):  # before anything walks it
            check_nesting(value, str(key))
    line = ImportLine.check(item)
    if line.namespace and identity(line.namespace, redactor) != namespace:
        # A caller writes only into its own namespace, whatever a line (or an item) says.
        raise InvalidInputError(
            f"this entry names namespace {line.namespace!r}, and this store writes into {namespace!r}"
            " — open it (or run the import with -N) in that namespace"
        )
    content = line.content
    role = line.role or None
    session = line.session or None
    kind = line.kind or ("turn" if role else "note")
    entry_id = line.id or new_id()
    tags = clean_tags(line.tags) if line.tags else ()
    found: dict[str, int] = {}  # what the identity fields held, by kind
    if redactor is not None:
        # Tags are looked up by value like sessions (--tag, forget --tag): each is an identity, so a
        # tag holding an e-mail becomes its pseudonym, not a label every such tag would share.
        fields = [line.id, role, session, *tags]
        for i, value in enumerate(fields):
            if value:
                pseudonymised = redactor.pseudonymise(value)
                fields[i] = pseudonymised.text
                if sealer is not None:
                    sealer.note(value, pseudonymised)
                for kind_found, n in pseudonymised.counts.items():
                    found[kind_found] = found.get(kind_found, 0) + n
        entry_id = fields[0] or entry_id
        role, session = fields[1], fields[2]
        tags = clean_tags(fields[3:]) if tags else ()
    created_ms = to_ms(line.created_at) if line.created_at else now_ms()
    source = line.source or None
    metadata: Any = line.metadata or {}
    metadata_json = "{}"
    if metadata:
        try:
            metadata_json = dumps(metadata)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"metadata is not JSON-serialisable ({exc})") from None
        metadata = json.loads(metadata_json)  # a plain JSON copy, for the redactor to walk
    written_ms = to_ms(line.updated_at) if line.updated_at else now_ms()
    ttl_ms = max(int(line.ttl_days * 86_400_000), 1) if line.ttl_days is not None else None
    if line.ttl_days is not None and not line.expires_at:
        expires_ms: int | None = now_ms() + (ttl_ms or 0)
    else:  # both given: an exported entry, whose expiry is kept and whose time to live renews it
        expires_ms = to_ms(line.expires_at) if line.expires_at else None
    redactions_json: str | None = None
    if redactor is not None:
        redactions: dict[str, int] = dict(line.redactions) if line.redactions else {}  # counts an export carries over
        for kind_found, n in found.items():
            redactions[kind_found] = redactions.get(kind_found, 0) + n
        body = Redaction(content) if content_scrubbed else redactor.scrub(content)
        scrubbed_source = redactor.scrub(source) if source else None
        kept = stored_metadata(metadata, redactor, sealer) if metadata else None
        for counts in (body.counts, scrubbed_source.counts if scrubbed_source else {}, kept.counts if kept else {}):
            for kind_found, n in counts.items():
                redactions[kind_found] = redactions.get(kind_found, 0) + n
        if body.blocked or (scrubbed_source and scrubbed_source.blocked) or (kept and kept.blocked):
            raise WriteRefusedError(
                f"the redaction policy refuses to store this entry (found: {', '.join(sorted(redactions))})",
                reason="policy", counts=redactions,
            )
        content = body.text
        if scrubbed_source is not None:
            source = scrubbed_source.text
        if kept is not None and kept.counts:
            metadata_json = dumps(kept.value)
        redactions_json = dumps(redactions) if redactions else "{}"
    try:
        digest = content_hash(content)
    except UnicodeEncodeError:
        raise InvalidInputError("content is not valid Unicode (it contains a lone surrogate)") from None
    row = Row(
        None, entry_id, namespace, kind, content, role, session,
        dumps(list(tags)) if tags else "[]", source, metadata_json, created_ms, expires_ms, digest, redactions_json,
        updated_at=written_ms, ttl_ms=ttl_ms,
    )
    _check_encodable(row)
    return row


def entry_from_row(row: Sequence[Any]) -> Entry:
    """The :class:`Entry` of a stored row (columns in :data:`COLUMNS` order), built without validation:
    the row was checked when it was written."""
    return Entry.trusted({
        "id": row[1],
        "content": row[4],
        "kind": row[3],
        "namespace": row[2],
        "role": row[5],
        "session": row[6],
        "tags": tuple(json.loads(row[7])) if row[7] != "[]" else (),  # most rows': no parse
        "source": row[8],
        "metadata": json.loads(row[9]) if row[9] != "{}" else {},
        "created_at": from_ms(row[10]),
        "expires_at": from_ms(row[11]) if row[11] is not None else None,
        "content_hash": row[12],
        "redactions": json.loads(row[13]) if row[13] is not None else None,
        "superseded_by": row[14],
        "superseded_at": from_ms(row[15]) if row[15] is not None else None,
        "updated_at": from_ms(row[17] if row[17] is not None else row[10]),
        "ttl_days": row[18] / 86_400_000 if row[18] is not None else None,
    })


_TEXT_FIELDS = ("id", "namespace", "role", "session", "tags", "source", "metadata")  # content: hashed
_text_fields = attrgetter(*_TEXT_FIELDS)
_NESTED = (dict, list, tuple)  # a tuple, not a union: isinstance checks it in half the time


def _check_encodable(row: Row) -> None:
    """Refuse a lone surrogate (JSON can spell one, ``"\\ud800"``) in a text field: SQLite stores UTF-8."""
    if "".join(filter(None, _text_fields(row))).isascii():
        return  # the common case, in one check
    for field in _TEXT_FIELDS:
        value = getattr(row, field)
        if value is not None and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInputError(f"{field} is not valid Unicode (it contains a lone surrogate)") from None
