"""Promotion: a memory moved into another namespace — a team's shared space — whole.

What one agent learnt in its private namespace becomes the team's with ``harness-mem promote ID
--to NAMESPACE``: the entry moves, and with it what makes it a memory rather than a line of text —
its history (the versions it corrected, and any correction of it: the whole chain) and its sources
(the turns a derived fact or summary cites). Each keeps its id, times, vectors and sealed identity
values (sealed again for the new namespace: a sealed value opens only in its own). Nothing is
copied: the private namespace no longer holds them.

The move is refused, before anything changes, when an id is already taken in the target. On
PostgreSQL the database also checks the role may write both namespaces (row-level security).

A store that syncs refuses it too: its log names each entry by namespace and id, and a move cannot be
ordered against what other devices do meanwhile to the entries where they were (a correction made
there would land in the old namespace, a forget there would miss them), so devices would disagree.
"""

from __future__ import annotations

from collections.abc import Iterable

from .corrections import history
from .errors import InvalidInputError
from .identities import Identities, identity_values_in_use
from .rows import Row
from .sessions import cited_turns
from .storage import Scope, Storage
from .sync import outbox


def promote(storage: Storage, scope: Scope, identities: Identities | None, entry_id: str, target: str) -> list[str]:
    """Move the entry ``entry_id`` of ``scope``'s namespace into ``target`` (as stored) with its
    history and sources; returns the ids moved (as stored), the entry's chain first, oldest first."""
    if target == scope.namespace:
        raise InvalidInputError(f"the entry is in namespace {target!r} already — promote moves it to another")
    if outbox.device(storage) is not None:
        raise InvalidInputError("this store syncs, and a move to another namespace does not travel to its other"
                                " devices (they would keep the entries where they were) — nothing was moved")
    chain = history(storage, scope, entry_id)
    ids = list(dict.fromkeys([*(e.id for e in chain), *(turn for e in chain for turn in cited_turns(e))]))
    pks = {entry: pk for entry in ids if (pk := storage.pk_of(scope.namespace, entry)) is not None}
    with storage.transaction():
        taken = [entry for entry in pks if storage.pk_of(target, entry) is not None]
        if taken:
            raise InvalidInputError(f"namespace {target!r} has an entry with id {taken[0]!r} already — nothing was"
                                    " moved; forget or delete one of the two first")
        rows = storage.rows(list(pks.values()))
        sealed = storage.sealed_identities(scope.namespace, sorted(_identity_values(rows.values())))
        if sealed:
            if identities is None:
                raise InvalidInputError("these entries hold identity values sealed in the store, and this handle"
                                        " keeps no identity key — open it with its key to move them")
            storage.seal_identities(target, identities.resealed(target, sealed))
        storage.move(list(pks.values()), target)
    return list(pks)


def _identity_values(rows: Iterable[Row]) -> set[str]:
    """The stored identity values the rows hold (ids, roles, sessions, tags, metadata pseudonyms)."""
    return {value for _, value in identity_values_in_use(
        (row.namespace, row.id, row.role, row.session, row.tags, row.superseded_by, row.metadata) for row in rows)}
