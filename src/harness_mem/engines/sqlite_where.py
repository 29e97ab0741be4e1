"""A :class:`~harness_mem.filters.Selection` as a SQLite WHERE clause over ``entries``."""

from __future__ import annotations

import json
from typing import Any

from ..filters import Selection
from ..models import to_ms
from ..storage import DERIVED_SOURCE


def where(selection: Selection, alias: str = "e") -> tuple[str, list[Any]]:
    """A WHERE clause (without the keyword) and its parameters."""
    filters = selection.filters
    # A forgotten entry is never returned; a superseded one only when asked for.
    clauses = [f"{alias}.namespace = ?", f"{alias}.forgotten_at IS NULL"]
    params: list[Any] = [selection.namespace]
    if filters.as_of is not None:
        # True then: said by that time, and not replaced by an entry that became true by then (a
        # correction's own time, its created_at, is when the old entry stopped being true).
        clauses.append(f"{alias}.created_at <= ?")
        params.append(to_ms(filters.as_of))
        if not filters.include_superseded:
            clauses.append(
                f"({alias}.superseded_by IS NULL OR EXISTS (SELECT 1 FROM entries successor"
                f" WHERE successor.namespace = {alias}.namespace AND successor.id = {alias}.superseded_by"
                " AND successor.created_at > ?))"
            )
            params.append(to_ms(filters.as_of))
    elif not filters.include_superseded:
        clauses.append(f"{alias}.superseded_by IS NULL")
    if selection.live:
        clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)")
        params.append(selection.now)
    if filters.kind is not None:
        kinds = [filters.kind] if isinstance(filters.kind, str) else list(filters.kind)
        clauses.append(f"{alias}.kind IN ({', '.join('?' * len(kinds))})")
        params.extend(kinds)
    for column in ("role", "session"):
        value = getattr(filters, column)
        if value is not None:
            clauses.append(f"{alias}.{column} = ?")
            params.append(value)
    prefix = filters.session_prefix
    if prefix:
        clauses.append(f"substr({alias}.session, 1, ?) = ?")
        params.extend([len(prefix), prefix])
        if ord(prefix[-1]) < 0x10FFFF:
            # The same condition as a range (UTF-8 sorts by code point), which the session index answers.
            clauses.append(f"{alias}.session >= ? AND {alias}.session < ?")
            params.extend([prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)])
    if filters.tags:
        clauses.append(
            f"NOT EXISTS (SELECT 1 FROM json_each(?) AS wanted WHERE wanted.value NOT IN"
            f" (SELECT value FROM json_each({alias}.tags)))"
        )
        params.append(json.dumps(list(filters.tags)))
    if filters.any_tags:
        clauses.append(
            f"EXISTS (SELECT 1 FROM json_each({alias}.tags) AS have WHERE have.value IN"
            f" (SELECT value FROM json_each(?)))"
        )
        params.append(json.dumps(list(filters.any_tags)))
    if filters.exclude_sessions:
        clauses.append(f"({alias}.session IS NULL OR {alias}.session NOT IN ({', '.join('?' * len(filters.exclude_sessions))}))")
        params.extend(filters.exclude_sessions)
    if filters.exclude_kinds:
        clauses.append(f"{alias}.kind NOT IN ({', '.join('?' * len(filters.exclude_kinds))})")
        params.extend(filters.exclude_kinds)
    if filters.exclude_tags:
        clauses.append(
            f"NOT EXISTS (SELECT 1 FROM json_each({alias}.tags) AS have WHERE have.value IN"
            f" (SELECT value FROM json_each(?)))"
        )
        params.append(json.dumps(list(filters.exclude_tags)))
    if filters.derived is not None:
        clauses.append(f"{alias}.source {'=' if filters.derived else 'IS NOT'} ?")
        params.append(DERIVED_SOURCE)
    if filters.since is not None:
        clauses.append(f"{alias}.created_at >= ?")
        params.append(to_ms(filters.since))
    if filters.until is not None:
        clauses.append(f"{alias}.created_at <= ?")
        params.append(to_ms(filters.until))
    return " AND ".join(clauses), params
