"""Sessions as units: the turns around a hit, sessions ranked by a query, listed, and read whole.

A transcript's answer is often a few turns long, and "which conversation was that?" is a question
of its own. Recall ranks turns; these functions give what surrounds them. Every read here uses the
``entries_by_session`` index (namespace, session, created_at).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .errors import InvalidInputError
from .models import Entry, Hit, SessionHit, SessionSummary, from_ms
from .rows import COLUMNS, entry_from_row

if TYPE_CHECKING:
    from .store import MemoryStore

MAX_CONTEXT = 20
MAX_PAGE = 1000
#: Turns recall_sessions ranks before grouping them, per session asked for.
TURNS_PER_SESSION = 8

_CURRENT = "e.forgotten_at IS NULL AND e.superseded_by IS NULL"
#: With the entries a correction replaced: what frames a session recalled with them.
_KEPT = "e.forgotten_at IS NULL"
_IN_SESSION = "e.namespace = ? AND e.session = ?"
_LIVE = f"{_IN_SESSION} AND {_CURRENT}"


def with_context(store: MemoryStore, hits: list[Hit], n: int) -> list[Hit]:
    """Each turn hit with the ``n`` turns before and after it in its session (other hits: no context)."""
    if not 0 <= n <= MAX_CONTEXT:
        raise InvalidInputError(f"context must be between 0 and {MAX_CONTEXT} turns, not {n}")
    if n == 0:
        return hits
    return [hit.model_copy(update={"context": tuple(around(store, hit.entry, n))})
            if hit.entry.session else hit for hit in hits]


def around(store: MemoryStore, entry: Entry, n: int) -> list[Entry]:
    """The ``n`` turns before and after ``entry`` in its session, in order, without it."""
    before, after = _neighbours(store, entry, n)
    return [*before, *after]


def _neighbours(store: MemoryStore, entry: Entry, n: int, shown: str = _CURRENT) -> tuple[list[Entry], list[Entry]]:
    pk = _pk(store, entry.id)
    where = f"{_IN_SESSION} AND {shown}"
    created = int(entry.created_at.timestamp() * 1000)
    params = (store.namespace, entry.session, created, created, pk, n)
    before = store._conn.execute(
        f"SELECT {COLUMNS} FROM entries e WHERE {where} AND (e.created_at < ? OR (e.created_at = ? AND e.pk < ?))"
        " ORDER BY e.created_at DESC, e.pk DESC LIMIT ?", params,
    ).fetchall()
    after = store._conn.execute(
        f"SELECT {COLUMNS} FROM entries e WHERE {where} AND (e.created_at > ? OR (e.created_at = ? AND e.pk > ?))"
        " ORDER BY e.created_at, e.pk LIMIT ?", params,
    ).fetchall()
    return [entry_from_row(row) for row in reversed(before)], [entry_from_row(row) for row in after]


def _pk(store: MemoryStore, entry_id: str) -> int:
    row = store._conn.execute("SELECT pk FROM entries WHERE namespace = ? AND id = ?", (store.namespace, entry_id)).fetchone()
    return int(row[0]) if row else 0


def recall_sessions(store: MemoryStore, query: str, k: int = 5, *, context: int = 1, **recall_args: Any) -> list[SessionHit]:
    """The ``k`` sessions that best answer ``query``, best first.

    A session scores as its best-matching entry (the anchor); each comes with the ``context`` turns
    before and after the anchor (``around``, in order, the anchor among them), its first and last turns, its size and its time span. ``recall_args`` are recall's
    (mode, filters); with ``include_superseded`` the replaced turns count in the session's frame too.
    """
    if not 1 <= k <= 100:
        raise InvalidInputError(f"k must be between 1 and 100 sessions, not {k}")
    hits = [hit for hit in store.recall(query, k=min(1000, k * TURNS_PER_SESSION), **recall_args) if hit.entry.session]
    shown = _KEPT if recall_args.get("include_superseded") else _CURRENT
    found: list[SessionHit] = []
    # The frames are read in one snapshot, and from the hits still there in it: another process may
    # delete, forget or correct turns between the ranking and these reads, and a session is then
    # framed by what it holds now (or left out, once no hit of it is left), never half gone.
    with store._snapshot():
        kept = _still_there(store, [hit.entry.id for hit in hits], shown)
        anchors: dict[str, Hit] = {}
        for hit in hits:  # best first: the first hit of a session is its anchor
            session = hit.entry.session
            if session is not None and hit.entry.id in kept and session not in anchors:
                anchors[session] = hit
                if len(anchors) == k:
                    break
        for session, anchor in anchors.items():
            summary = _summary(store, session, shown)
            first, last = _bookends(store, session, shown)
            before, after = _neighbours(store, anchor.entry, context, shown)
            found.append(SessionHit(
                session=session, score=anchor.score, anchor=anchor, around=(*before, anchor.entry, *after),
                first=first, last=last, turns=summary.turns, started_at=summary.started_at, ended_at=summary.ended_at,
            ))
    return found


def _still_there(store: MemoryStore, ids: list[str], shown: str) -> set[str]:
    """Those of ``ids`` that are still stored in a session, and still ``shown``."""
    return {row[0] for row in store._conn.execute(
        "SELECT e.id FROM json_each(?) AS wanted CROSS JOIN entries e ON e.namespace = ? AND e.id = wanted.value"
        f" WHERE e.session IS NOT NULL AND {shown}",
        (json.dumps(ids), store.namespace),
    )}


def _summary(store: MemoryStore, session: str, shown: str) -> SessionSummary:
    turns, started, ended = store._conn.execute(
        f"SELECT count(*), min(e.created_at), max(e.created_at) FROM entries e WHERE {_IN_SESSION} AND {shown}", (store.namespace, session),
    ).fetchone()
    return SessionSummary(session=session, turns=turns, started_at=from_ms(started), ended_at=from_ms(ended))


def _bookends(store: MemoryStore, session: str, shown: str) -> tuple[Entry, Entry]:
    rows = [store._conn.execute(
        f"SELECT {COLUMNS} FROM entries e WHERE {_IN_SESSION} AND {shown} ORDER BY e.created_at {order}, e.pk {order} LIMIT 1",
        (store.namespace, session),
    ).fetchone() for order in ("ASC", "DESC")]
    return entry_from_row(rows[0]), entry_from_row(rows[1])


def sessions(store: MemoryStore, limit: int = 20, offset: int = 0) -> list[SessionSummary]:
    """The namespace's sessions, most recently active first, with their sizes."""
    _check_page(limit, offset)
    rows = store._conn.execute(
        "SELECT e.session, count(*), min(e.created_at), max(e.created_at) FROM entries e"
        " WHERE e.namespace = ? AND e.session IS NOT NULL AND e.forgotten_at IS NULL AND e.superseded_by IS NULL"
        " GROUP BY e.session ORDER BY max(e.created_at) DESC, e.session LIMIT ? OFFSET ?",
        (store.namespace, limit, offset),
    ).fetchall()
    return [SessionSummary(session=s, turns=n, started_at=from_ms(a), ended_at=from_ms(b)) for s, n, a, b in rows]


def session_turns(store: MemoryStore, session: str, offset: int = 0, limit: int = 50) -> list[Entry]:
    """A session's entries in order, a page at a time."""
    _check_page(limit, offset)
    rows = store._conn.execute(
        f"SELECT {COLUMNS} FROM entries e WHERE {_LIVE} ORDER BY e.created_at, e.pk LIMIT ? OFFSET ?",
        (store.namespace, store._key(session), limit, offset),
    ).fetchall()
    return [entry_from_row(row) for row in rows]


def _check_page(limit: int, offset: int) -> None:
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE}, not {limit!r}")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be 0 or more, not {offset!r}")

