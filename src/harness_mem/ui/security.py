"""Who may use the memory browser, and what a page may do in their browser.

The rules of :mod:`harness_mem.access` (loopback unless a token is given; Host checked on loopback)
plus what a browser needs on top:

- **An access token in the printed URL.** On loopback it is made afresh for each run, so another
  user of the machine, or a page in another browser, cannot use the memory by guessing the port;
  off loopback it is the token given (``--token-file`` or the environment). Visiting ``?token=…``
  trades it for a session cookie (``HttpOnly; SameSite=Strict``) and redirects to the same page
  without it; scripts may send ``Authorization: Bearer …`` instead.
- **Every POST comes from this origin**: its Origin (or, without one, its Referer) is the page's
  own ``http://HOST:PORT``, else 403; and it carries the session's CSRF token, else 403.
- **Headers that keep a page to itself**: a Content-Security-Policy that allows no inline script or
  style and nothing from elsewhere, no framing, no sniffing, and no caching of pages holding memory.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..access import host_allowed, is_loopback, tokens_match

__all__ = ["CSRF_FIELD", "SECURITY_HEADERS", "Guard", "Guarded"]

#: The form field every POST carries its CSRF token in.
CSRF_FIELD = "csrf"

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", b"default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self';"
                                 b" form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with a form POST,
    # and the Origin is what proves the POST came from this page.
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


@dataclass
class Guard:
    """The access rules of one server bound to ``host:port``."""

    host: str
    port: int
    #: The token off loopback (required there); None on loopback, where one is made for this run.
    given_token: str | None = None
    read_only: bool = False
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    access_token: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.access_token = self.given_token or secrets.token_urlsafe(24)

    @property
    def cookie_name(self) -> str:
        # Cookies are kept per host, not per port: two servers on one machine keep one each.
        return f"harness_mem_ui_{self.port}"

    @property
    def checks_host(self) -> bool:
        # Off loopback the server is reached by names it cannot know; the token is the guard there.
        return is_loopback(self.host)

    def url(self, *, with_token: bool) -> str:
        """Where to open the browser: the token is in it on loopback only (off loopback it is the one the
        user gave, which is never printed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        base = f"http://{host}:{self.port}/"
        return f"{base}?{urlencode({'token': self.access_token})}" if with_token else base

    def new_session(self) -> str:
        """A session cookie's value: a random id and its signature."""
        session = secrets.token_urlsafe(18)
        return f"{session}.{self._sign('session', session)}"

    def session_of(self, cookie: str | None) -> str | None:
        """The session id in a cookie this server signed; None for anything else."""
        session, _, signature = (cookie or "").partition(".")
        if session and signature and tokens_match(signature, self._sign("session", session)):
            return session
        return None

    def csrf_token(self, session: str) -> str:
        """The token the session's forms carry: bound to it, so one taken from another session is no use."""
        return self._sign("csrf", session)

    def csrf_ok(self, session: str | None, given: str | None) -> bool:
        return session is not None and given is not None and tokens_match(given, self.csrf_token(session))

    def _sign(self, purpose: str, value: str) -> str:
        return hmac.new(self.secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


class Guarded:
    """ASGI middleware enforcing a :class:`Guard` before the app sees a request. The CSRF token, which
    is in the form body, is checked by the app's actions (:func:`harness_mem.ui.app.action`); the
    session it is checked against is put in ``scope["state"]["session"]`` here."""

    def __init__(self, app: Any, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers") or ()}
        host_header = headers.get("host", "")
        if self.guard.checks_host and not host_allowed(host_header, self.guard.host, self.guard.port):
            await _answer(send, 421, "this server answers only to its own address (the URL harness-mem ui printed)")
            return
        path = scope.get("path", "")
        if path.startswith("/static/"):  # the stylesheet: nothing in it is the user's
            await self.app(scope, receive, _with_headers(send))
            return
        session = self.guard.session_of(_cookie(headers.get("cookie", ""), self.guard.cookie_name))
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if (session is None and scope["method"] == "GET" and "token" in query
                and tokens_match(query["token"], self.guard.access_token)):
            await self._log_in(scope, query, send)
            return
        scheme, _, credentials = headers.get("authorization", "").strip().partition(" ")
        bearer = scheme.lower() == "bearer" and tokens_match(credentials.strip(), self.guard.access_token)
        if session is None and not bearer:
            await _answer(send, 401, "open the address harness-mem ui printed (it carries the access token)")
            return
        if scope["method"] not in ("GET", "HEAD"):
            if self.guard.read_only:
                await _answer(send, 405, "this browser was started with --read-only: nothing can be changed here",
                              [(b"allow", b"GET, HEAD")])
                return
            if not _same_origin(headers, host_header):
                await _answer(send, 403, "refused: this request did not come from a page of this server")
                return
        scope.setdefault("state", {})["session"] = session
        await self.app(scope, receive, _with_headers(send))

    async def _log_in(self, scope: dict[str, Any], query: dict[str, str], send: Any) -> None:
        """Trade the URL's token for a session cookie, and go to the same page without the token."""
        rest = urlencode([(name, value) for name, value in query.items() if name != "token"])
        location = scope.get("path", "/") + (f"?{rest}" if rest else "")
        cookie = f"{self.guard.cookie_name}={self.guard.new_session()}; Path=/; HttpOnly; SameSite=Strict"
        await _answer(send, 303, "signed in", [(b"location", location.encode()), (b"set-cookie", cookie.encode())])


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _same_origin(headers: dict[str, str], host_header: str) -> bool:
    """The request came from a page of this server: its Origin, or its Referer's, is ours."""
    origin = headers.get("origin")
    if origin is None and "referer" in headers:
        parts = urlsplit(headers["referer"])
        origin = f"{parts.scheme}://{parts.netloc}"
    return bool(host_header) and origin is not None and tokens_match(origin, f"http://{host_header}")


def _with_headers(send: Any) -> Any:
    """``send`` with :data:`SECURITY_HEADERS` added to the response."""

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
        await send(message)

    return sending


async def _answer(send: Any, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A refusal as one line of plain text, with the same protective headers as every page."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *SECURITY_HEADERS, *(headers or [])]})
    await send({"type": "http.response.body", "body": text.encode() + b"\n"})
