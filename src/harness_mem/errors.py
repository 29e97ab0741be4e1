"""Every error harness_mem raises on purpose.

Callers can catch at any level of the tree::

    HarnessMemError
    ├── StorageError              the database cannot be used as asked
    │   ├── ExtensionError        sqlite-vec (or extension loading) is unavailable
    │   ├── SchemaTooNewError     the file was migrated by a newer harness-mem
    │   └── MigrationError        a migration failed and was rolled back
    ├── InvalidInputError         the caller passed something we refuse (bad kind, bad time, ...)
    │   ├── DuplicateIdError      an id that already exists in the namespace
    │   ├── IdentityKeyError      the store's identity key is not here: no pseudonym can be made
    │   └── InvalidSkillError     a SKILL.md that is malformed or breaks the agentskills.io rules
    ├── NotFoundError             no entry (or run, or skill) with that id
    ├── EmbedderError             no embedder available, or a different one than the file was built with
    ├── BlockedError              redaction policy refused to store the content
    │   └── WriteRefusedError     a GuardedMemory write was refused (reason: substring, policy, duplicate)
    └── ModelError                a text model call failed or answered nonsense

Each message says what went wrong and, where there is one, how to fix it: the CLI prints it as is.
"""

from __future__ import annotations

__all__ = [
    "BlockedError",
    "DiskFullError",
    "DuplicateIdError",
    "EmbedderError",
    "ExtensionError",
    "HarnessMemError",
    "IdentityKeyError",
    "InvalidInputError",
    "InvalidSkillError",
    "MigrationError",
    "MissingVectorsWarning",
    "ModelMissingWarning",
    "ModelError",
    "NotFoundError",
    "SchemaTooNewError",
    "StorageError",
    "SyncFormatError",
    "WriteRefusedError",
]


class HarnessMemError(Exception):
    """Base class: anything harness_mem raises deliberately."""


class StorageError(HarnessMemError):
    """The database cannot be used as asked."""


class DiskFullError(StorageError):
    """The disk filled up during a write; the write was rolled back, nothing committed was lost."""


class ExtensionError(StorageError):
    """SQLite extensions (sqlite-vec) cannot be loaded in this Python."""


class SchemaTooNewError(StorageError):
    """The database was migrated by a newer version of harness-mem."""


class MigrationError(StorageError):
    """A migration failed; it was rolled back and stays pending."""


class InvalidInputError(HarnessMemError, ValueError):
    """The caller passed a value harness_mem refuses."""


class DuplicateIdError(InvalidInputError):
    """An entry with this id already exists in the namespace."""


class IdentityKeyError(InvalidInputError):
    """The store's pseudonyms are keyed with an identity key this process does not have: a value
    holding personal data can be neither written nor looked up (reads show the pseudonyms)."""


class InvalidSkillError(InvalidInputError):
    """A SKILL.md document is malformed or breaks the agentskills.io rules."""


class SyncFormatError(InvalidInputError):
    """A sync operation this version does not read: malformed, or made by a newer harness-mem."""


class NotFoundError(HarnessMemError, LookupError):
    """No row with that id."""


class EmbedderError(HarnessMemError):
    """No embedder is available, or the file was built with a different one."""


class MissingVectorsWarning(UserWarning):
    """Recall answered although some entries have no vector yet (``reindex`` embeds them)."""


class ModelMissingWarning(UserWarning):
    """The file has vectors but this process has no model to make more: it recalls by keyword, and
    what it writes waits for ``reindex`` in a process that has the model."""


class BlockedError(HarnessMemError):
    """The redaction policy refused to store this content."""


class WriteRefusedError(BlockedError):
    """A guarded write stored nothing; ``reason`` is "blocked-substring", "policy" or "duplicate"."""

    def __init__(
        self,
        message: str,
        *,
        reason: str = "policy",
        counts: dict[str, int] | None = None,
        duplicate_of: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.counts = dict(counts or {})  # kinds that made the policy block, never values
        self.duplicate_of = duplicate_of  # id of the stored entry this write duplicates


class ModelError(HarnessMemError):
    """A text model call failed or returned something unusable."""
