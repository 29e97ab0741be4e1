"""harness-mem: local-first memory and experience for LLM agents, in one SQLite file."""

from .errors import HarnessMemError
from .models import Entry, Hit
from .protocols import Embedder, Memory

__all__ = ["Embedder", "Entry", "HarnessMemError", "Hit", "Memory"]
