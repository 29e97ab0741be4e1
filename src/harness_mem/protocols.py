"""The narrow interfaces other code builds on: anything that remembers, anything that embeds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .models import Entry, Hit

if TYPE_CHECKING:  # annotations only: code that merely wraps a Memory need not load numpy
    import numpy as np
    import numpy.typing as npt


@runtime_checkable
class Memory(Protocol):
    """Something that stores entries and recalls them. :class:`MemoryStore` is one; wrappers are others."""

    def add(self, content: str, **fields: Any) -> Entry:
        """Store ``content`` and return the stored entry (as stored: possibly redacted)."""
        ...

    def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
        """The ``k`` most relevant entries, best first; an empty list is not an error."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors, many at a time."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """A ``(len(texts), dim)`` float32 matrix, one model call for the whole batch."""
        ...
