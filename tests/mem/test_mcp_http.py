"""``harness-mem mcp --http``: the same tools over Streamable HTTP, in a real server process on 127.0.0.1,
reached with the SDK's HTTP client; a request without the token is refused, and so is a page's Origin."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_embedder import _LAUNCHER, cli_process
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from harness_mem.access import allowed_hosts
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.anyio
TOKEN = "a-test-token-0123456789abcdef"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(tmp_path: Path, address: str, token: str | None = TOKEN) -> Iterator[tuple[str, Path]]:
    """``harness-mem mcp --http ADDRESS:PORT`` (with a token file when ``token``), in its own process."""
    db, token_file = tmp_path / "memory.db", tmp_path / "token"
    port = free_port(address)
    written = f"[{address}]" if ":" in address else address
    options = []
    if token is not None:
        token_file.write_text(token + "\n")
        options = ["--token-file", str(token_file)]
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, "mcp", "--db", str(db), "--http", f"{written}:{port}",
                             *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={k: v for k, v in os.environ.items() if k != "HARNESS_MEM_MCP_TOKEN"})
    url = f"http://{written}:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start listening"
                time.sleep(0.1)
        yield url, db
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert b"Traceback" not in err, err.decode()[-2000:]
        assert TOKEN.encode() not in err  # never printed


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``harness-mem mcp --http 127.0.0.1:PORT`` with a token file, in its own process."""
    with serving(tmp_path, "127.0.0.1") as found:
        yield found


@asynccontextmanager
async def connected(url: str, token: str | None = TOKEN) -> AsyncIterator[Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http, \
            Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client:
        yield client


async def test_the_tools_over_http_with_the_token(server: tuple[str, Path]) -> None:
    url, db = server
    async with connected(url) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == {"remember", "recall", "recall_sessions", "get_memory", "update_memory", "forget",
                         "recent_activity", "find_skills"}
        done = await client.call_tool("remember", {"content": "the staging deploy uses the blue pool",
                                                   "metadata": {"team": "ops"}})
        assert not done.is_error, done.content[0].text
        found = await client.call_tool("recall", {"query": "which pool does staging use", "mode": "keyword"})
        hits = found.structured_content["hits"]
        assert [hit["content"] for hit in hits] == ["the staging deploy uses the blue pool"]
        assert hits[0]["metadata"] == {"team": "ops"}
        bad = await client.call_tool("recall", {"query": "x", "k": 10_000})
        assert bad.is_error and "\n" not in bad.content[0].text
    with MemoryStore(db, embedder=None, read_only=True) as store:  # in the file, for every other client
        assert [e.content for e in store.list()] == ["the staging deploy uses the blue pool"]


async def test_a_request_without_the_token_or_with_a_wrong_one_is_refused(server: tuple[str, Path]) -> None:
    url, db = server
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for auth in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
        answer = httpx.post(url, json=hello, headers={**headers, **auth}, timeout=10)
        assert answer.status_code == 401, (auth, answer.status_code)
    with pytest.raises(Exception):  # noqa: B017 — the SDK's client fails as its transport does
        async with connected(url, token=None) as client:
            await client.list_tools()
    # With the token but from a web page's origin: the SDK's DNS-rebinding check refuses it.
    page = httpx.post(url, json=hello, headers={**headers, "Authorization": f"Bearer {TOKEN}",
                                                  "Origin": "http://evil.example"}, timeout=10)
    assert page.status_code in (400, 403), page.status_code


def test_off_loopback_a_token_is_required_and_bad_addresses_are_one_line(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "memory.db"
    monkeypatch.delenv("HARNESS_MEM_MCP_TOKEN", raising=False)  # cli_process passes os.environ on
    short = tmp_path / "short"
    short.write_text("abc")
    cases = [
        (["--http", "0.0.0.0:8765"], "needs a token; give --token-file FILE or set $HARNESS_MEM_MCP_TOKEN"),
        (["--http", "127.0.0.1"], "--http takes HOST:PORT"),
        (["--http", "127.0.0.1:99999"], "--http takes HOST:PORT"),
        (["--http", "127.0.0.1:8765", "--token-file", str(short)], "at least 16 characters"),
    ]
    for args, said in cases:
        result = cli_process("--db", str(db), "mcp", *args, timeout=60)
        err = result.stderr.decode()
        assert result.returncode == 1 and said in err and err.count("\n") == 1, (args, err)
    assert not db.exists()  # refused before the store was made
    result = cli_process("--db", str(db), "mcp", "--token-file", str(tmp_path / "t"), timeout=60)
    assert result.returncode == 2 and "--token-file goes with --http" in result.stderr.decode()


def test_the_page_origin_check_and_json_rpc_stay_the_sdks(server: tuple[str, Path]) -> None:
    url, _ = server
    # A malformed body with the token is answered as JSON-RPC, not a traceback.
    answer = httpx.post(url, content=b"{not json", headers={"Authorization": f"Bearer {TOKEN}",
                                                            "Accept": "application/json, text/event-stream",
                                                            "Content-Type": "application/json"}, timeout=10)
    assert answer.status_code == 400
    body = answer.text
    assert "Traceback" not in body and ("error" in body or json.loads(body).get("error"))


HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
POSTING = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_a_loopback_address_the_sdk_does_not_know_still_has_host_and_origin_checked(tmp_path: Path) -> None:
    # Linux routes all of 127/8 to lo: 127.0.0.2 is loopback, so it is served without a token, and a page
    # whose name resolves to it must be refused as on 127.0.0.1 (the SDK's check knows only three names).
    with serving(tmp_path, "127.0.0.2", token=None) as (url, db):
        port = url.rsplit(":", 1)[1].split("/")[0]
        for headers, status in (({"Host": "evil.example"}, 421),
                                ({"Host": "evil.example", "Origin": "http://evil.example"}, 421),
                                ({"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}, 421),
                                ({"Origin": "http://evil.example"}, 403),
                                ({"Origin": f"http://evil.example:{port}"}, 403)):
            answer = httpx.post(url, json=HELLO, headers={**POSTING, **headers}, timeout=30)
            assert answer.status_code == status, (headers, answer.status_code, answer.text)
        # Its own clients, writing the address as they may, are served.
        for headers in ({}, {"Origin": f"http://127.0.0.2:{port}"}, {"Host": f"localhost:{port}"}):
            answer = httpx.post(url, json=HELLO, headers={**POSTING, **headers}, timeout=30)
            assert answer.status_code == 200, (headers, answer.status_code, answer.text)
        async with connected(url, token=None) as client:
            done = await client.call_tool("remember", {"content": "the canary build runs at noon"})
            assert not done.is_error, done.content[0].text
    with MemoryStore(db, embedder=None, read_only=True) as store:
        assert [e.content for e in store.list()] == ["the canary build runs at noon"]


def test_ipv6_loopback_written_out_in_full_is_checked_too(tmp_path: Path) -> None:
    with serving(tmp_path, "0:0:0:0:0:0:0:1", token=None) as (url, _):
        port = url.rsplit(":", 1)[1].split("/")[0]
        page = httpx.post(url, json=HELLO, headers={**POSTING, "Host": "evil.example",
                                                    "Origin": "http://evil.example"}, timeout=30)
        assert page.status_code == 421, (page.status_code, page.text)
        for host in (f"[::1]:{port}", f"[0:0:0:0:0:0:0:1]:{port}"):
            answer = httpx.post(url, json=HELLO, headers={**POSTING, "Host": host}, timeout=30)
            assert answer.status_code == 200, (host, answer.status_code, answer.text)


def test_the_names_allowed_are_the_bound_address_written_every_way() -> None:
    assert set(allowed_hosts("0:0:0:0:0:0:0:1")) >= {"[::1]", "[::1]:*", "[0:0:0:0:0:0:0:1]:*", "localhost:*"}
    assert set(allowed_hosts("127.1.2.3")) == {"127.1.2.3", "127.1.2.3:*", "localhost", "localhost:*"}
    assert "evil.example:*" not in allowed_hosts("localhost")


def test_the_scheme_of_the_token_is_case_insensitive(server: tuple[str, Path]) -> None:
    url, _ = server
    for scheme in ("bearer", "BEARER", "Bearer", "bEaReR"):
        answer = httpx.post(url, json=HELLO, headers={**POSTING, "Authorization": f"{scheme} {TOKEN}"}, timeout=30)
        assert answer.status_code == 200, (scheme, answer.status_code)
    for given in (f"Basic {TOKEN}", f"bearer{TOKEN}", f"bearer {TOKEN}x", "bearer"):
        answer = httpx.post(url, json=HELLO, headers={**POSTING, "Authorization": given}, timeout=30)
        assert answer.status_code == 401, (given, answer.status_code)


def test_every_malformed_request_gets_a_json_rpc_error_over_http(server: tuple[str, Path]) -> None:
    url, _ = server
    headers = {**POSTING, "Authorization": f"Bearer {TOKEN}"}
    cases = [
        ('{"jsonrpc": "2.0", "id": null, "method": "tools/list"}', None),
        ('{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', 1.5),
        ('{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', None),
        ('{"jsonrpc": "1.0", "id": 7, "method": "tools/list"}', 7),
        ('{"jsonrpc": "2.0", "id": 8, "method": 3}', 8),
        ("[1, 2]", None),
        ("{not json", None),
    ]
    for body, request_id in cases:
        answer = httpx.post(url, content=body.encode(), headers=headers, timeout=30)
        assert answer.status_code == 400, (body, answer.status_code, answer.text)
        error = answer.json()
        assert error["jsonrpc"] == "2.0" and error["id"] == request_id, (body, error)
        assert error["error"]["code"] in (-32600, -32700) and "\n" not in error["error"]["message"], (body, error)
    too_large = httpx.post(url, content=b'{"jsonrpc": "2.0", "id": 9, "method": "x", "params": {"p": "'
                           + b"a" * (5 << 20) + b'"}}', headers=headers, timeout=60)
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == -32600
    # A notification is still one (202), and a well-formed request still answered.
    note = httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers, timeout=30)
    assert note.status_code in (202, 400), note.status_code  # 400 only for want of a session
    assert httpx.post(url, json=HELLO, headers=headers, timeout=30).status_code == 200
