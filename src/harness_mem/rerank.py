"""Late-interaction reranking: a question's word pieces matched one by one against a candidate's.

A pooled MiniLM vector averages a text into one point, so a question about one detail of a turn
that says several things sits far from it. MaxSim (as ColBERT scores) keeps the detail: each word
piece of the question takes its best match among the candidate's word pieces, and the matches are
averaged. The vectors come from the same all-MiniLM-L6-v2 that embeds the store (its token states,
before pooling), so nothing else is installed; no cross-encoder with its weights installs from the
package registry (flashrank and rerankers fetch theirs from a hub at run time).

The top :data:`RERANK_DEPTH` candidates of a recall are fused again (``fusion.fuse``, the same
weights and priors) with each one's MaxSim in place of its cosine. Their word pieces are computed at
query time (one model pass over 30 texts: about 0.2 s for chat turns with the int8 model, several
times that for long assistant replies), so it is an option: ``recall(..., rerank=True)``,
``harness-mem recall --rerank``. A store keeps the pieces it computed (:class:`PieceCache`), so later reranks that read
the same entries run the model over the question and the new texts only. Measured with
bench/bench_recall.py over the dev corpora (the README has the table): R@5 and MRR@10 gain on all
four (LongMemEval both roles R@5 .705 → .757, user turns .872 → .897; LoCoMo facts .716 → .738),
R@10 holds or gains.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["PIECE_CACHE_BYTES", "RERANK_DEPTH", "PieceCache", "TokenEmbedder", "maxsim"]

#: Candidates reranked: the top 30 of the fused order (deeper gains little on R@5, and costs in proportion).
RERANK_DEPTH = 30
#: What a store's :class:`PieceCache` holds at most: about 44,000 word pieces, some 1,200 chat turns.
PIECE_CACHE_BYTES = 32 * 2**20


@runtime_checkable
class TokenEmbedder(Protocol):
    """An embedder that can also give a text's word pieces as vectors (the default MiniLM can)."""

    def token_vectors(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Per text, one unit vector per word piece it reads."""
        ...


def maxsim(question: npt.NDArray[np.float32], candidate: npt.NDArray[np.float32]) -> float:
    """The mean over the question's word pieces of each one's best cosine among the candidate's
    (rows are unit vectors); 0 when either has none."""
    if not len(question) or not len(candidate):
        return 0.0
    return float((question @ candidate.T).max(axis=1).mean())


class PieceCache:
    """The word-piece vectors of the texts recent reranks read, so a store asked about the same
    things again (an agent's session, a server's clients) runs the model over new texts only.

    Keyed by a digest of the text, never the text itself (a forgotten entry's words do not stay in
    memory), so a changed entry is simply a new key; float16, the least recently used dropped past
    ``budget`` bytes. Safe to share between threads.
    """

    def __init__(self, budget: int = PIECE_CACHE_BYTES) -> None:
        self.budget = budget
        self.size = 0
        self._rows: OrderedDict[bytes, npt.NDArray[np.float16]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def pieces(self, embedder: TokenEmbedder, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Each text's word-piece vectors, from the cache or, for those it lacks, one model call."""
        keys = [hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest() for text in texts]
        found: dict[bytes, npt.NDArray[np.float32]] = {}
        with self._lock:
            for key in keys:
                row = self._rows.get(key)
                if row is not None:
                    self._rows.move_to_end(key)
                    found[key] = row.astype(np.float32)
        missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in found}
        if missing:
            computed = [vectors.astype(np.float16) for vectors in embedder.token_vectors(list(missing.values()))]
            # Scored at the precision kept: a rerank orders the same whether its pieces were cached or not.
            found.update((key, vectors.astype(np.float32)) for key, vectors in zip(missing, computed, strict=True))
            with self._lock:
                for key, vectors in zip(missing, computed, strict=True):
                    self._keep(key, vectors)
        return [found[key] for key in keys]

    def _keep(self, key: bytes, row: npt.NDArray[np.float16]) -> None:
        if row.nbytes > self.budget or key in self._rows:
            return
        self._rows[key] = row
        self.size += row.nbytes
        while self.size > self.budget:
            _, dropped = self._rows.popitem(last=False)
            self.size -= dropped.nbytes
