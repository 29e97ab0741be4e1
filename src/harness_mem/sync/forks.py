"""Forks: one entry changed apart on two devices, settled the same way on every device.

Two kinds, each with one current version that every device computes from the operations alone:

- **corrected apart**: two supersedes of one entry. The successor with the latest
  ``(valid_from, clock, device)`` is current; the others are kept, superseded by it.
- **added apart**: two adds of one id with other words (two machines import the same note id, a
  fact whose id comes from its words consolidated otherwise). The add with the latest
  ``(time written, clock, device)`` holds the id; each other version is kept as history under
  ``<id>~fork-<its words' hash>``, superseded by the id, so ``history`` and ``get`` show it.

Forgetting an id forgets every version written under it (:func:`versions_of_forked`): the versions
are one entry's, and a forget that reached only one would leave devices that learnt of the versions
in another order holding different ones.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..rows import Row
from ..storage import Storage
from .operations import FORK_MARK, AddBody, Operation, SupersedeBody, parse_operation


@dataclass(frozen=True)
class Fork:
    """One entry changed apart: its versions, the current one first."""

    namespace: str
    entry_id: str  # the entry corrected apart, or the id added apart
    versions: list[str]  # the current version first
    added: bool  # True: added apart (the other versions are ``<id>~fork-…``)


def fork_id(entry_id: str, content_hash: str) -> str:
    """The id a version that lost a fork of ``entry_id`` is kept under (the same on every device)."""
    return f"{entry_id}{FORK_MARK}{content_hash.rpartition(':')[2][:12]}"


def forked_from(row: Row) -> str | None:
    """The id a row is a kept version of, when it is one (None: it is an entry of its own)."""
    root, mark, _ = row.id.rpartition(FORK_MARK)
    return root if mark and row.superseded_by == root else None


def correction_precedence(op: Operation) -> tuple[int, tuple[int, int], str]:
    """How successors of one entry rank: the latest ``valid_from``, then clock, then device, is current."""
    assert isinstance(op.body, SupersedeBody)
    return op.body.valid_from, op.stamp, op.device


def add_precedence(op: Operation) -> tuple[int, tuple[int, int], str]:
    """How adds of one id rank: the latest written, then clock, then device, holds the id."""
    assert isinstance(op.body, AddBody)
    entry = op.body.entry
    return entry.updated_at if entry.updated_at is not None else entry.created_at, op.stamp, op.device


def versions_of_forked(storage: Storage, pks: Sequence[int]) -> list[int]:
    """The other versions of any forked id among these entries: those kept under ``<id>~fork-…`` of
    an entry given, and the entry holding the id of a kept version given (live ones)."""
    rows = storage.rows(list(pks))
    found: set[int] = set()
    for namespace in {row.namespace for row in rows.values()}:
        mine = [row for row in rows.values() if row.namespace == namespace]
        roots = {forked_from(row) or row.id for row in mine}
        kept = [(pk, entry_id, by) for pk, entry_id, by in storage.replaced_by(namespace, sorted(roots))
                if entry_id.startswith(by + FORK_MARK)]
        found.update(pk for pk, _, _ in kept)
        for root in {by for _, _, by in kept} | {r for row in mine if (r := forked_from(row)) is not None}:
            if (pk := storage.pk_of(namespace, root)) is not None:
                found.add(pk)
    return sorted(found - set(pks))


def forks(storage: Storage) -> list[Fork]:
    """Every fork this store holds: entries corrected apart (from the logged supersedes) and ids added
    apart (those with a kept version), each with its current version first."""
    by_old: dict[tuple[str, str], list[Operation]] = {}
    after = 0
    while rows := storage.logged_operations(after, 10_000):
        for seq, _, text in rows:
            after = seq
            if text is not None and '"op":"supersede"' in text:
                op = parse_operation(json.loads(text))
                by_old.setdefault((op.ns, str(op.id)), []).append(op)
    found = []
    for (namespace, old_id), successors in by_old.items():
        ranked = sorted(successors, key=correction_precedence, reverse=True)
        ordered = list(dict.fromkeys(s.body.new_id for s in ranked if isinstance(s.body, SupersedeBody)))
        if len(ordered) > 1:
            found.append(Fork(namespace, old_id, ordered, added=False))
    for namespace, entry_id in storage.added_twice():
        kept = sorted(fork for _, fork, by in storage.replaced_by(namespace, [entry_id])
                      if fork.startswith(by + FORK_MARK))
        if kept:
            found.append(Fork(namespace, entry_id, [entry_id, *kept], added=True))
    return found


def forks_of(storage: Storage, namespace: str, entry_id: str) -> list[Fork]:
    """The forks an entry is part of: as the entry corrected apart, one of its successors, or a
    version of an id added apart."""
    ids = {entry_id}
    if (pk := storage.pk_of(namespace, entry_id)) is not None:
        row = storage.rows([pk])[pk]
        ids.add(forked_from(row) or entry_id)
    found = []
    supersedes = [parse_operation(json.loads(text)) for text in storage.logged_supersedes(namespace, sorted(ids))]
    for old_id in dict.fromkeys(str(op.id) for op in supersedes):
        successors = [parse_operation(json.loads(text)) for text in storage.logged_supersedes(namespace, [old_id])]
        ranked = sorted((s for s in successors if str(s.id) == old_id), key=correction_precedence, reverse=True)
        ordered = list(dict.fromkeys(s.body.new_id for s in ranked if isinstance(s.body, SupersedeBody)))
        if len(ordered) > 1:
            found.append(Fork(namespace, old_id, ordered, added=False))
    for root in sorted(ids):
        kept = sorted(fork for _, fork, by in storage.replaced_by(namespace, [root]) if fork.startswith(by + FORK_MARK))
        if kept:
            found.append(Fork(namespace, root, [root, *kept], added=True))
    return found
