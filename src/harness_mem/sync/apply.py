"""Applying another device's operations: the store becomes a function of the set of operations.

Each chunk is applied in one transaction, with its operations logged (so a replay is skipped) and the
chunk recorded as read: killed at any point, a store holds whole chunks or none of one. Whatever
order chunks arrive in, two stores holding the same operations hold the same entries:

- an ``add`` is written unless a forget stamped after it names it or selects it; an id added with
  other words on two devices holds its latest add everywhere, the other words kept as its history
  (:mod:`~harness_mem.sync.forks`);
- a ``supersede`` makes the latest successor of an entry current, by ``(valid_from, stamp, device)``,
  whatever order the successors arrived in; the others are kept as superseded by it;
- a ``forget`` forgets the entries it names and those its selector matches that were added before
  it, with everything derived from them;
- an ``expiry`` sets a renewed time to live, the latest renewal winning;
- a ``tag`` sets an entry's tags changed in place, the latest retag winning.

What is derived (keyword and vector indexes) is built here as each entry is written; consolidation's
own entries never travel: the next ``consolidate`` here derives them from the turns that came.
Incoming text passes this store's redactor too: a device that stores raw text cannot make this one.
"""

from __future__ import annotations

import base64
import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..corrections import forget_entries
from ..errors import InvalidInputError
from ..filters import Filters, Selection
from ..identities import SealedIdentity
from ..models import content_hash, dumps, now_ms, to_ms
from ..redaction import Redactor
from ..rows import Row
from ..storage import Storage, Vectors
from .forks import add_precedence, correction_precedence, fork_id
from .incoming import Scrubbed, scrub_all, scrub_one
from .operations import (
    FORK_MARK,
    AddBody,
    ExpiryBody,
    ForgetBody,
    Operation,
    SupersedeBody,
    TagBody,
    parse_operation,
)


@dataclass
class Applied:
    """What applying did, counted."""

    applied: int = 0
    skipped: int = 0  # already held
    forks: int = 0
    forgotten: int = 0
    refused: list[str] = field(default_factory=list)  # one line each: an operation for a namespace not ours


def apply_chunk(storage: Storage, operations: Sequence[Operation], *, device: str, chunk: str,
                redactor: Redactor | None, counts: Applied) -> None:
    """Apply one chunk of ``device`` in one transaction, and record it as read.

    Consecutive adds are written as one batch (as an import writes them); every other operation is
    applied on its own, after the adds before it.
    """
    known = storage.known_operations([op.hash for op in operations])
    todo = [op for op in operations if op.hash not in known]
    incoming = [op for op in todo if op.op == "add"]
    scrubbed = None if redactor is None else scrub_all(redactor, [op.body.entry.content for op in incoming])  # type: ignore[union-attr]
    rows = {op.hash: _row(op, redactor, None if scrubbed is None else scrubbed[n]) for n, op in enumerate(incoming)}
    vectors = storage.embed_new(list(rows.values()), "ignore")  # the model runs before the write lock
    with storage.transaction():
        known = storage.known_operations([op.hash for op in todo])  # another process may have applied some
        counts.skipped += len(operations) - len(todo) + len(known)
        adds: list[Operation] = []
        for op in todo:
            if op.hash in known:
                continue
            if storage.writable_to is not None and op.ns not in storage.writable_to:
                counts.refused.append(f"an operation for another namespace ({op.op} of {op.id})")
                continue
            if op.op == "add":
                adds.append(op)
                continue
            _add_all(storage, adds, chunk, rows, vectors, counts, redactor)
            adds = []
            if op.op == "forget":
                counts.forgotten += _forget(storage, op)
            elif op.op == "expiry":
                _expiry(storage, op)
            storage.log_operations([op], chunk=chunk)
            if op.op == "supersede":
                _settle(storage, op.ns, [str(op.id)])
            elif isinstance(op.body, ForgetBody):  # a forget ends a stretch: corrections either side are no rivals
                _settle(storage, op.ns, op.body.ids)
            elif op.op == "tag":
                _retag(storage, op.ns, [str(op.id)])
            counts.applied += 1
        _add_all(storage, adds, chunk, rows, vectors, counts, redactor)
        storage.note_chunk(device, chunk, "applied")


def _add_all(storage: Storage, adds: Sequence[Operation], chunk: str, rows: dict[str, Row], vectors: Vectors,
             counts: Applied, redactor: Redactor | None) -> None:
    """Write the entries of consecutive adds, except those a forget stamped after them reached first
    (logged by their hash alone: their words are never kept)."""
    for namespace in dict.fromkeys(op.ns for op in adds):
        mine = [op for op in adds if op.ns == namespace]
        forgotten = storage.forgotten_stamps(namespace, [str(op.id) for op in mine])
        selectors = [json.loads(text) for text in storage.selector_forgets(namespace, min(op.stamp for op in mine))]
        kept, dropped = [], []
        for op in mine:
            stamp = forgotten.get(str(op.id))
            later = [s for s in selectors if tuple(s["hlc"]) > op.stamp]
            if (stamp is not None and stamp > op.stamp) or any(_selects(s, rows[op.hash]) for s in later):
                dropped.append(op)
            else:
                kept.append(op)
        sealed = {(s.stored, s.key_id, s.sealed): None for op in kept for s in op.body.identities}  # type: ignore[union-attr]
        if sealed:
            storage.seal_identities(namespace, [SealedIdentity(stored, key_id, base64.b64decode(blob))
                                                for stored, key_id, blob in sealed])
        batch = [rows[op.hash] for op in kept]
        written = {row.id for row in storage.write(batch, "ignore", {id(r): vectors[id(r)] for r in batch if id(r) in vectors})}
        written |= _revive(storage, namespace, [op for op in kept if rows[op.hash].id not in written], rows)
        storage.log_operations(kept, chunk=chunk)
        storage.log_operations(dropped, chunk=chunk, text=False)
        for entry_id in dict.fromkeys(row.id for row in batch if row.id not in written):
            counts.forks += _settle_adds(storage, namespace, entry_id, redactor)  # the id was here: added apart?
        # A retag, a correction of, or by, an entry may have come before the entry did.
        _retag(storage, namespace, [row.id for row in batch])
        _settle(storage, namespace, [row.id for row in batch])
        counts.applied += len(mine)


def _revive(storage: Storage, namespace: str, adds: Sequence[Operation], rows: dict[str, Row]) -> set[str]:
    """Write the adds whose id is held by an entry forgotten before they were made (a forget of an id
    does not reach an add of it made later, on any device): the tombstone goes, the new entry takes
    the id. The ids written."""
    revived = []
    forgets = storage.forgotten_stamps(namespace, [str(op.id) for op in adds])
    for op in adds:
        if (pk := storage.pk_of(namespace, str(op.id))) is None:
            continue
        here = storage.rows([pk])[pk]
        # Ordered by clock where the forget is logged (a replace's forget and add share a millisecond).
        forget = forgets.get(str(op.id))
        if here.forgotten_at is not None and (here.forgotten_at < op.stamp.wall if forget is None else forget < op.stamp):
            storage.delete(namespace, here.id)
            revived.append(rows[op.hash])
    return {row.id for row in storage.write(revived, "ignore")} if revived else set()


def _row(op: Operation, redactor: Redactor | None, scrubbed: Scrubbed | None = None) -> Row:
    """The row an add writes here, its words through this store's redactor (``scrubbed``: done already)."""
    body = op.body
    assert isinstance(body, AddBody) and op.id is not None
    entry = body.entry
    content = entry.content
    redactions = entry.redactions
    if redactor is not None:
        if scrubbed is None:
            scrubbed = scrub_one(redactor, content)
        if scrubbed.blocked:
            raise InvalidInputError(f"the redaction policy here refuses entry {op.id!r} from another device")
        content = scrubbed.text
        if scrubbed.counts or redactions is None:
            redactions = {**(redactions or {})}
            for kind, n in scrubbed.counts.items():
                redactions[kind] = redactions.get(kind, 0) + n
    return Row(None, op.id, op.ns, entry.kind, content, entry.role, entry.session, dumps(entry.tags),
               entry.source, dumps(entry.metadata), entry.created_at, entry.expires_at, content_hash(content),
               None if redactions is None else dumps(redactions), updated_at=entry.updated_at, ttl_ms=entry.ttl_ms)


def _settle_adds(storage: Storage, namespace: str, entry_id: str, redactor: Redactor | None) -> int:
    """Make the id added apart hold its latest add, and keep each other version's words under
    ``<id>~fork-…``, superseded by it, from every add logged (so the order they came in does not
    matter); how many versions were kept now. An id forgotten here stays forgotten."""
    adds = [parse_operation(json.loads(text)) for _, text in storage.logged_about(namespace, entry_id, "add")
            if text is not None]
    pk = storage.pk_of(namespace, entry_id)
    if len(adds) < 2 or pk is None or (here := storage.rows([pk])[pk]).forgotten_at is not None:
        return 0
    ranked = sorted(adds, key=add_precedence, reverse=True)
    winner = _row(ranked[0], redactor)
    when = add_precedence(ranked[0])[0]
    versions: dict[str, Row] = {}  # words → the latest add of them, each other version once
    for op in ranked[1:]:
        row = _row(op, redactor)
        if row.content_hash != winner.content_hash:
            versions.setdefault(row.content_hash, row)
    if here.content_hash != winner.content_hash:  # the id holds a version that lost: it makes room
        storage.rename(pk, fork_id(entry_id, here.content_hash))
        storage.mark_superseded(pk, entry_id, when)
        storage.write([winner], "error")
        versions.pop(here.content_hash, None)
    elif _written_columns(here) != _written_columns(winner):  # its words, written apart with other columns
        _take_columns(storage, pk, here, winner)
    new = []
    for words, row in versions.items():
        if (kept := storage.pk_of(namespace, fork_id(entry_id, words))) is None:
            new.append(row._replace(id=fork_id(entry_id, words), superseded_by=entry_id, superseded_at=when))
        else:  # kept when another version held the id: superseded from the latest one's time, as everywhere
            storage.mark_superseded(kept, entry_id, when)
    storage.write(new, "error")
    return len(new) + (here.content_hash != winner.content_hash)


def _written_columns(row: Row) -> tuple[object, ...]:
    """What an add sets besides the words: two adds of the same words may differ in these."""
    return (row.kind, row.role, row.session, row.tags, row.source, row.metadata, row.created_at, row.updated_at,
            row.expires_at, row.ttl_ms, row.redactions)


def _take_columns(storage: Storage, pk: int, here: Row, winner: Row) -> None:
    """Make the entry at ``pk`` hold the winning add's columns, as if that add had come first: the row is
    written again (its session, kind and time feed its indexes), keeping its corrections; the old row
    goes under a name no logged add has, so the log keeps the words of both adds. A later retag or
    renewal of the entry still wins (the caller applies retags; the renewal is applied here)."""
    storage.rename(pk, f"{here.id}~replaced")
    storage.write([winner._replace(superseded_by=here.superseded_by, superseded_at=here.superseded_at)], "error")
    storage.delete(here.namespace, f"{here.id}~replaced")
    renewed = storage.latest_logged(here.namespace, [here.id], "expiry").get(here.id)
    if renewed is not None and isinstance(body := parse_operation(json.loads(renewed)).body, ExpiryBody):
        storage.set_expiry(here.namespace, here.id, body.expires_at)


def _retag(storage: Storage, namespace: str, entry_ids: Sequence[str]) -> None:
    """Give each entry the tags of its latest retag logged, if any (the latest stamp wins, whatever
    order the retags and the entry arrived in)."""
    for entry_id, text in storage.latest_logged(namespace, entry_ids, "tag").items():
        op = parse_operation(json.loads(text))
        if isinstance(op.body, TagBody) and (pk := storage.pk_of(namespace, entry_id)) is not None:
            storage.set_tags(pk, dumps(op.body.tags))


def _settle(storage: Storage, namespace: str, entry_ids: Sequence[str]) -> None:
    """Settle the corrections of these entries, and of those they are corrections of: each corrected
    entry's latest successor current, every other successor superseded by it, from every supersede,
    add and forget logged (so the order they and the entries arrived in does not matter). A successor
    that was itself corrected keeps its own successor.

    A correction reaches the version it was made of: corrections of an id made between two forgets
    of it (a replace is one) are rivals, those of another stretch are not; the entry under the id now
    is superseded only by corrections made after an add of it in the stretch it lives in.
    """
    olds = sorted({str(parse_operation(json.loads(text)).id) for text in storage.logged_supersedes(namespace, entry_ids)})
    if not olds:
        return
    by_old: dict[str, list[Operation]] = {}
    for text in storage.logged_supersedes(namespace, olds):  # every correction of each, not only those found
        if (op := parse_operation(json.loads(text))).id in olds:
            by_old.setdefault(str(op.id), []).append(op)
    forgets = storage.logged_stamps(namespace, list(by_old), "forget")
    adds = storage.logged_stamps(namespace, list(by_old), "add")
    for old_id, successors in by_old.items():
        ended = forgets.get(old_id, [])
        stretches: dict[int, list[Operation]] = {}  # how many forgets of the id came before → what was made then
        for successor in successors:
            stretches.setdefault(bisect.bisect(ended, successor.stamp), []).append(successor)
        now = len(ended)
        held = [stamp for stamp in adds.get(old_id, []) if bisect.bisect(ended, stamp) == now]
        every = [s.body.new_id for s in successors if isinstance(s.body, SupersedeBody)]
        reaching = None  # the correction the entry under the id now is superseded by
        for stretch, made in stretches.items():
            winner = _settle_rivals(storage, namespace, made, every)
            if stretch == now and any(stamp < max(s.stamp for s in made) for stamp in held):
                reaching = winner
        if (pk := storage.pk_of(namespace, old_id)) is not None:
            _mark(storage, pk, reaching, every)


def _settle_rivals(storage: Storage, namespace: str, made: Sequence[Operation], every: Sequence[str]) -> Operation:
    """Of the corrections made of one version, make the latest current and each other superseded by
    it (one corrected since keeps its own successor); the latest. ``every``: the ids of all the
    corrections of the entry, of every stretch."""
    winner = max(made, key=correction_precedence)
    assert isinstance(winner.body, SupersedeBody)
    rivals = list(dict.fromkeys(s.body.new_id for s in made if isinstance(s.body, SupersedeBody)))
    corrected = {str(op.id) for op in map(parse_operation, map(json.loads, storage.logged_supersedes(namespace, rivals)))
                 if op.id in rivals}
    for entry_id in rivals:
        if entry_id not in corrected and (pk := storage.pk_of(namespace, entry_id)) is not None:
            _mark(storage, pk, None if entry_id == winner.body.new_id else winner, every)
    return winner


def _mark(storage: Storage, pk: int, by: Operation | None, every: Sequence[str]) -> None:
    """Mark an entry superseded by a correction (None: by none of ``every``, the corrections of the
    entry it is one of: a mark one of them left before a forget or an add split them goes)."""
    if by is not None:
        assert isinstance(by.body, SupersedeBody)
        storage.mark_superseded(pk, by.body.new_id, by.body.valid_from)
    elif storage.rows([pk])[pk].superseded_by in every:
        storage.mark_superseded(pk, None, None)


def _forget(storage: Storage, op: Operation) -> int:
    assert isinstance(op.body, ForgetBody)
    # An id it names, unless what holds it here was added after the forget (elsewhere, before that
    # device learnt of it): the same rule as for an add arriving after the forget.
    # The latest add counts: an id held by an add made after the forget (a replace, an add apart) keeps it.
    named = storage.added_stamps(op.ns, op.body.ids, latest=True)
    pks = {pk for entry_id in op.body.ids if (pk := storage.pk_of(op.ns, entry_id)) is not None
           and (entry_id not in named or named[entry_id] < op.stamp)}
    for entry_id in (entry_id for entry_id in op.body.ids if entry_id in named and named[entry_id] > op.stamp):
        _forget_versions_before(storage, op, entry_id)
    if op.body.selector is not None:
        filters = Filters.check({**op.body.selector, "include_superseded": True})
        selected = storage.rows(storage.pks(Selection(filters, op.ns, now_ms(), live=False)))
        added = storage.added_stamps(op.ns, [row.id for row in selected.values()], latest=True)
        # Those added before the forget are what it meant; one added after it (here, or elsewhere
        # before this device learnt of it) stays.
        pks.update(pk for pk, row in selected.items() if row.id in added and added[row.id] < op.stamp)
    live = [pk for pk, row in storage.rows(sorted(pks)).items() if row.forgotten_at is None]
    return forget_entries(storage, live, op.body.at) if live else 0


def _forget_versions_before(storage: Storage, op: Operation, entry_id: str) -> None:
    """A forget of an id held here by an add made after it: what it reached goes (the words of the
    adds before it, and the versions kept of them), as where the forget came before that add."""
    assert isinstance(op.body, ForgetBody)
    later = {content_hash(later_add.body.entry.content) for stamp, text in storage.logged_about(op.ns, entry_id, "add")
             if text is not None and stamp > op.stamp
             and isinstance((later_add := parse_operation(json.loads(text))).body, AddBody)}
    kept = storage.rows([pk for pk, version, of in storage.replaced_by(op.ns, [entry_id])
                         if version.startswith(of + FORK_MARK)])
    reached = [pk for pk, row in kept.items() if row.content_hash not in later]  # words added after it stay
    if reached:
        storage.forget(reached, op.body.at)
    storage.empty_adds_before(op.ns, entry_id, op.stamp)


def _selects(operation: dict[str, Any], row: Row) -> bool:
    """Whether a forget's selector matches a row about to be added (then it is not)."""
    selector = operation["body"]["selector"]
    if selector.get("session") is not None and selector["session"] != row.session:
        return False
    kinds = selector.get("kind")
    if kinds is not None and row.kind not in ([kinds] if isinstance(kinds, str) else kinds):
        return False
    if selector.get("tags") and not set(selector["tags"]) <= set(json.loads(row.tags)):
        return False
    filters = Filters.check({**selector, "include_superseded": True})
    if filters.since is not None and row.created_at < to_ms(filters.since):
        return False
    return filters.until is None or row.created_at <= to_ms(filters.until)  # both ends included, as a filter has them


def _expiry(storage: Storage, op: Operation) -> None:
    assert isinstance(op.body, ExpiryBody) and op.id is not None
    latest = max((stamp for stamp, _ in storage.logged_about(op.ns, op.id, "expiry")), default=None)
    if latest is None or op.stamp > latest:
        storage.set_expiry(op.ns, op.id, op.body.expires_at)
