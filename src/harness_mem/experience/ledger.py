"""The consolidation ledger: how far each session's transcript has been consolidated.

Two watermarks per (namespace, session), each the highest turn pk folded in: ``derivations`` for
the segments and facts derived from the turns (with how many were written), and ``consolidations``
for an agent run's episode (its id and how many turns it covers). This module holds the SQL that
offline consolidation (``consolidate.py``) needs — the ledger itself and the reads of sessions and
turns past their watermarks — so the job's rules stay free of SQL. Every write runs inside the
memory store's transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..models import dumps, now_ms
from .tables import tables_of

if TYPE_CHECKING:
    from ..store import MemoryStore
    from .episode import Episode

#: (session, max turn pk, episode watermark or None, episode id, turns, facts, derived watermark, first turn ms)
SessionRow = tuple[str, int, int | None, str | None, int, int, int, int]
#: (pk, id, role, content, tags JSON, metadata JSON, created ms)
TurnRow = tuple[int, str, str | None, str, str, str, int]


class ConsolidationLedger:
    """The ``consolidations`` rows of one store's namespace, and the session reads around them."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.namespace = store.namespace
        self.tables = tables_of(store.storage)  # the store's own connection: writes join its transactions

    def sessions_past_watermark(
        self, *, session: str | None, since_ms: int | None, cutoff_ms: int | None
    ) -> list[SessionRow]:
        """Sessions whose latest turn is past a watermark: the derived entries' one, or the episode's
        when it has one."""
        where = ["e.namespace = ?", "e.kind = 'turn'", "e.session IS NOT NULL", "e.forgotten_at IS NULL",
                 "(e.expires_at IS NULL OR e.expires_at > ?)"]
        params: list[Any] = [self.namespace, now_ms()]
        if session is not None:
            where.append("e.session = ?")
            params.append(session)
        having = ["(max(e.pk) > coalesce(d.derived_pk, 0) OR max(e.pk) > c.last_pk)"]
        if since_ms is not None:
            having.append("max(e.created_at) >= ?")
            params.append(since_ms)
        if cutoff_ms is not None:
            having.append("max(e.created_at) <= ?")
            params.append(cutoff_ms)
        return [tuple(row) for row in self.tables.execute(
            "SELECT e.session, max(e.pk), c.last_pk, c.episode_id, coalesce(c.turns, 0),"
            " coalesce(c.facts, 0), coalesce(d.derived_pk, 0), min(e.created_at)"
            " FROM entries e LEFT JOIN consolidations c ON c.namespace = e.namespace AND c.session = e.session"
            " LEFT JOIN derivations d ON d.namespace = e.namespace AND d.session = e.session"
            f" WHERE {' AND '.join(where)}"
            # Grouped by the ledger's columns too: one row per session (its namespace is fixed), and
            # PostgreSQL selects only grouped or aggregated columns.
            " GROUP BY e.session, c.last_pk, c.episode_id, c.turns, c.facts, d.derived_pk"
            f" HAVING {' AND '.join(having)}"
            " ORDER BY min(e.created_at), e.session",
            params,
        ).fetchall()]

    def turns_after(self, session: str, pk: int) -> list[TurnRow]:
        """The session's live turns numbered above ``pk``, in time order (a forgotten turn, still in
        the file until the purge, is not read: nothing derived may quote it)."""
        return [tuple(row) for row in self.tables.execute(
            "SELECT pk, id, role, content, tags, metadata, created_at FROM entries"
            " WHERE namespace = ? AND session = ? AND kind = 'turn' AND pk > ? AND forgotten_at IS NULL"
            " AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at, pk",
            (self.namespace, session, pk, now_ms()),
        ).fetchall()]

    def recorded_by_run(self, episode_id: str) -> bool:
        """True when ``episode_id`` exists and was not written by consolidation."""
        return self.tables.execute(
            "SELECT 1 FROM episodes ep JOIN entries e ON e.namespace = ep.namespace AND e.id = ep.entry_id"
            f" WHERE ep.namespace = ? AND ep.id = ? AND {self.tables.json_type('e.metadata', 'consolidated_from')} IS NULL",
            (self.namespace, episode_id),
        ).fetchone() is not None

    def episode_row_entry(self, episode_id: str) -> tuple[str | None] | None:
        """``(entry id,)`` of the episode row ``episode_id``; None when there is no such row."""
        row = self.tables.execute(
            "SELECT entry_id FROM episodes WHERE namespace = ? AND id = ?", (self.namespace, episode_id)
        ).fetchone()
        return None if row is None else (row[0],)

    def repoint_episode(self, episode_id: str, entry_id: str, episode: Episode, created_ms: int) -> None:
        """Point the episode row at a new entry holding ``episode`` (its id and pk stay, and with them
        the links from skills distilled from it)."""
        self.tables.execute(
            "UPDATE episodes SET entry_id = ?, situation = ?, tools = ?, skills = ?, outcome = ?, success = ?,"
            " tags = ?, created_at = ? WHERE namespace = ? AND id = ?",
            (
                entry_id, episode.situation, dumps(episode.tools), dumps(episode.skills), episode.outcome,
                None if episode.success is None else int(episode.success), dumps(episode.tags),
                created_ms, self.namespace, episode_id,
            ),
        )

    def unlinked_episode_entries(self, session: str, source: str) -> list[str]:
        """Ids of the session's consolidation episode entries that no episode row points at."""
        return [row[0] for row in self.tables.execute(
            "SELECT e.id FROM entries e WHERE e.namespace = ? AND e.session = ? AND e.kind = 'episode'"
            f" AND e.source = ? AND {self.tables.json_type('e.metadata', 'consolidated_from')} = 'object'"
            " AND NOT EXISTS (SELECT 1 FROM episodes ep WHERE ep.namespace = e.namespace AND ep.entry_id = e.id)",
            (self.namespace, session, source),
        )]

    def move_watermark(
        self, session: str, *, seen: int | None, episode_id: str, last_pk: int, last_turn_id: str, turns: int
    ) -> bool:
        """Move the session's watermark from ``seen`` (None: never consolidated) to ``last_pk``.

        False when another process moved it since ``seen`` was read: then nothing is written.
        """
        now = now_ms()
        if seen is None:
            cursor = self.tables.execute(
                "INSERT INTO consolidations (namespace, session, episode_id, last_pk, last_turn_id, turns,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (self.namespace, session, episode_id, last_pk, last_turn_id, turns, now, now),
            )
        else:
            cursor = self.tables.execute(
                "UPDATE consolidations SET episode_id = ?, last_pk = ?, last_turn_id = ?, turns = ?, updated_at = ?"
                " WHERE namespace = ? AND session = ? AND last_pk = ?",
                (episode_id, last_pk, last_turn_id, turns, now, self.namespace, session, seen),
            )
        return bool(cursor.rowcount == 1)

    def move_derived_watermark(self, session: str, *, seen: int, derived_pk: int, segments: int, facts: int) -> bool:
        """Record that the session's turns up to ``derived_pk`` have been derived from (moving it
        from ``seen``, 0 the first time); False when another process moved it meanwhile."""
        cursor = self.tables.execute(
            "INSERT INTO derivations (namespace, session, derived_pk, segments, facts, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, session) DO UPDATE SET"
            " derived_pk = excluded.derived_pk, segments = derivations.segments + excluded.segments,"
            " facts = derivations.facts + excluded.facts, updated_at = excluded.updated_at"
            " WHERE derivations.derived_pk = ?",
            (self.namespace, session, derived_pk, segments, facts, now_ms(), seen),
        )
        return bool(cursor.rowcount == 1)
