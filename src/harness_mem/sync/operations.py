"""The operation: one change to a store, as it travels between devices.

An operation is immutable and content-addressed: its identity is the sha256 of its canonical JSON
(sorted keys, no spaces, UTF-8), so the same operation written twice, or read from two copies of a
chunk, is one operation. It carries only what the store already holds at rest (redacted content,
pseudonymised identity fields, sealed identity values); nothing derived travels (keyword and vector
indexes, consolidation's entries), since every device rebuilds those from the entries.

The kinds (``op``):

- ``add``: an entry as written, every column that is fixed when it is written, and the sealed raw
  values behind its pseudonyms.
- ``supersede``: ``new_id`` corrects ``id`` from ``valid_from`` (the new version is its own ``add``).
- ``forget``: the ids forgotten at the origin, and the selector they were chosen by, if any.
- ``expiry``: an entry's time to live renewed to ``expires_at``.
- ``tag``: an entry's tags changed in place to ``tags`` (the whole list, as stored; the latest wins).

``harness-mem schema sync-op`` prints the JSON schema; :func:`parse_operation` checks one.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from ..errors import SyncFormatError
from ..identities import SealedIdentity
from ..models import Record, dumps
from ..rows import Row
from .clock import Stamp

FORMAT_VERSION = 1
OpKind = Literal["add", "supersede", "forget", "expiry", "tag"]
Millis = Annotated[int, Field(ge=0)]
DEVICE_PATTERN = r"^[0-9a-f]{32}$"
#: What follows an id in the id of a version of it added apart that lost (``<id>~fork-<words' hash>``).
FORK_MARK = "~fork-"


class EntryColumns(Record):
    """An entry's columns that are fixed when it is written, as stored."""

    kind: str
    content: str
    role: str | None
    session: str | None
    tags: list[str]
    source: str | None
    metadata: dict[str, Any]
    created_at: Millis
    updated_at: Millis | None
    expires_at: Millis | None
    ttl_ms: Millis | None
    redactions: dict[str, int] | None


class SealedValue(Record):
    """A row of the ``identities`` table: a pseudonym, the key it is sealed with, the sealed raw value."""

    stored: str
    key_id: str
    sealed: str  # base64


class AddBody(Record):
    entry: EntryColumns
    identities: list[SealedValue]


class SupersedeBody(Record):
    new_id: str
    valid_from: Millis


class ForgetBody(Record):
    ids: list[str]
    selector: dict[str, Any] | None
    at: Millis


class ExpiryBody(Record):
    expires_at: Millis


class TagBody(Record):
    tags: list[str]


_BODIES: dict[str, type[Record]] = {"add": AddBody, "supersede": SupersedeBody, "forget": ForgetBody,
                                    "expiry": ExpiryBody, "tag": TagBody}


class Operation(Record):
    """One logged change (see the module docstring)."""

    error = SyncFormatError

    v: Literal[1] = 1
    op: OpKind
    ns: str
    id: str | None  # the entry it is about; None for a forget of several
    hlc: tuple[Millis, Annotated[int, Field(ge=0)]]
    device: Annotated[str, Field(pattern=DEVICE_PATTERN)]
    body: AddBody | SupersedeBody | ForgetBody | ExpiryBody | TagBody

    @model_validator(mode="after")
    def _body_fits_op(self) -> Self:
        if type(self.body) is not _BODIES[self.op]:
            raise ValueError(f"its body is not the body of an {self.op!r} operation")
        if self.op != "forget" and self.id is None:
            raise ValueError(f"an {self.op!r} operation names the entry it is about (id)")
        return self

    @property
    def stamp(self) -> Stamp:
        return Stamp(*self.hlc)

    def canonical(self) -> bytes:
        """The bytes its identity is the hash of: sorted keys, no spaces, UTF-8."""
        return self._canonical

    @cached_property
    def _canonical(self) -> bytes:  # made once: an operation is hashed, logged and written
        return dumps(self.model_dump(mode="json")).encode()

    @cached_property
    def hash(self) -> str:
        return hashlib.sha256(self._canonical).hexdigest()


def related_id(op: Operation) -> str | None:
    """The other entry an operation is about, besides ``id``: a supersede's new version."""
    return op.body.new_id if isinstance(op.body, SupersedeBody) else None


def parse_operation(data: Mapping[str, Any]) -> Operation:
    """An operation read from elsewhere, checked; :class:`SyncFormatError` in one line if it is not
    one (a newer format says so: it needs a newer harness-mem, it is not broken)."""
    version = data.get("v") if isinstance(data, Mapping) else None
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise SyncFormatError(f"an operation of sync format {version}, made by a newer harness-mem — upgrade to read it")
    return Operation.check(data)


def added(row: Row, device: str, stamp: Stamp, identities: Sequence[SealedIdentity] = ()) -> Operation:
    """The ``add`` of a stored row, with the sealed values behind the pseudonyms it uses."""
    entry = EntryColumns.trusted({
        "kind": row.kind, "content": row.content, "role": row.role, "session": row.session,
        "tags": json.loads(row.tags), "source": row.source, "metadata": json.loads(row.metadata),
        "created_at": row.created_at, "updated_at": row.updated_at, "expires_at": row.expires_at,
        "ttl_ms": row.ttl_ms, "redactions": None if row.redactions is None else json.loads(row.redactions)})
    sealed = [SealedValue.trusted({"stored": s.stored, "key_id": s.key_id,
                                   "sealed": base64.b64encode(s.sealed).decode()}) for s in identities]
    return _operation("add", row.namespace, row.id, device, stamp,
                      AddBody.trusted({"entry": entry, "identities": sealed}))


def superseded(namespace: str, old_id: str, new_id: str, when: int, device: str, stamp: Stamp) -> Operation:
    return _operation("supersede", namespace, old_id, device, stamp,
                      SupersedeBody.trusted({"new_id": new_id, "valid_from": when}))


def forgotten(namespace: str, ids: Sequence[str], selector: Mapping[str, Any] | None, when: int, device: str,
              stamp: Stamp) -> Operation:
    body = ForgetBody.trusted({"ids": sorted(ids), "selector": None if selector is None else dict(selector), "at": when})
    return _operation("forget", namespace, ids[0] if len(ids) == 1 else None, device, stamp, body)


def renewed(namespace: str, entry_id: str, expires_at: int, device: str, stamp: Stamp) -> Operation:
    return _operation("expiry", namespace, entry_id, device, stamp, ExpiryBody.trusted({"expires_at": expires_at}))


def retagged(namespace: str, entry_id: str, tags: Sequence[str], device: str, stamp: Stamp) -> Operation:
    return _operation("tag", namespace, entry_id, device, stamp, TagBody.trusted({"tags": list(tags)}))


def _operation(op: OpKind, namespace: str, entry_id: str | None, device: str, stamp: Stamp, body: Record) -> Operation:
    return Operation.trusted({"v": FORMAT_VERSION, "op": op, "ns": namespace, "id": entry_id,
                              "hlc": (stamp.wall, stamp.tick), "device": device, "body": body})
