"""The outbox: every write's operation logged in the write's own transaction.

A store starts logging when it is first given a device id (:func:`start`, which logs what the store
already holds in the same transaction); from then on the storage seam calls the ``log_*`` functions
here inside each write's transaction, so a crash can never leave a write without its operation or an
operation without its write. A store that never syncs has no device id and logs nothing: its writes
cost what they did.

Only what is said and written is logged: consolidation's entries are derived, and every device
derives its own. A forgotten entry's ``add`` is emptied by the engine as it forgets (its hash kept,
so a replay is recognised): the log never keeps text the store has let go of.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..identities import SealedIdentity, identity_values_in_use
from ..rows import Row
from .clock import Stamp, next_stamp
from .operations import FORK_MARK, Operation, added, forgotten, renewed, retagged, superseded

#: The setting that holds this store's device id; a store without one logs nothing.
DEVICE_SETTING = "sync.device"
#: A random token of this store, so a copied file can be told from the store it was copied from.
OWNER_SETTING = "sync.owner"


class LoggedStorage(Protocol):
    """What the outbox needs of a storage (:class:`~harness_mem.storage.Storage` provides it)."""

    def setting(self, key: str) -> str | None: ...

    def set_setting(self, key: str, value: str) -> None: ...

    def transaction(self) -> AbstractContextManager[None]: ...

    def last_stamp(self) -> Stamp | None: ...

    def log_operations(self, operations: Sequence[Operation]) -> None: ...

    def rows_after(self, pk: int, limit: int) -> list[Row]: ...

    def sealed_identities(self, namespace: str, stored: Sequence[str]) -> list[SealedIdentity]: ...

    def pk_of(self, namespace: str, entry_id: str) -> int | None: ...

    def replaced_by(self, namespace: str, entry_ids: Sequence[str]) -> list[tuple[int, str, str]]: ...

    def delete(self, namespace: str, entry_id: str) -> bool: ...


class _Stamps:
    """Successive stamps for one transaction's operations, after the latest one logged."""

    def __init__(self, storage: LoggedStorage) -> None:
        self.last = storage.last_stamp()

    def __call__(self) -> Stamp:
        self.last = next_stamp(self.last)
        return self.last


def device(storage: LoggedStorage) -> str | None:
    """This store's device id, or None when it does not log (it has never synced)."""
    return storage.setting(DEVICE_SETTING)


def uses(row: Row) -> set[str]:
    """The pseudonyms a row's identity fields hold: the sealed values its ``add`` carries."""
    in_use = identity_values_in_use([(row.namespace, row.id, row.role, row.session, row.tags, row.superseded_by,
                                      row.metadata)])
    return {value for _, value in in_use if "<" in value}


def log_added(storage: LoggedStorage, rows: Sequence[Row], sealed: Sequence[SealedIdentity]) -> None:
    """Log the ``add`` of each row written (derived ones left out by the caller)."""
    if not rows or (me := device(storage)) is None:
        return
    stamps = _Stamps(storage)
    by_value = {s.stored: s for s in sealed}
    operations = []
    for row in rows:
        wanted = uses(row)
        carried = [by_value[v] for v in sorted(wanted) if v in by_value]
        if len(carried) < len(wanted):  # sealed by an earlier write: the table has it
            known = {s.stored for s in carried}
            carried += storage.sealed_identities(row.namespace, sorted(wanted - known))
        operations.append(added(row, me, stamps(), sorted(carried)))
    storage.log_operations(operations)


def log_replacing(storage: LoggedStorage, rows: Sequence[Row], when: int) -> None:
    """Before rows replace the entries holding their ids: log a forget of those ids, stamped before the
    rows' adds, and delete the versions of them kept from other devices (``<id>~fork-…``).

    On every other device the forget takes the old words with all their versions, and the add that
    follows it takes the id (a forget never reaches an add stamped after it): every device ends with
    the new words alone, as this one does. Logged as a plain add, the old words would stay there as a
    version the new ones won against.
    """
    if not rows or device(storage) is None:
        return
    for namespace in dict.fromkeys(row.namespace for row in rows):
        held = [row.id for row in rows if row.namespace == namespace and storage.pk_of(namespace, row.id) is not None]
        log_forgotten(storage, namespace, held, None, when)
        delete_kept_versions(storage, namespace, held)


def delete_kept_versions(storage: LoggedStorage, namespace: str, entry_ids: Sequence[str]) -> None:
    """Delete the versions of these ids kept from other devices (``<id>~fork-…``), as the ids are
    deleted: the forget logged for an id reaches every version of it on the other devices."""
    for _, version, of in storage.replaced_by(namespace, entry_ids):
        if version.startswith(of + FORK_MARK):
            storage.delete(namespace, version)


def log_superseded(storage: LoggedStorage, namespace: str, old_id: str, new_id: str, when: int) -> None:
    if (me := device(storage)) is not None:
        storage.log_operations([superseded(namespace, old_id, new_id, when, me, _Stamps(storage)())])


def log_forgotten(storage: LoggedStorage, namespace: str, ids: Sequence[str], selector: Mapping[str, Any] | None,
                  when: int) -> None:
    if ids and (me := device(storage)) is not None:
        storage.log_operations([forgotten(namespace, ids, selector, when, me, _Stamps(storage)())])


def log_renewed(storage: LoggedStorage, namespace: str, expiries: Mapping[str, int]) -> None:
    if not expiries or (me := device(storage)) is None:
        return
    stamps = _Stamps(storage)
    storage.log_operations([renewed(namespace, entry_id, expires, me, stamps())
                            for entry_id, expires in sorted(expiries.items())])


def log_retagged(storage: LoggedStorage, namespace: str, tags: Mapping[str, Sequence[str]]) -> None:
    """Log each entry's tags changed in place (id → its whole new list, as stored)."""
    if not tags or (me := device(storage)) is None:
        return
    stamps = _Stamps(storage)
    storage.log_operations([retagged(namespace, entry_id, listed, me, stamps())
                            for entry_id, listed in sorted(tags.items())])


def start(storage: LoggedStorage, derived: Callable[[Row], bool], *, batch: int = 500) -> tuple[str, int]:
    """Give the store a device id and log what it holds, in one transaction: (device, operations).

    Each entry said or written (forgotten and ``derived`` ones aside) is logged as an ``add`` stamped with its own
    time, and each correction as a ``supersede`` stamped with when it was made, so what another device
    forgot later still reaches them. A store that already logs is left as it is.
    """
    with storage.transaction():
        if (me := device(storage)) is not None:
            return me, 0
        me = secrets.token_hex(16)
        storage.set_setting(DEVICE_SETTING, me)
        storage.set_setting(OWNER_SETTING, secrets.token_hex(16))
        logged = 0
        for rows in _all_rows(storage, batch):
            rows = [row for row in rows if not derived(row)]
            operations: list[Operation] = []
            for row in rows:
                wanted = sorted(uses(row))
                carried = storage.sealed_identities(row.namespace, wanted) if wanted else []
                operations.append(added(row, me, Stamp(row.created_at, 0), carried))
                if row.superseded_by is not None:
                    operations.append(superseded(row.namespace, row.id, row.superseded_by,
                                                 row.superseded_at or row.created_at, me,
                                                 Stamp(row.superseded_at or row.created_at, 1)))
            storage.log_operations(operations)
            logged += len(operations)
    return me, logged


def _all_rows(storage: LoggedStorage, batch: int) -> Iterator[list[Row]]:
    after = 0
    while rows := storage.rows_after(after, batch):
        yield rows
        after = rows[-1].pk or after
