"""The entries counted by namespace, kind, role and redaction, as the engines keep them.

Counting by reading every entry took seconds on a large store, and every write made the next count
start over. Each engine keeps a counter a namespace and group of entries alike in what is counted
(kind, role, redactions, forgotten) instead, in the transaction that changes an entry, whatever the path (SQLite: triggers of ``migrations/0017_entry_counts.sql``;
PostgreSQL: of ``migrations/postgres/0014_entry_counts.sql``, under the row-level security of the
entries). The kept counters include entries that expired since they were written (an entry expires
without a write): :func:`entry_counts` takes those off, read through the expiry index.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from .storage import Storage

__all__ = ["EntryCounts", "entry_counts", "redaction_counts"]


@dataclass
class EntryCounts:
    """One namespace's entries not expired (forgotten ones not purged yet included), and those
    expired waiting for a purge."""

    kept: dict[str, int] = field(default_factory=dict)
    expired: int = 0

    def add(self, key: str, n: int) -> None:
        self.kept[key] = self.kept.get(key, 0) + n

    @property
    def entries(self) -> int:
        return self.kept.get("entries", 0)

    @property
    def forgotten(self) -> int:
        return self.kept.get("forgotten", 0)

    @property
    def unredacted(self) -> int:
        return self.kept.get("unredacted", 0)

    def by(self, prefix: str) -> dict[str, int]:
        """The counts of the keys ``<prefix>:<name>`` by name, none that is zero."""
        start = prefix + ":"
        return {key[len(start):]: n for key, n in self.kept.items() if key.startswith(start) and n}


def entry_counts(storage: Storage, now: int) -> dict[str, EntryCounts]:
    """Every namespace this connection may read, with its counts at ``now``."""
    counts: dict[str, EntryCounts] = {}
    for namespace, group, n in storage.kept_counts():
        kind, role, redactions, forgotten = json.loads(group)
        of = counts.setdefault(namespace, EntryCounts())
        for key, weight in _keys(kind, role, redactions, bool(forgotten)):
            of.add(key, weight * n)
    for namespace, kind, role, redactions, forgotten, n in storage.expired_groups(now):
        of = counts.setdefault(namespace, EntryCounts())
        of.expired += n
        for key, weight in _keys(kind, role, redactions, forgotten):
            of.add(key, -weight * n)
    return {namespace: of for namespace, of in sorted(counts.items()) if of.entries or of.expired}


def _keys(kind: str, role: str | None, redactions: str | None, forgotten: bool) -> Iterator[tuple[str, int]]:
    """What one entry of a group adds to each count."""
    yield "entries", 1
    yield f"kind:{kind}", 1
    if forgotten:
        yield "forgotten", 1
    if role is not None:
        yield f"role:{role}", 1
    if redactions is None:
        yield "unredacted", 1
        return
    for name, n in redaction_counts(redactions):
        yield f"redacted:{name}", n


def redaction_counts(redactions: str) -> list[tuple[str, int]]:
    """(kind, count) pairs of an entry's ``redactions`` column (a JSON object of counts)."""
    try:
        counts = json.loads(redactions)
    except ValueError:
        return []
    if not isinstance(counts, dict):
        return []
    return [(str(k), int(v)) for k, v in counts.items() if isinstance(v, int | float) and not isinstance(v, bool)]
