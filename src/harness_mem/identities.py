"""Identities that round-trip: ids, sessions, roles, tags, the namespace and metadata values come
back as the caller gave them, while the file holds none of them raw.

Identity fields are stored as keyed pseudonyms (:func:`~harness_mem.rows.identity`):
``user-ada@example.com`` is stored as ``user-<EMAIL:…>``, which every lookup by the raw value
finds. That alone would hand the pseudonym back on every read, and a framework that keys its items
by an e-mail (LangGraph's namespaces, an Agents SDK session id) could no longer recognise its own.
So the raw value of each identity field that the redactor changed is also kept **sealed**: encrypted
(AES-GCM, the namespace and stored value as associated data) under a key that is never in the file,
in the ``identities`` table beside the entries, and every read of a store that has the key puts the
raw values back (:meth:`Identities.reveal`).

**The key** is the caller's (``MemoryStore(identity_key=…)`` or ``$HARNESS_MEM_IDENTITY_KEY``, 64 hex
digits), else a key file made on first use in the user's config directory:
``$HARNESS_MEM_CONFIG`` (default ``$XDG_CONFIG_HOME/harness-mem``, else ``~/.config/harness-mem``),
``keys/<key id>.key``, mode 0600 in a 0700 directory. The file records which key it was sealed with
(``identities.key_id`` in its settings; each sealed row its key's id). A store opened where that
key is missing reads as before, with the pseudonyms in place of the names: **losing the key loses
the names, never the memories**, and no new key is made over an old one. The pseudonyms themselves
are keyed with this key too (:mod:`harness_mem.pseudonyms`), so without it nothing holding personal
data can be written to an identity field or looked up by one. A team shares the
key with ``harness-mem key export`` / ``key import`` (:mod:`harness_mem.keyfiles`), and rotates it
with ``key rotate`` (:mod:`harness_mem.rotation`).

Metadata values are kept the same way (:func:`~harness_mem.rows.stored_metadata`): a framework reads
its item back from them. Content is redacted as the policy says (a label is not a pseudonym and has
no raw value kept), and credentials are never sealed: a password that happens to be an id comes
back as its pseudonym, one in a metadata value as the policy scrubs it.

Two spellings the redactor reads as one value (an address in two cases, a phone number with and
without its spaces, a number and its digits as text) share one pseudonym, and so one sealed value
per namespace: the first written is the one read back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .errors import IdentityKeyError, InvalidInputError

if TYPE_CHECKING:
    from .models import Entry, Hit, SessionHit, SessionSummary
    from .redaction import Redaction

__all__ = [
    "KEY_ID_SETTING", "ROTATING_SETTING", "Identities", "IdentityKey", "IdentityRecords", "KeyRecords", "SealedIdentity", "Sealer", "choose_key",
    "key_file", "metadata_pseudonyms", "raw_value", "read_key_file",
]

logger = logging.getLogger(__name__)

#: The setting naming the key this store's identities are sealed with (its id, not the key).
KEY_ID_SETTING = "identities.key_id"
#: Set while a key rotation is under way (:mod:`harness_mem.rotation`): the old key's id ("" once done).
ROTATING_SETTING = "identities.rotating_from"
_KEY_BYTES = 32
_NONCE_BYTES = 12
# A stored identity that holds a pseudonym (only those have a raw value to reveal).
_PSEUDONYM = re.compile(r"<[A-Z][A-Z0-9_]*:[0-9a-f]{12}>")
# How many revealed values a store remembers (a session's id repeats in every turn).
_CACHED = 4096
# Begins the sealed text of a metadata int (a phone number kept as a number): it comes back an int.
_INT_MARK = "\x00int:"


class SealedIdentity(NamedTuple):
    """One row of the ``identities`` table: a stored identity value and its raw value, sealed."""

    stored: str
    key_id: str
    sealed: bytes


class KeyRecords(Protocol):
    """Where a store records which key is its own: its settings."""

    def setting(self, key: str) -> str | None: ...

    def set_setting(self, key: str, value: str) -> None: ...

    def transaction(self) -> AbstractContextManager[None]: ...


class IdentityRecords(KeyRecords, Protocol):
    """What this module needs of a store's storage (:class:`~harness_mem.storage.Storage` has it)."""

    def sealed_identities(self, namespace: str, stored: Sequence[str]) -> list[SealedIdentity]: ...


class IdentityKey:
    """A key that seals identities, and its id (the first 16 hex digits of its SHA-256)."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) != _KEY_BYTES:
            raise InvalidInputError(f"an identity key is {_KEY_BYTES} bytes (64 hex digits), not {len(secret)}")
        self.secret = secret
        self.id = hashlib.sha256(b"harness-mem identity key\x00" + secret).hexdigest()[:16]
        self._aead: Any = None

    @classmethod
    def parse(cls, given: bytes | str) -> IdentityKey:
        """A key passed by the caller: 32 bytes, or their 64 hex digits."""
        if isinstance(given, str):
            try:
                return cls(bytes.fromhex(given.strip()))
            except ValueError:
                raise InvalidInputError("an identity key given as text must be 64 hex digits") from None
        return cls(bytes(given))

    @property
    def pseudonym_key(self) -> bytes:
        """The key a store's pseudonyms are keyed with outside it (:mod:`harness_mem.pseudonyms`):
        derived from this one under a label of its own, so it seals nothing and this seals no pseudonym."""
        return hmac.new(self.secret, b"harness-mem pseudonym key v1", hashlib.sha256).digest()

    def _cipher(self) -> Any:
        if self._aead is None:
            # Imported here: a CLI call that writes no identity never pays for it.
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(self.secret)
        return self._aead

    def seal(self, namespace: str, stored: str, raw: str) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + bytes(self._cipher().encrypt(nonce, raw.encode("utf-8"), _bound(namespace, stored)))

    def open(self, namespace: str, stored: str, sealed: bytes) -> str | None:
        """The raw value, or None when this key did not seal it (or the row was tampered with)."""
        from cryptography.exceptions import InvalidTag

        try:
            plain = self._cipher().decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], _bound(namespace, stored))
        except (InvalidTag, ValueError):
            return None
        return bytes(plain).decode("utf-8")

    def __getstate__(self) -> dict[str, Any]:  # an import's worker processes get the key, not the cipher
        return {"secret": self.secret, "id": self.id, "_aead": None}

    def __repr__(self) -> str:
        return f"<IdentityKey {self.id}>"


def _bound(namespace: str, stored: str) -> bytes:
    # The associated data: a sealed row moved to another namespace or value does not open.
    return f"{namespace}\x00{stored}".encode()


def raw_value(opened: str) -> str | int:
    """What an opened sealed row holds: the text, or the int a metadata value was."""
    return int(opened[len(_INT_MARK):]) if opened.startswith(_INT_MARK) else opened


def read_key_file(key_id: str, config_dir: Path) -> IdentityKey | None:
    """The key of id ``key_id`` from its file in ``config_dir``, or None when it is not there."""
    found = _read_key(key_file(key_id, config_dir))
    return found if found is not None and found.id == key_id else None


def key_file(key_id: str, config_dir: Path) -> Path:
    """Where the key of id ``key_id`` is kept: ``keys/<key id>.key`` in the config directory."""
    return config_dir / "keys" / f"{key_id}.key"


def _read_key(path: Path) -> IdentityKey | None:
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        return IdentityKey.parse(text)
    except InvalidInputError:
        logger.warning("%s is not an identity key (64 hex digits); identities stay pseudonyms", path)
        return None


def _make_key(config_dir: Path) -> IdentityKey:
    key = IdentityKey(secrets.token_bytes(_KEY_BYTES))
    path = key_file(key.id, config_dir)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(key.secret.hex() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return key


def choose_key(storage: KeyRecords, given: bytes | str | None, config_dir: Path, *, create: bool) -> IdentityKey | None:
    """The key this handle seals and reveals with: the one given, else the store's key file (made
    on first use when ``create``); None when the store's key is not on this machine."""
    if given is not None:
        key = IdentityKey.parse(given)
        if create and storage.setting(KEY_ID_SETTING) is None:
            with storage.transaction():
                if storage.setting(KEY_ID_SETTING) is None:
                    storage.set_setting(KEY_ID_SETTING, key.id)
        return key
    recorded = storage.setting(KEY_ID_SETTING)
    if recorded is not None:
        found = _read_key(key_file(recorded, config_dir))
        if found is None:
            logger.warning("the identity key %s is not in %s: identities are shown as pseudonyms", recorded,
                           config_dir / "keys")
        return found
    if not create:
        return None
    with storage.transaction():  # one key per store, whichever process makes it first
        recorded = storage.setting(KEY_ID_SETTING)
        if recorded is None:
            try:
                key = _make_key(config_dir)
            except OSError as exc:  # a config directory that cannot be written: keep the memories, not the names
                logger.warning("cannot make an identity key in %s (%s): identities are kept as pseudonyms",
                               config_dir, exc)
                return None
            storage.set_setting(KEY_ID_SETTING, key.id)
            return key
    return _read_key(key_file(recorded, config_dir))


class Sealer:
    """What a write seals: each identity value the redactor changed, noted as its row is prepared.

    Noted values wait in :attr:`pending` until :func:`~harness_mem.storage.write_sealed` stores them in the transaction of
    the rows that hold them; a failed write puts them back. The key is found (or made) on the first
    value to seal, so a store whose identities hold nothing sensitive never makes one. Picklable
    (with its key), for an import's worker processes, whose notes travel back with their rows.
    """

    def __init__(self, namespace: str, find_key: Callable[[], IdentityKey | None],
                 secret_kinds: Iterable[str] = ()) -> None:
        self.namespace = namespace
        #: Kinds never sealed: credentials (see the module's docstring).
        self.secret_kinds = frozenset(secret_kinds)
        self.pending: dict[str, SealedIdentity] = {}
        self._find_key: Callable[[], IdentityKey | None] | None = find_key
        self._key: IdentityKey | None = None

    @property
    def resolved(self) -> bool:
        """True once the key has been looked for (found or not)."""
        return self._find_key is None

    @property
    def key(self) -> IdentityKey | None:
        if self._find_key is not None:
            self._key, self._find_key = self._find_key(), None
        return self._key

    def note(self, raw: str | int, pseudonymised: Redaction) -> None:
        """Seal ``raw`` (a metadata value may be an int) as the value behind its stored form, unless
        unchanged, known or a credential."""
        stored = pseudonymised.text
        # Sealed again for each write that holds it (once per batch), never taken as known: a gc in
        # another process may have dropped its sealed row since this handle last wrote it.
        if raw == stored or stored in self.pending:
            return
        if self.secret_kinds and any(span.kind in self.secret_kinds for span in pseudonymised.spans):
            return
        key = self.key
        if key is None:
            return
        plain = raw if isinstance(raw, str) else _INT_MARK + str(raw)
        self.pending[stored] = SealedIdentity(stored, key.id, key.seal(self.namespace, stored, plain))

    def take(self) -> list[SealedIdentity]:
        taken = list(self.pending.values())
        self.pending.clear()
        return taken

    def put_back(self, rows: Iterable[SealedIdentity]) -> None:
        for row in rows:
            self.pending.setdefault(row.stored, row)

    def __getstate__(self) -> dict[str, Any]:  # the key travels, not the storage that finds it
        state = dict(vars(self))
        state.update(_key=self.key, _find_key=None, pending={})
        return state


class Identities:
    """A store's identity values, revealed on the way out: a read gets the raw value of every
    stored identity it can open, and the stored form where it cannot."""

    def __init__(self, storage: IdentityRecords, namespace: str, *, given: bytes | str | None, config_dir: Path,
                 writable: bool, secret_kinds: Iterable[str] = ()) -> None:
        self.storage = storage
        self.namespace = namespace
        #: What this handle's writes seal with (the key is looked for, or made, on first use).
        self.sealer = Sealer(namespace, lambda: choose_key(storage, given, config_dir, create=writable), secret_kinds)
        self._reading: Callable[[], IdentityKey | None] = lambda: choose_key(storage, given, config_dir, create=False)
        self._read_key: tuple[IdentityKey | None] | None = None
        self._revealed: dict[str, str | int] = {}

    def _key(self) -> IdentityKey | None:
        # A read never makes a key; once this handle's writes have one, reads use it too.
        if self.sealer.resolved and self.sealer.key is not None:
            return self.sealer.key
        if self._read_key is None:
            self._read_key = (self._reading(),)
        return self._read_key[0]

    def reveal(self, values: Iterable[str | None]) -> dict[str, str | int]:
        """The raw value of each stored identity in ``values`` that this handle's key opens."""
        wanted = {v for v in values if v and "<" in v and v not in self._revealed and _PSEUDONYM.search(v)}
        if wanted:
            key = self._key()
            if key is not None:
                if len(self._revealed) >= _CACHED:
                    self._revealed.clear()
                for stored, key_id, sealed in self.storage.sealed_identities(self.namespace, sorted(wanted)):
                    raw = key.open(self.namespace, stored, sealed) if key_id == key.id else None
                    if raw is not None:
                        self._revealed[stored] = raw_value(raw)
        return self._revealed

    def resealed(self, namespace: str, sealed: Sequence[SealedIdentity]) -> list[SealedIdentity]:
        """``sealed`` (rows of this handle's namespace) sealed again for ``namespace``, what moving
        their entries there takes along: a sealed row opens only in its own namespace. Raises
        :class:`IdentityKeyError` when this handle's key cannot open one (nothing is changed)."""
        key = self._key()
        out = []
        for row in sealed:
            raw = key.open(self.namespace, row.stored, row.sealed) if key is not None and row.key_id == key.id else None
            if key is None or raw is None:
                raise IdentityKeyError(f"{row.stored[:60]!r} was sealed with an identity key this process does not have"
                                       " — moving it needs that key (`harness-mem key import`); nothing was moved")
            out.append(SealedIdentity(row.stored, key.id, key.seal(namespace, row.stored, raw)))
        return out

    def value(self, stored: str) -> str:
        """One stored identity value as the caller gave it (as stored when it cannot be opened)."""
        return str(self.reveal([stored]).get(stored, stored)) if "<" in stored else stored

    def entries(self, entries: Sequence[Entry]) -> list[Entry]:
        """``entries`` with their identity fields as the caller gave them."""
        known = self.reveal(v for e in entries for v in _identity_values(e))
        if not known:
            return list(entries)
        out = []
        for entry in entries:
            changes: dict[str, Any] = {}
            for field in ("id", "namespace", "role", "session", "superseded_by"):
                value = getattr(entry, field)
                if value in known:
                    changes[field] = str(known[value])
            if any(tag in known for tag in entry.tags):
                changes["tags"] = tuple(str(known.get(tag, tag)) for tag in entry.tags)
            if entry.metadata and any(v in known for v in _metadata_strings(entry.metadata)):
                changes["metadata"] = _revealed_metadata(entry.metadata, known)
            out.append(entry.model_copy(update=changes) if changes else entry)
        return out

    def hits(self, hits: Sequence[Hit]) -> list[Hit]:
        """``hits`` with their entries' (and their context's and sources') identity fields as given."""
        out = []
        for hit in hits:
            context, sources = hit.context or (), hit.sources or ()
            entry, *rest = self.entries([hit.entry, *context, *sources])
            if entry is hit.entry and all(a is b for a, b in zip(rest, (*context, *sources), strict=True)):
                out.append(hit)  # nothing of it was sealed: the hit as it is (a copy a hit cost 10 µs)
                continue
            update: dict[str, Any] = {"entry": entry}
            if hit.context is not None:
                update["context"] = tuple(rest[:len(context)])
            if hit.sources is not None:
                update["sources"] = tuple(rest[len(context):])
            out.append(hit.model_copy(update=update))
        return out

    def summaries(self, summaries: Sequence[SessionSummary]) -> list[SessionSummary]:
        self.reveal(s.session for s in summaries)
        return [s.model_copy(update={"session": self.value(s.session)}) for s in summaries]

    def session_hits(self, found: Sequence[SessionHit]) -> list[SessionHit]:
        out = []
        for hit in found:
            [anchor] = self.hits([hit.anchor])
            first, last, *around = self.entries([hit.first, hit.last, *hit.around])
            out.append(hit.model_copy(update={"session": self.value(hit.session), "anchor": anchor,
                                              "around": tuple(around), "first": first, "last": last}))
        return out


def _identity_values(entry: Entry) -> Iterable[str | None]:
    yield from (entry.id, entry.namespace, entry.role, entry.session, entry.superseded_by)
    yield from entry.tags
    if entry.metadata:
        yield from _metadata_strings(entry.metadata)


def metadata_pseudonyms(metadata: Any) -> Iterator[str]:
    """Every string in ``metadata`` (dict keys too) that holds a pseudonym: the stored values a
    metadata value may have sealed (what a gc keeps)."""
    return (s for s in _metadata_strings(metadata) if "<" in s and _PSEUDONYM.search(s))


def _metadata_strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(key, str):
                yield key
            yield from _metadata_strings(value)
    elif isinstance(obj, list | tuple):
        for value in obj:
            yield from _metadata_strings(value)


def _revealed_metadata(obj: Any, known: dict[str, str | int]) -> Any:
    if isinstance(obj, str):
        return known.get(obj, obj)
    if isinstance(obj, dict):
        return {(known.get(k, k) if isinstance(k, str) else k): _revealed_metadata(v, known) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_revealed_metadata(v, known) for v in obj]
    return obj


def identity_values_in_use(rows: Iterable[Sequence[Any]]) -> set[tuple[str, str]]:
    """(namespace, value) of every identity value in ``rows`` of (namespace, id, role, session,
    tags as JSON, superseded_by, metadata as JSON): what :meth:`Storage.drop_unused_identities` keeps."""
    used: set[tuple[str, str]] = set()
    for namespace, *values, tags, superseded_by, metadata in rows:
        used.update((namespace, v) for v in (*values, superseded_by) if v)
        used.update((namespace, tag) for tag in json.loads(tags) if isinstance(tag, str))
        if "<" in metadata:
            used.update((namespace, value) for value in metadata_pseudonyms(json.loads(metadata)))
    return used
