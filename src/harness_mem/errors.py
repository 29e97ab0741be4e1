"""Every error harness_mem raises on purpose.

Callers can catch at any level of the tree::

    HarnessMemError
    ├── StorageError              the database cannot be used as asked
    │   ├── ExtensionError        sqlite-vec (or extension loading) is unavailable
    │   ├── SchemaTooNewError     the file was migrated by a newer harness-mem
    │   └── MigrationError        a migration failed and was rolled back
    ├── InvalidInputError         the caller passed something we refuse (bad kind, bad time, ...)
    │   └── DuplicateIdError      an id that already exists in the namespace
    ├── NotFoundError             no entry (or run, or skill) with that id
    ├── EmbedderError             no embedder available, or a different one than the file was built with
    ├── BlockedError              redaction policy refused to store the content
    └── ModelError                a text model call failed or answered nonsense

Each message says what went wrong and, where there is one, how to fix it: the CLI prints it as is.
"""

from __future__ import annotations


class HarnessMemError(Exception):
    """Base class: anything harness_mem raises deliberately."""


class StorageError(HarnessMemError):
    """The database cannot be used as asked."""


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


class NotFoundError(HarnessMemError, LookupError):
    """No row with that id."""


class EmbedderError(HarnessMemError):
    """No embedder is available, or the file was built with a different one."""


class BlockedError(HarnessMemError):
    """The redaction policy refused to store this content."""


class ModelError(HarnessMemError):
    """A text model call failed or returned something unusable."""
