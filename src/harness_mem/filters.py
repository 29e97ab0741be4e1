"""Recall and list filters: the conditions every returned entry meets, as one SQL WHERE clause.

The arguments come from callers, the CLI and MCP tools loosely typed (times as ``7d``, a tag as a
bare string); :class:`Filters` validates them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictStr, WithJsonSchema

from .models import Record, check_kind, clean_tags, parse_time, to_ms


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

    @property
    def is_empty(self) -> bool:
        """True when only the namespace and expiry constrain the result."""
        return (self.kind is None and self.role is None and self.session is None and not self.session_prefix
                and not self.tags and not self.any_tags and self.since is None and self.until is None)

    def sql(self, namespace: str, now_ms: int, alias: str = "e", *, live: bool = True) -> tuple[str, list[Any]]:
        """A WHERE clause (without the keyword) and its parameters.

        ``live=False`` leaves out the expiry test, for a first pass that an index answers alone.
        """
        # A forgotten entry is never returned; a superseded one only when asked for.
        clauses = [f"{alias}.namespace = ?", f"{alias}.forgotten_at IS NULL"]
        params: list[Any] = [namespace]
        if not self.include_superseded:
            clauses.append(f"{alias}.superseded_by IS NULL")
        if live:
            clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)")
            params.append(now_ms)
        if self.kind is not None:
            kinds = [self.kind] if isinstance(self.kind, str) else list(self.kind)
            clauses.append(f"{alias}.kind IN ({', '.join('?' * len(kinds))})")
            params.extend(kinds)
        for column in ("role", "session"):
            value = getattr(self, column)
            if value is not None:
                clauses.append(f"{alias}.{column} = ?")
                params.append(value)
        if self.session_prefix:
            clauses.append(f"substr({alias}.session, 1, ?) = ?")
            params.extend([len(self.session_prefix), self.session_prefix])
            if ord(self.session_prefix[-1]) < 0x10FFFF:
                # The same condition as a range (UTF-8 sorts by code point), which the session index answers.
                clauses.append(f"{alias}.session >= ? AND {alias}.session < ?")
                params.extend([self.session_prefix, self.session_prefix[:-1] + chr(ord(self.session_prefix[-1]) + 1)])
        if self.tags:
            clauses.append(
                f"NOT EXISTS (SELECT 1 FROM json_each(?) AS wanted WHERE wanted.value NOT IN"
                f" (SELECT value FROM json_each({alias}.tags)))"
            )
            params.append(json.dumps(list(self.tags)))
        if self.any_tags:
            clauses.append(
                f"EXISTS (SELECT 1 FROM json_each({alias}.tags) AS have WHERE have.value IN"
                f" (SELECT value FROM json_each(?)))"
            )
            params.append(json.dumps(list(self.any_tags)))
        if self.since is not None:
            clauses.append(f"{alias}.created_at >= ?")
            params.append(to_ms(self.since))
        if self.until is not None:
            clauses.append(f"{alias}.created_at <= ?")
            params.append(to_ms(self.until))
        return " AND ".join(clauses), params


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
) -> Filters:
    """Filters from loosely typed arguments (times as ISO strings or ages like ``7d``), validated."""
    return Filters(
        kind=kind, role=role, session=session, session_prefix=session_prefix, tags=tags, any_tags=any_tags,
        since=since, until=until, include_superseded=include_superseded,
    )
