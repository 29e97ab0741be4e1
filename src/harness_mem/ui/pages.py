"""What each page of the memory browser shows, as functions of the store.

Only the store's public methods are called (no table is read here), each with its own limits, so a
page costs what the same question costs from Python: a search is one recall, a list is one page of
``list``/``sessions``, an entry is its row, its history and the turns it cites.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast
from urllib.parse import urlencode

from ..counts import EntryCounts
from ..errors import InvalidInputError
from ..experience.outcomes import Outcome
from ..experience.store import ExperienceStore, SkillRecord, SkillVersion, StoredEpisode
from ..models import Entry, Hit
from ..provenance import cited_ids, cited_turns
from ..recall import Mode
from ..store import MemoryStore

__all__ = ["EntryPage", "EpisodeView", "HealthPage", "Listing", "SearchForm", "SessionPage", "SkillPage",
           "entry_page", "episode_page", "episodes", "explained", "facts", "health_page", "hit_entries", "marked",
           "revealed_in", "search", "search_form", "session_page", "sessions", "skill_page", "skills"]

#: Entries, sessions or hits on one page.
PAGE_SIZE = 50
MODES = ("hybrid", "keyword", "semantic")
KINDS = ("note", "fact", "summary", "turn", "episode")
MAX_QUERY_CHARS = 4_096
MAX_HITS = 100
MAX_CURSOR_CHARS = 1_000


def _one_of(value: str | None, allowed: tuple[str, ...], name: str) -> str | None:
    if not value:
        return None
    if value not in allowed:
        raise InvalidInputError(f"{name} must be one of {', '.join(allowed)}, not {value[:40]!r}")
    return value


def _after(params: Mapping[str, str]) -> str | None:
    """Where a page starts: the last item of the page before it (blank: the first page)."""
    text = params.get("after") or None
    if text is not None and len(text) > MAX_CURSOR_CHARS:
        raise InvalidInputError(f"after must name an item of the list, at most {MAX_CURSOR_CHARS} characters")
    return text


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
#: What redaction leaves in stored text: ``<EMAIL:1a2b3c4d5e6f>`` (a keyed pseudonym) or ``<API_KEY>`` (removed).
PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]*)(?::[0-9a-f]{12})?>")
#: What each piece of shown text is: plain, one of the query's words, or a redaction's placeholder.
PLAIN, MATCHED, PSEUDONYM, REMOVED = "plain", "matched", "pseudonym", "removed"


def marked(text: str, query: str) -> list[tuple[str, str]]:
    """``text`` in pieces, each with what it is: one of the query's words (any case), for ``<mark>``;
    a redaction's placeholder, explained where it is shown; else plain."""
    words = {word.casefold() for word in _WORD.findall(query) if len(word) > 1}
    pieces: list[tuple[str, str]] = []

    def words_of(part: str) -> None:
        last = 0
        for match in _WORD.finditer(part) if words else ():
            if match.group().casefold() in words:
                if match.start() > last:
                    pieces.append((part[last:match.start()], PLAIN))
                pieces.append((match.group(), MATCHED))
                last = match.end()
        if last < len(part):
            pieces.append((part[last:], PLAIN))

    last = 0
    for found in PLACEHOLDER.finditer(text):
        words_of(text[last:found.start()])
        pieces.append((found.group(), PSEUDONYM if ":" in found.group() else REMOVED))
        last = found.end()
    words_of(text[last:])
    return pieces or [(text, PLAIN)]


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
    #: For an episode: the result consolidation inferred, and the turn that showed it.
    outcome: Outcome | None = None
    outcome_turn: Entry | None = None


def entry_page(store: MemoryStore, entry_id: str) -> EntryPage:
    entry = store.get(entry_id)
    history = store.history(entry_id)
    versions = {version.id for version in history}
    derived = [other for other in store.would_forget(entry_id) if other.id not in versions]
    outcome = Outcome.from_dict(entry.metadata.get("outcome")) if entry.kind == "episode" else None
    turn = next(iter(store.get_many([outcome.turn_id])), None) if outcome is not None and outcome.turn_id else None
    return EntryPage(entry, history, cited_turns(store, entry), derived, outcome, turn)


@dataclass(frozen=True)
class Listing:
    """One page of a list: where it started (None: the first page) and where the next one starts
    (None: this is the last). Pages are keyset pages: each starts after the last item of the one
    before, found through an index however deep in the list, never by counting past what comes first.

    Going back is going forward again from where the previous page started: each link carries the
    starts of the pages walked through (``back``), so "previous" is exact and as cheap as "next". A
    backward read through the index would need each list's query run in reverse, and the sessions
    list, found by walking the newest entries, has no reverse that is not a scan. The trail keeps the
    last :data:`MAX_TRAIL` starts (the address stays short); past them only the first page is offered."""

    items: list[Any]
    after: str | None
    next_after: str | None
    back: tuple[str, ...] = ()
    #: Whether the trail lost its oldest starts (the page before the first kept one is not known).
    cut: bool = False

    def next_query(self) -> str:
        trail = (*self.back, self.after) if self.after is not None else self.back
        return _trail_query(self.next_after, trail, self.cut)

    def previous_query(self) -> str | None:
        """The query string of the page before this one (None: this is the first, or it is not known)."""
        if self.after is None:
            return None
        if self.back:
            return _trail_query(self.back[-1], self.back[:-1], self.cut)
        return None if self.cut else ""


#: How many pages back a link remembers.
MAX_TRAIL = 20


def _trail_query(after: str | None, back: tuple[str, ...], cut: bool) -> str:
    cut = cut or len(back) > MAX_TRAIL
    pairs = [("back", start) for start in back[-MAX_TRAIL:]] + ([("cut", "1")] if cut else [])
    return urlencode(pairs + ([("after", after)] if after is not None else []))


def _listing(items: list[Any], after: str | None, key: Callable[[Any], str], params: Mapping[str, str]) -> Listing:
    """A page of ``items`` (read with one more than a page: that one says whether a next page exists)."""
    more = len(items) > PAGE_SIZE
    shown = items[:PAGE_SIZE]
    getlist = getattr(params, "getlist", None)  # a query string repeats "back"; a plain mapping has one
    back = tuple(getlist("back")) if getlist is not None else tuple(filter(None, [params.get("back")]))
    if any(len(start) > MAX_CURSOR_CHARS for start in back) or len(back) > MAX_TRAIL:
        raise InvalidInputError(f"back must name at most {MAX_TRAIL} items of the list")
    return Listing(shown, after, key(shown[-1]) if more else None, back, params.get("cut") == "1")


def sessions(store: MemoryStore, params: Mapping[str, str]) -> Listing:
    """Sessions, most recently active first, a page at a time."""
    after = _after(params)
    return _listing(store.sessions(limit=PAGE_SIZE + 1, after=after), after, lambda s: s.session, params)


@dataclass(frozen=True)
class SessionPage:
    session: str
    #: The transcript, in order: turns by role (tool turns are folded by the template).
    turns: Listing
    #: What consolidation derived from this session's turns (summaries, facts, episodes).
    derived: list[Entry] = field(default_factory=list)
    #: For each turn on this page, what was derived from it: shown beside the turn.
    derived_from: dict[str, list[Entry]] = field(default_factory=dict)

    def shown_turn(self, turn_id: str) -> Entry | None:
        """The turn ``turn_id`` when it is on this page (a derived entry's source links to it here)."""
        return next((turn for turn in self.turns.items if turn.id == turn_id), None)


def session_page(store: MemoryStore, session: str, params: Mapping[str, str]) -> SessionPage:
    after = _after(params)
    page = store.session_turns(session, limit=PAGE_SIZE + 1, after=after)
    if not page and after is None:
        raise InvalidInputError(f"no session {session[:200]!r} in this namespace")
    derived = list(store.list(session=session, kind=["summary", "fact", "episode"], limit=PAGE_SIZE))
    turns = _listing(page, after, _entry_id, params)
    on_page = {turn.id for turn in turns.items}
    derived_from: dict[str, list[Entry]] = {}
    for entry in derived:
        for turn_id in cited_ids(entry):
            if turn_id in on_page:
                derived_from.setdefault(turn_id, []).append(entry)
    return SessionPage(session, turns, derived, derived_from)



def _entry_id(entry: Entry) -> str:
    return entry.id


def facts(store: MemoryStore, params: Mapping[str, str]) -> tuple[Listing, str | None, bool]:
    """Facts, newest first: those true now, or ``as_of`` a time; with ``superseded`` also the
    versions a correction replaced."""
    after = _after(params)
    as_of = params.get("as_of") or None
    superseded = params.get("superseded") == "1"
    found = list(store.list(kind="fact", newest_first=True, limit=PAGE_SIZE + 1, after=after, as_of=as_of,
                            include_superseded=superseded))
    return _listing(found, after, _entry_id, params), as_of, superseded


def revealed_in(store: MemoryStore, entries: Iterable[Entry]) -> frozenset[str]:
    """The identity values of ``entries`` (ids, sessions, roles, tags) shown as written because
    this process holds the identity key: the page marks them, since the file holds only their
    pseudonyms."""
    values = {v for e in entries for v in (e.id, e.session, e.role, *e.tags) if v}
    return frozenset(v for v in values if store.revealed(v))


def hit_entries(hits: Iterable[Hit]) -> Iterator[Entry]:
    """The entries a list of hits shows: each hit's, and the turns it came from."""
    for hit in hits:
        yield hit.entry
        yield from hit.sources or ()


@dataclass(frozen=True)
class HealthPage:
    path: str
    file_bytes: int
    #: This namespace's counts, and every readable namespace's entries.
    counts: EntryCounts
    namespaces: dict[str, int]
    missing_vectors: int
    model: str
    #: The file's bytes by table and index, and doctor's checks: only when asked (they read the file).
    sizes: dict[str, Any] | None
    checks: list[dict[str, Any]] | None


def health_page(store: MemoryStore, *, with_checks: bool, with_sizes: bool) -> HealthPage:
    """Counts, redactions and embedding coverage from the counters the engine keeps, so a view
    after a write costs what one before it does; the sizes by table and ``doctor``'s checks only
    when asked, since they read the file's pages."""
    model = "keyword only" if store.embedder is None else store.embedder.name
    counts = store.counts()
    return HealthPage(str(store.path), store.file_bytes(), counts.get(store.namespace, EntryCounts()),
                      {namespace: of.entries for namespace, of in counts.items()}, store.count_missing_vectors(),
                      model, store.sizes() if with_sizes else None,
                      store.diagnose()["checks"] if with_checks else None)


@dataclass(frozen=True)
class EpisodeView:
    """An episode with how its result was decided: the outcome consolidation inferred (None when it
    was recorded with its result, or before outcomes were inferred) and the turn that showed it."""

    episode: StoredEpisode
    outcome: Outcome | None
    turn: Entry | None
    session: str | None


def _episode_views(store: MemoryStore, episodes: list[StoredEpisode]) -> list[EpisodeView]:
    """Each episode with its entry's recorded outcome and that turn: two reads for the whole page."""
    entries = {entry.id: entry for entry in store.get_many([ep.entry_id for ep in episodes if ep.entry_id])}
    outcomes = {ep.id: Outcome.from_dict(entries[ep.entry_id].metadata.get("outcome"))
                for ep in episodes if ep.entry_id in entries}
    turns = {turn.id: turn for turn in store.get_many(
        [outcome.turn_id for outcome in outcomes.values() if outcome is not None and outcome.turn_id])}
    views = []
    for ep in episodes:
        outcome = outcomes.get(ep.id)
        turn = turns.get(outcome.turn_id) if outcome is not None and outcome.turn_id else None
        entry = entries.get(ep.entry_id) if ep.entry_id else None
        views.append(EpisodeView(ep, outcome, turn, entry.session if entry is not None else None))
    return views


RESULTS = {"success": True, "failure": False}


def episodes(store: MemoryStore, params: Mapping[str, str]) -> tuple[Listing, str | None]:
    """Episodes, newest first (only successes or failures when ``result`` says), a page at a time."""
    after = _after(params)
    result = _one_of(params.get("result"), tuple(RESULTS), "result")
    found = ExperienceStore(store).list(limit=PAGE_SIZE + 1, after=after,
                                        success=None if result is None else RESULTS[result])
    listing = _listing(found, after, lambda ep: ep.id, params)
    return replace(listing, items=_episode_views(store, listing.items)), result  # its trail back kept


def episode_page(store: MemoryStore, episode_id: str) -> tuple[EpisodeView, list[SkillRecord]]:
    """One episode, its outcome and the turn that showed it, and the skills learnt from it."""
    experience = ExperienceStore(store)
    view = _episode_views(store, [experience.get(episode_id)])[0]
    return view, experience.skills_from_episode(view.episode.id)


def skills(store: MemoryStore, params: Mapping[str, str]) -> Listing:
    """Saved skills by name, a page at a time."""
    after = _after(params)
    found = ExperienceStore(store).list_skills(limit=PAGE_SIZE + 1, after=after)
    return _listing(found, after, lambda record: record.name, params)


@dataclass(frozen=True)
class SkillPage:
    skill: SkillRecord
    #: Every saved version, newest first, each with the episode that prompted it (None: none did,
    #: or it is gone: history outlives episodes).
    revisions: list[tuple[SkillVersion, StoredEpisode | None]]
    #: The episodes it was distilled or revised from.
    sources: list[StoredEpisode]


def skill_page(store: MemoryStore, name: str) -> SkillPage:
    experience = ExperienceStore(store)
    record = experience.get_skill(name)
    history = experience.skill_history(name)
    wanted = list(dict.fromkeys([*record.source_episodes, *(v.episode_id for v in history if v.episode_id)]))
    known = {ep.id: ep for ep in experience.get_many(wanted)}
    return SkillPage(record, [(version, known.get(version.episode_id) if version.episode_id else None)
                              for version in reversed(history)],
                     [known[ep_id] for ep_id in record.source_episodes if ep_id in known])
