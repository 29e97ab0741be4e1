"""Who may reach a store served over HTTP: the rules ``mcp --http`` and ``ui`` share.

- **Loopback only, unless a token is given.** Any other address is reachable by other machines, so
  it needs a token, read from a file or the environment (never the command line, which other users
  of the machine can read), at least :data:`MIN_TOKEN_CHARS` long and compared in constant time.
- **Host is checked on loopback** (DNS rebinding): a page on another site that resolves its own name
  to 127.0.0.1 sends its own name as Host, which is none of :func:`allowed_hosts`.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from pathlib import Path

from .errors import InvalidInputError

__all__ = ["MIN_TOKEN_CHARS", "TOKEN_ENV", "allowed_hosts", "host_allowed", "is_loopback", "parse_address",
           "read_token", "token_required", "tokens_match"]

#: The environment variable a token can come from instead of a file.
TOKEN_ENV = "HARNESS_MEM_MCP_TOKEN"
#: A token shorter than this is refused: it could be guessed.
MIN_TOKEN_CHARS = 16


def parse_address(text: str, option: str = "--http") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as its parts; a bad one is a one-line error."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInputError(f"{option} takes HOST:PORT (like 127.0.0.1:8765), not {text[:60]!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(token_file: Path | None, env: str = TOKEN_ENV) -> str | None:
    """The token from ``token_file`` or the variable ``env`` (None when neither gives one)."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"cannot read the token file {str(token_file)[:200]}: {type(exc).__name__}") from None
    else:
        token = os.environ.get(env, "").strip()
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise InvalidInputError(f"the token must be at least {MIN_TOKEN_CHARS} characters with no spaces"
                                " (for one: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token


def token_required(host: str, token: str | None, env: str = TOKEN_ENV) -> None:
    """Refuse to serve ``host`` without a token when it is not loopback (one line saying how to give one)."""
    if token is None and not is_loopback(host):
        raise InvalidInputError(f"serving on {host}, which is not loopback, needs a token; give --token-file FILE"
                                f" or set ${env}")


def tokens_match(given: bytes | str, expected: bytes | str) -> bool:
    """``given`` is ``expected``, found in a time that says nothing about how much of it matched."""
    as_bytes = [value.encode() if isinstance(value, str) else value for value in (given, expected)]
    return hmac.compare_digest(as_bytes[0], as_bytes[1])


def allowed_hosts(host: str) -> list[str]:
    """The Host header values a loopback server bound to ``host`` answers: that address in each way a
    client may write it, and ``localhost`` (a page cannot send either: a browser sends its own name),
    each alone and as ``NAME:*`` (any port)."""
    names = {host, "localhost"}
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # localhost: it resolves to either loopback address
        names |= {"127.0.0.1", "::1"}
    else:
        names |= {address.compressed, address.exploded}
    written = {f"[{name}]" if ":" in name else name for name in names}
    return sorted(written | {f"{name}:*" for name in written})


def host_allowed(header: str, host: str, port: int) -> bool:
    """Whether a request's Host header names the loopback server bound to ``host:port``: one of
    :func:`allowed_hosts` with exactly that port (or none, as a client may leave out port 80)."""
    names = {name for name in allowed_hosts(host) if not name.endswith(":*")}
    return header in {f"{name}:{port}" for name in names} or (port == 80 and header in names)
