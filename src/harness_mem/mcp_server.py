"""``harness-mem mcp``: one memory store served to MCP hosts (Claude Desktop, Claude Code, Cursor…) over stdio.

The tools are :data:`harness_mem.tools.OPERATIONS`, rendered: ``remember``, ``recall``,
``recall_sessions``, ``get_memory``, ``update_memory``, ``forget``, ``recent_activity`` and
``find_skills``, each with its name, model-facing description, input schema (the limits included),
read-only/destructive hints and output schema from the one spec the agent loop's tools also use.

**Arguments** are checked by the spec before the store sees them: text up to
:data:`~harness_mem.tools.MAX_CONTENT_CHARS`, queries up to :data:`~harness_mem.tools.MAX_QUERY_CHARS`,
at most :data:`~harness_mem.tools.MAX_K` hits. Unknown argument names are refused rather than
ignored, so a misspelt filter does not silently widen a search.

**Results** are pydantic models: the server sends them as ``structuredContent`` and publishes their
output schema. A recall hit is :class:`~harness_mem.models.Hit`'s one JSON shape (the same as
``recall --json``), its text clipped to :data:`~harness_mem.tools.HIT_CHARS` (``truncated`` says so);
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

import io
import json
import logging
import math
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Annotated, Any, BinaryIO, NamedTuple

import anyio
import numpy as np
from mcp.server import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError
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
from pydantic import BaseModel, ValidationError

from .cliutils import one_line, shown
from .errors import EmbedderError, HarnessMemError, MissingVectorsWarning
from .protocols import Embedder
from .recall import Mode
from .store import MemoryStore
from .tools import (
    HIT_CHARS,
    MAX_CONTENT_CHARS,
    MAX_HISTORY,
    MAX_K,
    MAX_QUERY_CHARS,
    OPERATIONS,
    Caller,
    Operation,
    RecallResult,
    SessionsResult,
    for_model,
    operation,
)

__all__ = ["HIT_CHARS", "MAX_CONTENT_CHARS", "MAX_FRAME_BYTES", "MAX_HISTORY", "MAX_JSON_DEPTH", "MAX_K",
           "MAX_QUERY_CHARS", "MemoryTools", "build_server", "serve"]

logger = logging.getLogger(__name__)

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
    """The memory operations of :mod:`harness_mem.tools` on one store, with the model's loading
    state applied: recall matches by keyword while the model loads, a write waits for it.

    Nothing here knows the protocol: :func:`build_server` offers :meth:`call` as the tools. It
    raises a :class:`~harness_mem.errors.HarnessMemError` for what the caller got wrong.
    """

    def __init__(self, store: MemoryStore, *, tags: Sequence[str] = ()) -> None:
        self.store = store
        self.model = ModelWarmup(store.embedder)
        self._lock = store.lock  # one call at a time on the store, whoever else holds it
        self.caller = Caller(source="mcp", recall_mode=self._recall_mode, tags=tuple(tags))

    def call(self, name: str, arguments: Mapping[str, Any]) -> BaseModel:
        """Run the operation ``name`` with the model's ``arguments`` (checked first)."""
        op = operation(name)
        args = op.parse(arguments)
        if op.embeds:
            self._wait_for_model()  # before the lock: reads go on while the model loads
        notes: list[str] = []
        with self._lock, self._noting(notes):
            result = op.handler(self.store, args, self.caller)
        if notes and isinstance(result, RecallResult | SessionsResult):
            result = result.model_copy(update={"note": " ".join(filter(None, [result.note, *notes]))})
        return result

    def _recall_mode(self, asked: Mode | None) -> tuple[Mode | None, str | None]:
        """The mode recall may use now (None: the store's default, hybrid) and a note when degraded."""
        if self.store.embedder is None:
            return "keyword", None
        if asked == "keyword":
            return asked, None
        self.model.start()
        if self.model.ready:
            return asked, None
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
        # Said to the model: the hint for a terminal user (which command to run) is left out.
        notes += dict.fromkeys(for_model(w.message) for w in caught  # type: ignore[arg-type]
                               if issubclass(w.category, MissingVectorsWarning))

    def _wait_for_model(self) -> None:
        """Writes embed what they store: wait until the model can (a failed load is reported by the write)."""
        if self.store.embedder is not None and not self.model.wait(MODEL_WAIT_SECONDS):
            raise EmbedderError(
                f"the embedding model is still loading after {MODEL_WAIT_SECONDS:.0f} s — try again later")


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

def _annotations(op: Operation) -> ToolAnnotations:
    if op.read_only:
        return ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return ToolAnnotations(read_only_hint=False, open_world_hint=False, destructive_hint=op.destructive,
                           idempotent_hint=op.idempotent)


def _stub(op: Operation) -> Callable[[], Any]:
    """A function for the SDK to register: its return annotation gives the output schema. It never
    runs: :meth:`_Server.call_tool` answers the spec's tools itself."""

    def stub() -> Any:
        raise AssertionError("answered by _Server.call_tool")

    stub.__name__ = op.name
    stub.__annotations__ = {"return": Annotated[CallToolResult, op.result]}
    return stub


class _Server(MCPServer[Any]):
    """MCPServer whose memory tools come from :data:`harness_mem.tools.OPERATIONS`: each tool's
    input schema is its arguments' model, and a call is checked and run by the spec (unknown names
    refused, each bad argument named on one line)."""

    def __init__(self, tools: MemoryTools, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tools = tools
        for op in OPERATIONS:
            registered = self._tool_manager.add_tool(_stub(op), name=op.name, description=op.description,
                                                     annotations=_annotations(op), structured_output=True)
            registered.parameters = op.parameters  # the spec's schema, limits included
            # As the result serialises (a hit is flat), which the SDK reads live.
            registered.fn_metadata.output_schema = op.result.model_json_schema(mode="serialization")

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
        if self._tool_manager.get_tool(name) is None:
            return await super().call_tool(name, arguments, context)  # the SDK's "Unknown tool"
        # In a worker thread, as the SDK runs a sync tool: the store's calls block.
        return await anyio.to_thread.run_sync(_run, self.tools, name, arguments)


def _run(tools: MemoryTools, name: str, arguments: dict[str, Any]) -> CallToolResult:
    """Run one operation; what goes wrong becomes a one-line tool error.

    The result goes out twice, as the protocol asks: as ``structuredContent`` for the host, and as
    compact JSON text for the model (the SDK's own text would be indented: a third more tokens).
    """
    try:
        result = tools.call(name, arguments)
        # Serialised here, so that text that cannot be encoded is this call's error rather than the
        # end of the SDK's writer, and of the server.
        text, structured = result.model_dump_json(), result.model_dump(mode="json")
    except HarnessMemError as exc:
        # Redacted: an error may quote a secret it was given.
        raise ToolError(f"Error executing tool {name}: {for_model(exc)}") from exc
    except Exception as exc:
        # A bug or an unusable file: the server keeps serving, the model gets one line, the log the traceback.
        logger.exception("unexpected error in a harness-mem tool")
        raise ToolError(f"Error executing tool {name}: unexpected {type(exc).__name__}: {shown(str(exc))[:300]}") from exc
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def build_server(tools: MemoryTools) -> MCPServer[Any]:
    """The MCP server exposing ``tools``; the model starts loading once the handshake is over."""
    server = _Server(tools, "harness-mem", instructions=SERVER_INSTRUCTIONS, log_level="WARNING", version=_version())

    async def start_model_after_handshake(ctx: Any, call_next: Any) -> Any:
        if ctx.method not in ("initialize", "server/discover", "ping"):
            tools.model.start()
        return await call_next(ctx)

    server.middleware.append(start_model_after_handshake)
    return server


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("harness-mem")
    except metadata.PackageNotFoundError:
        return "0"


def serve(store: MemoryStore, *, tags: Sequence[str] = ()) -> None:
    """Serve ``store`` over stdio until the host closes the connection; what the tools write
    carries ``tags`` too."""
    build_server(MemoryTools(store, tags=tags)).run("stdio")
