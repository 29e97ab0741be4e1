"""Import a coding agent's transcripts: find the files, refuse what is not one, store only what is new.

A backfill reads months of history, and is run again as that history grows, so it is built to be
re-run: each file is read from where the last run stopped (:mod:`.positions`: an unchanged file is
not read at all, a grown one only from its new lines), every turn has a stable id (:mod:`.turns`),
and each batch asks the store which of its ids are stored already, so only the others are cut,
redacted and written. A turn forgotten since keeps its tombstone, so an import never brings it
back. A session the hooks were capturing is imported only up to the hooks' first turn in it: from
there on it is stored already, in the hooks' own words (a reply whole, a tool's structured
result), under other ids.

A file named on its own that is not a transcript of the format asked for is refused before anything
is stored (the first records show it: :data:`SNIFF_LINES`); inside a folder such files are counted
and passed over. Inside a transcript, a line that is not a record, or a record that gives no turn,
is counted by reason: nothing raises past the import.

Turns are cut as the hooks cut them (tool turns to
:data:`~harness_mem.integrations.claude_code.TOOL_MAX_CHARS`, text to ``TEXT_MAX_CHARS``, never
through a value the redactor would take) and written through ``MemoryStore.add_many``, so they are
redacted and indexed like every write.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import HarnessMemError, InvalidInputError
from ..integrations.claude_code import CAPTURE_EVENTS, HOST, TEXT_MAX_CHARS, TOOL_MAX_CHARS
from ..jsonl import MAX_LINE_BYTES, one_line, read_lines
from ..models import parse_time
from ..progress import Progress
from . import claude_code, codex, positions
from .turns import ImportedTurn, Item, Resume, Skipped, load_record

if TYPE_CHECKING:
    from ..store import MemoryStore

__all__ = ["BATCH_SIZE", "CAPTURED", "FORMATS", "HOOK_MARGIN", "SNIFF_LINES", "TranscriptFormat",
           "TranscriptReport", "find_transcripts", "format_of", "import_transcripts"]

#: A file is a transcript when its first records (at most this many lines) say so.
SNIFF_LINES = 20
#: Turns looked up and written together: one query for which are stored, one transaction.
BATCH_SIZE = 500
CAPTURED = "captured by the hooks"
#: A turn this close before a session's first hook-captured turn is taken as captured too: the
#: host writes its record and runs the hook at about the same time, in either order.
HOOK_MARGIN = timedelta(seconds=5)
#: Sessions whose hook start an import keeps in mind at once (a file's session, its sub-agents' …).
HOOKED_SESSIONS = 1024


@dataclass(frozen=True)
class TranscriptFormat:
    """A kind of transcript file: how to find it, tell it from other files and read its turns."""

    name: str
    title: str
    source: str
    default_root: Callable[[], Path]
    recognises: Callable[[list[dict[str, Any]]], bool]
    read: Callable[[Path, Iterable[tuple[int, bytes | str]]], Iterator[Item]]
    #: The ``metadata.event`` of the turns this tool's hooks store (none: it has no hooks).
    hook_events: tuple[str, ...] = ()


FORMATS: dict[str, TranscriptFormat] = {
    claude_code.NAME: TranscriptFormat(claude_code.NAME, claude_code.TITLE, HOST, claude_code.default_root,
                                       claude_code.recognises, claude_code.read, CAPTURE_EVENTS),
    codex.NAME: TranscriptFormat(codex.NAME, codex.TITLE, codex.NAME, codex.default_root,
                                 codex.recognises, codex.read),
}


@dataclass
class TranscriptReport:
    """What an import did: turns written, turns found stored already, and what was skipped, by reason."""

    format: str
    files: int = 0
    sessions: int = 0  # sessions the files hold turns of
    new_sessions: int = 0  # sessions that got at least one turn now
    turns: int = 0
    already_stored: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # records that give no turn, by reason
    files_skipped: Counter[str] = field(default_factory=Counter)  # files passed over in a folder, by reason
    unchanged: int = 0  # files not read: the same as when the last import read them
    bytes: int = 0  # bytes read from the files

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "files": self.files, "sessions": self.sessions,
                "new_sessions": self.new_sessions, "turns": self.turns, "already_stored": self.already_stored,
                "unchanged": self.unchanged, "bytes": self.bytes,
                "skipped": dict(self.skipped.most_common()), "files_skipped": dict(self.files_skipped.most_common())}


def format_named(name: str) -> TranscriptFormat:
    """The format called ``name``; raises :class:`InvalidInputError` naming the known ones."""
    try:
        return FORMATS[name]
    except KeyError:
        raise InvalidInputError(f"unknown transcript format {name!r} — use one of {', '.join(FORMATS)}") from None


def find_transcripts(paths: Sequence[Path], format: str) -> tuple[list[Path], Counter[str]]:
    """The transcript files at ``paths`` (files, or folders searched for ``*.jsonl``), in order, and
    the files passed over in folders, by reason. No paths: the tool's own folder.

    Raises :class:`InvalidInputError` in one line for a path that does not exist, a file named on
    its own that is not such a transcript, or when no transcript is found at all.
    """
    kind = format_named(format)
    paths = list(paths) or [kind.default_root()]
    found: list[Path] = []
    passed: Counter[str] = Counter()
    for path in paths:
        if path.is_dir():
            for candidate in sorted(path.rglob("*.jsonl"), key=str):  # a session before its sub-agents
                why = _not_one(candidate, kind)
                if why is None:
                    found.append(candidate)
                elif candidate.is_file():
                    passed[why] += 1
        elif path.exists():
            why = _not_one(path, kind)
            if why is not None:
                raise InvalidInputError(f"{path} is not a {kind.title} ({why}) — nothing was imported")
            found.append(path)
        else:
            raise InvalidInputError(f"no such file or folder: {path}")
    if not found:
        where = ", ".join(map(str, paths))
        raise InvalidInputError(f"no {kind.title} in {where} — nothing was imported")
    return list(dict.fromkeys(found)), passed


def format_of(path: Path) -> TranscriptFormat | None:
    """The transcript format the file at ``path`` is in, by its first records; None for any other file."""
    return next((kind for kind in FORMATS.values() if _not_one(path, kind) is None), None)


def _not_one(path: Path, kind: TranscriptFormat) -> str | None:
    """Why the file at ``path`` is not a transcript of ``kind``; None when it is one."""
    records: list[dict[str, Any]] = []
    try:
        with path.open("rb") as stream:
            for number, raw in enumerate(read_lines(stream), start=1):
                record = load_record(raw)
                if isinstance(record, dict):
                    records.append(record)
                if number >= SNIFF_LINES:
                    break
    except (OSError, HarnessMemError) as exc:
        return one_line(f"cannot read it: {exc}")
    if not records:
        return "no JSON records in its first lines"
    return None if kind.recognises(records) else "its first records have other fields"


def import_transcripts(
    store: MemoryStore,
    files: Sequence[Path],
    format: str,
    *,
    progress: Progress | None = None,
    batch_size: int = BATCH_SIZE,
) -> TranscriptReport:
    """Import the transcript ``files`` (see :func:`find_transcripts`) into ``store``; turns already
    stored are skipped. ``progress`` is told the phases, and the bytes of each part read with the
    turns it wrote."""
    kind = format_named(format)
    if batch_size < 1:
        raise InvalidInputError(f"batch_size must be at least 1, not {batch_size!r}")
    report = TranscriptReport(kind.name)
    sessions: set[str] = set()
    added: set[str] = set()
    hooked: dict[str, datetime | None] = {}  # session -> when the hooks began capturing it
    writing = "embedding and writing" if store.embedder is not None and not store.keyword_only else "writing"
    with store.storage.bulk():
        for path in files:
            try:
                stream = path.open("rb")
            except OSError as exc:
                report.files_skipped[one_line(f"cannot read it: {exc}")] += 1
                continue
            with stream:
                if progress is not None:
                    progress.phase("reading")
                report.files += 1
                start = positions.start_of(store, kind.name, path, stream.fileno())
                if start.unchanged:
                    report.unchanged += 1
                    if progress is not None:
                        progress.advance(_size_of(stream), 0)
                    continue
                read = _Counted(stream, start, report.turns)
                batch: list[ImportedTurn] = []
                resume: Resume | None = None
                try:
                    for item in kind.read(path, read.lines()):
                        if isinstance(item, Resume):
                            resume = item
                            continue
                        if isinstance(item, Skipped):
                            report.skipped[item.reason] += 1
                            continue
                        sessions.add(item.session)
                        if kind.hook_events and _captured(store, kind, item, hooked):
                            report.skipped[CAPTURED] += 1
                            continue
                        batch.append(item)
                        if len(batch) >= batch_size:
                            added |= _write(store, kind, batch, report, progress, writing)
                            batch = []
                            _advance(read, report, progress)
                except InvalidInputError as exc:  # a line without end: what came before it is kept
                    report.skipped[one_line(str(exc))] += 1
                if batch:
                    added |= _write(store, kind, batch, report, progress, writing)
                _advance(read, report, progress)
                position = None if resume is None else read.position(resume)
                if position is not None:  # only now: the turns before it are written
                    positions.save(store, kind.name, path, position)
    report.sessions, report.new_sessions = len(sessions), len(added)
    return report


def _size_of(stream: Any) -> int:
    return int(os.fstat(stream.fileno()).st_size)


def _captured(store: MemoryStore, kind: TranscriptFormat, turn: ImportedTurn,
              hooked: dict[str, datetime | None]) -> bool:
    """True when the tool's hooks were capturing ``turn``'s session by its time: they stored it
    already, in their own words (a reply whole, a tool's structured result), under another id."""
    if turn.session not in hooked:
        first = next(store.list(limit=1, session=turn.session, kind="turn",
                                metadata={"event": {"$in": list(kind.hook_events)}}), None)
        hooked[turn.session] = None if first is None else first.created_at - HOOK_MARGIN
        if len(hooked) > HOOKED_SESSIONS:
            del hooked[next(iter(hooked))]
    since = hooked[turn.session]
    if since is None:
        return False
    try:
        return parse_time(turn.created_at) >= since
    except (InvalidInputError, ValueError, OverflowError):  # the store says why when it is written
        return False


class _Counted:
    """A file's numbered lines from where :mod:`.positions` says to start, counting the bytes read
    (and the turns written from them, so the progress follows the work) and where each line starts
    (so the next run can start at one)."""

    def __init__(self, stream: Any, start: positions.Start, turns: int) -> None:
        self.stream = stream
        self.start = start
        self.done = 0
        self.shown = 0
        self.spans: dict[int, tuple[int, int]] = {}  # line number -> (offset, length)
        self.end = start.offset  # where the lines read so far end, their newline included
        self.last = start.line - 1  # the number of the last line read
        self.exact = True  # False once a line too long to keep was cut: its length is unknown
        self.turns_shown = turns  # the import's turns written before this file

    def lines(self) -> Iterator[tuple[int, bytes | str]]:
        fd = self.stream.fileno()
        for number, offset, length in self.start.header:
            header = os.pread(fd, length, offset)
            self.done += len(header)
            self.spans[number] = (offset, length)
            yield number, header
        self.stream.seek(self.start.offset)
        for number, raw in enumerate(read_lines(self.stream), start=self.start.line):
            self.done += len(raw) + 1
            self.exact = self.exact and len(raw) <= MAX_LINE_BYTES
            self.spans[number] = (self.end, len(raw))
            self.end += len(raw) + 1
            self.last = number
            yield number, raw

    def position(self, resume: Resume) -> positions.Position | None:
        """Where the next run starts, as ``resume`` says; None when it cannot be known (the file
        is read in full next time)."""
        if not self.exact:
            return None
        fd = self.stream.fileno()
        stat = os.fstat(fd)
        last, size = self.last, self.end
        if last >= self.start.line and os.pread(fd, 1, size - 1) != b"\n":
            size, last = self.spans[last][0], last - 1  # its last line has no newline yet: it is being written
        line = last + 1 if resume.line is None else min(resume.line, last + 1)
        if line not in self.spans and line != last + 1:
            return None
        offset = self.spans[line][0] if line in self.spans else size
        header = tuple((n, *self.spans[n]) for n in resume.header if n in self.spans and n < line)
        head, tail = positions.fingerprint(fd, size)
        return positions.Position(size, stat.st_mtime_ns, stat.st_ino, head, tail, line, offset, header)


def _advance(read: _Counted, report: TranscriptReport, progress: Progress | None) -> None:
    step, read.shown = read.done - read.shown, read.done
    written, read.turns_shown = report.turns - read.turns_shown, report.turns
    report.bytes += step
    if progress is not None and (step or written):
        progress.advance(step, written)


def _write(store: MemoryStore, kind: TranscriptFormat, batch: list[ImportedTurn], report: TranscriptReport,
           progress: Progress | None, phase: str) -> set[str]:
    """Write the turns of ``batch`` not stored yet; returns the sessions that got turns."""
    from ..experience.transcript import truncate_turn  # the experience package: only when writing

    by_id: dict[str, ImportedTurn] = {}
    for turn in batch:
        by_id.setdefault(turn.id, turn)  # a repeated id (a record written twice) is stored once
    stored = store.storage.still_there(store.namespace, list(by_id), include_superseded=True)
    # Ids are looked up as given first: they hold nothing a redactor changes, as a rule, and making
    # each one's stored form costs a scan of it (half of a second run's time). Those not found are
    # looked up again in the form the redactor gives them.
    unfound = {store.scope.key(id) or id: id for id in by_id if id not in stored}
    changed = {key: id for key, id in unfound.items() if key != id}
    if changed:
        stored |= {changed[key] for key in store.storage.still_there(store.namespace, list(changed),
                                                                     include_superseded=True)}
    new = [turn for id, turn in by_id.items() if id not in stored]
    redactor = store.redactor
    items = []
    for turn in new:
        text, _ = truncate_turn(turn.text, TOOL_MAX_CHARS if turn.role == "tool" else TEXT_MAX_CHARS,
                                redactor=redactor)
        items.append({"content": text, "kind": "turn", "role": turn.role, "session": turn.session,
                      "tags": turn.tags, "source": kind.source, "metadata": turn.metadata, "id": turn.id,
                      "created_at": turn.created_at})
    refused = 0

    def invalid(index: int, exc: HarnessMemError) -> None:
        nonlocal refused
        refused += 1
        report.skipped[one_line(str(exc))] += 1

    if progress is not None and items:
        progress.phase(phase)
    written = store.add_many(items, on_conflict="ignore", on_invalid=invalid) if items else []
    report.turns += len(written)
    report.already_stored += len(batch) - len(written) - refused
    return {entry.session for entry in written if entry.session}
