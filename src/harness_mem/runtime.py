"""Where the hook processes keep their private files: writers' sockets, locks, what a session was given.

One directory per user that no one else may enter: ``$HARNESS_MEM_RUNTIME_DIR``, else
``$XDG_RUNTIME_DIR/harness-mem``, else ``harness-mem-UID`` in the temporary directory. Every hook
reaches it, so this module imports only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import stat

__all__ = ["RUNTIME_DIR_ENV", "is_private", "make_private_dir", "runtime_dir"]

RUNTIME_DIR_ENV = "HARNESS_MEM_RUNTIME_DIR"


def runtime_dir() -> str:
    """The directory the writers' sockets live in (it need not exist yet)."""
    chosen = os.environ.get(RUNTIME_DIR_ENV)
    if chosen:
        return chosen
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return os.path.join(xdg, "harness-mem")
    import tempfile  # only here: most hooks never need it

    return os.path.join(tempfile.gettempdir(), f"harness-mem-{os.getuid()}")


def is_private(directory: str) -> bool:
    """True when ``directory`` is a real directory of this user that no one else may enter."""
    try:
        info = os.lstat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def make_private_dir(directory: str) -> bool:
    """Create ``directory`` (mode 0700) unless it exists; True when it is private (see :func:`is_private`)."""
    with contextlib.suppress(OSError):
        os.mkdir(directory, 0o700)
    return is_private(directory)
