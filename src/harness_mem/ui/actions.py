"""What the memory browser can change, each through the operation the CLI and MCP use.

Forget, correct and add a note are the memory tools' own operations (:data:`harness_mem.tools.OPERATIONS`:
``forget``, ``update_memory``, ``remember``), run with the same argument models, checks and errors.
Purge and consolidation are the store's maintenance, as ``harness-mem purge`` and ``harness-mem
consolidate --session`` run them; they are not memory tools (a model should not purge a file), so
they stay library calls here too. Each action has a preview, which writes nothing: what the
confirmation page shows before the second POST does it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from ..models import Entry
from ..store import MemoryStore
from ..tools import Caller, ForgetResult, RememberResult, run_operation

__all__ = ["CALLER", "Consolidation", "Purged", "add_note", "consolidate_session", "correct", "forget", "preview_forget",
           "purge"]

#: How the browser runs the operations: what it writes says it came from here; text is shown whole.
CALLER = Caller(source="ui", hit_chars=None)


def forget(store: MemoryStore, entry_id: str) -> ForgetResult:
    """Forget the entry with all its versions, and what was derived from them (the ``forget`` tool)."""
    return cast(ForgetResult, run_operation(store, "forget", {"id": entry_id}, CALLER))


@dataclass(frozen=True)
class Purged:
    forgotten: int
    purged: int


def purge(store: MemoryStore, entry_id: str) -> Purged:
    """Forget the entry (as :func:`forget`), then remove every forgotten and expired entry of the
    namespace from the file, bytes included (``harness-mem purge``)."""
    done = forget(store, entry_id)
    return Purged(done.forgotten, store.purge())


def correct(store: MemoryStore, entry_id: str, content: str) -> RememberResult:
    """A new version that replaces the entry; the old one stays in its history (the ``update_memory`` tool)."""
    return cast(RememberResult, run_operation(store, "update_memory", {"id": entry_id, "content": content}, CALLER))


def add_note(store: MemoryStore, content: str, tags: list[str]) -> RememberResult:
    """A note, redacted as every write is (the ``remember`` tool)."""
    arguments: dict[str, Any] = {"content": content, "kind": "note"}
    if tags:
        arguments["tags"] = tags
    return cast(RememberResult, run_operation(store, "remember", arguments, CALLER))


@dataclass(frozen=True)
class Consolidation:
    """What consolidating one session wrote (or, as a preview, would write)."""

    described: str
    written: list[tuple[str, str]]


def consolidate_session(store: MemoryStore, session: str, *, dry_run: bool) -> Consolidation:
    """Consolidate ``session`` now, whether or not it is finished (``harness-mem consolidate --session``)."""
    from ..experience.consolidate import consolidate  # the experience package loads only for this

    report = consolidate(store, session=session, dry_run=dry_run)
    if not report.sessions:
        return Consolidation("nothing new to consolidate in this session", [])
    result = report.sessions[0]
    return Consolidation(result.describe(), [(kind, text) for kind, text in result.written()])


def preview_forget(store: MemoryStore, entry_id: str) -> list[Entry]:
    """What :func:`forget` (and so :func:`purge`) would take: the versions and what was derived from them."""
    return store.would_forget(entry_id)
