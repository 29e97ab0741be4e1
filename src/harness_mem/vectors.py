"""The vector index: exact vectors in sqlite-vec, a two-stage search that reads a fraction of them.

Every entry's embedding lives in a vec0 table (``entries_vec``, float32, cosine distance), keyed by the
entry's internal pk and written or deleted in the same transaction as the entry: that is the exact
index (:meth:`VectorIndex.exact_knn`). A brute-force vec0 KNN reads every vector, though, and a vec0
point lookup costs tens of microseconds, so recall does not use it directly:

1. **Prefilter** — all of a namespace's entries are ranked by the Hamming distance between the *signs*
   of their vectors and the query's (48 bytes per 384-dimension vector, held in memory as uint64
   words); a shortlist of the nearest survives.
2. **Rescore** — the shortlist is scored by cosine against a float16 copy of each vector, read in one
   query from the plain table ``entry_vectors`` (microseconds a row). float16 keeps three significant
   digits: rankings match float32 except for near-ties.

The shortlist size was chosen on the benchmark (bench/bench_vectors.py) so that the top 10 agree with
the exact vec0 KNN. ``entry_vectors`` also keeps the sign bits, so a process loads its prefilter
without touching the float vectors, and a generation counter in ``settings`` tells each process when
another one changed the vectors: it then reloads; its own writes update its cache in place.

When filters leave few candidates (a session, a conversation), the prefilter is skipped and all of
them are rescored: filters always apply before the top-k cut.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .db import Connection
from .errors import EmbedderError
from .protocols import Embedder

# Below this many candidates, rescore them all (a few ms) instead of cutting with the prefilter.
EXACT_MAX_CANDIDATES = 2048
# Shortlist = max(SHORTLIST_MIN, SHORTLIST_PER_HIT × k): chosen in bench/bench_vectors.py for ≥ 0.95
# top-10 agreement with exact search on MiniLM vectors at 100k entries.
SHORTLIST_MIN = 160
SHORTLIST_PER_HIT = 16

GENERATION_KEY = "vectors.generation"


def bump_generation(conn: Connection) -> int:
    """Mark the vectors as changed (inside a write transaction); returns the new generation."""
    row = conn.execute(
        "UPDATE settings SET value = CAST(value AS INTEGER) + 1 WHERE key = ? RETURNING value", (GENERATION_KEY,)
    ).fetchone()
    return int(row[0])


def has_vector_table(conn: Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'entries_vec'").fetchone() is not None


def embedding_text(content: str, role: str | None) -> str:
    """What is embedded for an entry: like the keyword index, the speaker goes with the text."""
    return f"{role}: {content}" if role else content


def missing_vectors(conn: Connection) -> int:
    """Entries (in every namespace) that have no vector yet: ``reindex`` embeds them."""
    return int(conn.execute(
        "SELECT count(*) FROM entries e WHERE NOT EXISTS (SELECT 1 FROM entry_vectors v WHERE v.pk = e.pk)"
    ).fetchone()[0])


def pack_signs(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
    """One bit per dimension (1 = positive), packed big-endian like sqlite-vec's ``bit[]``."""
    return np.packbits(vectors > 0, axis=1)


@dataclass
class _NamespaceBits:
    generation: int
    pks: npt.NDArray[np.int64]
    words: npt.NDArray[np.uint64]  # (n, dim / 64)


@dataclass
class _Pending:
    added: list[tuple[str, npt.NDArray[np.int64], npt.NDArray[np.uint8]]] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)


class VectorIndex:
    """Vector rows of one store, for one embedding model (its dimension fixes the table)."""

    def __init__(self, conn: Connection, embedder: Embedder) -> None:
        self.conn = conn
        self.embedder = embedder
        self.dim = int(embedder.dim)
        if self.dim % 64:
            raise EmbedderError(f"embedding dimension {self.dim} is not a multiple of 64 — unsupported")
        self._bits: dict[str, _NamespaceBits] = {}
        self._pending = _Pending()

    # ---- model identity ------------------------------------------------------------------------

    @staticmethod
    def recorded_model(conn: Connection) -> dict[str, str] | None:
        rows = dict(conn.execute("SELECT key, value FROM settings WHERE key LIKE 'embedder.%'").fetchall())
        return {k.removeprefix("embedder."): v for k, v in rows.items()} or None

    def identity(self) -> dict[str, str]:
        return {
            "name": str(self.embedder.name),
            "dim": str(self.dim),
            "fingerprint": str(getattr(self.embedder, "fingerprint", self.embedder.name)),
        }

    def check_model(self) -> dict[str, str] | None:
        """The recorded model (None when none is yet); raises if it is not this index's model."""
        recorded = self.recorded_model(self.conn)
        mine = self.identity()
        if recorded is not None and recorded != mine:
            raise EmbedderError(
                f"this database's vectors were made by {recorded.get('name')} ({recorded.get('dim')} dims,"
                f" {recorded.get('fingerprint')}), not by {mine['name']} ({mine['dim']} dims, {mine['fingerprint']})"
                " — run `harness-mem reindex` to rebuild them with the current model"
            )
        return recorded

    def attach(self) -> None:
        """Check (or record) that this file's vectors come from this model; create the tables.

        Runs inside the caller's write transaction.
        """
        if self.check_model() is None:
            self.conn.executemany("INSERT INTO settings (key, value) VALUES (?, ?)",
                                  [(f"embedder.{k}", v) for k, v in self.identity().items()])
        self.conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS entries_vec USING vec0(embedding float[{self.dim}] distance_metric=cosine)"
        )

    # ---- writes (inside the store's transaction) -----------------------------------------------

    def write(self, namespace: str, pks: list[int], vectors: npt.NDArray[np.float32]) -> None:
        signs = pack_signs(vectors)
        self.conn.executemany(
            "INSERT INTO entries_vec (rowid, embedding) VALUES (?, ?)",
            [(pk, vectors[i].tobytes()) for i, pk in enumerate(pks)],
        )
        halves = vectors.astype(np.float16)
        self.conn.executemany(
            "INSERT INTO entry_vectors (pk, bits, half) VALUES (?, ?, ?)",
            [(pk, signs[i].tobytes(), halves[i].tobytes()) for i, pk in enumerate(pks)],
        )
        self._pending.added.append((namespace, np.asarray(pks, dtype=np.int64), signs))

    def delete(self, pk: int) -> None:
        self.conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (pk,))  # vec0 has no cascade
        self._pending.deleted.append(pk)

    def committed(self, generation: int) -> None:
        """Fold this process's own committed writes into its caches (no reload needed)."""
        pending, self._pending = self._pending, _Pending()
        for namespace, cache in list(self._bits.items()):
            if cache.generation != generation - 1:
                del self._bits[namespace]  # someone else wrote in between: reload on next search
                continue
            if pending.deleted:
                keep = ~np.isin(cache.pks, np.asarray(pending.deleted, dtype=np.int64))
                cache.pks, cache.words = cache.pks[keep], cache.words[keep]
            for added_ns, pks, signs in pending.added:
                if added_ns == namespace:
                    cache.pks = np.concatenate([cache.pks, pks])
                    cache.words = np.concatenate([cache.words, signs.view(np.uint64)])
            cache.generation = generation

    def rolled_back(self) -> None:
        self._pending = _Pending()

    # ---- reads ---------------------------------------------------------------------------------

    def _generation(self) -> int:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (GENERATION_KEY,)).fetchone()
        return int(row[0]) if row else 0

    def _namespace_bits(self, namespace: str) -> _NamespaceBits:
        generation = self._generation()
        cache = self._bits.get(namespace)
        if cache is None or cache.generation != generation:
            rows = self.conn.execute(
                "SELECT b.pk, b.bits FROM entry_vectors b JOIN entries e ON e.pk = b.pk WHERE e.namespace = ?",
                (namespace,),
            ).fetchall()
            pks = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            raw = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.uint8).reshape(len(rows), self.dim // 8)
            cache = _NamespaceBits(generation, pks, raw.view(np.uint64).copy())
            self._bits[namespace] = cache
        return cache

    def search(
        self, query: npt.NDArray[np.float32], k: int, namespace: str, candidates: list[int] | None = None
    ) -> list[tuple[int, float]]:
        """(pk, cosine similarity) of the k nearest entries, best first.

        ``candidates`` restricts the search to those pks (the rows that passed the filters).
        """
        if candidates is not None and len(candidates) <= EXACT_MAX_CANDIDATES:
            return self.rescore(query, candidates, k)
        cache = self._namespace_bits(namespace)
        pks, words = cache.pks, cache.words
        if candidates is not None:
            keep = np.isin(pks, np.asarray(candidates, dtype=np.int64))
            pks, words = pks[keep], words[keep]
        if len(pks) == 0:
            return []
        shortlist = min(len(pks), max(SHORTLIST_MIN, SHORTLIST_PER_HIT * k))
        query_words = pack_signs(query[None, :]).view(np.uint64)
        distances = np.bitwise_count(words ^ query_words).sum(axis=1, dtype=np.int32)
        if shortlist < len(pks):
            nearest = np.argpartition(distances, shortlist - 1)[:shortlist]
        else:
            nearest = np.arange(len(pks))
        return self.rescore(query, pks[nearest].tolist(), k)

    def rescore(self, query: npt.NDArray[np.float32], pks: list[int], k: int) -> list[tuple[int, float]]:
        """Cosine similarity of ``query`` to each pk's vector (float16 copy); the k best."""
        rows = self.conn.execute(
            "SELECT pk, half FROM entry_vectors WHERE pk IN (SELECT value FROM json_each(?))", (json.dumps(pks),)
        ).fetchall()
        if not rows:
            return []
        found = [row[0] for row in rows]
        matrix = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float16).reshape(len(rows), self.dim)
        similarity = matrix.astype(np.float32) @ query.astype(np.float32)
        order = np.argsort(-similarity, kind="stable")[:k]
        return [(found[i], float(similarity[i])) for i in order]

    def exact_knn(self, query: npt.NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        """Brute-force vec0 KNN over every vector (the reference the fast path is measured against)."""
        rows = self.conn.execute(
            "SELECT rowid, distance FROM entries_vec WHERE embedding MATCH ? AND k = ?",
            (query.astype(np.float32).tobytes(), k),
        ).fetchall()
        return [(int(pk), 1.0 - float(distance)) for pk, distance in rows]

    def count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM entry_vectors").fetchone()[0])

    def clear(self) -> None:
        """Drop every vector and the recorded model (inside a transaction): ``reindex`` starts over."""
        self.conn.execute("DROP TABLE IF EXISTS entries_vec")
        self.conn.execute("DELETE FROM entry_vectors")
        self.conn.execute("DELETE FROM settings WHERE key LIKE 'embedder.%'")
        self._bits.clear()
