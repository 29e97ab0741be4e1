"""The sync folder: each device's chunks of operations and its manifest, in a folder any tool carries.

::

    DIR/harness-mem/FORMAT                              "harness-mem sync 1"
    DIR/harness-mem/keying.json                         the identity key's id and the salt of every device's pseudonyms
    DIR/harness-mem/devices/<device>/manifest.json      its chunks, in order
    DIR/harness-mem/devices/<device>/chunks/<sha256>.jsonl.gz
    DIR/harness-mem/devices/<device>/owner              the store that writes this device

A device writes only its own directory, so a file syncer or git never sees two writers of one file.
Every file is written to a temporary name, flushed to disk and renamed; the manifest goes last, so a
reader finds a chunk complete before the manifest names it. A reader trusts nothing it cannot check:
a chunk whose bytes do not hash to its name is not complete yet (a syncer still copying it) and is
left for the next sync; one that hashes right but does not parse is quarantined.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import DiskFullError, InvalidInputError, StorageError, SyncFormatError
from .operations import Operation, parse_operation

FORMAT_LINE = "harness-mem sync 1"
_FORMAT = re.compile(r"^harness-mem sync (\d+)$")
_DEVICE = re.compile(r"^[0-9a-f]{32}$")
_CHUNK = re.compile(r"^[0-9a-f]{64}$")
#: An operation line longer than this is refused: no store writes one (content is capped far below).
MAX_LINE = 16 * 1024 * 1024


class Keying(NamedTuple):
    """What a store's pseudonyms are made with: its salt, and the id of its identity key (not the key)."""

    salt: str
    key_id: str | None


@dataclass(frozen=True)
class ChunkRef:
    """A manifest's line for one chunk: its name (the sha256 of its bytes) and how many operations it holds."""

    name: str
    operations: int


class Incomplete(Exception):  # noqa: N818 — a state, not a failure: the next sync reads it
    """A chunk not (yet) all there: missing, or its bytes not those its name promises."""


class SyncFolder:
    """``DIR/harness-mem``: the devices' directories (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.root = Path(path).expanduser() / "harness-mem"
        marker = self.root / "FORMAT"
        if marker.exists():
            found = _FORMAT.match(marker.read_text(encoding="utf-8").strip())
            if found is None:
                raise InvalidInputError(f"{self.root} is not a harness-mem sync folder (its FORMAT file says otherwise)")
            if int(found.group(1)) > 1:
                raise SyncFormatError(f"{self.root} was made by a newer harness-mem (sync format {found.group(1)})"
                                      " — upgrade to sync with it")
        elif create:
            if Path(path).expanduser().exists() and not Path(path).expanduser().is_dir():
                raise InvalidInputError(f"{path} is a file, not a folder")
            (self.root / "devices").mkdir(parents=True, exist_ok=True)
            _write_atomically(marker, (FORMAT_LINE + "\n").encode())
        else:
            raise InvalidInputError(f"{path} holds no harness-mem sync folder")

    def keying(self) -> Keying | None:
        """What every device's pseudonyms are made with (None until the first device syncs)."""
        path = self.root / "keying.json"
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_bytes())
            return Keying(str(data["salt"]), None if data.get("key_id") is None else str(data["key_id"]))
        except (ValueError, KeyError, TypeError):
            raise InvalidInputError(f"{path} does not parse: restore it from another device's copy of the folder") from None

    def set_keying(self, keying: Keying) -> None:
        _write_atomically(self.root / "keying.json", json.dumps(keying._asdict()).encode())

    def devices(self) -> list[str]:
        """Every device that has written here (directories named by a device id, nothing else)."""
        folder = self.root / "devices"
        return sorted(d.name for d in folder.iterdir() if d.is_dir() and _DEVICE.match(d.name)) if folder.exists() else []

    def owner(self, device: str) -> str | None:
        path = self.root / "devices" / device / "owner"
        return path.read_text(encoding="utf-8").strip() if path.exists() else None

    def claim(self, device: str, owner: str) -> None:
        """Record the store that writes ``device`` (the first to write it)."""
        (self.root / "devices" / device / "chunks").mkdir(parents=True, exist_ok=True)
        _write_atomically(self.root / "devices" / device / "owner", (owner + "\n").encode())

    def manifest(self, device: str) -> list[ChunkRef]:
        """The chunks ``device`` has written, in order ([] before its first)."""
        path = self.root / "devices" / device / "manifest.json"
        if not path.exists():
            return []
        try:
            data = json.loads(path.read_bytes())
            return [ChunkRef(str(c["name"]), int(c["operations"])) for c in data["chunks"]
                    if _CHUNK.match(str(c["name"]))]
        except (ValueError, KeyError, TypeError) as exc:
            raise Incomplete(f"the manifest of device {device} does not parse ({exc})") from None

    def write_chunk(self, device: str, operations: Sequence[Operation]) -> ChunkRef:
        """Write operations as one chunk of ``device`` and name it in its manifest (last)."""
        ref = self._chunk(device, operations)
        self._write_manifest(device, [*self.manifest(device), ref])
        return ref

    def replace_chunk(self, device: str, old: str, operations: Sequence[Operation]) -> ChunkRef | None:
        """Put a chunk of ``operations`` (none: no chunk) where ``device``'s chunk ``old`` was, and
        delete ``old``: the manifest names the new one before the old one goes, so a reader never
        finds a name without its file."""
        ref = self._chunk(device, operations) if operations else None
        listed = []
        for chunk in self.manifest(device):
            if chunk.name != old:
                listed.append(chunk)
            elif ref is not None:
                listed.append(ref)
        self._write_manifest(device, listed)
        (self.root / "devices" / device / "chunks" / f"{old}.jsonl.gz").unlink(missing_ok=True)
        return ref

    def _chunk(self, device: str, operations: Sequence[Operation]) -> ChunkRef:
        data = gzip.compress(b"".join(op.canonical() + b"\n" for op in operations), mtime=0)
        name = hashlib.sha256(data).hexdigest()
        chunks = self.root / "devices" / device / "chunks"
        chunks.mkdir(parents=True, exist_ok=True)
        _write_atomically(chunks / f"{name}.jsonl.gz", data)
        return ChunkRef(name, len(operations))

    def _write_manifest(self, device: str, chunks: Sequence[ChunkRef]) -> None:
        previous = self.root / "devices" / device / "manifest.json"
        seq = json.loads(previous.read_bytes()).get("seq", 0) + 1 if previous.exists() else 1
        manifest = {"format": 1, "device": device, "seq": seq,
                    "chunks": [{"name": c.name, "operations": c.operations} for c in chunks]}
        _write_atomically(previous, json.dumps(manifest, indent=1).encode())

    def read_chunk(self, device: str, name: str) -> list[Operation]:
        """The operations of a chunk: :class:`Incomplete` if its bytes are not all there yet,
        :class:`SyncFormatError` if they are and are not a chunk of operations (quarantine it)."""
        path = self.root / "devices" / device / "chunks" / f"{name}.jsonl.gz"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise Incomplete(f"chunk {name[:12]} of device {device[:12]} is not here yet") from None
        if hashlib.sha256(data).hexdigest() != name:
            raise Incomplete(f"chunk {name[:12]} of device {device[:12]} is not complete yet")
        return list(_operations(data, name))


def _operations(data: bytes, name: str) -> Iterator[Operation]:
    try:
        text = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise SyncFormatError(f"chunk {name[:12]} is not gzip data ({exc})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE:
            raise SyncFormatError(f"chunk {name[:12]} line {number} is longer than any operation ({len(line):,} bytes)")
        try:
            found: Any = json.loads(line)
        except ValueError as exc:
            raise SyncFormatError(f"chunk {name[:12]} line {number} is not JSON ({exc})") from None
        if not isinstance(found, dict):
            raise SyncFormatError(f"chunk {name[:12]} line {number} is not an operation")
        try:
            yield parse_operation(found)
        except SyncFormatError as exc:
            raise SyncFormatError(f"chunk {name[:12]} line {number}: {exc}") from None


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader finds the old file or the whole new one; a folder
    that cannot take it (full, read-only) is one line, and nothing half-written stays."""
    temporary: str | None = None
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        kind = DiskFullError if exc.errno == errno.ENOSPC else StorageError
        raise kind(f"could not write {path.name} in the sync folder {path.parent} ({exc.strerror}) — free space"
                   " there or make it writable, then sync again: what this store holds is unchanged") from None
    except BaseException:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        raise
