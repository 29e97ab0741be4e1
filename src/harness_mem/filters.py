"""Recall and list filters: the conditions every returned entry meets (each engine renders them).

The arguments come from callers, the CLI and MCP tools loosely typed (times as ``7d``, a tag as a
bare string); :class:`Filters` validates them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictStr, WithJsonSchema

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

    @property
    def is_empty(self) -> bool:
        """True when only the namespace and expiry constrain the result."""
        return (self.kind is None and self.role is None and self.session is None and not self.session_prefix
                and not self.tags and not self.any_tags and self.since is None and self.until is None
                and self.derived is None and self.as_of is None and not self.excludes)

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
) -> Filters:
    """Filters from loosely typed arguments (times as ISO strings or ages like ``7d``), validated."""
    return Filters(
        kind=kind, role=role, session=session, session_prefix=session_prefix, tags=tags, any_tags=any_tags,
        since=since, until=until, include_superseded=include_superseded, derived=derived,
        as_of=as_of, exclude_sessions=exclude_sessions, exclude_kinds=exclude_kinds, exclude_tags=exclude_tags,
    )
