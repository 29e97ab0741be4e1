"""Rotating a store's identity key: a new key, every sealed identity sealed again under it, and
every identity-field pseudonym keyed again with it.

A pseudonym keeps only its outer digest (HMAC of the key and the in-file digest, see
:mod:`harness_mem.pseudonyms`), so it cannot be keyed again from itself. The raw values can: each
sealed row is opened with the old key, redacted again with the store's in-file secret alone (the
in-file digest), and that digest keyed with the old key (which must give the pseudonym stored, or
the row is left out) and with the new one. Each stored text then has every pseudonym in that
table replaced, by the same walk over :data:`~harness_mem.pseudonyms.IDENTITY_COLUMNS` that
rekeys an older store (``Storage.rekey_pseudonyms``): on SQLite in steps that commit and resume
after a crash, on PostgreSQL in one transaction by the store's owner.

A pseudonym without a sealed raw value stays as it was: a placeholder inside content (which no one
can read back anyway), a credential (never sealed) and an identity written with
``identity_key=False``. Those three are no longer found by their raw value after a rotation.

The store records the rotation before rewriting anything (``identities.rotating_from`` holds the
old key's id, ``identities.key_id`` the new one): until it is done no process writes a name (a
row written meanwhile could clash with the rewrite, :func:`~harness_mem.storage.write_sealed`),
afterwards only one with the new key does, and an interrupted rotation is finished by running it
again. The old key file is kept where it was until the user deletes it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .errors import IdentityKeyError, InvalidInputError, StorageError
from .identities import (
    KEY_ID_SETTING,
    ROTATING_SETTING,
    IdentityKey,
    SealedIdentity,
    choose_key,
    key_file,
    raw_value,
    read_key_file,
)
from .keyfiles import install_key
from .pseudonyms import PSEUDONYM, keying, missing_key, resealer
from .redaction import Redactor
from .redaction.redactor import outer_digest

if TYPE_CHECKING:
    from .storage import Storage

__all__ = ["Rotation", "rotate", "rotating_from", "rotator"]


class Rotation(NamedTuple):
    """What a rotation did: the old and new keys' ids, where the new key is, where the old key file
    is (None: the old key was given, not read from a file), how many rows changed, and what gives a
    stored text as the rotation rewrote it."""

    old_id: str
    new_id: str
    new_key_file: Path
    old_key_file: Path | None
    changed: int
    rename: Callable[[str], str]


def rotating_from(storage: Storage) -> str | None:
    """The id of the key a rotation under way moves the store from, or None."""
    return storage.setting(ROTATING_SETTING) or None


def rotate(storage: Storage, given: bytes | str | None, config_dir: Path,
           progress: Callable[[int, int], None] | None = None) -> Rotation:
    """Rotate the store's identity key (or finish a rotation that was interrupted); the new key is
    written to ``config_dir`` (see the module's docstring)."""
    if storage.read_only:
        raise InvalidInputError("this store is open read-only — rotating its identity key writes to it")
    if storage.confined_to is not None:
        raise InvalidInputError("a confined database role cannot rotate the store's key — connect as its owner")
    if not keying(storage).outside:
        raise InvalidInputError("this store's pseudonyms are not keyed with its identity key yet — run"
                                " `harness-mem migrate` first")
    if not storage.rekeys_pseudonyms:
        raise StorageError(f"rotating the identity key of a {storage.engine} store is not supported")
    pending = rotating_from(storage)
    if pending is None:
        old = choose_key(storage, given, config_dir, create=False)
        recorded = storage.setting(KEY_ID_SETTING)
        if recorded is None:
            raise InvalidInputError("this store has no identity key yet (no identity value was ever sealed):"
                                    " there is nothing to rotate")
        if old is None:
            raise missing_key(storage, config_dir)
        if old.id != recorded:
            raise IdentityKeyError(f"this store's identities are sealed with identity key {recorded}, not the one"
                                   f" given ({old.id}) — rotate it with that key")
        new = IdentityKey(secrets.token_bytes(len(old.secret)))
        install_key(new, config_dir)  # before the store names it: the key is never missing
        with storage.transaction():
            if storage.setting(KEY_ID_SETTING) != old.id or rotating_from(storage) is not None:
                raise InvalidInputError("another process rotated this store's key meanwhile — run it again")
            storage.set_setting(ROTATING_SETTING, old.id)
            storage.set_setting(KEY_ID_SETTING, new.id)
    else:
        new_id = storage.setting(KEY_ID_SETTING) or ""
        found_old, found_new = _key_of(pending, given, config_dir), _key_of(new_id, given, config_dir)
        if found_old is None or found_new is None:
            lacking = pending if found_old is None else new_id
            raise IdentityKeyError(
                f"a rotation of this store's identity key from {pending} to {new_id} was interrupted, and key"
                f" {lacking} is not in {config_dir / 'keys'} — run `harness-mem key rotate` where both keys are")
        old, new = found_old, found_new
    rekey, reseal = rotator(storage, old, new)
    changed = storage.rekey_pseudonyms(rekey, reseal, finished=lambda: rotating_from(storage) is None,
                                       finish=lambda: storage.set_setting(ROTATING_SETTING, ""), progress=progress)
    old_file = key_file(old.id, config_dir)
    return Rotation(old.id, new.id, key_file(new.id, config_dir), old_file if old_file.exists() else None, changed,
                    rekey)


def _key_of(key_id: str, given: bytes | str | None, config_dir: Path) -> IdentityKey | None:
    if given is not None:
        key = IdentityKey.parse(given)
        if key.id == key_id:
            return key
    return read_key_file(key_id, config_dir)


def rotator(storage: Storage, old: IdentityKey, new: IdentityKey) -> tuple[
        Callable[[str], str], Callable[[str, SealedIdentity], tuple[str, SealedIdentity]]]:
    """A function giving a stored text with each pseudonym of a sealed identity keyed with ``new``
    instead of ``old``, and one giving a sealed row sealed again under ``new`` (a row ``old`` does
    not open keeps its bytes). The pseudonyms are found on first use, inside the walk's transaction."""
    found: dict[str, str] = {}
    looked: list[bool] = []

    def renamed() -> dict[str, str]:
        if not looked:
            found.update(_renamings(storage, old, new))
            looked.append(True)
        return found

    def rekey(text: str) -> str:
        return PSEUDONYM.sub(lambda m: renamed().get(m[0], m[0]), text)

    return rekey, resealer(rekey, old, new)


def _renamings(storage: Storage, old: IdentityKey, new: IdentityKey) -> dict[str, str]:
    """Each pseudonym keyed with ``old`` that a sealed raw value gives, and its form keyed with ``new``."""
    inner = Redactor.default(secret=storage.redaction_secret(create=False))
    before, after = old.pseudonym_key, new.pseudonym_key
    renamings: dict[str, str] = {}
    for namespace, row in storage.every_sealed_identity():
        opened = old.open(namespace, row.stored, row.sealed) if row.key_id == old.id else None
        if opened is None:
            continue
        for match in PSEUDONYM.finditer(inner.pseudonymise(str(raw_value(opened))).text):
            kind, digest = match[1], match[2]
            was = f"<{kind}:{outer_digest(before, kind, digest)}>"
            if was in row.stored:  # the stored value holds it: this raw value is what it stands for
                renamings[was] = f"<{kind}:{outer_digest(after, kind, digest)}>"
    return renamings
