"""Moving a store between engines: ``harness-mem copy SRC DST`` (a SQLite file, a PostgreSQL URL).

Every entry of every namespace that is not forgotten goes across as it is stored: its id, times,
session, role, tags, metadata, redaction counts and correction marks (so histories survive), with
the vector it already has and the identity of the model that made it. Nothing is embedded again and
nothing is redacted again: the rows were redacted when first written, and the destination takes the
source's pseudonym key (and is keyed outside it as the source is, with the same identity key: see
:mod:`harness_mem.pseudonyms`), so a lookup by a raw session id or entry id finds the same rows on both.
Forgotten entries stay behind: what was forgotten does not spread.

A copy is resumable: it goes in the source's write order, and an id the destination already holds
is left as it is, so running it again after an interruption carries on where it stopped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from . import pseudonyms
from .engines import open_storage, shown_location
from .errors import StorageError
from .identities import KEY_ID_SETTING, ROTATING_SETTING, SealedIdentity
from .models import counted
from .passages import Embedding
from .progress import Progress
from .rows import Row
from .storage import Storage

__all__ = ["CopyReport", "RecordedModel", "copy_store"]

BATCH_SIZE = 500


@dataclass
class CopyReport:
    """What a copy did: entries read from the source, written to the destination, already there."""

    source: str
    target: str
    read: int = 0
    copied: int = 0
    already: int = 0
    vectors: int = 0
    model: str | None = None


class RecordedModel:
    """A model known by its identity alone: the destination records it and takes the source's
    vectors. It embeds nothing: an entry without a vector in the source stops the copy."""

    def __init__(self, identity: dict[str, str]) -> None:
        self.name = identity["name"]
        self.dim = int(identity["dim"])
        self.fingerprint = identity.get("fingerprint", self.name)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise StorageError(
            f"no vector yet for {counted(len(texts), 'entry', 'entries')} of the source — run `harness-mem reindex` on it, then copy again"
            " (what was copied so far is kept)"
        )


def copy_store(source: str | os.PathLike[str], target: str | os.PathLike[str], *, batch_size: int = BATCH_SIZE,
               progress: Progress | None = None) -> CopyReport:
    """Copy every live entry of ``source`` into ``target`` (created and migrated if need be);
    ``progress`` is told each batch's entries read and written."""
    if str(source) == str(target):
        raise StorageError("the source and the destination are the same store — name another destination")
    src = open_storage(source, read_only=True)
    try:
        if src.schema_version() == 0:
            raise StorageError(f"{shown_location(source)} holds no harness-mem store — nothing to copy")
        dst = open_storage(target)
        try:
            dst.migrate()
            return _copy(src, dst, batch_size, progress)
        finally:
            dst.close()
    finally:
        src.close()


def _copy(src: Storage, dst: Storage, batch_size: int, progress: Progress | None) -> CopyReport:
    report = CopyReport(source=src.location, target=dst.location)
    _share_key(src, dst)
    _share_identities(src, dst)
    model = None if src.keyword_only else src.recorded_model()
    dst.use_embedder(RecordedModel(model) if model else None)
    if model is None:
        with dst.transaction():
            dst.set_keyword_only(True)
    report.model = model["name"] if model else None
    if progress is not None:  # forgotten entries are counted here, and left behind
        progress.phase("reading and writing entries with their vectors" if model else "reading and writing entries",
                       total=src.count_all())
    with dst.bulk():
        last = 0
        while rows := src.rows_after(last, batch_size):
            pks = [row.pk for row in rows if row.pk is not None]
            vectors = src.stored_vectors(pks) if model else {}
            passages = src.passages(pks) if model else {}
            fresh = [Row(None, *row[1:]) for row in rows]  # new rows: the destination numbers them
            given = {id(new): Embedding(_unit(vectors[old.pk]), tuple(passages.get(old.pk, ())))
                     for new, old in zip(fresh, rows, strict=True) if old.pk in vectors}
            written = dst.write(fresh, "ignore", given)
            report.read += len(rows)
            report.copied += len(written)
            report.already += len(rows) - len(written)
            report.vectors += sum(1 for row in written if id(row) in given)
            last = int(rows[-1].pk or last)
            if progress is not None:
                progress.advance(len(rows), len(written))
    return report


def _unit(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def _share_key(src: Storage, dst: Storage) -> None:
    """Give the destination the source's pseudonym key, unless it already keys entries of its own."""
    keyed = pseudonyms.keying(src)
    if keyed.state == "rekeying":
        raise StorageError(f"{src.location}: {keyed.describe()}")
    if src.setting(ROTATING_SETTING):
        raise StorageError(f"{src.location}: its identity key is being rotated (a run was interrupted) — run"
                           " `harness-mem key rotate` on it to finish, then copy")
    key = src.redaction_secret(create=False)
    if key is None or dst.redaction_secret(create=False) == key:
        return
    if dst.redaction_secret(create=False) is not None and dst.count_all():
        raise StorageError(
            f"{dst.location} already holds entries pseudonymised with another key — copy into a new or empty store"
        )
    with dst.transaction():
        dst.set_setting("redaction.secret", key)
        # Keyed as the source's are: outside it (with the same identity key), or by that secret alone.
        dst.set_setting(pseudonyms.KEYED_SETTING, keyed.state)


def _share_identities(src: Storage, dst: Storage) -> None:
    """Take the sealed identity values along (still sealed: the same key opens them in the copy)."""
    by_namespace: dict[str, list[SealedIdentity]] = {}
    for namespace, row in src.every_sealed_identity():
        by_namespace.setdefault(namespace, []).append(row)
    key_id = src.setting(KEY_ID_SETTING)
    if not by_namespace and key_id is None:
        return
    with dst.transaction():
        if key_id is not None and dst.setting(KEY_ID_SETTING) is None:
            dst.set_setting(KEY_ID_SETTING, key_id)
        for namespace, rows in by_namespace.items():
            dst.seal_identities(namespace, rows)
