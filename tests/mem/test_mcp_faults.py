"""``harness-mem mcp`` answers every frame a host can send, and keeps serving after it.

The SDK's stdio transport used to drop, without a word, every line its JSON parser refused: a lone
UTF-16 surrogate escape (``"\\ud83d"``: a JavaScript host cutting a string through an emoji),
nesting past 200 levels, anything that was not JSON or not a JSON-RPC message; the host then waited
for its own timeout. Each case here is sent to the real command in a real process, as raw bytes on
its stdin (:class:`RawServer`), or through the SDK's own ``Client`` while a side door writes the
raw frame between the client's (:func:`side_door`), and each must be answered, with the server still
answering a normal request after it. Last, ``get_memory`` pages a long history rather than return
all of it.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from fake_embedder import _LAUNCHER, HashedEmbedder
from mcp import Client, StdioServerParameters
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter

from harness_mem.mcp_server import MAX_FRAME_BYTES, MAX_HISTORY, MAX_JSON_DEPTH
from harness_mem.store import MemoryStore

INVALID_REQUEST, PARSE_ERROR, METHOD_NOT_FOUND = -32600, -32700, -32601
DEEP = 10_000
#: How long a test waits for one answer before it fails (never reached when the server answers).
ANSWER_WAIT = 120


def server_command(db: Path) -> list[str]:
    return [sys.executable, "-c", _LAUNCHER, "mcp", "--db", str(db)]


def frame(id: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def tool_call(id: Any, tool: str, arguments: dict[str, Any]) -> bytes:
    return frame(id, "tools/call", {"name": tool, "arguments": arguments})


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


INITIALIZE = frame(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "test", "version": "0"}})


class RawServer:
    """``harness-mem mcp`` in a process, spoken to in raw bytes, one line per frame."""

    def __init__(self, db: Path, stderr: BinaryIO) -> None:
        self.process = subprocess.Popen(server_command(db), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=stderr, env=dict(os.environ))
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.pings = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data + b"\n")
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        """The next message from the server (a reply: this server sends no requests of its own)."""
        line = self.lines.get(timeout=ANSWER_WAIT)
        assert line, "the server closed its output"
        message: dict[str, Any] = json.loads(line)
        return message

    def ask(self, data: bytes) -> dict[str, Any]:
        self.send(data)
        return self.answer()

    def still_serves(self) -> None:
        """A ping is answered, and it is the next thing the server says."""
        self.pings += 1
        ping_id = f"ping-{self.pings}"
        assert self.ask(frame(ping_id, "ping")) == {"jsonrpc": "2.0", "id": ping_id, "result": {}}


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[RawServer]:
    with open(tmp_path / "stderr.log", "w+b") as stderr:
        server = RawServer(tmp_path / "m.db", stderr)
        try:
            assert server.ask(INITIALIZE)["result"]["serverInfo"]["name"] == "harness-mem"
            server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
            yield server
        finally:
            assert server.process.stdin is not None and server.process.stdout is not None
            server.process.stdin.close()
            code = server.process.wait(timeout=60)
            server.reader.join(timeout=60)
            server.process.stdout.close()
        stderr.seek(0)
        log = stderr.read().decode(errors="replace")
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def error_of(answer: dict[str, Any], id: Any, code: int) -> str:
    """The message of a JSON-RPC error answer, checked to carry ``id`` and ``code`` and to be one line."""
    assert answer.get("id", "absent") == id and "error" in answer, answer
    assert answer["error"]["code"] == code, answer
    message: str = answer["error"]["message"]
    assert "\n" not in message and len(message) < 300, message
    return message


def result_of(answer: dict[str, Any], id: Any) -> dict[str, Any]:
    assert answer.get("id") == id and "result" in answer, str(answer)[:500]
    result: dict[str, Any] = answer["result"]
    return result


# ---- raw frames -----------------------------------------------------------------------------------


def test_a_lone_surrogate_becomes_u_fffd_except_in_an_id_which_is_refused_as_sent(raw: RawServer) -> None:
    # In a tool argument: the write goes through with U+FFFD for the half character.
    stored = result_of(raw.ask(tool_call(1, "remember", {"content": "the tunnel emoji is \ud83d"})), 1)
    assert stored["isError"] is False
    memory_id = stored["structuredContent"]["id"]
    shown = result_of(raw.ask(tool_call(2, "get_memory", {"id": memory_id})), 2)["structuredContent"]
    assert shown["memory"]["content"] == "the tunnel emoji is \ufffd"
    raw.still_serves()
    # A pair is a whole character and stays one.
    paired = result_of(raw.ask(tool_call(3, "remember", {"content": "smile \ud83d\ude00 please"})), 3)
    shown = result_of(raw.ask(tool_call(4, "get_memory", {"id": paired["structuredContent"]["id"]})), 4)
    assert shown["structuredContent"]["memory"]["content"] == "smile \U0001f600 please"
    # A lone low half in a query, in a tool's name, in an argument's name.
    found = result_of(raw.ask(tool_call(5, "recall", {"query": "tunnel \ude00 emoji"})), 5)
    assert found["isError"] is False and found["structuredContent"]["hits"][0]["id"] == memory_id
    unknown_tool = result_of(raw.ask(tool_call(6, "rec\ud83dall", {"query": "x"})), 6)
    assert unknown_tool["isError"] is True and "Unknown tool" in unknown_tool["content"][0]["text"]
    unknown_argument = result_of(raw.ask(tool_call(7, "recall", {"query": "x", "k\ud83d": 1})), 7)
    assert unknown_argument["isError"] is True and "unknown argument" in unknown_argument["content"][0]["text"]
    raw.still_serves()
    # In a method's name: no such method, said to the request that asked.
    assert error_of(raw.ask(frame(8, "tools/li\ud83dst")), 8, METHOD_NOT_FOUND)
    # In an id: changed, it would match nothing the host waits on, so it comes back as sent, refused.
    raw.send(frame("req-\ud83d", "ping"))
    line = raw.lines.get(timeout=ANSWER_WAIT)
    assert b'"id":"req-\\ud83d"' in line
    assert "lone UTF-16 surrogate" in error_of(json.loads(line), "req-\ud83d", INVALID_REQUEST)
    # In a notification: nothing to answer, and the next answer is the next request's.
    raw.send(b'{"jsonrpc": "2.0", "method": "notifications/\\ud83d"}')
    raw.still_serves()


@pytest.mark.parametrize("layout", ["id first", "id last"])
def test_nesting_ten_thousand_deep_is_refused_with_the_request_s_id(raw: RawServer, layout: str) -> None:
    """Python hosts write the id before the params, the TypeScript SDK after them: both are found."""
    deep = b'{"name": "recall", "arguments": {"query": ' + nested(DEEP) + b"}}"
    if layout == "id first":
        data = b'{"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": ' + deep + b"}"
    else:
        data = b'{"method": "tools/call", "params": ' + deep + b', "jsonrpc": "2.0", "id": 41}'
    message = error_of(raw.ask(data), 41, INVALID_REQUEST)
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in message
    raw.still_serves()
    # Objects, as deep, with a string holding brackets on the way.
    objects = b'{"a": "[[{{", "b": ' * DEEP + b"1" + b"}" * DEEP
    assert error_of(raw.ask(b'{"jsonrpc": "2.0", "id": 42, "method": "ping", "params": ' + objects + b"}"),
                    42, INVALID_REQUEST)
    # A bare array that deep has no id to answer to: null, as JSON-RPC asks.
    assert error_of(raw.ask(nested(DEEP)), None, INVALID_REQUEST)
    # Deep enough for Python's parser, too deep for the SDK's; and a lone surrogate on top.
    medium = tool_call(43, "recall", {"query": "x", "tags": json.loads(nested(MAX_JSON_DEPTH + 50))})
    assert error_of(raw.ask(medium), 43, INVALID_REQUEST)
    both = tool_call(44, "recall", {"query": "\ud83d", "tags": json.loads(nested(MAX_JSON_DEPTH + 50))})
    assert error_of(raw.ask(both), 44, INVALID_REQUEST)
    raw.still_serves()


def test_bytes_that_are_not_utf8_are_answered(raw: RawServer) -> None:
    # Inside a string: U+FFFD, and the call goes through.
    found = result_of(raw.ask(b'{"jsonrpc": "2.0", "id": 51, "method": "tools/call", "params": {"name": "recall",'
                              b' "arguments": {"query": "caf\xe9 \xff\xfe \xed\xa0\xbd"}}}'), 51)
    assert found["isError"] is False
    # Between the tokens: not JSON any more, and the error still finds the id.
    assert "not JSON" in error_of(raw.ask(b'{"jsonrpc": "2.0", "id": 52, \xff"method": "ping"}'), 52, PARSE_ERROR)
    assert error_of(raw.ask(b"\xff\xfe\x00{"), None, PARSE_ERROR)
    raw.still_serves()


def test_frames_that_are_not_json_rpc_are_answered(raw: RawServer) -> None:
    assert "not JSON" in error_of(raw.ask(b"hello?"), None, PARSE_ERROR)
    cut = b'{"jsonrpc": "2.0", "id": 61, "method": "tools/call", "params": {"name": "recall"'
    assert "not JSON" in error_of(raw.ask(cut), 61, PARSE_ERROR)  # a frame cut short: its id is still read
    assert '"2.0"' in error_of(raw.ask(b'{"jsonrpc": "1.0", "id": 62, "method": "ping"}'), 62, INVALID_REQUEST)
    assert "object" in error_of(raw.ask(b'{"jsonrpc": "2.0", "id": 63, "method": "ping", "params": [1]}'),
                                63, INVALID_REQUEST)
    assert "method" in error_of(raw.ask(b'{"jsonrpc": "2.0", "id": 64}'), 64, INVALID_REQUEST)
    assert "JSON object" in error_of(raw.ask(b'[{"jsonrpc": "2.0", "id": 65, "method": "ping"}]'),
                                     None, INVALID_REQUEST)
    assert "digits" in error_of(raw.ask(b'{"jsonrpc": "2.0", "id": 66, "method": "ping", "params": {"n": '
                                        + b"9" * 5000 + b"}}"), 66, PARSE_ERROR)
    # Ids MCP does not allow: the SDK would take each frame for a notification and stay silent.
    assert "id must be" in error_of(raw.ask(b'{"jsonrpc": "2.0", "id": 6.5, "method": "ping"}'), 6.5, INVALID_REQUEST)
    for bad_id in (b"true", b"null", b"[67]", b'{"n": 67}'):
        assert error_of(raw.ask(b'{"jsonrpc": "2.0", "id": ' + bad_id + b', "method": "ping"}'), None, INVALID_REQUEST)
    # A malformed response is logged, not answered (two peers could answer each other's errors for ever);
    # blank lines are no frames.
    raw.send(b'{"jsonrpc": "2.0", "id": 68, "result": "not an object"}')
    raw.send(b"   ")
    raw.still_serves()


def test_a_20_mb_frame_is_answered_and_one_past_the_limit_refused_with_its_id(raw: RawServer) -> None:
    big = tool_call(71, "recall", {"query": "x" * (20 << 20)})
    too_long = result_of(raw.ask(big), 71)
    assert too_long["isError"] is True and "at most 4096 characters" in too_long["content"][0]["text"]
    raw.still_serves()
    huge = b'{"jsonrpc": "2.0", "id": 72, "method": "tools/call", "params": {"name": "remember", "arguments":' \
           b' {"content": "' + b"y" * MAX_FRAME_BYTES + b'"}}}'
    assert "MiB at most" in error_of(raw.ask(huge), 72, INVALID_REQUEST)
    raw.still_serves()


# ---- the SDK's client, with raw frames between its own ---------------------------------------------


class SideDoor:
    """Raw frames written to the server between the SDK client's, and the answers to them: every
    answer whose id is a string starting with ``raw-``, or null."""

    def __init__(self) -> None:
        self.stdin: Any = None
        self.lock = anyio.Lock()
        self.answers_in, self.answers = anyio.create_memory_object_stream[dict[str, Any]](16)

    async def ask(self, data: bytes) -> dict[str, Any]:
        async with self.lock:
            await self.stdin.send(data + b"\n")
        with anyio.fail_after(ANSWER_WAIT):
            return await self.answers.receive()


def _for_the_side_door(message: dict[str, Any]) -> bool:
    if "id" not in message:
        return False  # a notification from the server: the client's
    return message["id"] is None or (isinstance(message["id"], str) and message["id"].startswith("raw-"))


@asynccontextmanager
async def side_door(db: Path, door: SideDoor) -> AsyncIterator[Any]:
    """A stdio transport for ``Client`` to ``harness-mem mcp --db DB``, sharing its stdin with ``door``."""
    process = await anyio.open_process(server_command(db), env=dict(os.environ), stderr=None)
    assert process.stdin is not None and process.stdout is not None
    door.stdin = process.stdin
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage](0)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)

    async def client_to_server() -> None:
        async for message in from_client:
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
            async with door.lock:
                await door.stdin.send(data + b"\n")

    async def server_to_client() -> None:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        while True:
            try:
                line = await lines.receive_until(b"\n", 1 << 26)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                return
            message = json.loads(line)
            if _for_the_side_door(message):
                await door.answers_in.send(message)
            else:
                await to_client.send(SessionMessage(jsonrpc_message_adapter.validate_json(line)))

    async with process, anyio.create_task_group() as group:
        group.start_soon(client_to_server)
        group.start_soon(server_to_client)
        try:
            yield from_server, to_server
        finally:
            await process.stdin.aclose()
            with anyio.fail_after(60):
                assert await process.wait() == 0
            group.cancel_scope.cancel()
            for stream in (to_server, from_client, to_client, from_server, door.answers_in, door.answers):
                stream.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def call(client: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return dict(result.structured_content)


@pytest.mark.anyio
async def test_the_sdk_client_keeps_its_session_through_every_hostile_frame(tmp_path: Path) -> None:
    door = SideDoor()
    hostile: list[tuple[bytes, Any, int | None]] = [  # the frame, the id it is answered with, the error code
        (tool_call("raw-1", "remember", {"content": "a cut emoji \ud83d"}), "raw-1", None),
        (frame("raw-2", "tools/\ud83dlist"), "raw-2", METHOD_NOT_FOUND),
        (frame("raw-\ud83d", "ping"), "raw-\ud83d", INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": "raw-4", "method": "tools/call", "params": {"name": "recall", "arguments":'
         b' {"query": ' + nested(DEEP) + b"}}}", "raw-4", INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": "raw-5", \xfe"method": "ping"}', "raw-5", PARSE_ERROR),
        (b'{"jsonrpc": "2.0", "id": "raw-6", "method": "tools/call", "params": {"name": "recall", "arguments":'
         b' {"query": "\xff\xfe"}}}', "raw-6", None),
        (tool_call("raw-7", "recall", {"query": "x" * (20 << 20)}), "raw-7", None),
        (b"}{", None, PARSE_ERROR),
    ]
    # The initialize handshake, as hosts do today: the raw frames then need no per-request protocol envelope.
    async with Client(side_door(tmp_path / "m.db", door), read_timeout_seconds=ANSWER_WAIT, mode="legacy") as client:
        kept = await call(client, "remember", content="the deploy key rotates every 90 days")
        for data, answer_id, code in hostile:
            answer = await door.ask(data)
            assert answer.get("id", "absent") == answer_id, str(answer)[:300]
            if code is None:
                assert "result" in answer, str(answer)[:300]
            else:
                assert answer["error"]["code"] == code, answer
            hits = (await call(client, "recall", query="deploy key"))["hits"]
            assert hits[0]["id"] == kept["id"]  # the client's session carries on
        cut = await call(client, "recall", query="cut emoji")
        assert cut["hits"][0]["content"] == "a cut emoji \ufffd"


# ---- get_memory's history, paged ---------------------------------------------------------------------


@asynccontextmanager
async def served(db: Path) -> AsyncIterator[Any]:
    params = StdioServerParameters(command=sys.executable, args=server_command(db)[1:], env=dict(os.environ))
    async with Client(params, read_timeout_seconds=ANSWER_WAIT) as client:
        yield client


@pytest.mark.anyio
async def test_get_memory_shows_the_newest_versions_and_pages_back_through_a_long_history(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    versions = 501
    with MemoryStore(db, embedder=HashedEmbedder()) as store:
        chain = [store.add("the build takes 1 minute").id]
        for minutes in range(2, versions + 1):
            chain.append(store.supersede(chain[-1], f"the build takes {minutes} minutes").id)
    async with served(db) as client:
        tool = {t.name: t for t in (await client.list_tools()).tools}["get_memory"]
        assert "history_offset" in tool.description and f"history_limit up to {MAX_HISTORY}" in tool.description
        assert tool.input_schema["properties"]["history_limit"]["maximum"] == MAX_HISTORY

        first = await client.call_tool("get_memory", {"id": chain[0]})
        assert len(first.content[0].text) < 10_000  # was 237 kB: every version
        page = dict(first.structured_content)
        assert [m["id"] for m in page["history"]] == chain[-10:]
        assert page["history_total"] == versions and page["older_versions"] == versions - 10
        assert page["current_id"] == chain[-1] and page["memory"]["id"] == chain[0]

        back = await call(client, "get_memory", id=chain[-1], history_offset=10, history_limit=100)
        assert [m["id"] for m in back["history"]] == chain[-110:-10] and back["older_versions"] == versions - 110
        oldest = await call(client, "get_memory", id=chain[-1], history_offset=versions - 3)
        assert [m["id"] for m in oldest["history"]] == chain[:3] and oldest["older_versions"] == 0
        past = await call(client, "get_memory", id=chain[-1], history_offset=versions)
        assert past["history"] == [] and past["history_total"] == versions

        for arguments, expected in [({"history_limit": MAX_HISTORY + 1}, "history_limit: Input should be less"),
                                    ({"history_limit": 0}, "history_limit: Input should be greater"),
                                    ({"history_offset": -1}, "history_offset: Input should be greater"),
                                    ({"history_offset": "10"}, "history_offset: Input should be a valid integer")]:
            result = await client.call_tool("get_memory", {"id": chain[0], **arguments})
            assert result.is_error and expected in result.content[0].text, result.content[0].text
