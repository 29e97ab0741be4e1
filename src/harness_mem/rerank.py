"""Late-interaction reranking: a question's word pieces matched one by one against a candidate's.

A pooled MiniLM vector averages a text into one point, so a question about one detail of a turn
that says several things sits far from it. MaxSim (as ColBERT scores) keeps the detail: each word
piece of the question takes its best match among the candidate's word pieces, and the matches are
averaged. The vectors come from the same all-MiniLM-L6-v2 that embeds the store (its token states,
before pooling), so nothing else is installed; no cross-encoder with its weights installs from the
package registry (flashrank and rerankers fetch theirs from a hub at run time).

The top :data:`RERANK_DEPTH` candidates of a recall are fused again (``fusion.fuse``, the same
weights and priors) with each one's MaxSim in place of its cosine. Their word pieces are computed at
query time (one model pass over 30 texts: 0.1–0.4 s for chat turns and facts, about a second for
long assistant replies), so it is an option: ``recall(..., rerank=True)``, ``harness-mem recall
--rerank``. Measured with bench/bench_recall.py over the dev corpora (the README has the table): R@5
and MRR@10 gain on all four (LongMemEval both roles R@5 .700 → .750, user turns .871 → .897; LoCoMo
facts .722 → .741), R@10 holds or gains.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["RERANK_DEPTH", "TokenEmbedder", "maxsim"]

#: Candidates reranked: the top 30 of the fused order (deeper gains little on R@5, and costs in proportion).
RERANK_DEPTH = 30


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
