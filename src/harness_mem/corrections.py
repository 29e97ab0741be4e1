"""Memory that changes without losing its history: remember, supersede, forget, purge.

Nothing is overwritten in place. A correction is a new entry; the old one stays, pointing at it
(``superseded_by``), and recall hides it unless asked. Forgetting leaves a tombstone: the entry's
keyword and vector rows go at once, so recall can never return it, and :func:`purge` later removes
its content from the file itself (with ``secure_delete``, an FTS5 merge and a rewrite of the file,
so the bytes are gone too, not only unreachable).

The functions here back :meth:`MemoryStore.remember`, ``supersede``, ``forget``, ``purge`` and
``history``.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .errors import InvalidInputError, NotFoundError
from .filters import Selection, make_filters
from .maintenance import purge_namespace
from .models import Entry, Remembered, now_ms
from .rows import Row, entry_from_row, prepare_row
from .storage import Scope, Storage, is_derived, write_sealed
from .sync import outbox
from .sync.forks import versions_of_forked


def normalise(content: str) -> str:
    """What remember stores and compares: Unicode NFC, without surrounding whitespace."""
    return unicodedata.normalize("NFC", content).strip() if isinstance(content, str) else content


def remember(
    storage: Storage,
    scope: Scope,
    content: str,
    *,
    kind: str | None = None,
    tags: Iterable[str] = (),
    session: str | None = None,
    role: str | None = None,
    source: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    supersedes: str | None = None,
    id: str | None = None,
    created_at: str | datetime | None = None,
    expires_at: str | datetime | None = None,
    ttl_days: float | None = None,
) -> Remembered:
    """Store ``content`` unless the namespace holds it already (same kind, same text once redacted).

    An exact duplicate writes nothing and returns the existing id with ``deduped=True``; there is
    no fuzzy merging. With ``supersedes``, the new entry replaces that one (see :func:`supersede`),
    unless it restates it: then nothing is written and that entry's id comes back, ``deduped=True``.
    ``id`` and ``created_at`` (when it became true) default to a new id and now.
    """
    item = {"content": normalise(content), "kind": kind, "tags": list(tags) if not isinstance(tags, str) else tags,
            "session": session, "role": role, "source": source, "metadata": metadata, "id": id,
            "created_at": created_at, "expires_at": expires_at, "ttl_days": ttl_days}
    row = prepare_row(item, namespace=scope.namespace, redactor=scope.redactor, sealer=scope.sealer)
    redactions = json.loads(row.redactions) if row.redactions else {}
    if supersedes is None and (found := _duplicate(storage, row)) is not None:  # the common repeat: a read only
        return Remembered(id=found, deduped=True, redactions=redactions)
    # The model runs before the write lock is taken (the first call in a process loads it); the checks
    # are made again under the lock, so the duplicate test and the correction mark stay atomic.
    vectors = storage.embed_new([row], "error")
    with storage.transaction():
        if supersedes is None:
            found = _duplicate(storage, row)
            if found is not None:
                return Remembered(id=found, deduped=True, redactions=redactions)
        else:
            old_pk = _current_pk(storage, scope, supersedes)
            old = storage.rows([old_pk])[old_pk]
            if _restates(row, old, metadata_given=metadata is not None,
                         expiry_given=expires_at is not None or ttl_days is not None):
                return Remembered(id=old.id, deduped=True, redactions=redactions)
        write_sealed(storage, scope.sealer, [row], "error", vectors)
        if supersedes is not None:
            when = now_ms()
            storage.mark_superseded(old_pk, row.id, when)
            if not is_derived(row):  # every device derives its own, and corrects it there
                outbox.log_superseded(storage, scope.namespace, old.id, row.id, when)
    return Remembered(id=row.id, deduped=False, redactions=redactions, supersedes=supersedes)


def _restates(new: Row, old: Row, *, metadata_given: bool, expiry_given: bool) -> bool:
    """True when a correction would change nothing: a version with the same text (once redacted),
    kind, role, session and tags, and no new metadata or expiry, is no version at all."""
    same = (new.content_hash, new.kind, new.role, new.session, new.tags) == \
        (old.content_hash, old.kind, old.role, old.session, old.tags)
    return same and (not metadata_given or new.metadata == old.metadata) and not expiry_given


def _duplicate(storage: Storage, row: Row) -> str | None:
    """The id of a current entry with the same namespace, kind and (redacted) content, if any."""
    return storage.duplicate_of(row.namespace, row.kind, row.content_hash, now_ms())


def supersede(storage: Storage, scope: Scope, old_id: str, new_content: str, **changes: Any) -> Remembered:
    """Correct an entry: a new entry with ``new_content`` replaces ``old_id``, which is kept and marked.

    The new entry is a version of the old one: it keeps its kind, role, session, tags, source and
    metadata unless ``changes`` gives others. So a correction of what consolidation derived still
    cites the turns it came from (``metadata.source_turns``), and is forgotten with them like the
    version it replaced: the corrected words restate what those turns said.
    """
    old = _get(storage, scope, old_id)
    defaults = {"kind": old.kind, "role": old.role, "session": old.session, "tags": old.tags,
                "source": old.source, "metadata": old.metadata or None}
    return remember(storage, scope, new_content, supersedes=old_id, **{**defaults, **changes})


def _get(storage: Storage, scope: Scope, entry_id: str) -> Entry:
    row = storage.get(scope.namespace, scope.key(entry_id) or entry_id, now_ms())
    if row is None:
        raise NotFoundError(
            f"no entry with id {entry_id!r} in namespace {scope.namespace!r} — `harness-mem list` shows the ids"
        )
    return entry_from_row(row)


def _current_pk(storage: Storage, scope: Scope, entry_id: str) -> int:
    """The pk of a live entry that nothing has replaced yet (what a correction may replace)."""
    found = storage.current(scope.namespace, scope.key(entry_id) or entry_id)
    if found is None:
        raise NotFoundError(f"no entry with id {entry_id!r} in namespace {scope.namespace!r}")
    if found[1] is not None:
        raise InvalidInputError(f"entry {entry_id!r} was already superseded by {found[1]!r} — correct that one")
    return found[0]


def forget(
    storage: Storage,
    scope: Scope,
    id: str | None = None,
    *,
    session: str | None = None,
    tags: Sequence[str] | str = (),
    kind: str | Sequence[str] | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
) -> int:
    """Tombstone the entry ``id``, or every entry matching the filters (all versions); returns how many.

    Recall, get and list never return a forgotten entry again; its keyword and vector rows are
    removed now, its content at the next :func:`purge`. Whatever cites a forgotten entry in
    ``metadata.source_turns`` (consolidation's segments, facts and episodes) is forgotten with it
    (and counted), even when it cites other entries too: it quotes the forgotten words. An episode
    forgotten so is built again by the next consolidation, from the turns that remain.
    """
    filters = make_filters(kind=kind, session=scope.key(session), tags=scope.tags(tags), since=since, until=until,
                           include_superseded=True)
    if id is None and filters.is_empty:
        raise InvalidInputError("forget needs an id or a filter (session, tags, kind, since, until)")
    selection = Selection(filters, scope.namespace, now_ms(), live=False)
    with storage.transaction():
        pks = storage.pks(selection, entry_id=None if id is None else scope.key(id) or id)
        if id is not None and not pks:
            raise NotFoundError(f"no entry with id {id!r} in namespace {scope.namespace!r}")
        pks = [*pks, *versions_of_forked(storage, pks)]  # an id added apart: every version written under it
        when = now_ms()
        if outbox.device(storage) is not None:  # the store syncs: its other devices forget them too
            said = [row.id for row in storage.rows(pks).values() if not is_derived(row)]
            selector = None if id is not None else filters.model_dump(mode="json", exclude_defaults=True,
                                                                      exclude={"include_superseded"})
            outbox.log_forgotten(storage, scope.namespace, said, selector, when)
        return forget_entries(storage, pks, when)


def forget_entries(storage: Storage, pks: Sequence[int], when: int) -> int:
    """Tombstone these entries and everything derived from them (inside a transaction); returns how many.

    What is derived quotes their words, so it goes too; an episode forgotten so is built again by the
    next consolidation, from the turns that remain (one forgotten itself is not).
    """
    pks = [*pks, *versions_of_forked(storage, pks)]
    reached = _derived_closure(storage, pks) - set(pks)
    storage.forget(sorted({*pks, *reached}), when)
    if reached:
        storage.rebuild_episodes(sorted(reached))
    return len(pks) + len(reached)


def would_forget(storage: Storage, scope: Scope, entry_id: str) -> list[Entry]:
    """What forgetting ``entry_id`` with all its versions would take, oldest first: the versions and
    everything derived from them (as :func:`forget` reaches it), read and nothing written."""
    chain = history(storage, scope, entry_id)
    pks = [pk for pk in (storage.pk_of(scope.namespace, entry.id) for entry in chain) if pk is not None]
    rows = storage.rows(sorted(_derived_closure(storage, pks)))
    return sorted((entry_from_row(row) for row in rows.values()), key=lambda entry: entry.created_at)


def _derived_closure(storage: Storage, pks: Sequence[int]) -> set[int]:
    """These entries with everything derived from them, and from what was derived from them: each holds
    their words (a segment, a fact or an episode quotes its turns), so it goes with them."""
    seen = set(pks)
    frontier = list(pks)
    while frontier:
        frontier = [pk for pk in storage.derived_from(frontier) if pk not in seen]
        seen.update(frontier)
    return seen


def purge(storage: Storage, scope: Scope) -> int:
    """Remove forgotten and expired entries of this namespace from the store; returns how many went.

    Deleted rows are zeroed, the keyword index is merged so that no deleted term survives in it,
    the store is rewritten (SQLite's page rebuilding leaves old copies of rows in the unused middle
    of live pages, which only a rewrite removes), and the write-ahead log is emptied: the text is
    gone from the file's bytes, not only from its tables. The rewrite needs free disk space as
    large as the file.
    """
    return purge_namespace(storage, scope.namespace)  # batched, with the pending purge on record


def history(storage: Storage, scope: Scope, entry_id: str) -> list[Entry]:
    """The correction chain ``entry_id`` belongs to, oldest first (one entry when never corrected)."""
    entry = _get(storage, scope, entry_id)
    chain = [entry]
    seen = {entry.id}
    while True:  # back: the entries each one replaced
        before = storage.kept(scope.namespace, superseded_by=chain[0].id)
        if before is None or before.id in seen:
            break
        chain.insert(0, entry_from_row(before))
        seen.add(before.id)
    while chain[-1].superseded_by and chain[-1].superseded_by not in seen:  # forward: what replaced it
        after = storage.kept(scope.namespace, entry_id=chain[-1].superseded_by)
        if after is None:
            break
        chain.append(entry_from_row(after))
        seen.add(after.id)
    return chain
