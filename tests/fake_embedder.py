"""A deterministic, instant embedder for tests about the vector *plumbing*, and a CLI launcher that uses it.

:class:`HashedEmbedder` hashes a text's words and character trigrams into 384 signed dimensions and
normalises the sum: texts that share words or spellings get a high cosine, and the same text gets the
same vector in every process. It knows nothing of meaning ("kitty" is not near "cat"), nor of word
order (the same words in another order make the same vector), so tests whose assertion rests on what
a real model understands use the ``embedder`` fixture instead.

The conftest makes it the store's default embedder (what ``embedder="auto"`` and the CLI's
``--embedder auto`` resolve to) for every test not marked ``real_model``; :func:`cli_process` does the
same for a ``harness-mem`` run in a real process.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

TESTS = Path(__file__).resolve().parent
_WORD = re.compile(r"\w+")
WORD_WEIGHT, TRIGRAM_WEIGHT = 1.0, 0.5
SLOTS_PER_FEATURE = 2  # each feature lands in two dimensions: denser vectors, fewer exact collisions


@lru_cache(maxsize=65536)
def _slots(feature: str, dim: int) -> tuple[tuple[int, float], ...]:
    """The dimensions and signs a feature adds to, from a stable hash (Python's hash() is salted per process)."""
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=4 * SLOTS_PER_FEATURE).digest()
    slots = []
    for i in range(SLOTS_PER_FEATURE):
        index = int.from_bytes(digest[4 * i: 4 * i + 3], "big") % dim
        while any(index == taken for taken, _ in slots):  # distinct dimensions: one feature never cancels itself
            index = (index + 1) % dim
        slots.append((index, 1.0 if digest[4 * i + 3] & 1 else -1.0))
    return tuple(slots)


def _features(text: str) -> list[tuple[str, float]]:
    words = _WORD.findall(text.lower())
    found = [(f"w:{word}", WORD_WEIGHT) for word in words]
    for word in words:
        padded = f" {word} "
        found += [(f"c:{padded[i:i + 3]}", TRIGRAM_WEIGHT) for i in range(len(padded) - 2)]
    return found or [(f"t:{text}", 1.0)]  # no word at all ("🙂", "", "-"): the text itself is the feature


class HashedEmbedder:
    """Hashed word and character-trigram features: unit-length float32, deterministic, no model to load.

    ``calls`` records the batch size of every :meth:`embed` call (tests of batching read it).
    """

    def __init__(self, name: str = "hashed-ngrams-test", dim: int = 384) -> None:
        self.name = name
        self.dim = dim
        self.fingerprint = "sha256:" + hashlib.sha256(f"{name}/{dim}/words+trigrams/v1".encode()).hexdigest()[:32]
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        rows: list[int] = []
        columns: list[int] = []
        values: list[float] = []
        for row, text in enumerate(texts):
            for feature, weight in _features(text):
                slots = _slots(feature, self.dim)
                rows += [row] * len(slots)
                columns += [index for index, _ in slots]
                values += [sign * weight for _, sign in slots]
        matrix = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(matrix, (np.asarray(rows, dtype=np.intp), np.asarray(columns, dtype=np.intp)),
                  np.asarray(values, dtype=np.float32))
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix[norms[:, 0] == 0, 0] = norms[norms == 0] = 1.0  # features that cancelled out: a fixed unit vector
        return matrix / norms



#: Characters :class:`StartReader` reads of a text, and its windows' overlap.
READ = 120
OVERLAP = 20


class StartReader(HashedEmbedder):
    """Embeds the first READ characters of a text, as MiniLM reads a bounded start; its windows
    after the first are passages (harness_mem.passages.Splitter)."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return super().embed([text[:READ] for text in texts])

    def passages(self, text: str) -> list[tuple[int, int]]:
        return [(start, min(len(text), start + READ)) for start in range(READ - OVERLAP, len(text) - OVERLAP, READ - OVERLAP)]


def hashed_by_name(name: str) -> HashedEmbedder:
    """A model chosen by name (``--embedder minilm``) is the HashedEmbedder too; unknown names still fail."""
    from harness_mem.errors import EmbedderError
    from harness_mem.providers.embeddings import EMBEDDERS, RECORDED_NAMES

    if RECORDED_NAMES.get(name, name) not in EMBEDDERS:
        raise EmbedderError(f"unknown embedder {name!r}")
    return HashedEmbedder()


def install() -> None:
    """Make :class:`HashedEmbedder` the default embedder of this process (for a CLI run in a subprocess)."""
    import harness_mem.store

    harness_mem.store.default_embedder = HashedEmbedder  # type: ignore[assignment]
    harness_mem.store.named_embedder = hashed_by_name  # type: ignore[assignment]


# Runs `python -m harness_mem ARGS…` after install(): the real entry point, with the test embedder.
_LAUNCHER = (
    "import runpy, sys\n"
    f"sys.path.insert(0, {str(TESTS)!r})\n"
    "import fake_embedder\n"
    "fake_embedder.install()\n"
    "runpy.run_module('harness_mem', run_name='__main__', alter_sys=True)\n"
)


def cli_process(*args: str, input: bytes | None = None, raise_errors: bool = False,
                timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """``harness-mem ARGS…`` in a new process with :class:`HashedEmbedder` as its default embedder.

    ``HARNESS_MEM_RAISE_ERRORS`` is dropped unless ``raise_errors``: a real process shows users'
    errors as one line, which is what these runs check.
    """
    env = dict(os.environ)
    if not raise_errors:
        env.pop("HARNESS_MEM_RAISE_ERRORS", None)
    return subprocess.run([sys.executable, "-c", _LAUNCHER, *args], input=input, capture_output=True,
                          env=env, timeout=timeout)
