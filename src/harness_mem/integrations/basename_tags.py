"""Turns an older harness-mem tagged with their directory's name, given back to their repository.

Before a project was its git repository (:mod:`.projects`), the Claude Code hooks tagged each turn
``project:<basename of cwd>``, so ``clientA/myproj`` and ``clientB/myproj`` shared one tag. Such a
tag names no project now: the hooks read only ``project:<repository key>`` (a key always holds a
``/``; a basename never does), so those turns are given to no one — never another ``myproj``'s
session.

Yet the old turns of a repository are its history. Claude Code keeps each session's transcript in
one folder per working directory (``~/.claude/projects/-home-ada-clientA-myproj/<session>.jsonl``),
and the transcript's records name their ``cwd``. So at SessionStart, the sessions tagged with this
directory's old basename tag whose transcript lies beside this session's, and whose ``cwd`` is in
this repository, are this repository's: their entries (turns, and what consolidation derived from
them, which carried no project then) are tagged with the repository's key instead. A session of
another ``myproj`` has its transcript in another folder and keeps its old tag. Each folder is
looked at once (a setting records it): no new turn gets a basename tag any more.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .projects import TAG_PREFIX, Project, find_project

if TYPE_CHECKING:
    from ..store import MemoryStore

__all__ = ["adopt_sessions", "basename_tag"]

#: How much of a transcript's start is read to find the directory it was recorded in.
HEAD_BYTES = 64 << 10


def basename_tag(cwd: str) -> str | None:
    """The tag an older harness-mem gave a turn said in ``cwd``: ``project:`` and the directory's name."""
    name = Path(cwd.rstrip("/\\")).name
    return TAG_PREFIX + name if name else None


def adopt_sessions(store: MemoryStore, payload: dict[str, Any], project: Project) -> int:
    """Tag with ``project`` the entries of the sessions recorded in this directory that carry its old
    basename tag (see the module); returns how many entries changed. Once per transcript folder."""
    cwd, transcript = payload.get("cwd"), payload.get("transcript_path")
    if store.read_only or not isinstance(cwd, str) or not isinstance(transcript, str):
        return 0
    old = basename_tag(cwd)
    if old is None or old == project.tag:
        return 0
    folder = Path(transcript).expanduser().parent
    done = f"projects.adopted.{store.namespace}.{hashlib.sha256(os.fsencode(folder)).hexdigest()[:32]}"
    if store.storage.setting(done) is not None:
        return 0
    sessions = {e.session for e in store.list(kind="turn", tags=[old]) if e.session}
    ours = [s for s in sorted(sessions) if _recorded_in(folder / f"{s}.jsonl", project)]
    (stored_old,), (stored_new,) = store.scope.tags([old]), store.scope.tags([project.tag])
    changed = sum(store.storage.move_session_tag(store.namespace, store.scope.key(s) or s, stored_old, stored_new,
                                                 family=TAG_PREFIX) for s in ours)
    with store.storage.transaction():
        store.storage.set_setting(done, json.dumps({"sessions": len(ours), "entries": changed}))
    return changed


def _recorded_in(transcript: Path, project: Project) -> bool:
    """True when the transcript at ``transcript`` (a regular file) was recorded in ``project``."""
    try:
        if not transcript.is_file():  # not a FIFO or a device, which reading could block on
            return False
        with transcript.open("rb") as stream:
            head = stream.read(HEAD_BYTES)
    except OSError:
        return False
    for line in head.splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and isinstance(record.get("cwd"), str):
            found = find_project(record["cwd"])
            return found is not None and found.key == project.key
    return False
