"""harness-mem: local-first memory and experience for LLM agents, in one SQLite file.

::

    from harness_mem import MemoryStore
    with MemoryStore("agent.db") as store:
        store.add("we chose argon2id for password hashing", tags=["decision"])
        for hit in store.recall("password hashing"):
            print(hit.score, hit.entry.content)
"""

from .aio import AsyncMemoryStore
from .embeddings import MiniLMEmbedder
from .episode import Episode
from .errors import (
    BlockedError,
    DuplicateIdError,
    EmbedderError,
    HarnessMemError,
    InvalidInputError,
    ModelError,
    NotFoundError,
    StorageError,
    WriteRefusedError,
)
from .experience import ExperienceStore
from .guarded import GuardedMemory, RedactingMemory
from .models import Entry, Hit
from .protocols import Embedder, Memory
from .redact import Action, Policy, Redactor
from .skills import Skill
from .store import MemoryStore
from .textmodel import TextModel

__all__ = [
    "Action",
    "AsyncMemoryStore",
    "BlockedError",
    "DuplicateIdError",
    "Embedder",
    "EmbedderError",
    "Entry",
    "Episode",
    "ExperienceStore",
    "GuardedMemory",
    "HarnessMemError",
    "Hit",
    "InvalidInputError",
    "Memory",
    "MemoryStore",
    "MiniLMEmbedder",
    "ModelError",
    "NotFoundError",
    "Policy",
    "RedactingMemory",
    "Redactor",
    "Skill",
    "StorageError",
    "TextModel",
    "WriteRefusedError",
]
