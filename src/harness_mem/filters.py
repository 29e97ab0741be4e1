"""Recall and list filters: the conditions every returned entry meets (each engine renders them).

The arguments come from callers, the CLI and MCP tools loosely typed (times as ``7d``, a tag as a
bare string); :class:`Filters` validates them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictStr, WithJsonSchema

from .errors import InvalidInputError
from .models import Record, check_kind, clean_tags, parse_time


def _kinds(value: Any) -> Any:
    """One kind or several, each checked; several become a tuple."""
    if value is None:
        return None
    if isinstance(value, str):
        return check_kind(value)
    return tuple(check_kind(k) for k in value)


def _time(value: Any) -> Any:
    return parse_time(value) if value is not None else None


_Tags = Annotated[tuple[str, ...], BeforeValidator(clean_tags)]


def _names(value: Any) -> Any:
    """One value or several, as a tuple (a bare string is one value, not its characters)."""
    return (value,) if isinstance(value, str) else tuple(value or ())


def _kind_list(value: Any) -> Any:
    return tuple(check_kind(k) for k in _names(value))


_Names = Annotated[tuple[StrictStr, ...], BeforeValidator(_names)]

#: The operators a metadata filter takes (MongoDB's names, as LangGraph, Chroma and mem0 use them).
METADATA_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in")
#: At most this many conditions in one filter, keys this deep, values in one ``$in``.
MAX_METADATA_CONDITIONS, MAX_METADATA_DEPTH, MAX_IN_VALUES = 32, 8, 100
_INT64 = 2**63


class MetadataCondition(Record):
    """One condition on a stored metadata value: the value at ``path`` (keys from the top) compared
    with ``value`` by ``op``. Values compare as JSON does: a number with a number, a string with a
    string (by code point), true/false and null only by (in)equality; a key that is not there
    matches ``$ne`` alone."""

    path: tuple[str, ...]
    op: str
    value: Any


def _scalar(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise InvalidInputError(f"metadata filter {where}: {value} is out of range for a stored number")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"metadata filter {where}: {value} is not a finite number")
        return value
    raise InvalidInputError(f"metadata filter {where}: compare with a string, number, true, false or null,"
                            f" not {type(value).__name__}")


def metadata_conditions(spec: Any) -> tuple[MetadataCondition, ...]:
    """A metadata filter (``{"lang": "en", "user.tier": {"$in": ["gold", "silver"]}, "score":
    {"$gte": 3}}``; dotted keys and nested mappings both name nested keys) as its conditions, all of
    which an entry must meet."""
    if spec is None or isinstance(spec, tuple):
        return spec or ()
    if not isinstance(spec, Mapping):
        raise InvalidInputError("a metadata filter is a mapping of keys to values or to {operator: value}")
    found: list[MetadataCondition] = []

    def walk(mapping: Mapping[Any, Any], path: tuple[str, ...]) -> None:
        for key, wanted in mapping.items():
            if not isinstance(key, str) or not key or key.startswith("$"):
                raise InvalidInputError(f"metadata filter: {str(key)[:40]!r} is not a key"
                                        f" (operators are {', '.join(METADATA_OPERATORS)}, after a key)")
            parts = path + tuple(key.split("."))
            if "" in parts or len(parts) > MAX_METADATA_DEPTH:
                raise InvalidInputError(f"metadata filter: {'.'.join(parts)[:60]!r} is not a key path"
                                        f" (at most {MAX_METADATA_DEPTH} keys, none empty)")
            if isinstance(wanted, Mapping) and wanted and all(isinstance(k, str) and k.startswith("$") for k in wanted):
                for op, value in wanted.items():
                    add(parts, op, value)
            elif isinstance(wanted, Mapping):
                walk(wanted, parts)
            else:
                add(parts, "$eq", wanted)

    def add(parts: tuple[str, ...], op: str, value: Any) -> None:
        where = ".".join(parts)[:60]
        if op not in METADATA_OPERATORS:
            raise InvalidInputError(f"metadata filter {where}: unknown operator {op[:20]!r}"
                                    f" (one of {', '.join(METADATA_OPERATORS)})")
        if op == "$in":
            if isinstance(value, str | bytes) or not isinstance(value, Sequence) or not 0 < len(value) <= MAX_IN_VALUES:
                raise InvalidInputError(f"metadata filter {where}: $in takes a list of 1 to {MAX_IN_VALUES} values")
            value = tuple(_scalar(v, where) for v in value)
        else:
            value = _scalar(value, where)
            if op in ("$gt", "$gte", "$lt", "$lte") and (value is None or isinstance(value, bool)):
                raise InvalidInputError(f"metadata filter {where}: {op} compares numbers or strings, not {value!r}")
        found.append(MetadataCondition.trusted({"path": parts, "op": op, "value": value}))
        if len(found) > MAX_METADATA_CONDITIONS:
            raise InvalidInputError(f"a metadata filter holds at most {MAX_METADATA_CONDITIONS} conditions")

    walk(spec, ())
    return tuple(found)
_When = Annotated[
    datetime | None,
    BeforeValidator(_time),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}],
                    "description": "ISO-8601 or an age back from now (30m, 24h, 7d, 2w)"}),
]


class Filters(Record):
    """Conditions every recalled or listed entry must meet; all optional and combinable."""

    kind: Annotated[str | tuple[str, ...] | None, BeforeValidator(_kinds)] = Field(
        None, description="one kind, or a list of kinds (any of them)"
    )
    role: StrictStr | None = None
    session: StrictStr | None = None
    session_prefix: StrictStr | None = None
    tags: _Tags = Field((), description="all of these")
    any_tags: _Tags = Field((), description="at least one of these")
    since: _When = None
    until: _When = None
    include_superseded: bool = Field(False, description="also entries a correction replaced")
    exclude_sessions: _Names = Field((), description="none of these sessions")
    exclude_kinds: Annotated[tuple[str, ...], BeforeValidator(_kind_list)] = Field((), description="none of these kinds")
    exclude_tags: _Tags = Field((), description="no entry with any of these tags")
    as_of: _When = Field(
        None, description="what was true then: entries said by that time and not yet replaced by a later one"
    )
    derived: bool | None = Field(
        None, description="true: only what consolidation derived (segments, facts); false: none of it"
    )
    metadata: Annotated[tuple[MetadataCondition, ...], BeforeValidator(metadata_conditions)] = Field(
        (), description='conditions on metadata values: {"key": value, "a.b": {"$gte": 3}, "k": {"$in": [...]}}'
    )

    @property
    def is_empty(self) -> bool:
        """True when only the namespace and expiry constrain the result."""
        return (self.kind is None and self.role is None and self.session is None and not self.session_prefix
                and not self.tags and not self.any_tags and self.since is None and self.until is None
                and self.derived is None and self.as_of is None and not self.excludes and not self.metadata)

    @property
    def excludes(self) -> bool:
        """True when some sessions, kinds or tags are left out."""
        return bool(self.exclude_sessions or self.exclude_kinds or self.exclude_tags)


@dataclass(frozen=True)
class Selection:
    """Filters bound to a namespace and a moment: what an engine turns into its own query.

    ``live=False`` leaves out the expiry test, for a first pass that an index answers alone.
    """

    filters: Filters
    namespace: str
    now: int
    live: bool = True

    def but(self, **changes: Any) -> Selection:
        """This selection with some of its filters changed."""
        return Selection(self.filters.model_copy(update=changes), self.namespace, self.now, self.live)


def make_filters(
    kind: str | Sequence[str] | None = None,
    role: str | None = None,
    session: str | None = None,
    session_prefix: str | None = None,
    tags: Sequence[str] | str = (),
    any_tags: Sequence[str] | str = (),
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    include_superseded: bool = False,
    derived: bool | None = None,
    as_of: str | datetime | None = None,
    exclude_sessions: Sequence[str] | str = (),
    exclude_kinds: Sequence[str] | str = (),
    exclude_tags: Sequence[str] | str = (),
    metadata: Mapping[str, Any] | None = None,
) -> Filters:
    """Filters from loosely typed arguments (times as ISO strings or ages like ``7d``), validated."""
    return Filters(
        kind=kind, role=role, session=session, session_prefix=session_prefix, tags=tags, any_tags=any_tags,
        since=since, until=until, include_superseded=include_superseded, derived=derived,
        as_of=as_of, exclude_sessions=exclude_sessions, exclude_kinds=exclude_kinds, exclude_tags=exclude_tags,
        metadata=metadata,
    )
