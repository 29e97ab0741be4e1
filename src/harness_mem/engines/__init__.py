"""The engines behind the storage seam (:mod:`harness_mem.storage`): SQLite, one file, the default.

:func:`open_storage` picks the engine for a target: a path (or ``":memory:"``) is a SQLite file.
"""

from __future__ import annotations

import os

from ..db import CACHE_SIZE_KIB
from ..settings import is_server_url
from ..storage import Storage

__all__ = ["is_url", "open_storage", "shown_location"]

is_url = is_server_url


def shown_location(target: str | os.PathLike[str]) -> str:
    """``target`` as it may be printed: a path as it is, a URL without its password."""
    if is_url(target):
        from .postgres import safe_location

        return safe_location(str(target))
    return str(target)


def open_storage(target: str | os.PathLike[str], *, read_only: bool = False,
                 cache_kib: int = CACHE_SIZE_KIB) -> Storage:
    """The storage at ``target``, opened (not migrated: see :meth:`Storage.migrate`)."""
    if is_url(target):
        from .postgres import PostgresStorage

        return PostgresStorage(str(target), read_only=read_only)
    from .sqlite import SQLiteStorage

    return SQLiteStorage(target, read_only=read_only, cache_kib=cache_kib)
