"""One sync: write this store's new operations to the folder, apply every other device's it has not read.

An incremental sync reads each device's manifest (small) and only the chunks not read yet, and writes
one chunk of what this store did since its last sync. Two processes syncing one store are serialised
by a lock on this device's directory; a crash between writing a chunk and recording it writes the same
operations again next time, which every reader skips (they are known by their hash).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .. import pseudonyms
from ..errors import IdentityKeyError, InvalidInputError, SyncFormatError
from ..identities import KEY_ID_SETTING
from ..redaction import Redactor
from ..storage import Storage, is_derived
from . import outbox
from .apply import Applied, apply_chunk
from .folder import Incomplete, Keying, SyncFolder
from .operations import Operation, parse_operation

SALT_SETTING = "redaction.secret"
PREVIOUS_OWNER_SETTING = "sync.owner_previous"
#: The ``seq`` of the last operation of this device written to the folder.
WRITTEN_SETTING = "sync.written_seq"


@dataclass
class SyncReport:
    """What one sync did."""

    device: str
    written: int = 0  # operations of this store written to the folder
    applied: Applied = field(default_factory=Applied)
    waiting: int = 0  # chunks not complete yet (a syncer still copying): read next time
    quarantined: list[str] = field(default_factory=list)  # one line each: chunks refused
    compacted: int = 0  # chunks of this device rewritten without forgotten words

    def summary(self) -> str:
        a = self.applied
        line = (f"wrote {self.written:,} · applied {a.applied:,} · skipped {a.skipped:,} · forks {a.forks:,}"
                f" · forgotten {a.forgotten:,} · quarantined {len(self.quarantined):,}")
        line += f" · {self.compacted:,} chunks rewritten without forgotten words" if self.compacted else ""
        return line + (f" · {self.waiting:,} chunks still arriving" if self.waiting else "")


def join(storage: Storage, path: str | os.PathLike[str], *, key_here: Callable[[str], bool],
         make_key: Callable[[], str | None]) -> bool:
    """Make this store's pseudonyms the folder's before its first exchange: True when it took the folder's keying.

    A pseudonym is keyed by the store's identity key (kept outside every store) and a salt kept in the
    store: two devices make the same pseudonym of one value only with the same key and salt, so that a
    lookup by a raw value (``--session ada@example.com``) finds what another device wrote, and a sealed
    value opens on each. The first store to sync a folder leaves its key's id and its salt there
    (``make_key`` makes its key if it has none yet; neither the id nor the salt is a secret: a guess
    cannot be tested without the key itself). A store that holds nothing keyed otherwise takes them,
    if the key is on this machine (``key_here(key_id)``; ``harness-mem key import``); a store that
    already holds entries keyed otherwise is refused.
    """
    _refuse_confined(storage)
    if pseudonyms.keying(storage).state != "outside":
        raise InvalidInputError("this store's pseudonyms are keyed by a secret inside it — run `harness-mem migrate`"
                                " to key them with the identity key before syncing")
    folder = SyncFolder(path)
    salt = str(storage.redaction_secret(create=True))
    key_id = storage.setting(KEY_ID_SETTING)
    theirs = folder.keying()
    if theirs is None:
        folder.set_keying(Keying(salt, key_id or make_key()))
        return False
    if theirs == (salt, key_id):
        return False
    sealed_nothing = key_id is None  # no value was sealed or keyed with a key of its own yet
    if storage.count_all() and (theirs.salt != salt or not sealed_nothing):
        raise InvalidInputError(f"this store already holds entries keyed otherwise than the stores syncing in"
                                f" {folder.root} — join it with a new, empty store")
    if theirs.key_id is not None and not key_here(theirs.key_id):
        raise IdentityKeyError(f"the stores syncing in {folder.root} use identity key {theirs.key_id}, which is not on"
                               " this machine — export it there (`harness-mem key export`) and `harness-mem key import`"
                               " it here")
    with storage.transaction():
        storage.set_setting(SALT_SETTING, theirs.salt)
        if theirs.key_id is not None:
            storage.set_setting(KEY_ID_SETTING, theirs.key_id)
    return True


def sync(storage: Storage, path: str | os.PathLike[str], *, redactor: Redactor | None,
         progress: Callable[[int], None] | None = None) -> SyncReport:
    """Exchange operations with the sync folder at ``path`` (see the module docstring)."""
    _refuse_confined(storage)
    folder = SyncFolder(path)
    device, _ = outbox.start(storage, is_derived)
    report = SyncReport(device)
    with _device_lock(folder.root / "devices" / device):
        _claim(storage, folder, device)
        report.written = _write(storage, folder, device)
        for other in folder.devices():
            if other != device:
                _read(storage, folder, other, redactor, report, progress)
        report.compacted = _compact(storage, folder, device)
    return report


def _refuse_confined(storage: Storage) -> None:
    """A role the database confines to some namespaces cannot sync: a store's device, its log's place
    in the folder and the chunks it has read are the whole store's, kept by its owner."""
    if storage.confined_to is not None:
        raise InvalidInputError("this database role is confined to some namespaces, and a store syncs as a whole"
                                " — run `harness-mem sync` as the store's owner: what this role writes is logged"
                                " and travels at the owner's next sync")


@dataclass(frozen=True)
class DeviceStatus:
    """How far this store has read one device of the folder (or, for its own, what waits to be written)."""

    device: str
    this_store: bool
    chunks: int  # in the device's manifest
    read: int  # applied here (its own: written)
    quarantined: int
    waiting: int  # operations of this store not written yet (its own device only)
    unread: int = 0  # operations in the chunks not read yet (other devices)


def status(storage: Storage, path: str | os.PathLike[str]) -> list[DeviceStatus]:
    """Every device of the folder, and how far this store has read it; nothing is written."""
    folder = SyncFolder(path, create=False)
    me = outbox.device(storage)
    found = []
    for device in folder.devices():
        try:
            listed = folder.manifest(device)
        except Incomplete:
            listed = []
        chunks = [c.name for c in listed]
        if device == me:
            after = int(storage.setting(WRITTEN_SETTING) or 0)
            waiting = sum(1 for _, _, text in storage.logged_operations(after, 1_000_000)
                          if text is not None and parse_operation(json.loads(text)).device == me)
            found.append(DeviceStatus(device, True, len(chunks), len(chunks), 0, waiting))
            continue
        read = storage.chunks_read(device)
        found.append(DeviceStatus(device, False, len(chunks), sum(1 for c in chunks if read.get(c) == "applied"),
                                  sum(1 for c in chunks if read.get(c) == "quarantined"), 0,
                                  sum(c.operations for c in listed if c.name not in read)))
    return found


def _claim(storage: Storage, folder: SyncFolder, device: str) -> None:
    """Make sure this store, and no copy of its file, writes ``device`` in the folder.

    A copied file carries the device id and the owner token, so the token moves on at every sync, in
    the store first and then in the folder: a copy that syncs after the original finds a token it never
    held and is refused (and the original is, if the copy synced first). A crash between the two writes
    leaves the folder with the previous token, which the store still accepts.
    """
    current = storage.setting(outbox.OWNER_SETTING)
    previous = storage.setting(PREVIOUS_OWNER_SETTING)
    claimed = folder.owner(device)
    if claimed is not None and claimed not in (current, previous):
        raise InvalidInputError(f"this store is a copy of device {device[:12]}, which another store has synced in"
                                f" {folder.root} since — sync the original, or export this one into a new store")
    token = secrets.token_hex(16)
    with storage.transaction():
        storage.set_setting(PREVIOUS_OWNER_SETTING, claimed or str(current))
        storage.set_setting(outbox.OWNER_SETTING, token)
    folder.claim(device, token)


def _write(storage: Storage, folder: SyncFolder, device: str) -> int:
    """Write this device's operations logged since its last sync as one chunk; how many."""
    after = int(storage.setting(WRITTEN_SETTING) or 0)
    mine: list[Operation] = []
    last = after
    while rows := storage.logged_operations(last, 10_000):
        for seq, _, text in rows:
            last = seq
            if text is None:
                continue  # an add forgotten before it ever left: nothing to send
            operation = parse_operation(json.loads(text))
            if operation.device == device:
                mine.append(operation)
    ref = folder.write_chunk(device, mine) if mine else None
    if last != after:
        with storage.transaction():
            if ref is not None:
                storage.note_written([op.hash for op in mine], ref.name)
            storage.set_setting(WRITTEN_SETTING, str(last))
    return len(mine)


def _compact(storage: Storage, folder: SyncFolder, device: str) -> int:
    """Rewrite each of this device's chunks that holds an add of an entry forgotten since, without it:
    the folder keeps no forgotten text (only this device writes its chunks). How many were rewritten."""
    rewritten = 0
    for name in storage.chunks_holding_forgotten(device):
        try:
            operations = folder.read_chunk(device, name)
        except (Incomplete, SyncFormatError):
            continue  # not the chunk this store wrote (a syncer's damage): `sync --status` shows it
        gone = storage.forgotten_adds([op.hash for op in operations])
        kept = [op for op in operations if op.hash not in gone]
        ref = folder.replace_chunk(device, name, kept)
        with storage.transaction():
            storage.note_written([op.hash for op in kept], None if ref is None else ref.name)
            storage.note_written(sorted(gone), None)
        rewritten += 1
    return rewritten


def _read(storage: Storage, folder: SyncFolder, device: str, redactor: Redactor | None, report: SyncReport,
          progress: Callable[[int], None] | None) -> None:
    read = storage.chunks_read(device)
    try:
        chunks = folder.manifest(device)
    except Incomplete:
        report.waiting += 1
        return
    for chunk in chunks:
        if chunk.name in read:
            continue
        try:
            operations = folder.read_chunk(device, chunk.name)
        except Incomplete:
            report.waiting += 1
            continue
        except SyncFormatError as exc:
            with storage.transaction():
                storage.note_chunk(device, chunk.name, "quarantined", str(exc))
            report.quarantined.append(f"device {device[:12]}: {exc}")
            continue
        apply_chunk(storage, operations, device=device, chunk=chunk.name, redactor=redactor, counts=report.applied)
        if progress is not None:
            progress(len(operations))


@contextmanager
def _device_lock(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
