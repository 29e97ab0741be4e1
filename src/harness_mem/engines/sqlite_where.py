"""A :class:`~harness_mem.filters.Selection` as a SQLite WHERE clause over ``entries``."""

from __future__ import annotations

import json
from typing import Any

from ..filters import MetadataCondition, Selection
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
    for condition in filters.metadata:
        clause, values = _metadata(condition, alias)
        clauses.append(clause)
        params.extend(values)
    if filters.since is not None:
        clauses.append(f"{alias}.created_at >= ?")
        params.append(to_ms(filters.since))
    if filters.until is not None:
        clauses.append(f"{alias}.created_at <= ?")
        params.append(to_ms(filters.until))
    return " AND ".join(clauses), params


_COMPARE = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _metadata(condition: MetadataCondition, alias: str) -> tuple[str, list[Any]]:
    """One metadata condition; JSON's types kept apart (true is not 1, "3" is not 3)."""
    path = "$" + "".join(f'."{key}"' for key in condition.path)
    if condition.op in _COMPARE:
        family = "'text'" if isinstance(condition.value, str) else "'integer', 'real'"
        return (f"(json_type({alias}.metadata, ?) IN ({family})"
                f" AND json_extract({alias}.metadata, ?) {_COMPARE[condition.op]} ?)", [path, path, condition.value])
    wanted = condition.value if condition.op == "$in" else (condition.value,)
    parts, params = [], []
    for value in wanted:
        clause, values = _equals(path, value, alias)
        parts.append(f"coalesce({clause}, 0)")
        params.extend(values)
    either = " OR ".join(parts)
    return (f"NOT ({either})" if condition.op == "$ne" else f"({either})"), params


def _equals(path: str, value: Any, alias: str) -> tuple[str, list[Any]]:
    if value is None:
        return f"json_type({alias}.metadata, ?) = 'null'", [path]
    if isinstance(value, bool):
        return f"json_type({alias}.metadata, ?) = ?", [path, "true" if value else "false"]
    family = "'text'" if isinstance(value, str) else "'integer', 'real'"
    return (f"(json_type({alias}.metadata, ?) IN ({family}) AND json_extract({alias}.metadata, ?) = ?)",
            [path, path, value])
