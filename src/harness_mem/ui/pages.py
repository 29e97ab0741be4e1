"""What each page of the memory browser shows, as functions of the store.

Only the store's public methods are called (no table is read here), each with its own limits, so a
page costs what the same question costs from Python: a search is one recall, a list is one page of
``list``/``sessions``, an entry is its row, its history and the turns it cites.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from ..errors import InvalidInputError
from ..models import Entry, Hit
from ..provenance import cited_turns
from ..recall import Mode
from ..store import MemoryStore

__all__ = ["EntryPage", "HealthPage", "Listing", "SearchForm", "SessionPage", "entry_page", "explained", "facts",
           "health_page", "marked", "search", "search_form", "session_page", "sessions"]

#: Entries, sessions or hits on one page.
PAGE_SIZE = 50
MODES = ("hybrid", "keyword", "semantic")
KINDS = ("note", "fact", "summary", "turn", "episode")
MAX_QUERY_CHARS = 4_096
MAX_HITS = 100


def _one_of(value: str | None, allowed: tuple[str, ...], name: str) -> str | None:
    if not value:
        return None
    if value not in allowed:
        raise InvalidInputError(f"{name} must be one of {', '.join(allowed)}, not {value[:40]!r}")
    return value


def _offset(params: Mapping[str, str]) -> int:
    text = params.get("offset") or "0"
    if not text.isdigit() or int(text) > 10_000_000:
        raise InvalidInputError(f"offset must be a whole number, 0 or more, not {text[:40]!r}")
    return int(text)


@dataclass(frozen=True)
class SearchForm:
    """The search box and its filters, as the query string gave them (blank: not given)."""

    query: str = ""
    mode: str | None = None
    kind: str | None = None
    role: str | None = None
    session: str | None = None
    tags: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    as_of: str | None = None
    k: int = 20


def search_form(params: Mapping[str, str]) -> SearchForm:
    """The search form from the query string; a value that cannot be is a one-line error."""
    query = (params.get("q") or "").strip()
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInputError(f"the query is longer than {MAX_QUERY_CHARS:,} characters")
    k_text = params.get("k") or "20"
    if not k_text.isdigit() or not 1 <= int(k_text) <= MAX_HITS:
        raise InvalidInputError(f"k must be between 1 and {MAX_HITS}, not {k_text[:20]!r}")
    tags = tuple(tag for tag in (params.get("tags") or "").replace(",", " ").split() if tag)
    return SearchForm(
        query=query, mode=_one_of(params.get("mode"), MODES, "mode"), kind=_one_of(params.get("kind"), KINDS, "kind"),
        role=params.get("role") or None, session=params.get("session") or None, tags=tags,
        since=params.get("since") or None, until=params.get("until") or None, as_of=params.get("as_of") or None,
        k=int(k_text))


def search(store: MemoryStore, form: SearchForm) -> list[Hit]:
    """The hits for ``form``, each explained, derived ones with the turns they came from: every lane,
    as an agent's recall searches."""
    if not form.query:
        return []
    return store.recall(form.query, form.k, cast(Mode | None, form.mode), kind=form.kind, role=form.role,
                        session=form.session, tags=form.tags, since=form.since, until=form.until, as_of=form.as_of,
                        explain=True, derived="both", sources=True)


_WORD = re.compile(r"\w+")


def marked(text: str, query: str) -> list[tuple[str, bool]]:
    """``text`` in pieces, each with whether it is one of the query's words (any case): for ``<mark>``."""
    words = {word.casefold() for word in _WORD.findall(query) if len(word) > 1}
    if not words:
        return [(text, False)]
    pieces: list[tuple[str, bool]] = []
    last = 0
    for match in _WORD.finditer(text):
        if match.group().casefold() in words:
            if match.start() > last:
                pieces.append((text[last:match.start()], False))
            pieces.append((match.group(), True))
            last = match.end()
    if last < len(text):
        pieces.append((text[last:], False))
    return pieces


_RETRIEVERS = {"keyword": "keyword", "semantic": "meaning", "hybrid": "fusion"}


def explained(hit: Hit) -> list[str]:
    """How the hit scored, one line per retriever that found it: its rank and raw score."""
    lines = []
    for name, parts in (hit.components or {}).items():
        label = _RETRIEVERS.get(name, name)
        rank = parts.get("rank")
        score = parts.get("score")
        if name == "coverage" and isinstance(score, float | int):  # what the 0-1 score was calibrated from
            lines.append(f"the query's words it holds: {score:.0%}")
            continue
        where = f"rank {rank}" if rank is not None else "not in its list"
        lines.append(f"{label}: {where}" + (f", score {score:.4g}" if isinstance(score, float | int) else ""))
    return lines


@dataclass(frozen=True)
class EntryPage:
    entry: Entry
    #: Its correction history, oldest first (itself alone when never corrected).
    history: list[Entry]
    #: For a derived entry: the turns it came from.
    sources: list[Entry]
    #: What was derived from it (or its other versions): what forgetting it takes along.
    derived: list[Entry]


def entry_page(store: MemoryStore, entry_id: str) -> EntryPage:
    entry = store.get(entry_id)
    history = store.history(entry_id)
    versions = {version.id for version in history}
    derived = [other for other in store.would_forget(entry_id) if other.id not in versions]
    return EntryPage(entry, history, cited_turns(store, entry), derived)


@dataclass(frozen=True)
class Listing:
    """One page of a list, and where the next and previous pages start (None: there is none)."""

    items: list[Any]
    offset: int
    next_offset: int | None
    previous_offset: int | None


def _listing(items: list[Any], offset: int) -> Listing:
    more = len(items) > PAGE_SIZE
    return Listing(items[:PAGE_SIZE], offset, offset + PAGE_SIZE if more else None,
                   max(offset - PAGE_SIZE, 0) if offset else None)


def sessions(store: MemoryStore, params: Mapping[str, str]) -> Listing:
    """Sessions, most recently active first, a page at a time."""
    offset = _offset(params)
    return _listing(store.sessions(limit=PAGE_SIZE + 1, offset=offset), offset)


@dataclass(frozen=True)
class SessionPage:
    session: str
    #: The transcript, in order: turns by role (tool turns are folded by the template).
    turns: Listing
    #: What consolidation derived from this session's turns (summaries, facts, episodes).
    derived: list[Entry] = field(default_factory=list)


def session_page(store: MemoryStore, session: str, params: Mapping[str, str]) -> SessionPage:
    offset = _offset(params)
    page = store.session_turns(session, offset=offset, limit=PAGE_SIZE + 1)
    if not page and not offset:
        raise InvalidInputError(f"no session {session[:200]!r} in this namespace")
    derived = list(store.list(session=session, kind=["summary", "fact", "episode"], limit=PAGE_SIZE))
    shown_beside = {entry.id for entry in derived}
    turns = _listing([entry for entry in page if entry.id not in shown_beside], offset)
    return SessionPage(session, turns, derived)


def facts(store: MemoryStore, params: Mapping[str, str]) -> tuple[Listing, str | None, bool]:
    """Facts, newest first: those true now, or ``as_of`` a time; with ``superseded`` also the
    versions a correction replaced."""
    offset = _offset(params)
    as_of = params.get("as_of") or None
    superseded = params.get("superseded") == "1"
    found = list(store.list(kind="fact", newest_first=True, limit=PAGE_SIZE + 1, offset=offset, as_of=as_of,
                            include_superseded=superseded))
    return _listing(found, offset), as_of, superseded


@dataclass(frozen=True)
class HealthPage:
    stats: dict[str, Any]
    missing_vectors: int
    model: str
    checks: list[dict[str, Any]] | None


def health_page(store: MemoryStore, *, with_checks: bool) -> HealthPage:
    """Sizes, counts, redactions and embedding coverage; ``doctor``'s checks only when asked, since
    the integrity check reads the whole file."""
    model = "keyword only" if store.embedder is None else store.embedder.name
    checks = store.diagnose()["checks"] if with_checks else None
    return HealthPage(store.stats(), store.count_missing_vectors(), model, checks)
