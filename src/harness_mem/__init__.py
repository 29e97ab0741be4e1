"""harness-mem: local-first memory and experience for LLM agents, in one SQLite file.

::

    from harness_mem import MemoryStore
    with MemoryStore("agent.db") as store:
        store.add("we chose argon2id for password hashing", tags=["decision"])
        for hit in store.recall("password hashing"):
            print(hit.score, hit.entry.content)
"""

from .aio import AsyncMemoryStore
from .errors import (
    BlockedError,
    DuplicateIdError,
    EmbedderError,
    ExtensionError,
    HarnessMemError,
    InvalidInputError,
    InvalidSkillError,
    MigrationError,
    ModelError,
    NotFoundError,
    SchemaTooNewError,
    StorageError,
    WriteRefusedError,
)
from .experience import Episode, ExperienceRecorder, ExperienceStore, Skill, TranscriptRecorder
from .models import Entry, Hit, ImportLine
from .protocols import Embedder, Memory
from .providers.embeddings import MiniLMEmbedder
from .providers.textmodel import TextModel
from .redaction import Action, GuardedMemory, Policy, RedactingMemory, Redactor
from .schema import json_schema, schemas
from .settings import Settings
from .store import MemoryStore

__all__ = [
    "Action",
    "AsyncMemoryStore",
    "BlockedError",
    "DuplicateIdError",
    "Embedder",
    "EmbedderError",
    "Entry",
    "Episode",
    "ExperienceRecorder",
    "ExperienceStore",
    "ExtensionError",
    "GuardedMemory",
    "HarnessMemError",
    "Hit",
    "ImportLine",
    "InvalidInputError",
    "InvalidSkillError",
    "Memory",
    "MemoryStore",
    "MigrationError",
    "MiniLMEmbedder",
    "ModelError",
    "NotFoundError",
    "Policy",
    "RedactingMemory",
    "Redactor",
    "SchemaTooNewError",
    "Settings",
    "Skill",
    "StorageError",
    "TextModel",
    "TranscriptRecorder",
    "WriteRefusedError",
    "json_schema",
    "schemas",
]
