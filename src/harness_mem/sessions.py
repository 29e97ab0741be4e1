"""Sessions as units: the turns around a hit, the turns a derived hit came from, sessions ranked
by a query, listed, and read whole.

A transcript's answer is often a few turns long, and "which conversation was that?" is a question
of its own. Recall ranks turns; these functions give what surrounds them, from the storage's
session reads (an index on namespace, session and time answers each). What consolidation derived
(a fact, a summary) cites its turns, and an agent reading it wants them beside it: what was said is
the evidence, the derived entry the digest of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import InvalidInputError
from .models import Entry, Hit, SessionHit, SessionSummary, from_ms, now_ms
from .rows import entry_from_row
from .storage import DERIVED_SOURCE, Scope, SessionSpan, Storage

MAX_CONTEXT = 20
#: The turns a derived hit is shown with, at most: a fact cites one or two, a summary its segment.
MAX_SOURCES = 3
MAX_PAGE = 1000
#: Turns recall_sessions ranks before grouping them, per session asked for.
TURNS_PER_SESSION = 8

#: What ranks the turns: :meth:`MemoryStore.recall <harness_mem.store.MemoryStore.recall>`.
Ranker = Callable[..., list[Hit]]


def with_context(storage: Storage, scope: Scope, hits: list[Hit], n: int) -> list[Hit]:
    """Each turn hit with the ``n`` turns before and after it in its session (other hits: no context)."""
    if not 0 <= n <= MAX_CONTEXT:
        raise InvalidInputError(f"context must be between 0 and {MAX_CONTEXT} turns, not {n}")
    if n == 0:
        return hits
    return [hit.model_copy(update={"context": tuple(around(storage, scope, hit.entry, n))})
            if hit.entry.session else hit for hit in hits]


def with_sources(storage: Storage, scope: Scope, hits: list[Hit]) -> list[Hit]:
    """Each derived hit with up to :data:`MAX_SOURCES` of the turns it cites (``metadata.source_turns``)
    as ``sources``, in order: those that are hits below it first (best first), then the others it
    cites; a turn already listed above it is not repeated.

    A turn shown that way is not listed again as a hit below it: a turn is a hit of its own where it
    is what matches, and otherwise reaches the reader through what was derived from it.
    """
    # Entries are known by namespace and id: a recall over several namespaces gives hits of each,
    # and a derived hit cites turns of its own namespace.
    rank = {(hit.entry.namespace, hit.entry.id): position for position, hit in enumerate(hits)}
    shown: set[tuple[str, str]] = set()  # every entry listed so far, as a hit or as a source
    # Every cited turn of a namespace in one read (a round trip each is what a server charges).
    now = now_ms()
    stored = {namespace: storage.get_many(namespace, list(dict.fromkeys(
                  t for hit in hits if hit.entry.namespace == namespace for t in cited_turns(hit.entry))), now)
              for namespace in dict.fromkeys(hit.entry.namespace for hit in hits)}
    out = []
    for hit in hits:
        namespace = hit.entry.namespace
        if (namespace, hit.entry.id) in shown:
            continue
        shown.add((namespace, hit.entry.id))
        cited = [turn_id for turn_id in cited_turns(hit.entry) if (namespace, turn_id) not in shown]
        if not cited:
            out.append(hit)
            continue
        sources: list[Entry] = []
        for turn_id in sorted(cited, key=lambda cited_id: rank.get((namespace, cited_id), len(hits))):  # stable
            row = stored[namespace].get(turn_id)
            if row is not None:
                sources.append(entry_from_row(row))
            if len(sources) == MAX_SOURCES:
                break
        shown.update((source.namespace, source.id) for source in sources)
        sources.sort(key=lambda e: (e.created_at, e.id))
        out.append(hit.model_copy(update={"sources": tuple(sources)}))
    return out


def cited_turns(entry: Entry) -> list[str]:
    """The turn ids a derived entry cites (none for any other entry)."""
    cited = entry.metadata.get("source_turns") if entry.source == DERIVED_SOURCE else None
    if not isinstance(cited, list):
        return []
    return list(dict.fromkeys(turn_id for turn_id in cited if isinstance(turn_id, str)))


def around(storage: Storage, scope: Scope, entry: Entry, n: int) -> list[Entry]:
    """The ``n`` turns before and after ``entry`` in its session, in order, without it."""
    before, after = _neighbours(storage, scope, entry, n)
    return [*before, *after]


def _neighbours(storage: Storage, scope: Scope, entry: Entry, n: int,
                include_superseded: bool = False) -> tuple[list[Entry], list[Entry]]:
    assert entry.session is not None
    # The entry's own namespace: a recall over several namespaces gives hits of each.
    pk = storage.pk_of(entry.namespace, entry.id) or 0
    created = int(entry.created_at.timestamp() * 1000)
    before, after = storage.neighbours(entry.namespace, entry.session, created, pk, n,
                                       include_superseded=include_superseded)
    return [entry_from_row(row) for row in before], [entry_from_row(row) for row in after]


def recall_sessions(storage: Storage, scope: Scope, recall: Ranker, query: str, k: int = 5, *, context: int = 1,
                    **recall_args: Any) -> list[SessionHit]:
    """The ``k`` sessions that best answer ``query``, best first.

    A session scores as its best-matching entry (the anchor); each comes with the ``context`` turns
    before and after the anchor (``around``, in order, the anchor among them), its first and last turns, its size and its time span. ``recall_args`` are recall's
    (mode, filters); with ``include_superseded`` the replaced turns count in the session's frame too.
    """
    if not 1 <= k <= 100:
        raise InvalidInputError(f"k must be between 1 and 100 sessions, not {k}")
    hits = [hit for hit in recall(query, k=min(1000, k * TURNS_PER_SESSION), **recall_args) if hit.entry.session]
    replaced = bool(recall_args.get("include_superseded"))
    found: list[SessionHit] = []
    # The frames are read in one snapshot, and from the hits still there in it: another process may
    # delete, forget or correct turns between the ranking and these reads, and a session is then
    # framed by what it holds now (or left out, once no hit of it is left), never half gone.
    with storage.snapshot():
        # A session is known by its namespace too: a recall over several gives hits of each.
        kept = {(namespace, entry_id) for namespace in {hit.entry.namespace for hit in hits}
                for entry_id in storage.still_there(namespace, [hit.entry.id for hit in hits
                                                                if hit.entry.namespace == namespace],
                                                    include_superseded=replaced)}
        anchors: dict[tuple[str, str], Hit] = {}
        for hit in hits:  # best first: the first hit of a session is its anchor
            where = (hit.entry.namespace, hit.entry.session or "")
            if hit.entry.session is not None and (where[0], hit.entry.id) in kept and where not in anchors:
                anchors[where] = hit
                if len(anchors) == k:
                    break
        for (namespace, session), anchor in anchors.items():
            summary = _summary(storage.session_span(namespace, session, include_superseded=replaced))
            first, last = storage.bookends(namespace, session, include_superseded=replaced)
            before, after = _neighbours(storage, scope, anchor.entry, context, replaced)
            found.append(SessionHit(
                session=session, score=anchor.score, anchor=anchor, around=(*before, anchor.entry, *after),
                first=entry_from_row(first), last=entry_from_row(last), turns=summary.turns,
                started_at=summary.started_at, ended_at=summary.ended_at,
            ))
    return found


def _summary(span: SessionSpan) -> SessionSummary:
    return SessionSummary(session=span.session, turns=span.turns, started_at=from_ms(span.started_ms),
                          ended_at=from_ms(span.ended_ms))


def sessions(storage: Storage, scope: Scope, limit: int = 20, offset: int = 0,
             after: str | None = None) -> list[SessionSummary]:
    """The namespace's sessions, most recently active first, with their sizes; ``after`` (a
    session): those listed after it (the next page, without counting past the ones before)."""
    _check_page(limit, offset)
    stored = None if after is None else scope.key(after) or after
    return [_summary(span) for span in storage.sessions(scope.namespace, limit, offset, stored)]


def session_turns(storage: Storage, scope: Scope, session: str, offset: int = 0, limit: int = 50,
                  after: str | None = None) -> list[Entry]:
    """A session's entries in order, a page at a time; ``after`` (an entry id): those after it."""
    _check_page(limit, offset)
    stored = scope.key(session) or session
    start = None if after is None else scope.key(after) or after
    return [entry_from_row(row) for row in storage.session_rows(scope.namespace, stored, offset, limit, start)]


def _check_page(limit: int, offset: int) -> None:
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE}, not {limit!r}")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be 0 or more, not {offset!r}")
