"""``harness-mem mcp --http HOST:PORT``: the MCP server over Streamable HTTP, for hosts that connect
to a URL (``http://HOST:PORT/mcp``) instead of starting a process.

The tools, their errors and their threads are the stdio server's (:mod:`harness_mem.mcp_server`).
What HTTP adds is who may call (the rules :mod:`harness_mem.access` holds for ``ui`` too):

- **A token** (``Authorization: Bearer …``) is required on every request when one is set, and one must
  be set for any address that is not loopback: a memory on the network is open to whoever reaches it
  otherwise. It comes from ``--token-file`` or ``$HARNESS_MEM_MCP_TOKEN``, never from the command
  line (which other users of the machine can read); it is compared in constant time and never
  printed. A request without it gets 401 before the server sees it.
- **On loopback, Host and Origin are checked** (DNS-rebinding protection): a web page in the user's
  browser cannot reach the server by resolving its own name to a loopback address. The SDK only
  knows ``127.0.0.1``, ``localhost`` and ``::1``; the names allowed here are built from whatever
  address is bound (``127.0.0.2``, ``[0:0:0:0:0:0:0:1]``…), so every address served without a
  token is one whose Host and Origin are checked.
- **Every malformed message gets a JSON-RPC error**, as on stdio (:func:`~harness_mem.mcp_server.check_frame`):
  the SDK would take a request whose id is null or 1.5 for a notification and answer 202.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.types import INVALID_REQUEST

from .access import allowed_hosts, is_loopback, token_required, tokens_match
from .mcp_server import Refusal, check_frame
from .store import MemoryStore

__all__ = ["build_app", "host_check", "serve_http"]

#: Where the server answers, as the SDK's Streamable HTTP transport has it.
PATH = "/mcp"


class BearerToken:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>`` (the scheme in
    any case, as RFC 9110 has it)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            scheme, _, credentials = given.strip().partition(b" ")
            # Compared whatever the scheme, so the time taken says nothing about the token.
            matches = tokens_match(credentials.strip(), self.expected)
            if not (matches and scheme.lower() == b"bearer"):
                await _answer(send, 401, b"text/plain", b"a bearer token is required\n",
                              [(b"www-authenticate", b"Bearer")])
                return
        await self.app(scope, receive, send)


def host_check(host: str) -> Any:
    """The SDK's DNS-rebinding settings for a loopback server bound to ``host``: Host one of
    :func:`allowed_hosts`, Origin absent or ``http://`` one of them."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = allowed_hosts(host)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"http://{name}" for name in hosts])


class JsonRpcFrames:
    """ASGI middleware: each POSTed body passes :func:`~harness_mem.mcp_server.check_frame` before the
    SDK sees it, so a malformed request gets the JSON-RPC error stdio would give (HTTP 400), and a
    lone surrogate is repaired as there."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        # Held whole to be checked, so no larger than the SDK itself takes.
        body, whole = await _read_body(receive, DEFAULT_MAX_REQUEST_BODY_SIZE)
        if not whole:
            await _refuse(send, Refusal(None, INVALID_REQUEST, "Invalid Request: a message is"
                                        f" {DEFAULT_MAX_REQUEST_BODY_SIZE >> 20} MiB at most"), 413)
            return
        checked = check_frame(body.decode("utf-8", errors="replace")) if body.strip() else None
        if isinstance(checked, Refusal):
            await _refuse(send, checked, 400)
            return
        if isinstance(checked, str):
            body = checked.encode("utf-8")
        await self.app(scope, _replay(body, receive), send)


async def _read_body(receive: Any, limit: int) -> tuple[bytes, bool]:
    """The request's body, and False when it ran past ``limit`` (the rest is then left unread)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True  # the client went away: the app sees what came
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", False
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks), True


def _replay(body: bytes, receive: Any) -> Any:
    """A ``receive`` that hands the app ``body`` once, then the server's own (for the disconnect)."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send: Any, refusal: Refusal, status: int) -> None:
    error = {"jsonrpc": "2.0", "id": refusal.id, "error": {"code": refusal.code, "message": refusal.message}}
    await _answer(send, status, b"application/json", json.dumps(error, separators=(",", ":")).encode())


async def _answer(send: Any, status: int, content_type: bytes, body: bytes,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def build_app(store: MemoryStore, host: str, token: str | None) -> Any:
    """The ASGI app serving ``store``'s tools at :data:`PATH`, behind the token when there is one."""
    from .mcp_server import MemoryTools, build_server

    token_required(host, token)
    # On loopback Host and Origin are checked for the address bound, whichever it is; elsewhere the
    # token is the guard (a server on a LAN address is reached by names this one cannot know).
    security = host_check(host) if is_loopback(host) else None
    app = JsonRpcFrames(build_server(MemoryTools(store)).streamable_http_app(
        streamable_http_path=PATH, host=host, transport_security=security))
    return BearerToken(app, token) if token else app


def serve_http(store: MemoryStore, host: str, port: int, token: str | None = None) -> None:
    """Serve ``store`` over Streamable HTTP at ``http://host:port/mcp`` until interrupted."""
    import uvicorn

    uvicorn.run(build_app(store, host, token), host=host, port=port, log_level="warning")
