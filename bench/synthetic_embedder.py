"""A bench-only embedder for stores too large to embed with the real model here: real MiniLM vectors
for the texts that are measured, synthetic ones that resemble them for the filler.

Embedding a million turns with all-MiniLM-L6-v2 takes hours on two cores, so :class:`SyntheticMiniLM`
answers two ways:

- a text it was given a real vector for (the planted LoCoMo turns, as the store embeds them:
  ``"<speaker>: <text>"``) gets that vector, computed once by the real model (the product's
  :class:`~harness_mem.providers.embeddings.MiniLMEmbedder`) and cached beside the store;
- any other text (filler) gets a synthetic vector, a function of the text alone (a blake2b hash
  of it picks everything): one of a few thousand *real* MiniLM vectors of filler texts (the
  anchors) moved by Gaussian noise with the anchors' own covariance, then renormalised::

      v = mean + RHO * (anchor - mean) + sqrt(1 - RHO²) * noise,   noise ~ N(0, cov(anchors))

  so a filler vector lies where real text does: the same mean direction, the same spread along the
  same axes, correlated RHO with one real text. With RHO = 0.7, 1,000 synthetic vectors against
  4,000 anchors, beside 1,000 held-out real filler vectors: mean pairwise cosine 0.266 (real
  0.272), nearest anchor but its own 0.53 (a real one's nearest 0.56), mean of the ten nearest
  0.53 (real 0.52); a synthetic vector has cosine 0.78 with its own anchor, and two of the same
  anchor about 0.63 with each other.

Its name and fingerprint are its own (``bench-synthetic-minilm``), so a store built with it is never
mistaken for one of the real model: opening it with MiniLM is refused by the store's model check.
Questions are embedded by the real model (see ``bench_scale.question_vectors``) and passed to recall
as ``query_vector``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

NAME = "bench-synthetic-minilm"
VERSION = 1
DIM = 384
RHO = 0.7  # correlation of a filler vector with its anchor (see the module docstring)
POOL = 4096  # Gaussian vectors the noise is summed from (four per text: 4096⁴ combinations)

Vectors = npt.NDArray[np.float32]


class SyntheticMiniLM:
    """Real MiniLM vectors for known texts, synthetic ones near real filler vectors for the rest.

    :param anchors: real MiniLM vectors of filler texts (unit length), at least a few hundred.
    :param real: the texts that get a real vector, and those vectors.
    :param model_fingerprint: the real model's fingerprint (recorded in this embedder's own).
    """

    name = NAME
    dim = DIM

    def __init__(self, anchors: Vectors, real: dict[str, Vectors], model_fingerprint: str) -> None:
        self.real = real
        self.mean = anchors.mean(axis=0)
        self.centred = (anchors - self.mean).astype(np.float32)
        eigenvalues, axes = np.linalg.eigh(np.cov(self.centred.T))
        # z @ shape.T has the anchors' covariance when z is standard normal; the pool holds such
        # draws, shaped once, so a text's noise is a sum of pool rows: the same bits in any batch.
        shape = axes * np.sqrt(np.clip(eigenvalues, 0, None))
        self.pool = (np.random.default_rng([VERSION, 384]).standard_normal((POOL, DIM)) @ shape.T).astype(np.float32)
        digest = hashlib.sha256(anchors.astype(np.float32).tobytes()).hexdigest()[:12]
        self.fingerprint = f"{NAME}:v{VERSION}:rho{RHO}:{len(anchors)}-anchors-{digest}:{model_fingerprint}"
        self.real_given = 0  # texts answered with a real vector
        self.synthetic_given = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        filler = []
        for i, text in enumerate(texts):
            vector = self.real.get(text)
            if vector is None:
                filler.append(i)
            else:
                out[i] = vector
        if filler:
            out[filler] = self.synthetic([texts[i] for i in filler])
        self.real_given += len(texts) - len(filler)
        self.synthetic_given += len(filler)
        return out

    def synthetic(self, texts: Sequence[str]) -> Vectors:
        """The synthetic vector of each text (ignoring ``real``): the same text always gets the same one."""
        digests = np.frombuffer(b"".join(hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                                         for t in texts), dtype=np.uint16).reshape(len(texts), 8)
        picks = digests[:, :4] % POOL
        anchor = digests[:, 4:].astype(np.uint64)
        anchor = (anchor[:, 0] | anchor[:, 1] << 16 | anchor[:, 2] << 32) % len(self.centred)
        noise = self.pool[picks].sum(axis=1) / 2  # four draws halved: the same distribution
        vectors = self.mean + RHO * self.centred[anchor] + np.float32(np.sqrt(1 - RHO**2)) * noise
        vectors /= np.sqrt((vectors * vectors).sum(axis=1, keepdims=True))
        return vectors.astype(np.float32)


# ---------------------------------------------------------------------------------- cached real vectors


def real_vectors(path: Path, texts: Sequence[str]) -> Vectors:
    """The real MiniLM vectors of ``texts``, cached in ``path`` (.npy) with the texts and the model's
    fingerprint beside it (.json); embedded with the product's default model when the cache does not
    hold exactly these texts."""
    from harness_mem.providers.embeddings import MiniLMEmbedder

    model = MiniLMEmbedder()
    side = path.with_suffix(".json")
    wanted = {"model": model.fingerprint, "texts": list(texts)}
    if path.exists() and side.exists() and json.loads(side.read_text(encoding="utf-8")) == wanted:
        return np.load(path)  # type: ignore[no-any-return]
    vectors = model.embed(list(texts)) if texts else np.zeros((0, DIM), np.float32)
    np.save(path, vectors)
    side.write_text(json.dumps(wanted), encoding="utf-8")
    return vectors


def model_fingerprint() -> str:
    from harness_mem.providers.embeddings import MiniLMEmbedder

    return MiniLMEmbedder().fingerprint
