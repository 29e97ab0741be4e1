"""The memory tools, declared once: what a model may call on a store, for every place that offers it.

Each :class:`Operation` is one memory operation as a model sees it: its name, a description written
for the model (when to use it, what the arguments mean, what comes back, the limits), its arguments
as a pydantic model (types, lengths, ranges: the JSON schema a host shows the model is that model's),
read-only and destructive hints, the handler (a function of the store, the checked arguments and the
:class:`Caller`) and the model of its result. :data:`OPERATIONS` lists them; the MCP server
(:mod:`harness_mem.mcp_server`) and the agent loop's tools (``harness_loop.memory_tools``) render
them, so the two cannot drift apart again.

**Arguments** are checked by :meth:`Operation.parse`: unknown names are refused (a misspelt filter
must not silently widen a search) and a bad value is one line naming the argument and the limit,
never echoing the value (it may be a megabyte).

**Errors** are written for the model: what went wrong and which tool to call instead, never a
command line, and passed through the display redactor (:func:`~harness_mem.cliutils.shown`) since
an error may quote what it was given.

**Hits** are :class:`~harness_mem.models.Hit` itself, clipped for a list (``truncated`` says so):
its ``model_dump(mode="json")`` is the one hit shape, the same as ``recall --json`` and
``harness-mem schema hit``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from .cliutils import shown
from .errors import InvalidInputError, NotFoundError
from .models import Entry, Hit, Remembered, format_time, has_visible_text
from .recall import Mode
from .store import MemoryStore

__all__ = [
    "HIT_CHARS",
    "MAX_CONTENT_CHARS",
    "MAX_HISTORY",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "OPERATIONS",
    "ActivityResult",
    "ArgumentError",
    "Arguments",
    "Caller",
    "FindSkillsArgs",
    "ForgetArgs",
    "ForgetResult",
    "GetMemoryArgs",
    "MemoryDetail",
    "MemoryItem",
    "Operation",
    "RecallArgs",
    "RecallResult",
    "RecallSessionsArgs",
    "RecentActivityArgs",
    "RememberArgs",
    "RememberResult",
    "SessionActivity",
    "SessionMatch",
    "SessionsResult",
    "SkillMatch",
    "SkillsResult",
    "UpdateMemoryArgs",
    "clip",
    "for_model",
    "listed_hit",
    "memory_item",
    "operation",
    "run_operation",
]

#: The longest memory a tool writes (characters). The store takes more; a model's memory should not.
MAX_CONTENT_CHARS = 65_536
#: The longest query (characters): far past any question, short of a pasted document.
MAX_QUERY_CHARS = 4_096
#: The most hits (or memories) one call returns.
MAX_K = 100
#: The most sessions ``recall_sessions`` returns, and skills ``find_skills`` returns: each is long.
MAX_SESSIONS = 20
MAX_SKILLS = 20
#: Turns shown around a hit, at most.
MAX_CONTEXT = 5
MAX_TAGS = 32
MAX_TAG_CHARS = 100
MAX_ID_CHARS = 200
MAX_SESSION_CHARS = 200
MAX_ROLE_CHARS = 64
#: Sessions, kinds or tags one recall may leave out.
MAX_EXCLUSIONS = 32
#: The largest metadata object a memory carries, as compact JSON (characters).
MAX_METADATA_CHARS = 16_384
#: The longest time to live a tool may give (days): ten years.
MAX_TOOL_TTL_DAYS = 3_650
#: Memory text shown per item in lists (recall, sessions, recent activity); get_memory shows it all.
HIT_CHARS = 2_000
#: Versions of a correction history one get_memory call shows at most (10 unless asked).
MAX_HISTORY = 100
DEFAULT_HISTORY = 10
MAX_HISTORY_OFFSET = 1_000_000
#: Fetched per hit wanted when the caller drops some (the running run's own turns).
OVERFETCH = 3

RecallKind = Literal["note", "fact", "summary", "turn", "episode"]
WriteKind = Literal["note", "fact", "summary"]


class ArgumentError(InvalidInputError):
    """A model's arguments do not fit the tool: one line naming each bad argument."""


# ---- what a renderer adds to the store ------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """How one renderer runs the operations.

    :param source: the ``source`` field of what the tools write.
    :param exclude: entries reads must not return (the agent loop's own running turns).
    :param vet: ``vet(content, dedup)``: the content as it may be stored (a guard's redaction), or
        :class:`~harness_mem.errors.WriteRefusedError`; ``dedup`` is False for a correction.
    :param recall_mode: ``recall_mode(asked)``: the mode to recall with and a note for the model
        (the MCP server answers by keyword while its model loads).
    :param before_write: called before each write (the MCP server waits for its model there).
    :param hit_chars: the content a hit in a list shows (``truncated`` past it); None: all of it,
        for a renderer that cuts the text itself.
    :param tags: tags every memory written carries besides its own (the MCP server: the project it
        runs in, so a coding agent's next session is told what it noted).
    """

    source: str = "tool"
    exclude: Callable[[Entry], bool] | None = None
    vet: Callable[[str, bool], str] | None = None
    recall_mode: Callable[[Mode | None], tuple[Mode | None, str | None]] | None = None
    before_write: Callable[[], None] | None = None
    hit_chars: int | None = HIT_CHARS
    tags: tuple[str, ...] = ()

    def visible(self, entry: Entry) -> bool:
        return self.exclude is None or not self.exclude(entry)


# ---- arguments ------------------------------------------------------------------------------------


def _not_blank(value: str) -> str:
    if not has_visible_text(value):
        raise ValueError("is empty (or only spaces and control characters): send the text itself")
    return value.strip()


def _an_id(value: str) -> str:
    # Ids are shown in brackets in the agent loop's results; a model often copies them along.
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1].strip()
    if not value:
        raise ValueError("is empty: send an id as a tool returned it")
    return value


def _small_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(json.dumps(value, separators=(",", ":"))) > MAX_METADATA_CHARS:
        raise ValueError(f"is larger than {MAX_METADATA_CHARS:,} characters as JSON: keep it to a few fields")
    return value


def _count(default: int, low: int, high: int, description: str) -> Any:
    return Field(default, ge=low, le=high, description=f"{description} ({low}-{high})")


Query = Annotated[str, Field(
    min_length=1, max_length=MAX_QUERY_CHARS,
    description=f"what to look for, in plain words (any text; up to {MAX_QUERY_CHARS:,} characters)"),
    AfterValidator(_not_blank)]
Content = Annotated[str, Field(
    min_length=1, max_length=MAX_CONTENT_CHARS,
    description=f"the memory: one self-contained statement (up to {MAX_CONTENT_CHARS:,} characters)"),
    AfterValidator(_not_blank)]
MemoryId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, description="a memory's id, as a tool returned it"),
                     AfterValidator(_an_id)]
Tag = Annotated[str, Field(min_length=1, max_length=MAX_TAG_CHARS)]
TagList = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
Tags = Annotated[list[Tag] | None, Field(
    max_length=MAX_TAGS, description=f"labels (up to {MAX_TAGS}, each up to {MAX_TAG_CHARS} characters)")]
Session = Annotated[str | None, Field(min_length=1, max_length=MAX_SESSION_CHARS)]
Role = Annotated[str | None, Field(min_length=1, max_length=MAX_ROLE_CHARS)]
Time = Annotated[str | None, Field(min_length=1, max_length=40)]


class Arguments(BaseModel):
    """A tool's arguments: strict (no "5" for 5, no "yes" for true) and closed (no unknown names)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RememberArgs(Arguments):
    content: Content
    kind: WriteKind = Field("note", description=(
        "fact: something true about the user, the project or the world; note: anything else;"
        " summary: a digest of a longer exchange"))
    tags: Tags = None
    session: Session = Field(None, description="the conversation it came from, if you track one")
    role: Role = Field(None, description="who said or decided it (user, assistant…), if it matters")
    metadata: Annotated[dict[str, Any] | None, AfterValidator(_small_metadata)] = Field(None, description=(
        f"structured fields to keep with it, as a JSON object (up to {MAX_METADATA_CHARS:,} characters)"))
    expires_at: Time = Field(None, description="forget it at this time (ISO-8601); leave out to keep it")
    ttl_days: float | None = Field(None, gt=0, le=MAX_TOOL_TTL_DAYS, description=(
        f"forget it after this many days (up to {MAX_TOOL_TTL_DAYS:,}); instead of expires_at"))

    @model_validator(mode="after")
    def _one_expiry(self) -> Self:
        if self.expires_at is not None and self.ttl_days is not None:
            raise ValueError("give expires_at or ttl_days, not both")
        return self


class RecallArgs(Arguments):
    query: Query
    k: int = _count(10, 1, MAX_K, "how many memories to return at most")
    mode: Literal["hybrid", "keyword", "semantic"] | None = Field(None, description=(
        "hybrid: by meaning and keywords (the default); keyword: by words only; semantic: by meaning only"))
    kind: RecallKind | None = Field(None, description=(
        "only memories of this kind (turn: a line of a past conversation); leave it out to search them all"))
    role: Role = Field(None, description="only conversation turns by this speaker (user, assistant…)")
    tags: Tags = Field(None, description="only memories carrying all these tags")
    session: Session = Field(None, description="only this conversation")
    since: Time = Field(None, description=(
        "only memories created since then: an age back from now (30m, 24h, 7d, 2w) or an ISO-8601 time"))
    until: Time = Field(None, description="only memories created before then: an age or an ISO-8601 time")
    exclude_session: Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_SESSION_CHARS)]],
                               Field(max_length=MAX_EXCLUSIONS)] = Field(
        default_factory=list, description=f"leave out these conversations (up to {MAX_EXCLUSIONS})")
    exclude_kind: Annotated[list[RecallKind], Field(max_length=MAX_EXCLUSIONS)] = Field(
        default_factory=list, description="leave out memories of these kinds")
    exclude_tag: Annotated[list[Tag], Field(max_length=MAX_EXCLUSIONS)] = Field(
        default_factory=list, description=f"leave out memories carrying any of these tags (up to {MAX_EXCLUSIONS})")
    context: int = _count(0, 0, MAX_CONTEXT, "for conversation turns: how many turns before and after each hit to include")
    include_superseded: bool = Field(False, description="also return memories that update_memory replaced")
    rerank: bool = Field(False, description=(
        "order the best 30 again by matching each word of the query against each memory's: better first"
        " hits for a question about one detail, at the cost of a model pass over those memories"))


class RecallSessionsArgs(Arguments):
    query: Query
    k: int = _count(5, 1, MAX_SESSIONS, "how many conversations to return at most")
    context: int = _count(1, 0, MAX_CONTEXT, "turns to show before and after the best-matching one")


class GetMemoryArgs(Arguments):
    id: MemoryId
    history_limit: int = _count(DEFAULT_HISTORY, 1, MAX_HISTORY, "how many versions of the history to show")
    history_offset: int = Field(0, ge=0, le=MAX_HISTORY_OFFSET, description=(
        "skip this many of the newest versions, to page back through a long history"))


class UpdateMemoryArgs(Arguments):
    id: MemoryId
    content: Content
    tags: Tags = Field(None, description="new tags (default: keep the old ones)")


class ForgetArgs(Arguments):
    id: MemoryId


class RecentActivityArgs(Arguments):
    limit: int = _count(10, 1, MAX_K, "how many of the newest memories to return")
    kind: RecallKind | None = Field(None, description="only memories of this kind")


class FindSkillsArgs(Arguments):
    query: str | None = Field(None, max_length=MAX_QUERY_CHARS, description=(
        "the task at hand, in plain words; leave it out to list the skills by name"))
    k: int = _count(5, 1, MAX_SKILLS, "how many skills to return at most")
    include_instructions: bool = Field(True, description="include each skill's whole SKILL.md")


# ---- results --------------------------------------------------------------------------------------


class MemoryItem(BaseModel):
    """One stored memory, as a model sees it in a list or a history."""

    id: str = Field(description="pass it to get_memory, update_memory or forget")
    kind: str = Field(description="note, fact, summary, turn (a transcript turn) or episode")
    content: str
    truncated: bool = Field(False, description="content was clipped here: get_memory shows all of it")
    tags: list[str] = Field(default_factory=list)
    session: str | None = Field(None, description="the conversation it belongs to, if any")
    role: str | None = Field(None, description="who said it, for a transcript turn")
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: str = Field(description="ISO-8601, UTC")
    expires_at: str | None = Field(None, description="when it will be forgotten, if ever")
    superseded_by: str | None = Field(None, description="the id of the memory that corrected this one")


class RecallResult(BaseModel):
    mode: Literal["hybrid", "keyword", "semantic"] = Field(
        description="hybrid: by meaning and keywords; keyword: by words only (see note); semantic: by meaning")
    note: str | None = Field(None, description="why the answer may be incomplete, when it may be")
    hits: list[Hit] = Field(description="best first; each is the memory's fields with its score")


class SessionMatch(BaseModel):
    session: str
    score: float = Field(description="the score of its best-matching entry")
    turns: int = Field(description="entries in the session")
    started_at: str
    ended_at: str
    anchor: Hit = Field(description="the session's best-matching entry")
    around: list[MemoryItem] = Field(description="the anchor with the turns just before and after it, in order")
    first: MemoryItem = Field(description="the session's first entry")
    last: MemoryItem = Field(description="the session's last entry")


class SessionsResult(BaseModel):
    mode: Literal["hybrid", "keyword", "semantic"]
    note: str | None = None
    sessions: list[SessionMatch]


class RememberResult(BaseModel):
    id: str = Field(description="the memory's id (the existing one when deduped)")
    deduped: bool = Field(description="the same text was already stored: nothing new was written")
    redactions: dict[str, int] = Field(description="secrets and personal data replaced before storing, by kind")
    supersedes: str | None = Field(None, description="the id this memory replaced")


class MemoryDetail(BaseModel):
    memory: MemoryItem
    current_id: str = Field(description="the newest version in the history (this id when never corrected)")
    history: list[MemoryItem] = Field(
        description="versions, oldest first: the newest history_limit of them, before the history_offset newest")
    history_total: int = Field(description="versions in the whole history, this one included")
    older_versions: int = Field(
        description="versions older than the first one shown: ask again with history_offset + len(history)")


class ForgetResult(BaseModel):
    forgotten: int = Field(description="entries forgotten: the memory and its other versions")
    ids: list[str]


class SessionActivity(BaseModel):
    session: str
    turns: int
    started_at: str
    ended_at: str


class ActivityResult(BaseModel):
    memories: list[MemoryItem] = Field(description="the newest memories, newest first")
    sessions: list[SessionActivity] = Field(description="the most recently active sessions, newest first")


class SkillMatch(BaseModel):
    name: str
    description: str
    version: int = Field(description="how many times it was saved with changes")
    score: float | None = Field(None, description="word overlap with the query, 0-1 (None when listing)")
    skill_md: str | None = Field(None, description="the whole SKILL.md: the instructions to follow")


class SkillsResult(BaseModel):
    skills: list[SkillMatch]
    total: int = Field(description="skills saved in this store")


def clip(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters (and an ellipsis), and whether it was cut."""
    return (text, False) if len(text) <= limit else (text[:limit] + "…", True)


def memory_item(entry: Entry, limit: int = HIT_CHARS) -> MemoryItem:
    content, truncated = clip(entry.content, limit)
    return MemoryItem(
        id=entry.id, kind=entry.kind, content=content, truncated=truncated, tags=list(entry.tags),
        session=entry.session, role=entry.role, metadata=dict(entry.metadata),
        created_at=format_time(entry.created_at),
        expires_at=None if entry.expires_at is None else format_time(entry.expires_at),
        superseded_by=entry.superseded_by,
    )


def listed_hit(hit: Hit, limit: int | None = HIT_CHARS) -> Hit:
    """``hit`` as a list shows it: content clipped to ``limit`` (``truncated``), and its context and source turns too."""
    if limit is None:
        return hit.model_copy(update={"score": round(hit.score, 6)})
    content, truncated = clip(hit.entry.content, limit)
    context, sources = (None if turns is None else tuple(e.model_copy(update={"content": clip(e.content, limit)[0]})
                                                         for e in turns) for turns in (hit.context, hit.sources))
    return hit.model_copy(update={"entry": hit.entry.model_copy(update={"content": content}), "truncated": truncated,
                                  "score": round(hit.score, 6), "context": context, "sources": sources})


def _remembered(done: Remembered) -> RememberResult:
    return RememberResult(id=done.id, deduped=done.deduped, redactions=dict(done.redactions),
                          supersedes=done.supersedes)


# ---- handlers ---------------------------------------------------------------------------------------


def _unknown(entry_id: str) -> NotFoundError:
    return NotFoundError(f"no entry with id {entry_id!r} (never stored, forgotten or expired) — recall or"
                         " recent_activity give the ids of what is stored")


def _get(store: MemoryStore, entry_id: str) -> Entry:
    try:
        return store.get(entry_id)
    except NotFoundError:
        raise _unknown(entry_id) from None


def _history(store: MemoryStore, entry_id: str) -> list[Entry]:
    try:
        return store.history(entry_id)
    except NotFoundError:
        raise _unknown(entry_id) from None


def _mode(caller: Caller, asked: Mode | None) -> tuple[Mode | None, str | None]:
    return caller.recall_mode(asked) if caller.recall_mode is not None else (asked, None)


def _mode_named(store: MemoryStore, mode: Mode | None) -> Literal["hybrid", "keyword", "semantic"]:
    if mode is not None:
        return mode
    return "keyword" if store.keyword_only else "hybrid"


def _vetted(caller: Caller, content: str, *, dedup: bool) -> str:
    if caller.before_write is not None:
        caller.before_write()
    return caller.vet(content, dedup) if caller.vet is not None else content


def remember(store: MemoryStore, args: RememberArgs, caller: Caller) -> RememberResult:
    content = _vetted(caller, args.content, dedup=True)
    tags = tuple(dict.fromkeys([*(args.tags or ()), *caller.tags]))
    fields: dict[str, Any] = {"kind": args.kind, "tags": tags, "session": args.session, "role": args.role,
                              "source": caller.source, "metadata": args.metadata}
    return _remembered(store.remember(content, expires_at=args.expires_at, ttl_days=args.ttl_days, **fields))


def recall(store: MemoryStore, args: RecallArgs, caller: Caller) -> RecallResult:
    """Every lane unless a kind is named: what was said and written ranked together with what
    consolidation derived from it, each derived hit with the turns it came from (so a store of
    turns alone answers, and a consolidated one gives the digest and its evidence in one list)."""
    mode, note = _mode(caller, args.mode)
    fetch = args.k * OVERFETCH if caller.exclude is not None else args.k
    hits = store.recall(args.query, fetch, mode, kind=args.kind, role=args.role, tags=args.tags or (),
                        session=args.session, since=args.since, until=args.until,
                        exclude_sessions=args.exclude_session, exclude_kinds=args.exclude_kind,
                        exclude_tags=args.exclude_tag, context=args.context,
                        include_superseded=args.include_superseded, derived="both", sources=True,
                        rerank=args.rerank and note is None)  # while the model loads, keywords answer alone
    kept = [listed_hit(h, caller.hit_chars) for h in hits if caller.visible(h.entry)][: args.k]
    return RecallResult(mode=_mode_named(store, mode), note=note, hits=kept)


def recall_sessions(store: MemoryStore, args: RecallSessionsArgs, caller: Caller) -> SessionsResult:
    mode, note = _mode(caller, None)
    fetch = args.k + 1 if caller.exclude is not None else args.k
    found = store.recall_sessions(args.query, fetch, context=args.context, mode=mode)
    kept = [s for s in found if caller.visible(s.anchor.entry)][: args.k]
    return SessionsResult(mode=_mode_named(store, mode), note=note, sessions=[
        SessionMatch(session=s.session, score=round(s.score, 6), turns=s.turns,
                     started_at=format_time(s.started_at), ended_at=format_time(s.ended_at),
                     anchor=listed_hit(s.anchor, caller.hit_chars), around=[memory_item(e) for e in s.around],
                     first=memory_item(s.first), last=memory_item(s.last))
        for s in kept
    ])


def get_memory(store: MemoryStore, args: GetMemoryArgs, caller: Caller) -> MemoryDetail:
    """The memory in full and a page of its history: ``history_limit`` versions, oldest first,
    ending ``history_offset`` versions before the newest (a history can grow without end)."""
    entry = _get(store, args.id)
    chain = _history(store, args.id)
    end = max(len(chain) - args.history_offset, 0)
    start = max(end - args.history_limit, 0)
    return MemoryDetail(memory=memory_item(entry, MAX_CONTENT_CHARS), current_id=chain[-1].id,
                        history=[memory_item(e) for e in chain[start:end]], history_total=len(chain),
                        older_versions=start)


def update_memory(store: MemoryStore, args: UpdateMemoryArgs, caller: Caller) -> RememberResult:
    content = _vetted(caller, args.content, dedup=False)  # a correction resembles what it corrects
    changes: dict[str, Any] = {"source": caller.source}
    if args.tags is not None:
        changes["tags"] = args.tags
    _get(store, args.id)  # an unknown id: the model-facing message
    try:
        return _remembered(store.supersede(args.id, content, **changes))
    except InvalidInputError as exc:
        if "already superseded" in str(exc):
            raise InvalidInputError(str(exc).replace("correct that one", "update_memory that one instead")) from None
        raise


def forget(store: MemoryStore, args: ForgetArgs, caller: Caller) -> ForgetResult:
    # Every version at once (one transaction): forgetting a fact must not leave its older wording.
    with store.transaction():
        chain = [entry.id for entry in _history(store, args.id)]
        forgotten = sum(store.forget(entry_id) for entry_id in chain)
    return ForgetResult(forgotten=forgotten, ids=chain)


def recent_activity(store: MemoryStore, args: RecentActivityArgs, caller: Caller) -> ActivityResult:
    entries = [e for e in store.recent(args.limit * OVERFETCH if caller.exclude else args.limit, kind=args.kind)
               if caller.visible(e)][: args.limit]
    active = store.sessions(limit=5)
    return ActivityResult(
        memories=[memory_item(e) for e in entries],
        sessions=[SessionActivity(session=s.session, turns=s.turns, started_at=format_time(s.started_at),
                                  ended_at=format_time(s.ended_at)) for s in active],
    )


def find_skills(store: MemoryStore, args: FindSkillsArgs, caller: Caller) -> SkillsResult:
    # The experience package (YAML, the SKILL.md rules) loads only when skills are asked for.
    from .experience.skills import overlap_similarity, skill_key_text
    from .experience.store import ExperienceStore

    experience = ExperienceStore(store)
    keys = experience.skill_keys()
    chosen: list[tuple[str, float | None]]
    if args.query is None or not args.query.strip():
        chosen = [(name, None) for name, _ in keys[: args.k]]
    else:
        query = args.query
        scored = [(name, overlap_similarity(query, skill_key_text(name, description))) for name, description in keys]
        ranked = sorted((pair for pair in scored if pair[1] > 0), key=lambda pair: -pair[1])
        chosen = [(name, round(score, 4)) for name, score in ranked[: args.k]]
    records = [(experience.get_skill(name), score) for name, score in chosen]
    return SkillsResult(total=len(keys), skills=[
        SkillMatch(name=r.name, description=r.skill.description, version=r.version, score=score,
                   skill_md=r.skill.render() if args.include_instructions else None)
        for r, score in records
    ])


# ---- the operations ---------------------------------------------------------------------------------


def _problems(error: ValidationError) -> str:
    problems = []
    for detail in error.errors(include_url=False):
        where = ".".join(str(part) for part in detail["loc"]) or "arguments"
        message = detail["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    return "; ".join(dict.fromkeys(problems))


@dataclass(frozen=True)
class Operation:
    """One memory operation, as every renderer offers it to a model."""

    name: str
    description: str
    args: type[Arguments]
    result: type[BaseModel]
    handler: Callable[[MemoryStore, Any, Caller], BaseModel]
    read_only: bool
    destructive: bool = False
    idempotent: bool = False
    #: It embeds what it writes (a renderer may wait for the model first).
    embeds: bool = False

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments: what the model is shown."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        schema.setdefault("required", [])
        return schema

    @property
    def argument_names(self) -> list[str]:
        return list(self.args.model_fields)

    def parse(self, arguments: Mapping[str, Any]) -> Arguments:
        """``arguments`` checked; :class:`ArgumentError` names each argument that does not fit."""
        unknown = [key for key in arguments if key not in self.args.model_fields]
        if unknown:
            raise ArgumentError(f"unknown argument {unknown[0]!r:.60} — it takes: {', '.join(self.argument_names)}")
        try:
            return self.args.model_validate(dict(arguments))
        except ValidationError as exc:
            raise ArgumentError(f"invalid arguments: {_problems(exc)}") from None

    def run(self, store: MemoryStore, arguments: Mapping[str, Any], caller: Caller | None = None) -> BaseModel:
        """Check ``arguments`` and run the operation on ``store``. Errors are
        :class:`~harness_mem.errors.HarnessMemError`; :func:`for_model` words them for the model."""
        return self.handler(store, self.parse(arguments), caller or Caller())


def for_model(exc: BaseException) -> str:
    """An error as one line for the model: redacted (it may quote what it was given), and pointing
    at the tool to call rather than at a command line."""
    text = str(exc) or type(exc).__name__
    head, dash, hint = text.partition(" — ")
    if "harness-mem " in hint:  # a hint written for a terminal user
        text = head
    return shown(text)


def _limits(**parts: str) -> str:
    return " Limits: " + "; ".join(f"{name} {limit}" for name, limit in parts.items()) + "."


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "remember", (
            "Store a memory for later conversations: a fact, decision or preference worth knowing next time"
            ' ("the user prefers tabs", "we chose argon2id for password hashing"). One self-contained statement'
            ' per call that makes sense without this conversation (say "the billing service deploys to'
            ' staging-eu", not "it deploys there"). Returns the memory\'s id; storing the same text again'
            " writes nothing and returns the existing id (deduped: true). Secrets and personal data (API keys,"
            " e-mail addresses, card numbers…) are redacted before storing, or the write is refused;"
            " `redactions` counts what was replaced. metadata keeps structured fields with it; expires_at or"
            " ttl_days makes it temporary.\n\n"
            "Use it for what will still matter later: facts about the user, the project or the environment,"
            " decisions and their reasons, lessons from mistakes. Skip small talk, scratch work and things"
            " only true right now. To correct a stored memory use update_memory, which keeps its history."
            + _limits(content=f"up to {MAX_CONTENT_CHARS:,} characters", tags=f"up to {MAX_TAGS}",
                      metadata=f"up to {MAX_METADATA_CHARS:,} characters as JSON",
                      ttl_days=f"up to {MAX_TOOL_TTL_DAYS:,}")
        ), RememberArgs, RememberResult, remember, read_only=False, idempotent=True, embeds=True),
    Operation(
        "recall", (
            "Search the memories by meaning and by keywords. Any text is a valid query (there is no search"
            " syntax). Returns up to k memories, best first, each with its id, content (clipped to"
            f" {HIT_CHARS:,} characters, `truncated` says so: get_memory has the rest), kind, tags, session,"
            " time and a score from 0 to 1 (how likely it holds what was asked, on one scale for every query; a"
            " memory that says it in other words than the query can score low and still rank first). It"
            " searches everything unless kind names one: notes, facts, summaries, episodes and the lines of past"
            " conversations (turns), ranked together; a fact or summary drawn from a conversation comes with the"
            " turns it was drawn from (`sources`), which are then not listed again. exclude_session, exclude_kind"
            " and exclude_tag leave those out."
            " `mode` says how it matched: hybrid (meaning and keywords) or keyword (words only: while the"
            " embedding model is still loading, or when the store keeps no vectors); `note` explains"
            " anything that made the answer incomplete. Memories corrected by update_memory are left out"
            " unless include_superseded. An empty list means nothing matched.\n\n"
            "Use it before answering anything that may depend on earlier conversations: decisions,"
            " preferences, facts about the user or the project, a name or a system that may have come up"
            " before; or to find the id of a memory to correct or forget. A short query with the"
            " distinctive words works best."
            + _limits(query=f"up to {MAX_QUERY_CHARS:,} characters", k=f"up to {MAX_K}",
                      context=f"up to {MAX_CONTEXT} turns", exclusions=f"up to {MAX_EXCLUSIONS} of each")
        ), RecallArgs, RecallResult, recall, read_only=True),
    Operation(
        "recall_sessions", (
            "Find the past conversations (sessions) that best match a query, rather than single memories."
            " Each session comes with its best-matching entry (anchor), an excerpt around it (the anchor with"
            " the turns just before and after it, in order), its first and last entries, its number of"
            " entries and its time span. Only memories recorded with a session count. `mode` and `note` are"
            " as in recall.\n\n"
            'Use it for "when did we talk about X" or "what did we decide about Y last time", where one'
            " line is not enough and the surrounding conversation matters; to read a single fact, recall is"
            " cheaper."
            + _limits(query=f"up to {MAX_QUERY_CHARS:,} characters", k=f"up to {MAX_SESSIONS}",
                      context=f"up to {MAX_CONTEXT} turns")
        ), RecallSessionsArgs, SessionsResult, recall_sessions, read_only=True),
    Operation(
        "get_memory", (
            "Read one memory in full by its id (from recall, remember or recent_activity), with its"
            " correction history. `current_id` is the newest version (the one to trust and to update);"
            f" `history` lists the newest {DEFAULT_HISTORY} versions (history_limit to change it), oldest"
            " first, `history_total` counts every version and `older_versions` those before the first one"
            " shown: to page back, call again with history_offset increased by the number shown. Content is"
            f" shown up to {MAX_CONTENT_CHARS:,} characters (history entries up to {HIT_CHARS:,}). An unknown"
            " or forgotten id is an error.\n\n"
            "Use it when a recall hit was clipped (truncated), or to see how a memory changed."
            + _limits(history_limit=f"up to {MAX_HISTORY}")
        ), GetMemoryArgs, MemoryDetail, get_memory, read_only=True),
    Operation(
        "update_memory", (
            "Correct a stored memory: the new content becomes a new memory that replaces the old one. The"
            " old one is kept (get_memory shows the history) but recall no longer returns it. Kind, session"
            " and tags carry over unless given. Returns the new id and, in `supersedes`, the old one. Only"
            " the newest version can be updated: an id that was already replaced is an error naming its"
            " successor; an unknown id is an error.\n\n"
            'Use it when something remembered has changed or turned out wrong ("the deploy target is now'
            ' staging-us"). Write the complete corrected statement, not a diff.'
            + _limits(content=f"up to {MAX_CONTENT_CHARS:,} characters", tags=f"up to {MAX_TAGS}")
        ), UpdateMemoryArgs, RememberResult, update_memory, read_only=False, embeds=True),
    Operation(
        "forget", (
            "Delete a memory for good: the memory and every other version in its correction history stop"
            " appearing anywhere at once, and their text leaves the file at the next purge. Returns how many"
            " entries were forgotten and their ids. An unknown id is an error.\n\n"
            "Use it only when the user asks you to forget something, or a memory is wrong and harmful to"
            " keep. If it is merely out of date, use update_memory instead, which keeps the history."
            + _limits(id=f"up to {MAX_ID_CHARS} characters")
        ), ForgetArgs, ForgetResult, forget, read_only=False, destructive=True),
    Operation(
        "recent_activity", (
            "What happened lately: the newest memories (newest first) and the five most recently active"
            f" conversations with their sizes and time spans. Memory text is clipped to {HIT_CHARS:,}"
            " characters.\n\n"
            "Use it at the start of a conversation to pick up where things were left, or when asked what"
            " you were doing; use recall to search instead."
            + _limits(limit=f"up to {MAX_K}")
        ), RecentActivityArgs, ActivityResult, recent_activity, read_only=True),
    Operation(
        "find_skills", (
            "Find saved skills: procedures (SKILL.md documents) learned from earlier work. With a query,"
            " returns the skills whose name and description share the most words with it, best first (word"
            " overlap, not meaning; score 0-1); without one, lists skills by name. Each comes with its name,"
            " description, version and, unless include_instructions is false, the whole SKILL.md.\n\n"
            "Use it when a task is like one done before, to follow the procedure that worked."
            + _limits(query=f"up to {MAX_QUERY_CHARS:,} characters", k=f"up to {MAX_SKILLS}")
        ), FindSkillsArgs, SkillsResult, find_skills, read_only=True),
)

_BY_NAME = {op.name: op for op in OPERATIONS}


def operation(name: str) -> Operation:
    """The operation called ``name``; :class:`NotFoundError` lists the others."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise NotFoundError(f"no memory tool named {name!r} — the tools are: {', '.join(_BY_NAME)}") from None


def run_operation(store: MemoryStore, name: str, arguments: Mapping[str, Any], caller: Caller | None = None) -> BaseModel:
    """:meth:`Operation.run` by name."""
    return operation(name).run(store, arguments, caller)

