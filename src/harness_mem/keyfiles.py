"""Identity keys on disk: the key files a store's key is found in, and a key wrapped under a
passphrase for handing to a teammate.

A key file is ``keys/<key id>.key`` in the config directory (see :mod:`harness_mem.identities`),
64 hex digits, mode 0600 in a 0700 directory. A wrapped key is a small JSON document::

    {"format": "harness-mem identity key", "version": 1, "key_id": "…",
     "kdf": {"name": "scrypt", "n": 32768, "r": 8, "p": 1, "salt": "<base64>"},
     "nonce": "<base64>", "sealed": "<base64>"}

``sealed`` is the key encrypted with AES-256-GCM under a key derived from the passphrase by
scrypt; every other field is the associated data, so changing the key id or the KDF's cost makes
the file fail to open, as a wrong passphrase does. The key id is in clear so a teammate can tell
which store it opens before typing anything.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from .errors import IdentityKeyError, InvalidInputError
from .identities import KEY_ID_SETTING, ROTATING_SETTING, IdentityKey, KeyRecords, key_file, read_key_file

__all__ = ["FORMAT", "describe_key", "install_key", "unwrap_key", "wrap_key", "write_new_file"]

FORMAT = "harness-mem identity key"
_VERSION = 1
# scrypt's cost: 32 MiB and a fraction of a second per guess (the passphrase is the weak part).
_SCRYPT = {"name": "scrypt", "n": 2**15, "r": 8, "p": 1}
_SALT_BYTES = 16
_NONCE_BYTES = 12
# What a file may ask of scrypt: a forged one must not make an import take all memory.
_MAX_N = 2**20


def wrap_key(key: IdentityKey, passphrase: str) -> str:
    """``key`` as a wrapped-key document (JSON text), sealed under ``passphrase``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    _check_passphrase(passphrase)
    kdf = {**_SCRYPT, "salt": _b64(os.urandom(_SALT_BYTES))}
    header = {"format": FORMAT, "version": _VERSION, "key_id": key.id, "kdf": kdf}
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(_derive(passphrase, kdf)).encrypt(nonce, key.secret, _bound(header))
    return json.dumps({**header, "nonce": _b64(nonce), "sealed": _b64(sealed)}, indent=2) + "\n"


def unwrap_key(text: str, passphrase: str, *, source: str) -> IdentityKey:
    """The key in a wrapped-key document; :class:`InvalidInputError` (one line, naming ``source``)
    when it is not one, the passphrase is wrong or the file was changed."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        document = json.loads(text)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError
        if document.get("version") != _VERSION:
            raise InvalidInputError(f"{source} is a wrapped identity key of version {document.get('version')!r},"
                                    f" which this harness-mem does not read (it reads version {_VERSION})")
        kdf = document["kdf"]
        header = {"format": FORMAT, "version": _VERSION, "key_id": str(document["key_id"]), "kdf": kdf}
        nonce, sealed = base64.b64decode(document["nonce"], validate=True), base64.b64decode(document["sealed"], validate=True)
        wrapping = _derive(passphrase, kdf)
    except (ValueError, KeyError, TypeError):
        raise InvalidInputError(f"{source} is not a wrapped identity key (made by `harness-mem key export`)") from None
    try:
        key = IdentityKey(bytes(AESGCM(wrapping).decrypt(nonce, sealed, _bound(header))))
    except (InvalidTag, ValueError, InvalidInputError):
        raise InvalidInputError(f"{source} does not open with that passphrase (a wrong passphrase, or the file was"
                                " changed); nothing was written") from None
    if key.id != header["key_id"]:  # sealed with its header, so only a forged file gets here
        raise InvalidInputError(f"{source} holds another key than the id it names; nothing was written")
    return key


def write_new_file(path: Path, text: str, *, force: bool) -> None:
    """Write ``text`` to ``path`` readable by its owner alone (0600); an existing file is refused
    unless ``force``."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise InvalidInputError(f"{path} exists — give --force to replace it") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(out.fileno(), 0o600)  # a file replaced with --force may have been readable by others
        out.write(text)
        out.flush()
        os.fsync(out.fileno())


def install_key(key: IdentityKey, config_dir: Path) -> tuple[Path, bool]:
    """Put ``key`` where a store sealed with it finds it (``keys/<key id>.key``, 0600 in a 0700
    directory); the path, and False when it was there already."""
    path = key_file(key.id, config_dir)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.exists():
            try:
                if IdentityKey.parse(path.read_text(encoding="ascii")).id == key.id:
                    return path, False
            except (InvalidInputError, UnicodeDecodeError):
                pass
            raise InvalidInputError(f"{path} exists and does not hold key {key.id} — move it away first")
        # Written beside it and renamed: a reader never finds half a key.
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        write_new_file(partial, key.secret.hex() + "\n", force=True)
        os.replace(partial, path)
    except OSError as exc:
        raise InvalidInputError(f"cannot write the key into {path.parent}: {exc.strerror}") from None
    return path, True


def describe_key(storage: KeyRecords, given: bytes | str | None, config_dir: Path, *, given_as: str) -> str:
    """One line for ``doctor`` and ``key status``: the store's key id and where this process found
    it (``given_as`` names where ``given`` came from); :class:`IdentityKeyError` saying how to get
    it when this process lacks it, or when a rotation was left unfinished."""
    recorded = storage.setting(KEY_ID_SETTING)
    if recorded is None:
        return "no identity key yet (one is made when the first identity value holding personal data is written)"
    rotating = storage.setting(ROTATING_SETTING)
    if rotating:
        raise IdentityKeyError(f"a rotation of the identity key from {rotating} to {recorded} was interrupted"
                               " — run `harness-mem key rotate` to finish it")
    if given is not None and IdentityKey.parse(given).id == recorded:
        where = given_as
    elif read_key_file(recorded, config_dir) is not None:
        where = str(key_file(recorded, config_dir))
    else:
        raise IdentityKeyError(
            f"identity key {recorded} is not here ({config_dir / 'keys'}{', nor ' + given_as if given else ''}):"
            " identities read as pseudonyms and none can be written — have a teammate run `harness-mem key export"
            " FILE`, then run `harness-mem key import FILE`")
    return f"identity key {recorded}, found in {where}: this process reads and writes the raw identities"


def _check_passphrase(passphrase: str) -> None:
    if len(passphrase) < 8:
        raise InvalidInputError("a passphrase for an identity key needs at least 8 characters")


def _derive(passphrase: str, kdf: Any) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    if not isinstance(kdf, dict) or kdf.get("name") != "scrypt":
        raise ValueError("not scrypt")
    n, r, p = int(kdf["n"]), int(kdf["r"]), int(kdf["p"])
    if not (2 <= n <= _MAX_N and 1 <= r <= 32 and 1 <= p <= 16):
        raise ValueError("scrypt cost out of range")
    salt = base64.b64decode(kdf["salt"], validate=True)
    return bytes(Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode("utf-8")))


def _bound(header: dict[str, Any]) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
