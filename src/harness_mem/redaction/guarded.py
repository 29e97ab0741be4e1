"""Redaction as wrappers around any :class:`~harness_mem.protocols.Memory`.

Two boundaries, two wrappers:

* :class:`RedactingMemory` sits where transcripts and experience are written. It scrubs the
  content, the tags, the source and every string inside the metadata, and **never drops** a write:
  a value the policy would block is only labelled, because losing a turn of a conversation is
  worse than keeping ``<MONEY>`` in it.
* :class:`GuardedMemory` sits in front of long-term memory. It refuses block-listed substrings,
  refuses what its (hygiene) policy blocks, and refuses near-duplicates of what is already stored.

A refused write is **reported**: ``add`` raises :class:`~harness_mem.errors.WriteRefusedError` (a
:class:`~harness_mem.errors.BlockedError`) whose ``reason`` is ``"blocked-substring"``,
``"policy"`` or ``"duplicate"``. Reporting success for a dropped write would let an agent's
"remember this" tool tell the user "remembered" when nothing was kept; nothing here pretends.

Near-duplicates are judged on the *redacted* text, so two notes that differ only in an e-mail
address are duplicates (both read ``<EMAIL>``). Similarity is the Jaccard index of token sets:
words of three characters or more, plus bigrams of CJK runs (Chinese text has no spaces, so
without bigrams it would never deduplicate). Candidates come from ``inner.recall(text,
recall_k)``; if recall fails the write is not treated as a duplicate (a broken index must not
block memory).

Both wrappers pass ``recall`` straight through and hand any extra keyword fields to
``inner.add`` unchanged; ids, kinds, roles, sessions and namespaces are identifiers and are not
scrubbed (a session id rewritten to ``<PHONE>`` would break session grouping).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import InvalidInputError, WriteRefusedError
from ..keyword import CJK_RUN
from ..models import Entry, Hit
from ..protocols import Memory
from .policy import Action
from .redactor import Redactor

__all__ = ["GuardedMemory", "RedactingMemory", "jaccard", "similarity_tokens"]

logger = logging.getLogger(__name__)

_WORD = re.compile(r"\w+")
_MIN_WORD = 3  # shorter words ("is", "of", "我们" is handled as a bigram) carry no signal


def similarity_tokens(text: str) -> frozenset[str]:
    """Lower-cased words of three characters or more, plus the bigrams of every CJK run."""
    tokens: set[str] = set()
    for part in CJK_RUN.split(text):
        tokens.update(word.lower() for word in _WORD.findall(part) if len(word) >= _MIN_WORD)
    for run in CJK_RUN.findall(text):
        if len(run) == 1:
            tokens.add(run)
        else:
            tokens.update(run[i : i + 2] for i in range(len(run) - 1))
    return frozenset(tokens)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets are not similar (0.0)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _merge(total: dict[str, int], counts: Mapping[str, int]) -> None:
    for kind, n in counts.items():
        total[kind] = total.get(kind, 0) + n


def _scrub_fields(
    redactor: Redactor, fields: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, int], bool]:
    """``fields`` with tags, source and metadata scrubbed; plus the counts and the blocked flag."""
    out = dict(fields)
    counts: dict[str, int] = {}
    blocked = False
    for name in ("tags", "source", "metadata"):
        if out.get(name) is None:
            continue
        value, found, was_blocked = redactor.scrub_value(out[name])
        out[name] = value
        _merge(counts, found)
        blocked = blocked or was_blocked
    return out, counts, blocked


def _with_counts(fields: dict[str, Any], key: str | None, counts: Mapping[str, int]) -> dict[str, Any]:
    """Record the per-kind counts under ``metadata[key]`` when asked to and there are any."""
    if key is None or not counts:
        return fields
    metadata = fields.get("metadata")
    if metadata is None:
        metadata = {}
    if isinstance(metadata, Mapping):
        fields["metadata"] = {**metadata, key: dict(sorted(counts.items()))}
    return fields


def _strings(value: Any) -> Iterator[str]:
    """Every string inside ``value`` (dict keys and values, list and tuple items), depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _strings(item)


class RedactingMemory:
    """Scrubs every write with ``redactor`` (default policy) and never drops one.

    :param inner: the memory that stores the redacted entries.
    :param redactor: defaults to :meth:`Redactor.default` (money kept, nothing blocked). With a
        blocking policy, blocked values are labelled and the write still goes through.
    :param counts_key: when set, the per-kind counts of what was redacted are stored in
        ``metadata[counts_key]`` (kinds and numbers only).
    """

    def __init__(
        self, inner: Memory, redactor: Redactor | None = None, *, counts_key: str | None = None
    ) -> None:
        self.inner = inner
        self.redactor = redactor if redactor is not None else Redactor.default()
        self.counts_key = counts_key

    def __repr__(self) -> str:
        return f"RedactingMemory({self.inner!r}, {self.redactor!r})"

    def add(self, content: str, **fields: Any) -> Entry:
        """Store the redacted ``content`` (tags, source and metadata redacted too)."""
        red = self.redactor.scrub(content)
        scrubbed, counts, _blocked = _scrub_fields(self.redactor, fields)
        _merge(counts, red.counts)
        return self.inner.add(red.text, **_with_counts(scrubbed, self.counts_key, counts))

    def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
        """Passed through to the inner memory."""
        return self.inner.recall(query, k, **filters)


class GuardedMemory:
    """Long-term memory's gatekeeper: scrub, refuse what must not be kept, refuse duplicates.

    :param inner: the memory that stores accepted entries.
    :param redactor: defaults to :meth:`Redactor.hygiene` (money and secrets block the write).
    :param blocked_substrings: text that must never be stored (compared case-insensitively against
        the raw content, tags, source and metadata strings): project code names, customer names.
    :param dedup_threshold: Jaccard similarity at or above which a write is a duplicate of a
        recalled entry; None turns deduplication off.
    :param recall_k: how many entries to recall as duplicate candidates.
    :param counts_key: as for :class:`RedactingMemory`.

    ``add`` raises :class:`~harness_mem.errors.WriteRefusedError` when it stores nothing.
    """

    def __init__(
        self,
        inner: Memory,
        redactor: Redactor | None = None,
        blocked_substrings: Iterable[str] = (),
        dedup_threshold: float | None = 0.6,
        recall_k: int = 5,
        *,
        counts_key: str | None = None,
    ) -> None:
        if dedup_threshold is not None and not 0.0 < dedup_threshold <= 1.0:
            raise InvalidInputError(
                f"dedup_threshold must be in (0, 1], got {dedup_threshold!r} — use None to turn dedup off"
            )
        if recall_k < 1:
            raise InvalidInputError(f"recall_k must be at least 1, got {recall_k!r}")
        if isinstance(blocked_substrings, str):
            blocked_substrings = (blocked_substrings,)
        self.inner = inner
        self.redactor = redactor if redactor is not None else Redactor.hygiene()
        # casefold, not lower: "STRASSE" must match "straße".
        self.blocked_substrings: tuple[str, ...] = tuple(s.casefold() for s in blocked_substrings if s)
        self.dedup_threshold = dedup_threshold
        self.recall_k = recall_k
        self.counts_key = counts_key

    def __repr__(self) -> str:
        return (
            f"GuardedMemory({self.inner!r}, {self.redactor!r}, blocked_substrings=<{len(self.blocked_substrings)}>, "
            f"dedup_threshold={self.dedup_threshold!r}, recall_k={self.recall_k!r})"
        )

    def add(self, content: str, **fields: Any) -> Entry:
        """Store the redacted ``content``, or raise :class:`WriteRefusedError` saying why not."""
        listed = self._blocked_substring(content, fields)
        if listed is not None:
            # The message names the list position, not the text: the list itself may be sensitive.
            raise WriteRefusedError(
                f"not stored: the text contains entry #{listed + 1} of the block list — "
                "remove it from the text (or from GuardedMemory(blocked_substrings=...))",
                reason="blocked-substring",
            )

        red = self.redactor.scrub(content)
        scrubbed, counts, fields_blocked = _scrub_fields(self.redactor, fields)
        _merge(counts, red.counts)
        if red.blocked or fields_blocked:
            policy = self.redactor.policy
            blocking = {kind: n for kind, n in counts.items() if policy.action_for(kind) is Action.BLOCK}
            kinds = ", ".join(f"{kind} ({n})" for kind, n in sorted(blocking.items()))
            raise WriteRefusedError(
                f"not stored: the {policy.name} policy keeps {kinds} out of long-term memory — "
                "remove it, or record it through RedactingMemory (transcripts) instead",
                reason="policy",
                counts=blocking,
            )

        duplicate = self._duplicate_of(red.text, scrubbed)
        if duplicate is not None:
            entry, score = duplicate
            raise WriteRefusedError(
                f"not stored: a near-duplicate of entry {entry.id} is already stored "
                f"(similarity {score:.2f} ≥ {self.dedup_threshold})",
                reason="duplicate",
                duplicate_of=entry.id,
            )
        return self.inner.add(red.text, **_with_counts(scrubbed, self.counts_key, counts))

    def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
        """Passed through to the inner memory."""
        return self.inner.recall(query, k, **filters)

    def _blocked_substring(self, content: str, fields: Mapping[str, Any]) -> int | None:
        """The index of the first block-list entry found in the content or text fields."""
        if not self.blocked_substrings:
            return None
        texts = [content, *(s for name in ("tags", "source", "metadata") for s in _strings(fields.get(name)))]
        folded = "\n".join(texts).casefold()
        for i, needle in enumerate(self.blocked_substrings):
            if needle in folded:
                return i
        return None

    def _duplicate_of(self, text: str, fields: Mapping[str, Any]) -> tuple[Entry, float] | None:
        """The most similar recalled entry when it reaches the threshold."""
        if self.dedup_threshold is None:
            return None
        tokens = similarity_tokens(text)
        if not tokens:
            return None
        # Duplicates are looked for where the entry would go: its namespace, nowhere else.
        scope = {"namespace": fields["namespace"]} if fields.get("namespace") is not None else {}
        try:
            hits = self.inner.recall(text, self.recall_k, **scope)
        except Exception as exc:  # a failing index must not block memory: treat as "no duplicate"
            logger.warning("duplicate check skipped, recall failed: %s", exc)
            return None
        best: tuple[Entry, float] | None = None
        for hit in hits:
            score = jaccard(tokens, similarity_tokens(hit.entry.content))
            if score >= self.dedup_threshold and (best is None or score > best[1]):
                best = (hit.entry, score)
        return best
