"""Pseudonyms nobody can reverse from a copy of the store.

An identity field holding personal data is stored as a keyed pseudonym (``user-<EMAIL:3f9a0c12d4e1>``,
see :func:`~harness_mem.rows.identity`). Keyed by a secret kept in the file alone
(``settings.redaction.secret``), anyone with a copy could test guesses: a phone number was found
from its pseudonym in 959 tries. So a store's pseudonyms are keyed a second time, with a key kept
where the identity key is, outside the file (derived from it, :meth:`IdentityKey.pseudonym_key`):
the digest is HMAC(that key, kind + the in-file digest), the in-file secret left as a salt that
tests nothing alone. A copy of the file, or a database dump, or a confined PostgreSQL role reading
``settings``, can no longer tell whether a guess is right.

**Without the key** a process reads as before, with the pseudonyms shown, but can make none: a write
of an identity value holding personal data, or a lookup by one, fails before anything is written
(:class:`~harness_mem.errors.IdentityKeyError`, naming the key and where to put it).

**Which kind a store is** is in its ``settings``: ``pseudonyms.keyed`` is ``outside`` for a store
made by this version (or rekeyed), ``rekeying`` while an older one is being moved over, and absent
for an older one, keyed by its in-file secret alone. An older store is rekeyed when opened for
writing where its identity key is (or can be made): every pseudonym in its tables re-keyed in
place from its in-file digest (no raw value is needed), and every sealed identity sealed again
under its new namespace and value. On SQLite steps commit as they go, and a crash midway resumes on
the next open; on PostgreSQL one transaction does it, by the store's owner (a confined role leaves
it). Opened without the key, an older store is left as it is (it reads as before, says once how to
rekey it, and writes no name its key could not seal); a store caught midway refuses writes until it
is finished.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .errors import IdentityKeyError, StorageError
from .identities import KEY_ID_SETTING, IdentityKey, KeyRecords, SealedIdentity, choose_key
from .redaction import Redactor
from .redaction.redactor import outer_digest
from .settings import Settings

if TYPE_CHECKING:
    from .storage import Storage

__all__ = [
    "IDENTITY_COLUMNS", "KEYED_SETTING", "PSEUDONYM", "Keying", "SecretRecords", "database_redactor", "key_finder", "keying",
    "missing_key", "rekey", "rekeyer", "resealer", "settle", "store_redactor", "withheld_redactor",
]

logger = logging.getLogger(__name__)

#: Every table that may hold a pseudonym, and its columns that may (JSON ones too): harness_mem's,
#: and harness_loop's run tables, which live in the same database and key their rows with the same
#: pseudonyms (the database is rekeyed as a whole, whichever package opens it; a table or column
#: that is not there is skipped).
IDENTITY_COLUMNS: dict[str, tuple[str, ...]] = {
    "entries": ("id", "namespace", "role", "session", "superseded_by", "tags", "metadata"),
    "episodes": ("id", "namespace", "entry_id", "tags"),
    "skills": ("namespace", "metadata"),
    "skill_revisions": ("episode_id",),
    "consolidations": ("namespace", "session", "episode_id", "last_turn_id"),
    "derivations": ("namespace", "session"),
    "namespace_roles": ("namespace",),
    "namespace_state": ("namespace",),
    "word_counts": ("namespace",),
    "runs": ("id", "namespace", "lease_owner"),
    "jobs": ("run_id", "job_id", "deps", "lease_owner"),
    "run_events": ("run_id", "job_id"),
}

#: The setting saying how a store's pseudonyms are keyed (see the module's docstring).
KEYED_SETTING = "pseudonyms.keyed"
OUTSIDE = "outside"
REKEYING = "rekeying"
#: A pseudonym in a stored text: its kind and its digest.
PSEUDONYM = re.compile(r"<([A-Z][A-Z0-9_]*):([0-9a-f]{12})>")


class Keying:
    """How a store's pseudonyms are keyed: ``outside`` (by a key kept where the identity key is),
    ``rekeying`` (an older store being moved over) or ``inside`` (an older store, by its in-file
    secret alone)."""

    def __init__(self, state: str | None) -> None:
        self.state = state or "inside"

    @property
    def outside(self) -> bool:
        return self.state == OUTSIDE

    def describe(self) -> str:
        """One line for ``doctor``."""
        if self.state == OUTSIDE:
            return "pseudonyms keyed outside the store (with the identity key): a copy cannot test guesses"
        if self.state == REKEYING:
            return ("pseudonyms being rekeyed (a run was interrupted): open it for writing where its identity key"
                    " is, or run `harness-mem migrate`, to finish")
        return ("pseudonyms keyed by a secret inside the store (an older one): a copy can test guesses"
                " — run `harness-mem migrate` where its identity key is to key them outside it")


def keying(storage: KeyRecords) -> Keying:
    """How ``storage``'s pseudonyms are keyed."""
    return Keying(storage.setting(KEYED_SETTING))


def missing_key(storage: KeyRecords, config_dir: Path) -> IdentityKeyError:
    """The refusal of a process without the store's identity key, saying where to get it."""
    recorded = storage.setting(KEY_ID_SETTING)
    if recorded is None:
        return IdentityKeyError(
            f"this store has no identity key yet and none can be made in {config_dir}: values holding personal data"
            " can be neither written nor looked up — set $HARNESS_MEM_IDENTITY_KEY (64 hex digits), or make the"
            " config directory writable")
    return IdentityKeyError(
        f"this store's pseudonyms are keyed with identity key {recorded}, which is not here: values holding personal"
        f" data can be neither written nor looked up — get it with `harness-mem key import FILE` (a file made by"
        f" `harness-mem key export FILE` where the key is), or set $HARNESS_MEM_IDENTITY_KEY to it")


def key_finder(storage: KeyRecords, given: bytes | str | None, config_dir: Path, *,
               create: bool) -> Callable[[], bytes]:
    """What a store's redactor asks for its outer key on its first pseudonym: the identity key's
    pseudonym key, or :class:`IdentityKeyError` when the store's key is not here."""

    def find() -> bytes:
        key = choose_key(storage, given, config_dir, create=create)
        if key is None:
            raise missing_key(storage, config_dir)
        recorded = storage.setting(KEY_ID_SETTING)
        if recorded is not None and recorded != key.id:
            raise IdentityKeyError(
                f"this store's pseudonyms are keyed with identity key {recorded}, not the one given ({key.id})"
                " — give that key, or open a store of this key")
        return key.pseudonym_key

    return find


def store_redactor(storage: KeyRecords, secret: str | None, outer: Callable[[], bytes], *, writable: bool) -> Redactor:
    """The store's default redactor: keyed by its in-file ``secret``, and again by ``outer`` unless
    the store is an older one (keyed inside). A writable handle on an older store still needs its
    key to make a pseudonym (the raw value is sealed with it), so it asks for it and keys nothing
    with it."""
    if keying(storage).state != "inside":
        return Redactor.default(secret=secret, outer=outer)
    key_seen: list[bool] = []

    def checked() -> None:
        # Asked for each new pseudonym: another process may have rekeyed the store since this
        # handle opened it, and a pseudonym keyed inside would then be found by nobody.
        if keying(storage).state != "inside":
            raise IdentityKeyError("this store's pseudonyms were rekeyed since this handle opened it — open it again")
        if not key_seen:
            outer()  # raises where the key is not
            key_seen.append(True)
        return None

    return Redactor.default(secret=secret, outer=checked if writable else None)


def withheld_redactor(location: str) -> Redactor:
    """The redactor of a confined role on an older store, whose in-file secret (its pseudonyms' only
    key) the database does not show it: it reads, and refuses every pseudonym, which it could only
    make wrong (a name written or looked up so would never be found, nor forgotten)."""

    def refuse() -> bytes:
        raise IdentityKeyError(f"{location} keys its pseudonyms with a secret inside it (an older store), which a"
                               " confined role may not read: values holding personal data can be neither written nor"
                               " looked up — the store's owner must run `harness-mem migrate` where its identity key is")

    return Redactor.default(outer=refuse)


class SecretRecords(KeyRecords, Protocol):
    """A store's settings with its in-file secret (a :class:`~harness_mem.storage.Storage`, or the
    settings of the file harness_loop's run tables are kept in)."""

    def redaction_secret(self, *, create: bool) -> str | None: ...


def database_redactor(records: SecretRecords, *, writable: bool, identity_key: bytes | str | None = None) -> Redactor:
    """The database's own redactor for a writer beside its memory store (harness_loop's run
    tables), keyed as the store's is, with the key found now: the one given, ``$HARNESS_MEM_IDENTITY_KEY``
    or the store's key file (made when ``writable`` and there is none). Where the key is missing,
    its pseudonyms refuse (:class:`IdentityKeyError`) as a memory store's do. An older store is
    not rekeyed here: opening its memory store does that."""
    settings = Settings.from_env()
    given = identity_key if identity_key is not None else settings.identity_key
    if writable and keying(records).state == "inside" and records.redaction_secret(create=False) is None:
        with records.transaction():  # a new file: keyed outside from the start
            records.set_setting(KEYED_SETTING, OUTSIDE)
    secret = records.redaction_secret(create=writable)
    if keying(records).state == "inside":
        return Redactor.default(secret=secret)
    try:
        outer: bytes | Callable[[], bytes] = key_finder(records, given, settings.config_dir(), create=writable)()
    except IdentityKeyError as exc:
        refusal = exc

        def refuse() -> bytes:
            raise IdentityKeyError(str(refusal))

        outer = refuse
    return Redactor.default(secret=secret, outer=outer)


def rekeyer(key: IdentityKey) -> tuple[Callable[[str], str], Callable[[str, SealedIdentity], tuple[str, SealedIdentity]]]:
    """For rekeying an older store with ``key``: a function giving a stored text with each pseudonym
    keyed outside, and one giving a sealed identity sealed again under its new namespace and value
    (one sealed by another key keeps its sealed bytes: it could not be opened before either)."""
    outer = key.pseudonym_key

    def rekey(text: str) -> str:
        return PSEUDONYM.sub(lambda m: f"<{m[1]}:{outer_digest(outer, m[1], m[2])}>", text)

    return rekey, resealer(rekey, key, key)


def resealer(rekey: Callable[[str], str], old: IdentityKey,
             new: IdentityKey) -> Callable[[str, SealedIdentity], tuple[str, SealedIdentity]]:
    """A function giving a sealed identity under its rekeyed namespace and value, sealed again with
    ``new`` (a row ``old`` does not open keeps its sealed bytes: it could not be opened before either)."""

    def reseal(namespace: str, row: SealedIdentity) -> tuple[str, SealedIdentity]:
        new_namespace, new_stored = rekey(namespace), rekey(row.stored)
        raw = old.open(namespace, row.stored, row.sealed) if row.key_id == old.id else None
        if raw is None:
            return new_namespace, SealedIdentity(new_stored, row.key_id, row.sealed)
        return new_namespace, SealedIdentity(new_stored, new.id, new.seal(new_namespace, new_stored, raw))

    return reseal


def rekey(storage: Storage, key: IdentityKey, progress: Callable[[int, int], None] | None = None) -> int:
    """Key an older store's pseudonyms outside it with ``key``, in place, resuming an interrupted
    run; how many rows changed. ``progress(done, total)`` is told after each step."""
    if keying(storage).outside:
        return 0
    if not storage.rekeys_pseudonyms:
        raise StorageError(f"rekeying an older {storage.engine} store's pseudonyms is not supported yet"
                           " — its pseudonyms stay keyed inside it")
    recorded = storage.setting(KEY_ID_SETTING)
    if recorded is not None and recorded != key.id:
        raise IdentityKeyError(f"this store's identities are sealed with identity key {recorded}, not the one given"
                               f" ({key.id}) — rekey it with that key")
    with storage.transaction():
        if keying(storage).outside:  # another process finished it meanwhile
            return 0
        storage.set_setting(KEYED_SETTING, REKEYING)
        if recorded is None:
            storage.set_setting(KEY_ID_SETTING, key.id)
    rekey_text, reseal = rekeyer(key)
    return storage.rekey_pseudonyms(rekey_text, reseal, finished=lambda: keying(storage).outside,
                                    finish=lambda: storage.set_setting(KEYED_SETTING, OUTSIDE), progress=progress)


def settle(storage: Storage, given: bytes | str | None, config_dir: Path, *, created: bool) -> None:
    """On a writable open: a new store is keyed outside from the start; an older one is rekeyed when
    its identity key is here (or can be made), else left as it is with one line saying what to do."""
    state = keying(storage).state
    if state == OUTSIDE:
        return
    if storage.confined_to is not None and not created:  # only the store's owner may rekey it
        logger.warning("%s: %s", storage.location, Keying(state).describe().replace(
            "where its identity key is", "as the store's owner, where its identity key is"))
        return
    if created or (state == "inside" and storage.redaction_secret(create=False) is None):
        with storage.transaction():  # nothing was ever keyed inside it
            storage.set_setting(KEYED_SETTING, OUTSIDE)
        return
    key = choose_key(storage, given, config_dir, create=True) if storage.rekeys_pseudonyms else None
    if key is None:
        logger.warning("%s: %s", storage.location, Keying(state).describe() if storage.rekeys_pseudonyms else
                       f"pseudonyms keyed by a secret inside the store (an older store), which harness-mem cannot"
                       f" rekey on {storage.engine} yet")
        return
    rekey(storage, key)
