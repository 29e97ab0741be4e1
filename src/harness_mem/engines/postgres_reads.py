"""What a recall on PostgreSQL asks before its snapshot, and how it is asked without a round trip.

Before it ranks, a recall asks a few things its statements depend on: which of its namespaces hold
derived entries (a second keyword lane), which speakers the question names, and whether every
entry has a vector (the data version tells it when to count those again); with them, how far its
vector search need read (whether its namespaces hold nearly every vector, whether any entry keeps
later windows: never checked, as they change no hit, only the work). Read in one statement,
they still cost a round trip of their own, as much as a tenth of a recall at 20,000 entries.

So a recall is told what the last recall of the same namespaces read, and the same statement goes
with its snapshot's first round trip: what was so in the view the recall read. If anything the
recall was told differs from that, the recall runs again on what is so (:class:`Guess`). These
change only when consolidation first derives into a namespace, a new speaker is heard, or entries
come without vectors: a recall runs twice that once, and every other recall is one round trip
shorter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..storage import DERIVED_SOURCE

# The store's data version: the owner's own writes, and each namespace's (a confined role's count
# in its namespaces' rows).
DATA_VERSION = ("coalesce((SELECT value::bigint FROM settings WHERE key = 'data.version'), 0)"
                " + coalesce((SELECT sum(value) FROM namespace_state WHERE key = 'data.version'), 0)")

# The live entries and those of them with a vector, in every namespace this role reads: from the
# counters the triggers keep (0014, 0015: an entries counter's key is 'entries:' and [kind, role,
# redactions, forgotten]), no entry read. What reindex would embed is their difference.
LIVE_AND_EMBEDDED = ("SELECT coalesce(sum(value) FILTER (WHERE CASE WHEN key LIKE 'entries:%%'"
                     " THEN substr(key, 9)::json ->> 3 END = 'false'), 0),"
                     " coalesce(sum(value) FILTER (WHERE key = 'vectors'), 0) FROM namespace_state")


def recall_reads(passages: bool | None) -> str:
    """For the namespaces given (a text array, three times): the data version; those holding
    derived entries; every speaker each has, from the counters kept per (kind, role, ...) (a
    handful of rows a namespace, no entry read); LIVE_AND_EMBEDDED; how many of the vectors are
    these namespaces'; whether any entry keeps later windows (``passages``: whether the store has
    their table; None: not known, taken as so)."""
    kept = {True: "EXISTS (SELECT 1 FROM entry_passages)", False: "false", None: "true"}[passages]
    return (
        f"SELECT {DATA_VERSION},"
        " ARRAY(SELECT n FROM unnest(%s::text[]) n WHERE EXISTS"
        f" (SELECT 1 FROM entries WHERE namespace = n AND source = '{DERIVED_SOURCE}')),"
        " (SELECT json_agg(json_build_array(namespace, role)) FROM (SELECT DISTINCT namespace,"
        " substr(key, 9)::json ->> 1 AS role FROM namespace_state WHERE namespace = ANY(%s)"
        " AND key LIKE 'entries:%%') r WHERE role IS NOT NULL),"
        " counted.*, (SELECT coalesce(sum(value), 0) FROM namespace_state WHERE key = 'vectors'"
        " AND namespace = ANY(%s)),"
        f" {kept}"
        f" FROM ({LIVE_AND_EMBEDDED}) counted")


@dataclass(frozen=True)
class RecallReads:
    """What :func:`recall_reads` read for a recall of ``namespaces``."""

    namespaces: tuple[str, ...]
    version: int
    derived: frozenset[str]
    # Each namespace's speakers by their lower-case names (a recall asks three times; a store of
    # many conversations has hundreds).
    speakers: Mapping[str, Mapping[str, tuple[str, ...]]]
    live: int
    embedded: int
    # Read, not told (see Guess): they change how far a vector search reads, not what it finds.
    embedded_here: int
    passages: bool

    @classmethod
    def parse(cls, namespaces: Sequence[str], found: Sequence[Any]) -> RecallReads:
        speakers: dict[str, dict[str, set[str]]] = {namespace: {} for namespace in namespaces}
        for namespace, role in found[2] or ():
            speakers[namespace].setdefault(role.lower(), set()).add(role)
        return cls(tuple(namespaces), int(found[0]), frozenset(found[1]),
                   {namespace: {name: tuple(sorted(roles)) for name, roles in named.items()}
                    for namespace, named in speakers.items()},
                   int(found[3]), int(found[4]), int(found[5]), bool(found[6]))

    @staticmethod
    def params(namespaces: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
        return list(namespaces), list(namespaces), list(namespaces)

    def data_version(self) -> int:
        return self.version

    def has_derived(self, namespace: str) -> bool:
        return namespace in self.derived

    def roles_named(self, namespace: str, words: Sequence[str]) -> list[str]:
        """The speakers of ``namespace`` whose lower-case name is one of ``words`` (lower-case)."""
        named = self.speakers.get(namespace, {})
        return sorted((role for word in set(words) for role in named.get(word, ())), key=lambda role: (role.lower(), role))

    def counts(self) -> tuple[int, int]:
        """Live entries, and those of them with a vector."""
        return self.live, self.embedded

    def hold_the_vectors(self) -> bool:
        """Whether these namespaces hold nearly every vector: few of a search's nearest are
        another's."""
        return self.embedded_here * 10 >= self.embedded * 9


@dataclass
class Guess:
    """A recall told ``reads`` (what the last recall of its namespaces read): each answer it was
    given is noted, and ``truth`` is what its snapshot's first round trip read (None: it sent
    nothing)."""

    reads: RecallReads
    asked: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    truth: RecallReads | None = None

    def held(self) -> bool:
        """Whether every answer the recall was given is what its snapshot saw."""
        truth = self.truth
        if truth is None:
            return not self.asked  # told something and read nothing after: asked again to be sure
        for name, args in self.asked:
            if getattr(truth, name)(*args) == getattr(self.reads, name)(*args):
                continue
            # The version and the counts only tell a recall whether every entry has a vector (to
            # count them again, to warn): written to since, with none missing then as now, changes
            # nothing it did. Anything else it was told that is not so does.
            if name not in ("data_version", "counts") or not (_all_embedded(truth) and _all_embedded(self.reads)):
                return False
        return True


def _all_embedded(reads: RecallReads) -> bool:
    return reads.live == reads.embedded
