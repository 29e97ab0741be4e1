"""harness-mem: local-first memory and experience for LLM agents, in one SQLite file.

::

    from harness_mem import MemoryStore
    with MemoryStore("agent.db") as store:
        store.add("we chose argon2id for password hashing", tags=["decision"])
        for hit in store.recall("password hashing"):
            print(hit.score, hit.entry.content)
"""

import importlib
import typing

# Names load on first use, so that `import harness_mem.jsonl` in an import's worker process, or a
# command that only reads, does not pay for the whole package (pydantic models, numpy, sqlite-utils).
_EXPORTS: dict[str, str] = {
    "Action": ".redaction",
    "AsyncMemoryStore": ".aio",
    "BlockedError": ".errors",
    "DuplicateIdError": ".errors",
    "Embedder": ".protocols",
    "EmbedderError": ".errors",
    "Entry": ".models",
    "Episode": ".experience",
    "ExperienceRecorder": ".experience",
    "ExperienceStore": ".experience",
    "ExtensionError": ".errors",
    "GuardedMemory": ".redaction",
    "HarnessMemError": ".errors",
    "Hit": ".models",
    "IdentityKeyError": ".errors",
    "ImportLine": ".models",
    "InvalidInputError": ".errors",
    "InvalidSkillError": ".errors",
    "json_schema": ".schema",
    "Memory": ".protocols",
    "MemoryStore": ".store",
    "MigrationError": ".errors",
    "MiniLMEmbedder": ".providers.embeddings",
    "ModelError": ".errors",
    "NotFoundError": ".errors",
    "Policy": ".redaction",
    "RedactingMemory": ".redaction",
    "Redactor": ".redaction",
    "schemas": ".schema",
    "SchemaTooNewError": ".errors",
    "Settings": ".settings",
    "Skill": ".experience",
    "StorageError": ".errors",
    "TextModel": ".providers.textmodel",
    "TranscriptRecorder": ".experience",
    "TranscriptWriter": ".experience",
    "WriteRefusedError": ".errors",
}

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
    "IdentityKeyError",
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
    "TranscriptWriter",
    "WriteRefusedError",
    "json_schema",
    "schemas",
]


def __getattr__(name: str) -> typing.Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if typing.TYPE_CHECKING:
    from .aio import AsyncMemoryStore
    from .errors import (
        BlockedError,
        DuplicateIdError,
        EmbedderError,
        ExtensionError,
        HarnessMemError,
        IdentityKeyError,
        InvalidInputError,
        InvalidSkillError,
        MigrationError,
        ModelError,
        NotFoundError,
        SchemaTooNewError,
        StorageError,
        WriteRefusedError,
    )
    from .experience import (
        Episode,
        ExperienceRecorder,
        ExperienceStore,
        Skill,
        TranscriptRecorder,
        TranscriptWriter,
    )
    from .models import Entry, Hit, ImportLine
    from .protocols import Embedder, Memory
    from .providers.embeddings import MiniLMEmbedder
    from .providers.textmodel import TextModel
    from .redaction import Action, GuardedMemory, Policy, RedactingMemory, Redactor
    from .schema import json_schema, schemas
    from .settings import Settings
    from .store import MemoryStore
