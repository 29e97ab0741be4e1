"""``harness-mem mcp --http HOST:PORT``: the MCP server over Streamable HTTP, for hosts that connect
to a URL (``http://HOST:PORT/mcp``) instead of starting a process.

The tools, their errors and their threads are the stdio server's (:mod:`harness_mem.mcp_server`).
What HTTP adds is who may call:

- **A token** (``Authorization: Bearer …``) is required on every request when one is set, and one must
  be set for any address that is not loopback: a memory on the network is open to whoever reaches it
  otherwise. It comes from ``--token-file`` or ``$HARNESS_MEM_MCP_TOKEN``, never from the command
  line (which other users of the machine can read); it is compared in constant time and never
  printed. A request without it gets 401 before the server sees it.
- **On loopback, Host and Origin are checked** (the SDK's DNS-rebinding protection): a web page in
  the user's browser cannot reach the server by resolving its own name to 127.0.0.1.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from pathlib import Path
from typing import Any

from .errors import InvalidInputError
from .store import MemoryStore

__all__ = ["TOKEN_ENV", "build_app", "is_loopback", "parse_address", "read_token", "serve_http"]

#: The environment variable a token can come from instead of a file.
TOKEN_ENV = "HARNESS_MEM_MCP_TOKEN"
#: Where the server answers, as the SDK's Streamable HTTP transport has it.
PATH = "/mcp"
#: A token shorter than this is refused: it could be guessed.
MIN_TOKEN_CHARS = 16


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as its parts; a bad one is a one-line error."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInputError(f"--http takes HOST:PORT (like 127.0.0.1:8765), not {text[:60]!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(token_file: Path | None) -> str | None:
    """The bearer token from ``token_file`` or :data:`TOKEN_ENV` (None when neither gives one)."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"cannot read the token file {str(token_file)[:200]}: {type(exc).__name__}") from None
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise InvalidInputError(f"the token must be at least {MIN_TOKEN_CHARS} characters with no spaces"
                                " (for one: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token


class BearerToken:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"a bearer token is required\n"})
                return
        await self.app(scope, receive, send)


def build_app(store: MemoryStore, host: str, token: str | None) -> Any:
    """The ASGI app serving ``store``'s tools at :data:`PATH`, behind the token when there is one."""
    from .mcp_server import MemoryTools, build_server

    if token is None and not is_loopback(host):
        raise InvalidInputError(
            f"serving on {host}, which is not loopback, needs a bearer token; give --token-file FILE or set ${TOKEN_ENV}"
        )
    # On loopback the SDK checks Host and Origin itself (DNS-rebinding protection).
    app = build_server(MemoryTools(store)).streamable_http_app(streamable_http_path=PATH, host=host)
    return BearerToken(app, token) if token else app


def serve_http(store: MemoryStore, host: str, port: int, token: str | None = None) -> None:
    """Serve ``store`` over Streamable HTTP at ``http://host:port/mcp`` until interrupted."""
    import uvicorn

    uvicorn.run(build_app(store, host, token), host=host, port=port, log_level="warning")
