"""How PostgreSQL's keyword index stores an entry's tokens: each as a ``tsvector`` lexeme with its
positions, within the limits of a lexeme, so that it holds, finds and counts what FTS5 does.

Used by the engine (:mod:`.postgres`) and by the worker processes that make an import's literals
(:mod:`.postgres_tokens`), which import this module alone.
"""

from __future__ import annotations

from hashlib import blake2b

from ..bm25 import index_tokens, term_tokens

__all__ = ["MAX_POSITION", "MAX_POSITIONS", "index_positions", "query_tokens", "stored_prefix", "stored_token",
           "tsvector_literal"]

#: A lexeme keeps at most this many positions, each at most this large (PostgreSQL's limits).
MAX_POSITIONS = 255
MAX_POSITION = 16383
# A lexeme is at most 2046 bytes; FTS5 keeps a token of any length. A longer token is stored as its
# first _LONG_HEAD bytes, "#" and a hash of the whole token (tokens are letters and digits: no real
# token has a "#"), so it is still held, found and counted as itself.
_MAX_LEXEME = 2046
_LONG_HEAD = _MAX_LEXEME - 17


def _head(token: str, size: int) -> str:
    """The longest start of ``token`` that fits in ``size`` bytes of UTF-8."""
    return token.encode()[:size].decode(errors="ignore")


def stored_token(token: str) -> str:
    """``token`` as the index stores it: itself, or for one too long for a lexeme its stand-in."""
    if len(token) * 4 <= _MAX_LEXEME or len(token.encode()) <= _MAX_LEXEME:
        return token
    return f"{_head(token, _LONG_HEAD)}#{blake2b(token.encode(), digest_size=8).hexdigest()}"


def stored_prefix(prefix: str) -> str:
    """A prefix query's token as it must start a stored one. One longer than a stand-in's head is
    cut to it, the one case where the engines may differ: it then matches every token that starts
    with those 2,029 bytes."""
    return prefix if len(prefix.encode()) <= _LONG_HEAD else _head(prefix, _LONG_HEAD)


def query_tokens(term: str) -> tuple[tuple[str, ...], bool]:
    """:func:`~harness_mem.bm25.term_tokens`, each token as the index stores it."""
    tokens, prefix = term_tokens(term)
    if not tokens:
        return tokens, prefix
    last = stored_prefix(tokens[-1]) if prefix else stored_token(tokens[-1])
    return (*map(stored_token, tokens[:-1]), last), prefix


def index_positions(text: str) -> tuple[dict[str, list[int]], int]:
    """Every position (from 1) of each stored token of ``text``'s keyword-index tokens, and how many
    tokens there are: what FTS5 keeps, without the limits of a ``tsvector``."""
    tokens = index_tokens(text)
    positions: dict[str, list[int]] = {}
    for at, token in enumerate(tokens, start=1):
        positions.setdefault(stored_token(token), []).append(at)
    return positions, len(tokens)


def tsvector_literal(text: str) -> tuple[str, int]:
    """The keyword index's tokens of ``text`` as a ``tsvector`` literal, and how many there are."""
    positions, count = index_positions(text)
    parts = []
    for token, where in positions.items():
        quoted = token.replace("\\", "\\\\").replace("'", "''") if "\\" in token or "'" in token else token
        kept = where[:MAX_POSITIONS]  # ascending, each once
        if kept[-1] > MAX_POSITION:  # those past the limit all become it, once
            kept = sorted({min(at, MAX_POSITION) for at in kept})
        parts.append(f"'{quoted}':{','.join(map(str, kept))}")
    return " ".join(parts), count
