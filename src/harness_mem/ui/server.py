"""``harness-mem ui``: bind, print where, open the browser, serve until interrupted.

The socket is bound before anything is printed, so the printed URL is one that answers, with the
port the system chose when none was asked for (``--port 0``, the default).
"""

from __future__ import annotations

import socket
import webbrowser
from collections.abc import Callable
from pathlib import Path

from ..access import read_token, token_required
from ..errors import InvalidInputError
from ..store import MemoryStore
from .security import Guard

__all__ = ["TOKEN_ENV", "bind", "serve", "token_for"]

#: The environment variable the browser's token can come from (off loopback, where one is needed).
TOKEN_ENV = "HARNESS_MEM_UI_TOKEN"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one); a one-line error when it cannot be."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InvalidInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def token_for(host: str, token_file: Path | None) -> str | None:
    """The token the browser must bring: the one given (``token_file`` or :data:`TOKEN_ENV`), which
    serving off loopback requires; None on loopback without one (a token is made for the run)."""
    token = read_token(token_file, TOKEN_ENV)
    token_required(host, token, TOKEN_ENV)
    return token


def serve(store: MemoryStore, sock: socket.socket, guard: Guard, *, open_browser: bool,
          say: Callable[[str], None]) -> None:
    """Serve ``store`` on ``sock`` behind ``guard`` until interrupted."""
    import uvicorn

    from .app import build_app

    with_token = guard.given_token is None  # a token the user gave is never printed
    url = guard.url(with_token=with_token)
    say(f"Memory browser at {url}" + ("" if with_token else "  (sign in once with ?token=YOUR_TOKEN)"))
    if open_browser:
        webbrowser.open(url)
    server = uvicorn.Server(uvicorn.Config(build_app(store, guard), log_level="warning", lifespan="off"))
    server.run(sockets=[sock])
