"""Memory as tools the model calls, rendered from harness_mem's one tool spec.

The operations -- ``remember``, ``recall``, ``recall_sessions``, ``get_memory``, ``update_memory``,
``forget``, ``recent_activity``, ``find_skills`` -- are declared once in :mod:`harness_mem.tools`
(names, descriptions, argument models with their limits, read-only hints, handlers); the MCP server
renders the same declarations, so the two offer the same tools with the same limits::

    loop = AgentLoop(model, [*workspace_tools(), *memory_tools(store)])
    # or, with the rest of the wiring (guides, capture, episodes), which also keeps the running
    # run's own turns out of the tools' reads:
    attach_memory(loop, store, tools=True)

What the loop adds is the rendering:

- **Compact, readable results** for the tools a model calls most: plain text, one numbered block
  per hit, best first (id, kind, date, tags, content cut to :data:`MAX_SHOWN_CHARS`, the turns
  around a conversation hit, the turns a fact or summary was drawn from), ids in brackets the model can pass to ``update_memory`` and
  ``forget`` (brackets are tolerated). ``get_memory``, ``recent_activity`` and ``find_skills``
  answer with their result model as JSON.
- **Errors are results, never crashes**: a bad argument (checked by the spec: types, lengths,
  ranges), anything harness_mem refuses (a :class:`GuardedMemory` or the redaction policy refusing a
  write, an unknown id, a read-only file) comes back as ``{"error": "<one line>"}`` with ``ok:
  false``; a refused write says why (``reason``) and, for a near-duplicate, which entry it
  duplicates (``duplicate_of``).

**Guarded writes.** With ``guard=GuardedMemory(...)``, ``remember`` and ``update_memory`` first pass
the guard's rules -- block-listed substrings, its redaction policy (hygiene by default: secrets and
money refused), and for ``remember`` its near-duplicate check against curated memory (notes, facts,
summaries; a transcript turn saying the same thing is not a duplicate) -- and then store the
guard-redacted text through the spec's handlers, so exact-duplicate detection and correction
history still apply. Only the guard's settings are used; its own ``inner`` memory is not written.

**Where they run.** The tools are coroutines that use the store on the loop's thread, as the recall
guides do: one SQLite connection is used by one thread at a time, and a memory operation on a local
file takes milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from harness_mem import Entry, GuardedMemory, Hit, MemoryStore
from harness_mem.errors import HarnessMemError, WriteRefusedError
from harness_mem.models import counted, format_time
from harness_mem.tools import (
    MAX_CONTENT_CHARS,
    MAX_K,
    OPERATIONS,
    Caller,
    ForgetResult,
    MemoryItem,
    Operation,
    RecallResult,
    RememberResult,
    SessionMatch,
    SessionsResult,
    for_model,
)

from .spill import ToolResult
from .tools import Tool

__all__ = [
    "CURATED_KINDS",
    "MAX_CONTENT_CHARS",
    "MAX_K",
    "MAX_SHOWN_CHARS",
    "MEMORY_TOOL_NAMES",
    "memory_tools",
]

MAX_SHOWN_CHARS = 600  # of each hit's content in a result
MAX_AROUND_CHARS = 240  # of each turn shown around a hit
MAX_SHOWN_TAGS = 10
CURATED_KINDS: tuple[str, ...] = ("note", "fact", "summary")
MEMORY_TOOL_NAMES: tuple[str, ...] = tuple(sorted(op.name for op in OPERATIONS))

_E = TypeVar("_E", Entry, MemoryItem)


# ---- results -----------------------------------------------------------------------------------


def _error(exc: Exception) -> ToolResult:
    """A tool error the model can read: one line, plus why a write was refused."""
    content: dict[str, Any] = {"error": for_model(exc)}
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


def _speaker(entry: Entry | MemoryItem) -> str:
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
        parts.append("tags: " + ", ".join(shown_tags[:MAX_SHOWN_TAGS]))
    return " · ".join(parts)


def _split_around(anchor: Entry, around: Sequence[_E]) -> tuple[list[_E], list[_E]]:
    """The turns before and after ``anchor``, by time and then id (ids are ordered within a
    millisecond), so turns stored in the same millisecond still fall on the right side."""
    key = (format_time(anchor.created_at), anchor.id)
    before = [e for e in around if (_when(e), e.id) < key]
    after = [e for e in around if (_when(e), e.id) > key]
    return before, after


def _when(entry: Entry | MemoryItem) -> str:
    return entry.created_at if isinstance(entry, MemoryItem) else format_time(entry.created_at)


def _turn_lines(entries: Sequence[Entry | MemoryItem], indent: str = "     ") -> list[str]:
    return [f"{indent}{_speaker(e)}{_cut(e.content, MAX_AROUND_CHARS)}" for e in entries]


def format_hits(query: str, hits: Sequence[Hit]) -> str:
    """Recall hits as numbered blocks: id, what it is, content, and any turns around it.

    Scores are left out: they fall along the order (best first), which carries the ranking, and a
    line less per hit leaves more of the prompt for the memories themselves.
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
        if hit.sources:
            lines += ["   drawn from:", *(f"     [{t.id}] {_speaker(t)}{_cut(t.content, MAX_AROUND_CHARS)}"
                                         for t in hit.sources)]
    return "\n".join(lines)


def _minute(iso: str) -> str:
    return f"{iso[:10]} {iso[11:16]}"


def format_sessions(query: str, found: Sequence[SessionMatch]) -> str:
    """Session hits as numbered blocks: when, how long, how it began, the match in context, how it ended."""
    if not found:
        return f"No past sessions match {query!r}."
    lines = [f"{counted(len(found), 'past session')} for {query!r}, best first:"]
    for i, s in enumerate(found, 1):
        span = f"{_minute(s.started_at)} → {_minute(s.ended_at)}"
        lines.append(f"{i}. session {s.session} · {span} · {counted(s.turns, 'entry', 'entries')}")
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


def _remembered(done: RememberResult) -> str:
    if done.deduped:
        return f"Already in memory as [{done.id}] (exact duplicate; nothing new was stored)."
    redacted = f" Redacted before storage: {_counts(done.redactions)}." if done.redactions else ""
    if done.supersedes is not None:
        return f"Corrected: [{done.id}] replaces [{done.supersedes}], which stays in its history.{redacted}"
    return f"Remembered as [{done.id}].{redacted}"


def _forgotten(done: ForgetResult) -> str:
    newest = done.ids[-1]
    older = f" (with its {done.forgotten - 1} older version{'s' if done.forgotten != 2 else ''})" \
        if done.forgotten > 1 else ""
    return f"Forgotten: [{newest}]{older} will not be recalled again."


def _rendered(op: Operation, arguments: dict[str, Any], result: BaseModel) -> Any:
    """The result as the model reads it: text for the tools it calls most, JSON for the others."""
    if isinstance(result, RecallResult):
        text = format_hits(str(arguments["query"]).strip(), result.hits)
        return f"{text}\n({result.note})" if result.note else text
    if isinstance(result, SessionsResult):
        text = format_sessions(str(arguments["query"]).strip(), result.sessions)
        return f"{text}\n({result.note})" if result.note else text
    if isinstance(result, RememberResult):
        return _remembered(result)
    if isinstance(result, ForgetResult):
        return _forgotten(result)
    return result.model_dump(mode="json")


def _loop_tool(op: Operation, store: MemoryStore, caller: Caller) -> Tool:
    async def call(**arguments: Any) -> Any:
        try:
            result = op.run(store, arguments, caller)
        except HarnessMemError as exc:
            return _error(exc)
        return _rendered(op, arguments, result)

    call.__name__ = op.name
    return Tool(name=op.name, description=op.description, parameters=op.parameters, fn=call,
                read_only=op.read_only, is_async=True)


def memory_tools(
    store: MemoryStore,
    *,
    guard: GuardedMemory | None = None,
    exclude: Callable[[Entry], bool] | None = None,
    source: str = "agent",
    names: Sequence[str] | None = None,
) -> list[Tool]:
    """The memory tools over ``store``, rendered from :data:`harness_mem.tools.OPERATIONS`.

    :param store: the memory the tools read and write.
    :param guard: vet ``remember`` and ``update_memory`` with this guard's rules (see the module docstring).
    :param exclude: entries the reads must not return -- :meth:`MemoryWiring.is_own`, the running
        run's own turns (``attach_memory(..., tools=True)`` passes it).
    :param source: the ``source`` field of what the tools write.
    :param names: only these tools (default: every one, :data:`MEMORY_TOOL_NAMES`).
    """

    def vet(content: str, dedup: bool) -> str:
        """``content`` as the guard would store it (redacted), or WriteRefusedError."""
        if guard is None:
            return content
        gate = _Gate(store, exclude)
        _vetting_copy(guard, gate, dedup=dedup).add(content)
        assert gate.accepted is not None
        return gate.accepted[0]

    unknown = sorted(set(names or ()) - set(MEMORY_TOOL_NAMES))
    if unknown:
        raise ValueError(f"no memory tool named {unknown[0]!r} — the tools are: {', '.join(MEMORY_TOOL_NAMES)}")
    # Hits whole: format_hits cuts them itself and says how much more there is.
    caller = Caller(source=source, exclude=exclude, vet=vet if guard is not None else None, hit_chars=None)
    return [_loop_tool(op, store, caller) for op in OPERATIONS if names is None or op.name in names]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} ×{n}" for kind, n in sorted(counts.items()))
