"""Import and export entries as JSON Lines, one entry an object a line.

An import keeps every good line and reports every bad one with its line number and the reason, so a
10,000-line file with three broken lines stores 9,997 entries and says exactly which three to fix.
Ids make it idempotent: a line whose id is already stored is skipped (or replaced, if asked).

A line is ``{"id"?, "text"|"content", "kind"?, "role"?, "session"?, "tags"?, "timestamp"?|"created_at"?,
"expires_at"?, "ttl_days"?, "source"?, "metadata"?, "namespace"?}``; any other key is kept in the
entry's metadata, so nothing a source file says is lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from .errors import HarnessMemError, InvalidInputError
from .models import dumps
from .store import BULK_BATCH_SIZE, MemoryStore, OnConflict

KNOWN_KEYS = frozenset(
    {"id", "text", "content", "kind", "role", "session", "tags", "timestamp", "created_at", "expires_at",
     "ttl_days", "source", "metadata", "namespace", "redactions"}
)


@dataclass(frozen=True)
class LineError:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class ImportReport:
    lines: int = 0
    added: int = 0
    skipped: int = 0  # already stored (same id) and left as they were
    errors: list[LineError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def parse_line(raw: bytes | str) -> dict[str, Any] | None:
    """One line as an entry item; None for a blank line; raises InvalidInputError with the reason."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"not valid UTF-8 (byte {exc.start})") from None
    text = raw.strip().lstrip("\ufeff")
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"expected a JSON object, got {type(data).__name__}")
    if "content" not in data:
        if "text" not in data:
            raise InvalidInputError('no "text" or "content" field')
        data["content"] = data.pop("text")
    else:
        data.pop("text", None)
    if "timestamp" in data:
        timestamp = data.pop("timestamp")
        data.setdefault("created_at", timestamp)
    data.pop("content_hash", None)  # derived: recomputed from the content, as in an export
    if data.keys() <= KNOWN_KEYS:  # the common case: nothing to move into the metadata
        return data
    extra = {k: data.pop(k) for k in data.keys() - KNOWN_KEYS}
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidInputError("metadata must be a JSON object")
    data["metadata"] = {**extra, **metadata}
    return data


def import_jsonl(
    store: MemoryStore,
    lines: Iterable[bytes | str],
    *,
    on_conflict: OnConflict = "ignore",
    batch_size: int = BULK_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import JSON Lines into ``store``; ``progress(n)`` is called as lines are read."""
    report = ImportReport()
    line_numbers: list[int] = []

    def items() -> Iterator[dict[str, Any]]:
        for number, raw in enumerate(lines, start=1):
            report.lines = number
            if progress is not None:
                progress(1)
            try:
                item = parse_line(raw)
            except InvalidInputError as exc:
                report.errors.append(LineError(number, str(exc)))
                continue
            if item is None:
                continue
            line_numbers.append(number)
            yield item

    rejected_by_store: list[LineError] = []

    def invalid(index: int, exc: HarnessMemError) -> None:
        rejected_by_store.append(LineError(line_numbers[index], str(exc)))

    report.added = store.bulk_add(items(), on_conflict=on_conflict, batch_size=batch_size, on_invalid=invalid)
    report.skipped = len(line_numbers) - report.added - len(rejected_by_store)
    report.errors.extend(rejected_by_store)
    report.errors.sort(key=lambda e: e.line)
    return report


def export_jsonl(store: MemoryStore, out: IO[str]) -> int:
    """Write every live entry of the store's namespace as JSON Lines; returns how many."""
    count = 0
    for record in store.export():
        out.write(dumps(record) + "\n")
        count += 1
    return count
