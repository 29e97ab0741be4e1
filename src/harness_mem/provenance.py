"""How it learnt that: the turns a derived entry (a summary, a fact, an episode) was drawn from.

Consolidation records them in ``metadata.source_turns``; ``harness-mem get`` and the memory browser
show them under the entry, in the words that were said.
"""

from __future__ import annotations

from .models import Entry
from .store import MemoryStore

__all__ = ["SHOWN_SOURCES", "cited_ids", "cited_turns"]

#: The most source turns shown under a derived entry.
SHOWN_SOURCES = 10


def cited_ids(entry: Entry) -> list[str]:
    """The ids of the turns ``entry`` records it was drawn from (none for a turn or a note)."""
    cited = entry.metadata.get("source_turns")
    return [str(turn_id) for turn_id in cited] if isinstance(cited, list) else []


def cited_turns(store: MemoryStore, entry: Entry, limit: int = SHOWN_SOURCES) -> list[Entry]:
    """The turns ``entry`` cites, those still there, at most ``limit``."""
    return store.get_many(cited_ids(entry)[:limit])  # one read, not one a turn
