"""How it learnt that: the turns a derived entry (a summary, a fact, an episode) was drawn from.

Consolidation records them in ``metadata.source_turns``; ``harness-mem get`` and the memory browser
show them under the entry, in the words that were said.
"""

from __future__ import annotations

from .models import Entry
from .store import MemoryStore

__all__ = ["SHOWN_SOURCES", "cited_turns"]

#: The most source turns shown under a derived entry.
SHOWN_SOURCES = 10


def cited_turns(store: MemoryStore, entry: Entry, limit: int = SHOWN_SOURCES) -> list[Entry]:
    """The turns ``entry`` cites, those still there, at most ``limit``."""
    cited = entry.metadata.get("source_turns")
    if not isinstance(cited, list):
        return []
    return store.get_many([str(turn_id) for turn_id in cited[:limit]])  # one read, not one a turn
