"""The engines behind the storage seam (:mod:`harness_mem.storage`): SQLite, one file, the default.

:func:`open_storage` picks the engine for a target: a path (or ``":memory:"``) is a SQLite file.
"""

from __future__ import annotations

import os

from ..db import CACHE_SIZE_KIB
from ..storage import Storage

__all__ = ["open_storage"]


def open_storage(target: str | os.PathLike[str], *, read_only: bool = False,
                 cache_kib: int = CACHE_SIZE_KIB) -> Storage:
    """The storage at ``target``, opened (not migrated: see :meth:`Storage.migrate`)."""
    from .sqlite import SQLiteStorage

    return SQLiteStorage(target, read_only=read_only, cache_kib=cache_kib)
