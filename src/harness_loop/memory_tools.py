"""Memory as tools the model calls: remember, recall, recall_sessions, forget, supersede.

Thin wrappers over harness_mem's memory operations (``MemoryStore.remember``, ``recall``,
``recall_sessions``, ``forget``, ``supersede``) for an agent loop::

    loop = AgentLoop(model, [*workspace_tools(), *memory_tools(store)])
    # or, with the rest of the wiring (guides, capture, episodes), which also keeps the running
    # run's own turns out of the tools' recall:
    attach_memory(loop, store, tools=True)

What the model sees and gets back:

- **Descriptions written for a model**: when to use the tool (and when not), what each argument
  means and its limits, what comes back.
- **Arguments checked** before anything is read or written -- types, lengths, ranges -- beyond the
  loop's own check of names: a bad one comes back as a tool error naming the argument and the limit.
- **Compact, readable results**: plain text, one numbered block per hit, best first (id, kind,
  date, tags, content cut to :data:`MAX_SHOWN_CHARS`, the turns around a conversation hit), ids the
  model can pass to ``supersede`` and ``forget``.
- **Errors are results, never crashes**: anything harness_mem refuses (a :class:`GuardedMemory` or
  the redaction policy refusing a write, an unknown id, a read-only file) comes back as
  ``{"error": "<one line>"}`` with ``ok: false``; a refused write says why (``reason``) and, for a
  near-duplicate, which entry it duplicates (``duplicate_of``).

**Guarded writes.** With ``guard=GuardedMemory(...)``, ``remember`` and ``supersede`` first pass the
guard's rules -- block-listed substrings, its redaction policy (hygiene by default: secrets and
money refused), and for ``remember`` its near-duplicate check against curated memory (notes, facts,
summaries; a transcript turn saying the same thing is not a duplicate) -- and then store the
guard-redacted text through ``remember``/``supersede``, so exact-duplicate detection and correction
history still apply. Only the guard's settings are used; its own ``inner`` memory is not written.

**Where they run.** The tools are coroutines that use the store on the loop's thread, as the recall
guides do: one SQLite connection is used by one thread at a time, and a memory operation on a local
file takes milliseconds.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, cast

from harness_mem import Entry, GuardedMemory, Hit, MemoryStore
from harness_mem.errors import HarnessMemError, InvalidInputError, WriteRefusedError
from harness_mem.models import SessionHit

from .spill import ToolResult
from .tools import Tool, tool

__all__ = [
    "CURATED_KINDS",
    "MAX_CONTENT_CHARS",
    "MAX_K",
    "MAX_SHOWN_CHARS",
    "MEMORY_TOOL_NAMES",
    "memory_tools",
]

MAX_CONTENT_CHARS = 4000  # one remembered statement; a document belongs in a file, not a note
MAX_QUERY_CHARS = 1000
MAX_ID_CHARS = 200
MAX_TAGS = 10
MAX_TAG_CHARS = 64
MAX_K = 20
MAX_CONTEXT = 5
MAX_SHOWN_CHARS = 600  # of each hit's content in a result
MAX_AROUND_CHARS = 240  # of each turn shown around a hit
OVERFETCH = 3  # recall more when the running run's own turns may have to be dropped
CURATED_KINDS: tuple[str, ...] = ("note", "fact", "summary")
# What `recall` searches unless told a kind: curated memory and episodes. Raw conversation turns are
# many and noisy (tool echoes); they are searched when asked for (kind="turn") or by recall_sessions.
DEFAULT_RECALL_KINDS: tuple[str, ...] = (*CURATED_KINDS, "episode")
MEMORY_TOOL_NAMES: tuple[str, ...] = ("forget", "recall", "recall_sessions", "remember", "supersede")
RecallKind = Literal["note", "fact", "summary", "episode", "turn"]


class _BadArgument(InvalidInputError):
    """An argument the model sent does not fit the tool."""


# ---- argument checks ---------------------------------------------------------------------------


def _text(name: str, value: Any, max_chars: int) -> str:
    if not isinstance(value, str):
        raise _BadArgument(f"`{name}` must be a string, not {type(value).__name__}")
    if not value.strip():
        raise _BadArgument(f"`{name}` is empty — send the text itself")
    if len(value) > max_chars:
        raise _BadArgument(f"`{name}` is {len(value)} characters; the limit is {max_chars} — shorten it")
    return value.strip()


def _int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadArgument(f"`{name}` must be a whole number from {low} to {high}, not {value!r:.40}")
    if not low <= value <= high:
        raise _BadArgument(f"`{name}` must be from {low} to {high}, not {value}")
    return value


def _tags(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise _BadArgument('`tags` must be a list of strings, e.g. ["deploy", "billing"]')
    if len(value) > MAX_TAGS:
        raise _BadArgument(f"`tags` has {len(value)} tags; the limit is {MAX_TAGS}")
    tags = []
    for t in value:
        t = t.strip()
        if not t or len(t) > MAX_TAG_CHARS or any(c.isspace() for c in t):
            raise _BadArgument(
                f"tag {t!r:.80} is not allowed: a tag is one word of 1 to {MAX_TAG_CHARS} characters, "
                "no spaces (use - or _)"
            )
        tags.append(t)
    return tags


def _choice(name: str, value: Any, allowed: Sequence[str], *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if value not in allowed:
        raise _BadArgument(f"`{name}` must be one of {', '.join(map(repr, allowed))}, not {value!r:.40}")
    return cast(str, value)


# ---- results -----------------------------------------------------------------------------------


def _error(exc: Exception) -> ToolResult:
    """A tool error the model can read: one line, plus why a write was refused."""
    content: dict[str, Any] = {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    if isinstance(exc, WriteRefusedError):
        content["reason"] = exc.reason
        if exc.duplicate_of:
            content["duplicate_of"] = exc.duplicate_of
    return ToolResult(False, content)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())  # one line per entry: newlines and runs of spaces add nothing
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more chars]"


def _day(when: datetime) -> str:
    return when.strftime("%Y-%m-%d")


def _speaker(entry: Entry) -> str:
    return f"{entry.role}: " if entry.role else ""


def _describe(entry: Entry) -> str:
    """``kind (role, session …) · date · tags: …`` for one entry."""
    parts: list[str] = [str(entry.kind)]
    where = [p for p in (entry.role, f"session {entry.session}" if entry.session else None) if p]
    if where:
        parts[0] += f" ({', '.join(where)})"
    parts.append(_day(entry.created_at))
    shown_tags = [t for t in entry.tags if not t.startswith(("session:", "role:"))]
    if shown_tags:
        parts.append("tags: " + ", ".join(shown_tags[:MAX_TAGS]))
    return " · ".join(parts)


def _split_around(anchor: Entry, around: Sequence[Entry]) -> tuple[list[Entry], list[Entry]]:
    """The turns before and after ``anchor``, by time and then id (ids are ordered within a
    millisecond), so turns stored in the same millisecond still fall on the right side."""
    key = (anchor.created_at, anchor.id)
    before = [e for e in around if (e.created_at, e.id) < key]
    after = [e for e in around if (e.created_at, e.id) > key]
    return before, after


def _turn_lines(entries: Sequence[Entry], indent: str = "     ") -> list[str]:
    return [f"{indent}{_speaker(e)}{_cut(e.content, MAX_AROUND_CHARS)}" for e in entries]


def format_hits(query: str, hits: Sequence[Hit]) -> str:
    """Recall hits as numbered blocks: id, what it is, content, and any turns around it.

    Scores are left out: their scale depends on the recall mode and means little to a model; the
    order (best first) carries the ranking.
    """
    if not hits:
        return f"No memories match {query!r}."
    lines = [f"{len(hits)} memor{'y' if len(hits) == 1 else 'ies'} for {query!r}, best first:"]
    for i, hit in enumerate(hits, 1):
        e = hit.entry
        lines.append(f"{i}. [{e.id}] {_describe(e)}")
        lines.append(f"   {_cut(e.content, MAX_SHOWN_CHARS)}")
        if hit.context:
            before, after = _split_around(e, hit.context)
            if before:
                lines += ["   just before it:", *_turn_lines(before)]
            if after:
                lines += ["   just after it:", *_turn_lines(after)]
    return "\n".join(lines)


def format_sessions(query: str, found: Sequence[SessionHit]) -> str:
    """Session hits as numbered blocks: when, how long, how it began, the match in context, how it ended."""
    if not found:
        return f"No past sessions match {query!r}."
    lines = [f"{len(found)} past session{'s' if len(found) != 1 else ''} for {query!r}, best first:"]
    for i, s in enumerate(found, 1):
        span = f"{s.started_at:%Y-%m-%d %H:%M} → {s.ended_at:%Y-%m-%d %H:%M}"
        lines.append(f"{i}. session {s.session} · {span} · {s.turns} entries")
        anchor = s.anchor.entry
        before, after = _split_around(anchor, s.around)
        shown = {anchor.id, *(e.id for e in s.around)}
        if s.first.id not in shown:
            lines.append(f"   began: {_speaker(s.first)}{_cut(s.first.content, MAX_AROUND_CHARS)}")
            if before:
                lines.append("     …")
        lines += _turn_lines(before, "   ")
        lines.append(f"   best match [{anchor.id}]: {_speaker(anchor)}{_cut(anchor.content, MAX_SHOWN_CHARS)}")
        lines += _turn_lines(after, "   ")
        if s.last.id not in shown:
            if after:
                lines.append("     …")
            lines.append(f"   ended: {_speaker(s.last)}{_cut(s.last.content, MAX_AROUND_CHARS)}")
    return "\n".join(lines)


# ---- guarded writes ------------------------------------------------------------------------------


class _Gate:
    """The inner memory of a vetting copy of a guard: an accepted write is handed back, not stored.

    Its recall, which the guard uses to find near-duplicates, looks at curated memory only.
    """

    def __init__(self, store: MemoryStore, exclude: Callable[[Entry], bool] | None) -> None:
        self.store = store
        self.exclude = exclude
        self.accepted: tuple[str, dict[str, Any]] | None = None

    def add(self, content: str, **fields: Any) -> Entry:
        self.accepted = (content, fields)
        return cast(Entry, None)  # the guard only passes this back; the caller reads `accepted`

    def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
        filters.pop("namespace", None)  # the store is confined to its namespace already
        hits = self.store.recall(query, k, kind=CURATED_KINDS, **filters)
        return [h for h in hits if self.exclude is None or not self.exclude(h.entry)]


def _vetting_copy(guard: GuardedMemory, gate: _Gate, *, dedup: bool) -> GuardedMemory:
    """A GuardedMemory with ``guard``'s rules over ``gate`` (near-duplicate check only with ``dedup``)."""
    return GuardedMemory(
        gate,
        redactor=guard.redactor,
        blocked_substrings=guard.blocked_substrings,
        dedup_threshold=guard.dedup_threshold if dedup else None,
        recall_k=guard.recall_k,
    )


# ---- the tools -----------------------------------------------------------------------------------


def memory_tools(
    store: MemoryStore,
    *,
    guard: GuardedMemory | None = None,
    exclude: Callable[[Entry], bool] | None = None,
    source: str = "agent",
) -> list[Tool]:
    """The memory tools over ``store``: remember, recall, recall_sessions, forget, supersede.

    :param store: the memory the tools read and write.
    :param guard: vet ``remember`` and ``supersede`` with this guard's rules (see the module docstring).
    :param exclude: entries the recall tools must not return -- :meth:`MemoryWiring.is_own`, the
        running run's own turns (``attach_memory(..., tools=True)`` passes it).
    :param source: the ``source`` field of what the tools write.
    """

    def vet(content: str, *, dedup: bool) -> str:
        """``content`` as the guard would store it (redacted), or WriteRefusedError."""
        if guard is None:
            return content
        gate = _Gate(store, exclude)
        _vetting_copy(guard, gate, dedup=dedup).add(content)
        assert gate.accepted is not None
        return gate.accepted[0]

    def visible(hit_entry: Entry) -> bool:
        return exclude is None or not exclude(hit_entry)

    async def remember(content: str, kind: Literal["note", "fact"] = "note", tags: list[str] | None = None) -> Any:
        """Save one durable piece of knowledge to long-term memory, so later runs (and later steps of
        this one) can recall it.

        Use it for what will still matter later: facts about the user, the project or the
        environment, decisions and their reasons, lessons from mistakes. Do not use it for scratch
        work or for what is only true right now; to change something already stored, use
        `supersede`. Write one self-contained statement that makes sense without this conversation
        (say "the billing service deploys to staging-eu", not "it deploys there"). Returns the
        entry's id; saving the exact same text again stores nothing and returns the existing id.
        Secrets and personal data are redacted before storage, or the write is refused.

        :param content: the statement to remember, at most 4000 characters.
        :param kind: "fact" for something true about the world or the user, "note" for anything else.
        :param tags: up to 10 one-word labels to group and filter memories, e.g. ["deploy", "billing"].
        """
        try:
            text = _text("content", content, MAX_CONTENT_CHARS)
            chosen = _choice("kind", kind, ("note", "fact"))
            labels = _tags(tags)
            text = vet(text, dedup=True)
            r = store.remember(text, kind=chosen, tags=labels, source=source)
        except HarnessMemError as exc:
            return _error(exc)
        if r.deduped:
            return f"Already in memory as [{r.id}] (exact duplicate; nothing new was stored)."
        redacted = f" Redacted before storage: {_counts(r.redactions)}." if r.redactions else ""
        return f"Remembered as [{r.id}].{redacted}"

    async def recall(
        query: str, k: int = 5, kind: RecallKind | None = None, context: int = 0
    ) -> Any:
        """Search long-term memory: notes and facts saved earlier, summaries, and past episodes (what
        was tried on a similar task and how it went); with kind "turn", the lines of past
        conversations.

        Use it before answering from assumptions, when the task mentions something that may have
        come up before (a name, a system, a preference), or to find the id of an entry to correct
        or forget. A short query with the distinctive words (names, systems, errors) works best.
        Returns up to k entries, best first, each with its id, kind, date, tags and
        content (long entries are cut to 600 characters); "No memories match" means nothing
        relevant is stored. The current conversation is not searched: it is already in front of you.

        :param query: what to look for, in a few words or a question (at most 1000 characters).
        :param k: how many entries to return, 1 to 20.
        :param kind: only entries of this kind: "note", "fact", "summary", "episode" or "turn" (a
            line of a past conversation); leave it out to search notes, facts, summaries and episodes.
        :param context: for a conversation turn found, also show this many turns before and after
            it (0 to 5).
        """
        try:
            text = _text("query", query, MAX_QUERY_CHARS)
            n = _int("k", k, 1, MAX_K)
            chosen = _choice("kind", kind, ("note", "fact", "summary", "episode", "turn"), optional=True)
            around = _int("context", context, 0, MAX_CONTEXT)
            may_be_own = exclude is not None and chosen == "turn"
            hits = store.recall(
                text, k=n * OVERFETCH if may_be_own else n, kind=chosen or DEFAULT_RECALL_KINDS, context=around
            )
        except HarnessMemError as exc:
            return _error(exc)
        kept = [h for h in hits if visible(h.entry)][:n]
        return format_hits(text, kept)

    async def recall_sessions(query: str, k: int = 3) -> Any:
        """Find past conversations (sessions) about something, to recall what was said or decided
        in them and when.

        Use it for questions like "when did we discuss X" or "what did we decide about Y last
        time", where one line is not enough and the surrounding conversation matters. Returns up
        to k sessions, best first: when each took place, how many entries it has, how it began,
        the best-matching turn with the turns just before and after it, and how it ended. To read a
        single fact, `recall` is cheaper.

        :param query: what the conversation was about (at most 1000 characters).
        :param k: how many sessions to return, 1 to 10.
        """
        try:
            text = _text("query", query, MAX_QUERY_CHARS)
            n = _int("k", k, 1, 10)
            found = store.recall_sessions(text, k=n + 1 if exclude is not None else n)
        except HarnessMemError as exc:
            return _error(exc)
        kept = [s for s in found if visible(s.anchor.entry)][:n]
        return format_sessions(text, kept)

    async def forget(id: str) -> Any:
        """Remove one entry from long-term memory for good: recall never returns it again.

        Use it only for an entry that is wrong and cannot be corrected, that is harmful to keep,
        or that the user asked you to forget. If the entry is merely out of date, use `supersede`
        instead, which keeps the history. Takes the id shown in brackets by `recall`.

        :param id: the entry's id, exactly as `recall` showed it (without the brackets).
        """
        try:
            entry_id = _text("id", id, MAX_ID_CHARS).strip("[]")
            store.forget(entry_id)  # NotFoundError for an unknown id
        except HarnessMemError as exc:
            return _error(exc)
        return f"Forgotten: [{entry_id}] will not be recalled again."

    async def supersede(id: str, content: str) -> Any:
        """Correct a stored entry: the new text becomes a new entry and the old one is kept in its
        history but no longer recalled.

        Use it when something remembered has changed or turned out wrong ("the deploy target is
        now staging-us"). Write the complete corrected statement, not a diff. Returns the new id.

        :param id: the id of the entry to correct, as `recall` showed it (without the brackets).
        :param content: the corrected statement in full, at most 4000 characters.
        """
        try:
            old = _text("id", id, MAX_ID_CHARS).strip("[]")
            text = _text("content", content, MAX_CONTENT_CHARS)
            text = vet(text, dedup=False)  # a correction resembles what it corrects, by design
            r = store.supersede(old, text, source=source)
        except HarnessMemError as exc:
            return _error(exc)
        redacted = f" Redacted before storage: {_counts(r.redactions)}." if r.redactions else ""
        return f"Corrected: [{r.id}] replaces [{old}], which stays in its history.{redacted}"

    return [
        tool(remember, description=_description(remember)),
        tool(recall, description=_description(recall), read_only=True),
        tool(recall_sessions, description=_description(recall_sessions), read_only=True),
        tool(forget, description=_description(forget)),
        tool(supersede, description=_description(supersede)),
    ]


def _description(fn: Callable[..., Any]) -> str:
    """The docstring's text before its ``:param`` lines, each paragraph on one line."""
    text = inspect.cleandoc(fn.__doc__ or "").split("\n:param", 1)[0]
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n") if p.strip())


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} ×{n}" for kind, n in sorted(counts.items()))
