"""``harness-mem mcp``: one memory store served to MCP hosts (Claude Desktop, Claude Code, Cursor…) over stdio.

Eight tools, each a thin wrapper over one :class:`~harness_mem.store.MemoryStore` operation:
``remember``, ``recall``, ``recall_sessions``, ``get_memory``, ``update_memory``, ``forget``,
``recent_activity`` and ``find_skills``. Their descriptions are written for the model that calls
them: when to use the tool, what the arguments mean, what comes back, and the limits.

**Arguments** are checked against documented limits before the store sees them (the limits are in
the input schema the host shows the model): text up to :data:`MAX_CONTENT_CHARS`, queries up to
:data:`MAX_QUERY_CHARS`, at most :data:`MAX_K` hits. Unknown argument names are refused rather than
ignored, so a misspelt filter does not silently widen a search.

**Results** are pydantic models: the SDK sends them as ``structuredContent`` and publishes their
output schema. Memory text in lists is clipped to :data:`HIT_CHARS` (``truncated`` says so);
``get_memory`` gives the whole of it.

**Errors** never end the server. A bad argument, a refused write, an unknown id, a missing model:
each comes back as a tool error (``isError``) of one line, which the model can read and act on.

**Starting fast.** A host waits for the handshake, so nothing heavy happens before it: the store
opens without loading its embedding model (``MemoryStore`` loads it on the first embedding), and
the model starts loading in a background thread once the handshake is over (the first message after
``initialize`` or ``server/discover``). Until it is ready, ``recall`` and ``recall_sessions`` match
by keyword and say so (``mode: "keyword"`` and a ``note``). Writes wait for it instead: an entry
stored without a vector is found by keyword alone until ``harness-mem reindex``, and every hybrid
recall warns about it until then; the light runtime loads in a fraction of a second, so only the
first write pays, once.

**Threads.** The SDK runs each tool in a worker thread; the store has one connection, so a lock
takes the calls one at a time.

**Every frame gets an answer.** The SDK's stdio transport parses each line with pydantic-core's JSON
parser, which refuses a lone UTF-16 surrogate escape (``"\\ud83d"``: what a JavaScript host sends
after cutting a string through an emoji) and nesting past 200 levels; the failure goes down the
read stream as an exception, which the SDK logs at debug level and drops, so the host waits for its
own timeout. The same for any line that is not a JSON-RPC message. So the server reads stdin
itself (:class:`FrameReader`) and hands the SDK only lines it will accept: a lone surrogate becomes
U+FFFD (as the SDK already does with bytes that are not UTF-8), except in an id, which is refused
(the host could not match a changed id); what cannot be parsed, is nested deeper than
:data:`MAX_JSON_DEPTH`, is larger than :data:`MAX_FRAME_BYTES` or is not a JSON-RPC message is
answered with a JSON-RPC error (its id when one can be read, else null), logged, and skipped; a
malformed *response* is only logged (answering it could set two peers answering each other's errors).
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import math
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Annotated, Any, BinaryIO, Literal, NamedTuple, TypeVar

import anyio
import numpy as np
from mcp.server import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    InputRequiredResult,
    JSONRPCNotification,
    TextContent,
    ToolAnnotations,
    jsonrpc_message_adapter,
)
from pydantic import BaseModel, Field, ValidationError

from .cliutils import one_line, shown
from .errors import EmbedderError, HarnessMemError, MissingVectorsWarning
from .models import Entry, Hit, format_time
from .protocols import Embedder
from .recall import Mode
from .store import MemoryStore

__all__ = ["HIT_CHARS", "MAX_CONTENT_CHARS", "MAX_FRAME_BYTES", "MAX_HISTORY", "MAX_JSON_DEPTH", "MAX_K",
           "MAX_QUERY_CHARS", "MemoryTools", "build_server", "serve"]

logger = logging.getLogger(__name__)

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
#: Memory text shown per item in lists (recall, sessions, recent activity); get_memory shows it all.
HIT_CHARS = 2_000
#: Versions of a correction history one get_memory call shows at most (10 unless asked).
MAX_HISTORY = 100
DEFAULT_HISTORY = 10
#: The longest line read from the host (bytes): far past any real request (a longest memory is under
#: 1 MB even with every character escaped), short of letting a runaway host fill the memory.
MAX_FRAME_BYTES = 32 << 20
#: The deepest nesting a frame may have: the SDK's JSON parser (pydantic-core's) stops there; a tool
#: call is five levels deep.
MAX_JSON_DEPTH = 200
#: How long a write waits for the embedding model before giving up (seconds): a first-time ONNX
#: export or the reference runtime can take this long; the light runtime takes a fraction of a second.
MODEL_WAIT_SECONDS = 300.0

SERVER_INSTRUCTIONS = (
    "Long-term memory that persists across conversations. Call recall before answering anything that may"
    " depend on earlier conversations, decisions or preferences. Call remember for durable facts,"
    " decisions and preferences worth knowing next time (one self-contained statement each), update_memory"
    " to correct one, forget when the user asks you to. recent_activity shows what happened lately;"
    " find_skills finds saved procedures for a task."
)


# ---- what the tools return -----------------------------------------------------------------------


class MemoryItem(BaseModel):
    """One stored memory, as a model sees it."""

    id: str = Field(description="pass it to get_memory, update_memory or forget")
    kind: str = Field(description="note, fact, summary, turn (a transcript turn) or episode")
    content: str
    truncated: bool = Field(False, description="content was clipped here: get_memory shows all of it")
    tags: list[str] = Field(default_factory=list)
    session: str | None = Field(None, description="the conversation it belongs to, if any")
    role: str | None = Field(None, description="who said it, for a transcript turn")
    created_at: str = Field(description="ISO-8601, UTC")
    superseded_by: str | None = Field(None, description="the id of the memory that corrected this one")


class RecallHit(MemoryItem):
    score: float = Field(description="relevance, higher is better; compare within one answer only")
    context: list[MemoryItem] | None = Field(None, description="the turns around this one in its session, in order")


class RecallResult(BaseModel):
    mode: Literal["hybrid", "keyword"] = Field(
        description="hybrid: by meaning and keywords; keyword: by words only (see note)")
    note: str | None = Field(None, description="why the answer may be incomplete, when it may be")
    hits: list[RecallHit]


class SessionMatch(BaseModel):
    session: str
    score: float = Field(description="the score of its best-matching entry")
    turns: int = Field(description="entries in the session")
    started_at: str
    ended_at: str
    anchor: RecallHit = Field(description="the session's best-matching entry")
    around: list[MemoryItem] = Field(description="the anchor with the turns just before and after it, in order")
    first: MemoryItem = Field(description="the session's first entry")
    last: MemoryItem = Field(description="the session's last entry")


class SessionsResult(BaseModel):
    mode: Literal["hybrid", "keyword"]
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


def _clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit] + "…", True)


def _memory(entry: Entry, limit: int = HIT_CHARS) -> MemoryItem:
    content, truncated = _clip(entry.content, limit)
    return MemoryItem(
        id=entry.id, kind=entry.kind, content=content, truncated=truncated, tags=list(entry.tags),
        session=entry.session, role=entry.role, created_at=format_time(entry.created_at),
        superseded_by=entry.superseded_by,
    )


def _hit(hit: Hit) -> RecallHit:
    return RecallHit(**_memory(hit.entry).model_dump(), score=round(hit.score, 6),
                     context=None if hit.context is None else [_memory(e) for e in hit.context])


# ---- the embedding model, loaded in the background -----------------------------------------------


class ModelWarmup:
    """Loads the store's embedding model once, in a background thread, and tells when it is ready.

    Loading is one embedding of a short text: the model loads on its first use, whatever the runtime.
    """

    def __init__(self, embedder: Embedder | None) -> None:
        self.embedder = embedder
        self.error: str | None = None
        self._done = threading.Event()
        self._started = False
        self._start_lock = threading.Lock()
        if embedder is None:
            self._done.set()

    def start(self) -> None:
        """Begin loading (once; later calls do nothing)."""
        with self._start_lock:
            if self._started or self.embedder is None:
                return
            self._started = True
        threading.Thread(target=self._load, name="harness-mem-model", daemon=True).start()

    def _load(self) -> None:
        assert self.embedder is not None
        try:
            self.embedder.embed(["warm-up"])
        except Exception as exc:  # any failure: recall says why it stays on keywords; a write reports it
            self.error = one_line(str(exc)) or type(exc).__name__
        finally:
            self._done.set()

    @property
    def ready(self) -> bool:
        """True once the model answers (never for a store without one)."""
        return self.embedder is not None and self._done.is_set() and self.error is None

    def wait(self, timeout: float) -> bool:
        """Start loading if need be and wait for the outcome; False when ``timeout`` passed first."""
        self.start()
        return self._done.wait(timeout)


# ---- the operations --------------------------------------------------------------------------------


class MemoryTools:
    """The eight operations on one store, with the limits and the model's loading state applied.

    Nothing here knows the protocol: :func:`build_server` exposes these methods as tools. Every
    method raises a :class:`~harness_mem.errors.HarnessMemError` for what the caller got wrong.
    """

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.model = ModelWarmup(store.embedder)
        self._lock = threading.Lock()

    # ---- reads

    def _recall_mode(self) -> tuple[Mode | None, str | None]:
        """The mode recall may use now (None: the store's default, hybrid) and a note when degraded."""
        if self.store.embedder is None:
            return "keyword", None
        self.model.start()
        if self.model.ready:
            return None, None
        if self.model.error is not None:
            return "keyword", (f"semantic matching is unavailable ({self.model.error});"
                               " this answer matched keywords only")
        return "keyword", ("the embedding model is still loading, so this answer matched keywords only;"
                           " ask again in a few seconds to match by meaning too")

    @contextmanager
    def _noting(self, notes: list[str]) -> Iterator[None]:
        """Collect the store's MissingVectorsWarning into ``notes``.

        The warnings filters are the process's: the caller holds the lock, so no other call's
        warnings land here.
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MissingVectorsWarning)
            yield
        notes += dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, MissingVectorsWarning))

    def recall(self, query: str, k: int = 10, *, kind: str | None = None, tags: list[str] | None = None,
               session: str | None = None, since: str | None = None, context: int = 0,
               include_superseded: bool = False) -> RecallResult:
        mode, note = self._recall_mode()
        notes = [note] if note else []
        with self._lock, self._noting(notes):
            hits = self.store.recall(query, k, mode, kind=kind, tags=tags or (), session=session, since=since,
                                     context=context, include_superseded=include_superseded)
        return RecallResult(mode=mode or "hybrid", note=" ".join(notes) or None, hits=[_hit(h) for h in hits])

    def recall_sessions(self, query: str, k: int = 5, *, context: int = 1) -> SessionsResult:
        mode, note = self._recall_mode()
        notes = [note] if note else []
        with self._lock, self._noting(notes):
            found = self.store.recall_sessions(query, k, context=context, mode=mode)
        return SessionsResult(mode=mode or "hybrid", note=" ".join(notes) or None, sessions=[
            SessionMatch(session=s.session, score=round(s.score, 6), turns=s.turns,
                         started_at=format_time(s.started_at), ended_at=format_time(s.ended_at),
                         anchor=_hit(s.anchor), around=[_memory(e) for e in s.around],
                         first=_memory(s.first), last=_memory(s.last))
            for s in found
        ])

    def get_memory(self, id: str, *, history_limit: int = DEFAULT_HISTORY, history_offset: int = 0) -> MemoryDetail:
        """The memory in full and a page of its history: ``history_limit`` versions, oldest first,
        ending ``history_offset`` versions before the newest (a history can grow without end)."""
        with self._lock:
            entry = self.store.get(id)
            chain = self.store.history(id)
        end = max(len(chain) - history_offset, 0)
        start = max(end - history_limit, 0)
        return MemoryDetail(memory=_memory(entry, MAX_CONTENT_CHARS), current_id=chain[-1].id,
                            history=[_memory(e) for e in chain[start:end]], history_total=len(chain),
                            older_versions=start)

    def recent_activity(self, limit: int = 10, *, kind: str | None = None, sessions: int = 5) -> ActivityResult:
        with self._lock:
            entries = self.store.recent(limit, kind=kind)
            active = self.store.sessions(limit=sessions) if sessions else []
        return ActivityResult(
            memories=[_memory(e) for e in entries],
            sessions=[SessionActivity(session=s.session, turns=s.turns, started_at=format_time(s.started_at),
                                     ended_at=format_time(s.ended_at)) for s in active],
        )

    def find_skills(self, query: str | None = None, k: int = 5, *,
                    include_instructions: bool = True) -> SkillsResult:
        # The experience package (YAML, the SKILL.md rules) loads only when skills are asked for.
        from .experience.skills import overlap_similarity, skill_key_text
        from .experience.store import ExperienceStore

        with self._lock:
            experience = ExperienceStore(self.store)
            keys = experience.skill_keys()
            chosen: list[tuple[str, float | None]]
            if query is None or not query.strip():
                chosen = [(name, None) for name, _ in keys[:k]]
            else:
                scored = [(name, overlap_similarity(query, skill_key_text(name, description)))
                          for name, description in keys]
                ranked = sorted((pair for pair in scored if pair[1] > 0), key=lambda pair: -pair[1])
                chosen = [(name, round(score, 4)) for name, score in ranked[:k]]
            records = [(experience.get_skill(name), score) for name, score in chosen]
        return SkillsResult(total=len(keys), skills=[
            SkillMatch(name=r.name, description=r.skill.description, version=r.version, score=score,
                       skill_md=r.skill.render() if include_instructions else None)
            for r, score in records
        ])

    # ---- writes

    def _wait_for_model(self) -> None:
        """Writes embed what they store: wait until the model can (a failed load is reported by the write)."""
        if self.store.embedder is not None and not self.model.wait(MODEL_WAIT_SECONDS):
            raise EmbedderError(
                f"the embedding model is still loading after {MODEL_WAIT_SECONDS:.0f} s — try again later")

    def remember(self, content: str, *, kind: str = "note", tags: list[str] | None = None,
                 session: str | None = None) -> RememberResult:
        self._wait_for_model()
        with self._lock:
            done = self.store.remember(content, kind=kind, tags=tags or (), session=session, source="mcp")
        return RememberResult(id=done.id, deduped=done.deduped, redactions=dict(done.redactions),
                              supersedes=done.supersedes)

    def update_memory(self, id: str, content: str, *, tags: list[str] | None = None) -> RememberResult:
        self._wait_for_model()
        changes: dict[str, Any] = {"source": "mcp"}
        if tags is not None:
            changes["tags"] = tags
        with self._lock:
            done = self.store.supersede(id, content, **changes)
        return RememberResult(id=done.id, deduped=done.deduped, redactions=dict(done.redactions),
                              supersedes=done.supersedes)

    def forget(self, id: str) -> ForgetResult:
        # Every version at once (one transaction): forgetting a fact must not leave its older wording.
        with self._lock, self.store.transaction():
            chain = [entry.id for entry in self.store.history(id)]  # NotFoundError for an unknown id
            forgotten = sum(self.store.forget(entry_id) for entry_id in chain)
        return ForgetResult(forgotten=forgotten, ids=chain)


# ---- the wire: every frame the host sends gets an answer ------------------------------------------

#: A ``\uD800``-``\uDFFF`` escape: the frame may hold a lone surrogate (or a pair, which is fine).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON string, whatever it holds. Possessive throughout, so that no input makes it backtrack.
_STRING = r'"(?:[^"\\]++|\\.)*+"'
_STRINGS = re.compile(_STRING, re.DOTALL)
#: What :func:`_frame_id` reads: what lies between tokens, then a string (or an unterminated one,
#: to the end), a run of brackets, or the end. Every match succeeds, so the scan is linear.
_TOKEN = re.compile(r'[^"\[\]{}]*+(?:(?P<string>"(?:[^"\\]++|\\.)*+(?:"|\\?\Z))'
                    r"|(?P<open>[\[{]++)|(?P<close>[\]}]++)|\Z)", re.DOTALL)
_ID_VALUE = re.compile(r"\s*+:\s*+(-?\d++|" + _STRING + r")\s*+[,}]", re.DOTALL)
#: Tokens :func:`_frame_id` reads before giving up (a few tenths of a second).
_ID_SEARCH_TOKENS = 200_000
_OPENING, _CLOSING = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)
_TOO_DEEP = f"Invalid Request: JSON nested deeper than {MAX_JSON_DEPTH} levels"

RequestId = int | str


class Refusal(NamedTuple):
    """A frame answered with a JSON-RPC error instead of reaching the SDK."""

    id: RequestId | float | None
    code: int
    message: str


def _is_request_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _frame_id(text: str) -> RequestId | None:
    """The top-level ``"id"`` of a frame that cannot be parsed whole (too deep, cut short, too large),
    so that the host can match the error to its request; None when it cannot be read."""
    if not text.lstrip().startswith("{") or '"id"' not in text:
        return None
    depth = 0
    for count, token in enumerate(_TOKEN.finditer(text)):
        if count == _ID_SEARCH_TOKENS:
            return None
        if token["string"] is not None:
            if depth == 1 and token["string"] == '"id"' and (value := _ID_VALUE.match(text, token.end())):
                found = json.loads(value.group(1))
                return found if _is_request_id(found) else None
        elif token["open"] is not None:
            depth += len(token["open"])
        elif token["close"] is not None:
            depth -= len(token["close"])
            if depth <= 0:
                return None  # the top-level object closed without an id
        else:
            return None  # the end
    return None


def _nesting(text: str) -> int:
    """How deep the arrays and objects of valid JSON ``text`` nest: the highest running count of
    brackets once the strings are out (in numpy: a frame can hold millions of brackets)."""
    skeleton = np.frombuffer(_STRINGS.sub("", text).encode("ascii", errors="ignore"), np.uint8)
    steps = np.isin(skeleton, _OPENING).astype(np.int32) - np.isin(skeleton, _CLOSING)
    return int(np.cumsum(steps).max(initial=0))


def _whole_characters(value: Any) -> Any:
    """``value`` with each lone surrogate replaced by U+FFFD (its depth is already bounded)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_whole_characters(item) for item in value]
    if isinstance(value, dict):
        return {_whole_characters(key): _whole_characters(item) for key, item in value.items()}
    return value


def _envelope_problem(message: Any) -> str:
    """Why a parsed frame is not a JSON-RPC message, in a few words."""
    if not isinstance(message, dict):
        return "a message is a JSON object"
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" in message:
        if not isinstance(message["method"], str):
            return "method must be a string"
        if message.get("params") is not None and not isinstance(message["params"], dict):
            return "params must be an object"
        return "not a valid request or notification"
    return "a request needs a method"


def check_frame(text: str) -> str | Refusal | None:
    """One line from the host: the line to give the SDK (its parser is then sure to take it), the
    error to answer it with, or None for a malformed response (answering one could start two peers
    answering each other's errors for ever; it is only logged)."""
    try:
        parsed = jsonrpc_message_adapter.validate_json(text, by_name=False)  # exactly what the SDK does
    except ValidationError as exc:
        return _repair_or_refuse(text, exc)
    # A notification takes no id, so the SDK reads a request whose id is null, a float or a boolean
    # as one and never answers: the host would wait for ever.
    if isinstance(parsed, JSONRPCNotification) and '"id"' in text:
        message = json.loads(text)
        if "id" in message:
            found = message["id"]
            number = isinstance(found, float) and math.isfinite(found)
            return Refusal(found if number else None, INVALID_REQUEST,
                           "Invalid Request: id must be a string or an integer")
    return text


def _repair_or_refuse(text: str, error: ValidationError) -> str | Refusal | None:
    """A frame the SDK would drop: the repaired line, or the error to answer it with."""
    try:
        message = json.loads(text)  # Python's parser takes lone surrogates, and nests to ~1,000
    except RecursionError:
        return Refusal(_frame_id(text), INVALID_REQUEST, _TOO_DEEP)
    except ValueError as exc:
        reason = (f"{exc.msg} at character {exc.pos}" if isinstance(exc, json.JSONDecodeError)
                  else "a number has too many digits")  # Python's int() stops at 4,300
        return Refusal(_frame_id(text), PARSE_ERROR, f"Parse error: the frame is not JSON ({reason})")
    if isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message):
        logger.warning("dropped a malformed response from the host: %s", one_line(str(error))[:300])
        return None
    found = message.get("id") if isinstance(message, dict) else None
    request_id = found if _is_request_id(found) else None
    if found is not None and request_id is None:
        number = isinstance(found, float) and math.isfinite(found)
        return Refusal(found if number else None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    # Counting brackets bounds the depth from above, so most frames need no closer look.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _nesting(text) > MAX_JSON_DEPTH:
        return Refusal(request_id, INVALID_REQUEST, _TOO_DEEP)
    if _SURROGATE_ESCAPE.search(text):
        if isinstance(request_id, str) and _LONE_SURROGATE.search(request_id):
            # Changed, the id would match none of the host's requests: refuse it, echoed as sent.
            return Refusal(request_id, INVALID_REQUEST,
                           "Invalid Request: the id holds a lone UTF-16 surrogate (half of a character)")
        # Half of a character (a host cut a string through an emoji): U+FFFD, as for bytes that are not UTF-8.
        repaired = json.dumps(_whole_characters(message), ensure_ascii=False)
        try:
            jsonrpc_message_adapter.validate_json(repaired, by_name=False)
        except ValidationError as exc:
            error = exc
        else:
            return repaired
    invalid_json = [detail["msg"] for detail in error.errors() if detail["type"] == "json_invalid"]
    if invalid_json:  # JSON that Python's parser takes and pydantic's does not
        return Refusal(request_id, PARSE_ERROR, f"Parse error: {one_line(invalid_json[0])[:200]}")
    return Refusal(request_id, INVALID_REQUEST, f"Invalid Request: {_envelope_problem(message)}")


class FrameWriter(io.TextIOWrapper):
    """The wire to the host: each write is one whole frame, flushed, under a lock that
    :class:`FrameReader`'s error replies share, so no two frames interleave."""

    def __init__(self, wire: BinaryIO) -> None:
        super().__init__(wire, encoding="utf-8")
        self._wire = wire
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        data = text.encode("utf-8", errors="replace")
        with self._lock:
            self._wire.write(data)
            self._wire.flush()
        return len(text)

    def flush(self) -> None:
        """Each write flushed already."""

    def close(self) -> None:
        # The wire outlives this wrapper (it may be the process's own stdout): never close it.
        with suppress(ValueError):
            self.detach()

    def refuse(self, refusal: Refusal) -> None:
        logger.warning("answered a frame the server cannot take: %s", refusal.message)
        error = {"jsonrpc": "2.0", "id": refusal.id, "error": {"code": refusal.code, "message": refusal.message}}
        # ASCII JSON: an id holding a lone surrogate goes back escaped, as it came.
        self.write(json.dumps(error, separators=(",", ":")) + "\n")


class FrameReader(io.TextIOWrapper):
    """The wire from the host, one checked line at a time (:func:`check_frame`): lines the SDK would
    drop are answered through ``replies`` and skipped, so the SDK only sees lines it can take."""

    def __init__(self, wire: BinaryIO, replies: FrameWriter) -> None:
        super().__init__(wire, encoding="utf-8", errors="replace")
        self._wire = wire
        self._replies = replies

    def readline(self, size: int = -1, /) -> str:  # type: ignore[override]  # as typeshed's own TextIOBase
        while True:
            raw = self._wire.readline(MAX_FRAME_BYTES + 1)
            if not raw:
                return ""
            if len(raw) > MAX_FRAME_BYTES and not raw.endswith(b"\n"):
                while (rest := self._wire.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass  # the rest of an oversized line is dropped as it comes, never held
                head = raw.decode("utf-8", errors="replace")
                self._replies.refuse(Refusal(_frame_id(head), INVALID_REQUEST,
                                             f"Invalid Request: a frame is {MAX_FRAME_BYTES >> 20} MiB at most"))
                continue
            text = raw.decode("utf-8", errors="replace")  # bytes that are not UTF-8: U+FFFD, as the SDK did
            if not text.strip():
                continue
            checked = check_frame(text)
            if isinstance(checked, str):
                return checked
            if checked is not None:
                self._replies.refuse(checked)

    def close(self) -> None:
        with suppress(ValueError):
            self.detach()


@contextmanager
def _protocol_streams() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The process's stdin and stdout, for the protocol alone: while serving, fd 0 reads the null
    device and fd 1 writes to stderr, so nothing else in the process can take or tear a frame (as
    the SDK's own transport does; it skips that for streams it is given)."""
    sys.stdout.flush()
    try:
        wire_in, wire_out = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDONLY)
    except OSError:  # descriptors cannot be moved here: serve the streams in place
        yield sys.stdin.buffer, sys.stdout.buffer
        return
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        # Never closed: a worker thread may still be blocked reading after the server stops.
        yield os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)


# ---- the MCP server ----------------------------------------------------------------------------------

# The arguments' types: their constraints and descriptions are the input schema the model sees.
Query = Annotated[str, Field(
    min_length=1, max_length=MAX_QUERY_CHARS,
    description=f"what to look for, in plain words (any text; up to {MAX_QUERY_CHARS:,} characters)")]
Content = Annotated[str, Field(
    min_length=1, max_length=MAX_CONTENT_CHARS,
    description=f"the memory: one self-contained statement (up to {MAX_CONTENT_CHARS:,} characters)")]
MemoryId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, description="a memory's id, as a tool returned it")]
Tag = Annotated[str, Field(min_length=1, max_length=MAX_TAG_CHARS)]
Tags = Annotated[list[Tag] | None, Field(
    max_length=MAX_TAGS, description=f"labels (up to {MAX_TAGS}, each up to {MAX_TAG_CHARS} characters)")]
Session = Annotated[str | None, Field(min_length=1, max_length=MAX_SESSION_CHARS)]
StrictBool = Annotated[bool, Field(strict=True)]

_ReadOnly = ToolAnnotations(read_only_hint=True, open_world_hint=False)

_F = TypeVar("_F", bound=Callable[..., Any])


def _strict_int(low: int, high: int, description: str) -> Any:
    return Field(strict=True, ge=low, le=high, description=f"{description} ({low}-{high})")


def _one_line_validation(tool: str, error: ValidationError) -> str:
    """A validation failure as one line naming each bad argument, never echoing its value (it may be
    a megabyte), prefixed like the SDK's other tool errors."""
    problems = []
    for detail in error.errors():
        where = ".".join(str(part) for part in detail["loc"]) or "arguments"
        problems.append(f"{where}: {detail['msg']}")
    return f"Error executing tool {tool}: invalid arguments: " + "; ".join(dict.fromkeys(problems))


class _Server(MCPServer[Any]):
    """MCPServer with harness-mem's argument checks: unknown names are refused, and validation errors
    are one line (the SDK's are pydantic's multi-line report)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parameters: dict[str, list[str]] = {}

    def register(self, fn: _F, *, description: str, read_only: bool, **hints: bool) -> _F:
        annotations = _ReadOnly if read_only else ToolAnnotations(read_only_hint=False, open_world_hint=False, **hints)
        self.add_tool(fn, name=fn.__name__, description=description, annotations=annotations, structured_output=True)
        self.parameters[fn.__name__] = list(inspect.signature(fn).parameters)
        return fn

    async def run_stdio_async(self) -> None:
        """Serve over stdin and stdout through :class:`FrameReader` and :class:`FrameWriter`."""
        with _protocol_streams() as (wire_in, wire_out):
            replies = FrameWriter(wire_out)
            frames = FrameReader(wire_in, replies)
            async with stdio_server(anyio.wrap_file(frames), anyio.wrap_file(replies)) as (read_stream, write_stream):
                # MCPServer gives no other way to run on given streams; the SDK's own Client does the same.
                lowlevel = self._lowlevel_server
                await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> CallToolResult | InputRequiredResult:
        known = self.parameters.get(name)
        if known is not None:
            unknown = [key for key in arguments if key not in known]
            if unknown:
                raise ToolError(f"Error executing tool {name}: unknown argument {unknown[0]!r:.60} — it takes:"
                                f" {', '.join(known)}")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_one_line_validation(name, exc.__cause__)) from exc.__cause__
            raise


def _run(operation: Callable[[], BaseModel]) -> CallToolResult:
    """Run one store operation; what goes wrong becomes a one-line tool error.

    The result goes out twice, as the protocol asks: as ``structuredContent`` for the host, and as
    compact JSON text for the model (the SDK's own text would be indented: a third more tokens).
    """
    try:
        result = operation()
        # Serialised here, so that text that cannot be encoded is this call's error rather than the
        # end of the SDK's writer, and of the server.
        text, structured = result.model_dump_json(), result.model_dump(mode="json")
    except ToolError:
        raise
    except HarnessMemError as exc:
        raise ToolError(shown(str(exc))) from exc  # redacted: an error may quote a secret it was given
    except Exception as exc:
        # A bug or an unusable file: the server keeps serving, the model gets one line, the log the traceback.
        logger.exception("unexpected error in a harness-mem tool")
        raise ToolError(f"unexpected {type(exc).__name__}: {shown(str(exc))[:300]}") from exc
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def build_server(tools: MemoryTools) -> MCPServer[Any]:
    """The MCP server exposing ``tools``; the model starts loading once the handshake is over."""
    server = _Server("harness-mem", instructions=SERVER_INSTRUCTIONS, log_level="WARNING",
                     version=_version())

    async def start_model_after_handshake(ctx: Any, call_next: Any) -> Any:
        if ctx.method not in ("initialize", "server/discover", "ping"):
            tools.model.start()
        return await call_next(ctx)

    server.middleware.append(start_model_after_handshake)

    def remember(
        content: Content,
        kind: Annotated[Literal["note", "fact", "summary"], Field(
            description="fact: something true about the user, the project or the world; note: anything else;"
                        " summary: a digest of a longer exchange")] = "note",
        tags: Tags = None,
        session: Annotated[Session, Field(description="the conversation it came from, if you track one")] = None,
    ) -> Annotated[CallToolResult, RememberResult]:
        return _run(lambda: tools.remember(content, kind=kind, tags=tags, session=session))

    server.register(remember, read_only=False, destructive_hint=False, idempotent_hint=True, description=(
        "Store a memory for later conversations: a fact, decision or preference worth knowing next time"
        ' ("the user prefers tabs", "we chose argon2id for password hashing"). One self-contained statement'
        " per call; skip small talk and things only true right now. To correct a stored memory use"
        " update_memory, which keeps its history. Storing the same text again writes nothing and returns the"
        " existing id (deduped: true). Secrets and personal data (API keys, e-mail addresses, card numbers…)"
        " are redacted before storing; `redactions` counts what was replaced. Returns the memory's id."
        f" Limits: content up to {MAX_CONTENT_CHARS:,} characters; up to {MAX_TAGS} tags."
    ))

    def recall(
        query: Query,
        k: Annotated[int, _strict_int(1, MAX_K, "how many memories to return at most")] = 10,
        kind: Annotated[Literal["note", "fact", "summary", "turn", "episode"] | None,
                        Field(description="only memories of this kind")] = None,
        tags: Annotated[Tags, Field(description="only memories carrying all these tags")] = None,
        session: Annotated[Session, Field(description="only this conversation")] = None,
        since: Annotated[str | None, Field(max_length=40, description=(
            "only memories created since then: an age back from now (30m, 24h, 7d, 2w) or an ISO-8601 time"
        ))] = None,
        context: Annotated[int, _strict_int(
            0, MAX_CONTEXT, "for conversation turns: how many turns before and after each hit to include")] = 0,
        include_superseded: Annotated[StrictBool, Field(
            description="also return memories that update_memory replaced")] = False,
    ) -> Annotated[CallToolResult, RecallResult]:
        return _run(lambda: tools.recall(query, k, kind=kind, tags=tags, session=session, since=since,
                                         context=context, include_superseded=include_superseded))

    server.register(recall, read_only=True, description=(
        "Search the memories by meaning and by keywords. Call it before answering anything that may depend on"
        " earlier conversations: decisions, preferences, facts about the user or the project. Any text is a"
        " valid query (there is no search syntax). Returns up to k memories, best first, each with its id,"
        f" content (clipped to {HIT_CHARS:,} characters: get_memory has the rest), kind, tags, session, time and"
        " a score (higher is better; compare scores within one answer only). `mode` says how it matched:"
        " hybrid (meaning and keywords) or keyword (words only: while the embedding model is still loading,"
        " or when the store keeps no vectors); `note` explains anything that made the answer incomplete."
        " Memories corrected by update_memory are left out unless include_superseded. An empty list means"
        f" nothing matched. Limits: query up to {MAX_QUERY_CHARS:,} characters; k up to {MAX_K}."
    ))

    def recall_sessions(
        query: Query,
        k: Annotated[int, _strict_int(1, MAX_SESSIONS, "how many conversations to return at most")] = 5,
        context: Annotated[int, _strict_int(0, MAX_CONTEXT, "turns to show before and after the best-matching one")] = 1,
    ) -> Annotated[CallToolResult, SessionsResult]:
        return _run(lambda: tools.recall_sessions(query, k, context=context))

    server.register(recall_sessions, read_only=True, description=(
        "Find the past conversations (sessions) that best match a query, rather than single memories: for"
        ' "when did we talk about X" or to see what was said around it. Each session comes with its'
        " best-matching entry (anchor), an excerpt around it (the anchor with the turns just before and"
        " after it, in order), its first and last entries, its number of entries and its time span. Only"
        " memories recorded with a session count. `mode` and `note`"
        f" are as in recall. Limits: query up to {MAX_QUERY_CHARS:,} characters; k up to {MAX_SESSIONS};"
        f" context up to {MAX_CONTEXT} turns."
    ))

    def get_memory(
        id: MemoryId,
        history_limit: Annotated[int, _strict_int(1, MAX_HISTORY, "how many versions of the history to show")]
        = DEFAULT_HISTORY,
        history_offset: Annotated[int, Field(strict=True, ge=0, description=(
            "skip this many of the newest versions, to page back through a long history"))] = 0,
    ) -> Annotated[CallToolResult, MemoryDetail]:
        return _run(lambda: tools.get_memory(id, history_limit=history_limit, history_offset=history_offset))

    server.register(get_memory, read_only=True, description=(
        "Read one memory in full by its id (from recall, remember or recent_activity), with its correction"
        " history. `current_id` is the newest version (the one to trust and to update); `history` lists the"
        f" newest {DEFAULT_HISTORY} versions (history_limit to change it), oldest first, `history_total`"
        " counts every version and `older_versions` those before the first one shown: to page back, call"
        " again with history_offset increased by the number shown. Use it when a recall hit was clipped, or"
        f" to see how a memory changed. Content is shown up to {MAX_CONTENT_CHARS:,} characters (history"
        f" entries up to {HIT_CHARS:,}). An unknown or forgotten id is an error."
        f" Limits: history_limit up to {MAX_HISTORY}."
    ))

    def update_memory(
        id: MemoryId,
        content: Content,
        tags: Annotated[Tags, Field(description="new tags (default: keep the old ones)")] = None,
    ) -> Annotated[CallToolResult, RememberResult]:
        return _run(lambda: tools.update_memory(id, content, tags=tags))

    server.register(update_memory, read_only=False, destructive_hint=False, description=(
        "Correct a stored memory when it changed or was wrong: the new content becomes a new memory that"
        " replaces the old one. The old one is kept (get_memory shows the history) but recall no longer"
        " returns it. Kind, session and tags carry over unless given. Returns the new id and, in"
        " `supersedes`, the old one. Only the newest version can be updated: an id that was already"
        " replaced is an error naming its successor; an unknown id is an error."
        f" Limits: content up to {MAX_CONTENT_CHARS:,} characters."
    ))

    def forget(id: MemoryId) -> Annotated[CallToolResult, ForgetResult]:
        return _run(lambda: tools.forget(id))

    server.register(forget, read_only=False, destructive_hint=True, idempotent_hint=False, description=(
        "Delete a memory for good, when the user asks you to forget something or it must not be kept: the"
        " memory and every other version in its correction history stop appearing anywhere at once (their"
        " text leaves the file at the next `harness-mem purge`). To fix a memory, use update_memory"
        " instead. Returns how many entries were forgotten and their ids. An unknown id is an error."
    ))

    def recent_activity(
        limit: Annotated[int, _strict_int(1, MAX_K, "how many of the newest memories to return")] = 10,
        kind: Annotated[Literal["note", "fact", "summary", "turn", "episode"] | None,
                        Field(description="only memories of this kind")] = None,
    ) -> Annotated[CallToolResult, ActivityResult]:
        return _run(lambda: tools.recent_activity(limit, kind=kind))

    server.register(recent_activity, read_only=True, description=(
        "What happened lately: the newest memories (newest first) and the five most recently active"
        " conversations with their sizes and time spans. Use it at the start of a conversation to pick up"
        " where things were left, or when asked what you were doing; use recall to search instead."
        f" Memory text is clipped to {HIT_CHARS:,} characters. Limits: limit up to {MAX_K}."
    ))

    def find_skills(
        query: Annotated[str | None, Field(max_length=MAX_QUERY_CHARS, description=(
            "the task at hand, in plain words; leave it out to list the skills by name"))] = None,
        k: Annotated[int, _strict_int(1, MAX_SKILLS, "how many skills to return at most")] = 5,
        include_instructions: Annotated[StrictBool, Field(description="include each skill's whole SKILL.md")] = True,
    ) -> Annotated[CallToolResult, SkillsResult]:
        return _run(lambda: tools.find_skills(query, k, include_instructions=include_instructions))

    server.register(find_skills, read_only=True, description=(
        "Find saved skills: procedures (SKILL.md documents) learned from earlier work, to follow when a task"
        " is like one done before. With a query, returns the skills whose name and description share the"
        " most words with it, best first (word overlap, not meaning; score 0-1); without one, lists skills by"
        " name. Each comes with its name, description, version and, unless include_instructions is false, the"
        f" whole SKILL.md. Limits: query up to {MAX_QUERY_CHARS:,} characters; k up to {MAX_SKILLS}."
    ))
    return server


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("harness-mem")
    except metadata.PackageNotFoundError:
        return "0"


def serve(store: MemoryStore) -> None:
    """Serve ``store`` over stdio until the host closes the connection."""
    build_server(MemoryTools(store)).run("stdio")
