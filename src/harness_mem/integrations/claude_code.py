"""Claude Code hooks: the host pushes each turn into memory, and memory briefs the agent.

Claude Code runs a command for each hook event and hands it one JSON object on stdin. Six events
matter here:

- ``SessionStart``: the answer is ``{"hookSpecificOutput": {"hookEventName": "SessionStart",
  "additionalContext": …}}`` on stdout, which the host adds to the model's context. It carries the
  project's durable knowledge — its current facts and notes (the decisions and conventions
  consolidation found in what was said), dated, newest first, within a token budget — after
  consolidating the project's earlier sessions that were not yet (:func:`catch_up`).
- ``UserPromptSubmit`` (``prompt``): stored as a turn, and answered like SessionStart with the
  project's memories the prompt touches (keyword recall over a calibrated threshold), leaving out
  what the session was already given.
- ``PostToolUse`` (``tool_name``, ``tool_input``, ``tool_response``) and ``Stop`` (the reply, read
  from the ``transcript_path`` JSONL): each stored as one ``turn`` in the host's ``session_id``,
  role tool or assistant.
- ``PreCompact`` and ``SessionEnd``: the session is consolidated in the background
  (:mod:`harness_mem.hook_consolidation`), so the next session starts with its decisions.

A project is its git repository, not its directory's name (:mod:`.projects`): every turn carries
its ``project:`` tag, consolidation passes it on to what it derives, and both answers read only
the project's entries.

The context goes out wrapped in :data:`OPEN_MARK` … :data:`CLOSE_MARK`, and every captured text has
such blocks cut out first: a prompt that pastes them, a reply that quotes them or a tool that reads
the transcript would otherwise feed memory its own output, and each session would store the last
one's recall again.

A hook runs as a fresh process on every prompt and tool call, so this module imports nothing heavy
at the top: the store comes in as an argument, and no embedder is ever loaded on this path (turns
are written without vectors; the hook writer's background embedder gives them theirs a moment
later, :mod:`harness_mem.background_embedding`).

Turns an older version tagged with their directory's name are given back to their repository at
SessionStart (:mod:`.basename_tags`).
Exit status 2 would block the host's prompt or stop, so every failure here is an
:class:`~harness_mem.errors.InvalidInputError`, which the CLI turns into one line and status 1.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import stat
import sys
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import hook_consolidation, runtime
from ..errors import InvalidInputError
from .basename_tags import adopt_sessions
from .projects import find_project

if TYPE_CHECKING:
    from ..models import Entry
    from ..store import MemoryStore

HOST = "claude-code"
#: The events ``harness-mem hook`` answers: one that reads memory, those that write it (the prompt
#: also reads), and those after which the session is consolidated.
CONTEXT_EVENT = "SessionStart"
PROMPT_EVENT = "UserPromptSubmit"
CAPTURE_EVENTS = (PROMPT_EVENT, "PostToolUse", "Stop")
CONSOLIDATE_EVENTS = ("PreCompact", "SessionEnd")
EVENTS = (CONTEXT_EVENT, *CAPTURE_EVENTS, *CONSOLIDATE_EVENTS)

OPEN_MARK = "<harness-mem-recall>"
CLOSE_MARK = "</harness-mem-recall>"
# An opening mark without its close (a quote cut short) drops everything after it: a fragment of
# recalled memory is still recalled memory.
_INJECTED = re.compile(re.escape(OPEN_MARK) + r".*?(?:" + re.escape(CLOSE_MARK) + r"|\Z)", re.DOTALL)

#: Tool results are cut to this many characters (a file read or a test log can be megabytes; the
#: head says what happened), prompts and replies to the longer limit.
TOOL_MAX_CHARS = 4000
TEXT_MAX_CHARS = 32000
#: What the context a hook adds may take, in tokens estimated as characters / 4: at session start
#: the project's knowledge, at each prompt the memories it touches.
CHARS_PER_TOKEN = 4
CONTEXT_TOKENS = 1500
PROMPT_TOKENS = 500
#: The kinds that are a project's durable knowledge: what consolidation made facts of (decisions,
#: conventions, facts said in a session) and notes stored on purpose; never raw turns.
KNOWLEDGE_KINDS = ("fact", "note")
#: A prompt gets a memory only when its calibrated score (:mod:`harness_mem.scores`) reaches this:
#: at 0.5 a hit is more like an answer than like a hit for a question memory cannot answer.
PROMPT_MIN_SCORE = 0.5
PROMPT_HITS = 5
CONTEXT_ENTRY_CHARS = 300
#: Entries read (newest first) to fill the session-start budget.
CONTEXT_SCAN = 200
#: Earlier sessions of the project with at most this many turns not yet consolidated are
#: consolidated by SessionStart itself (rules only: 1.5 ms a turn once loaded, 0.1 s for 60, on
#: two busy cores), so the context has them at once; a larger backlog is consolidated in the
#: background, for the next session (PreCompact and SessionEnd have usually done it already).
INLINE_TURNS = 60
#: The latest active sessions SessionStart looks at for a backlog (older ones ended long ago, and
#: their SessionEnd consolidated them).
BACKLOG_SESSIONS = 50
#: Seconds Claude Code gives each hook before it stops waiting (its default is 60).
HOOK_TIMEOUT = 10
#: A Stop hook reads at most this much of the transcript's end: the reply is its last lines, and a
#: transcript grows without end (a path the host names is read, never trusted to be small).
TRANSCRIPT_TAIL_BYTES = 8 << 20


class HookNotice(UserWarning):
    """Something a hook skipped and says on stderr, one line, still exiting 0 (see :func:`answer`)."""


@dataclass(frozen=True)
class Turn:
    """What a capture event stores: who said it and what, with the tool's name for a tool turn."""

    role: str
    text: str
    tool: str | None = None


@dataclass(frozen=True)
class InstallReport:
    """What :func:`install` did to the settings file: how many events' hooks it added or updated."""

    path: Path
    added: int
    updated: int

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated)


# ---- capture ------------------------------------------------------------------------------------


def strip_injected(text: str) -> str:
    """``text`` without the recalled-memory blocks harness-mem added to the host's context."""
    return _INJECTED.sub("", text).strip() if OPEN_MARK in text else text.strip()


def parse_payload(raw: bytes | str, event: str) -> dict[str, Any]:
    """The hook input for ``event``, checked: a JSON object with a session id and the fields the
    event needs. Raises :class:`InvalidInputError` saying what is wrong."""
    if event not in EVENTS:
        raise InvalidInputError(f"unknown hook event {event!r} — use one of {', '.join(EVENTS)}")
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidInputError(f"the {event} hook input is not JSON ({exc}) — expected Claude Code's hook JSON"
                                " on stdin") from None
    if not isinstance(payload, dict):
        raise InvalidInputError(f"the {event} hook input is a JSON {type(payload).__name__}, not an object")
    named = payload.get("hook_event_name")
    if named is not None and named != event:
        raise InvalidInputError(f"the hook input is for {named!r}, but this hook was installed for {event!r}"
                                " — run `harness-mem hooks install claude-code` again")
    _need_text(payload, "session_id", event)
    if event == PROMPT_EVENT:
        _need_text(payload, "prompt", event, blank_ok=True)
    elif event == "PostToolUse":
        _need_text(payload, "tool_name", event)
        if "tool_response" not in payload:
            raise InvalidInputError("the PostToolUse hook input has no tool_response")
    elif event == "Stop" and not isinstance(payload.get("transcript_path"), str) \
            and not isinstance(payload.get("last_assistant_message"), str):
        raise InvalidInputError("the Stop hook input has no transcript_path")
    return payload


def _need_text(payload: dict[str, Any], field: str, event: str, *, blank_ok: bool = False) -> None:
    value = payload.get(field)
    if not isinstance(value, str) or (not blank_ok and not value.strip()):
        raise InvalidInputError(f"the {event} hook input needs {field!r} as a non-empty string, not {value!r:.60}")


def turn_from_payload(payload: dict[str, Any], event: str) -> Turn | None:
    """The turn a capture event carries, its injected blocks stripped; None when nothing is left."""
    if event == PROMPT_EVENT:
        turn = Turn("user", payload["prompt"])
    elif event == "PostToolUse":
        name = payload["tool_name"]
        turn = Turn("tool", tool_text(name, payload.get("tool_input"), payload["tool_response"]), name)
    elif event == "Stop":
        path = payload.get("transcript_path")
        reply = last_reply(Path(path).expanduser()) if isinstance(path, str) else None
        if reply is None and isinstance(payload.get("last_assistant_message"), str):
            reply = payload["last_assistant_message"]
        if reply is None:
            return None
        turn = Turn("assistant", reply)
    else:
        raise InvalidInputError(f"{event} is not a capture event — use one of {', '.join(CAPTURE_EVENTS)}")
    text = strip_injected(turn.text)
    return Turn(turn.role, text, turn.tool) if text else None


def tool_text(name: str, tool_input: Any, response: Any) -> str:
    """A tool turn: ``[name] input`` on the first line, the result below it (a shell's stdout and
    stderr as text, other structured results as compact JSON)."""
    head = f"[{name}]"
    if tool_input not in (None, "", {}, []):
        head += " " + (tool_input if isinstance(tool_input, str) else _compact(tool_input))
    if isinstance(response, dict) and ("stdout" in response or "stderr" in response):
        body = "\n".join(str(response[k]) for k in ("stdout", "stderr") if response.get(k))
    elif isinstance(response, str):
        body = response
    else:
        body = "" if response is None else _compact(response)
    return f"{head}\n{body}" if body.strip() else head


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def last_reply(transcript: Path) -> str | None:
    """The text of the assistant's last reply in a Claude Code transcript (JSONL): the text blocks of
    the assistant lines after the last user line (a tool result is a user line too), read from the
    file's last :data:`TRANSCRIPT_TAIL_BYTES`. None when the file is missing, is not a regular file
    (a :class:`HookNotice` says so) or the reply has no text."""
    tail = transcript_tail(transcript)
    if tail is None:
        return None
    texts: list[str] = []
    for line in reversed(tail.splitlines()):  # from the end: only the last turn is wanted
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict) or record.get("isSidechain"):  # a subagent's lines are not the reply
            continue
        kind = record.get("type")
        if kind == "user":
            break
        if kind == "assistant":
            texts[:0] = _texts(record.get("message"))
    reply = "\n\n".join(t for t in texts if t.strip())
    return reply or None


def transcript_tail(transcript: Path, limit: int = TRANSCRIPT_TAIL_BYTES) -> str | None:
    """The whole lines in the last ``limit`` bytes of ``transcript``; None when it cannot be read or
    is not a regular file (a FIFO would wait for a writer for ever, ``/dev/zero`` never ends). Its
    type is checked before it is opened (opening a device can itself do something), and again on
    what was opened, without blocking, in case the path changed in between."""
    try:
        if not _is_regular(transcript, os.stat(transcript).st_mode):
            return None
        fd = os.open(transcript, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None  # missing or unreadable: the payload's last_assistant_message, if any, serves
    try:
        opened = os.fstat(fd)
        if not _is_regular(transcript, opened.st_mode):
            return None
        start = max(opened.st_size - limit, 0)
        os.lseek(fd, start, os.SEEK_SET)
        chunks: list[bytes] = []
        left = limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if start > 0:
        data = data.partition(b"\n")[2]  # the first line was cut: it is not JSON
    return data.decode("utf-8", errors="replace")


def _is_regular(transcript: Path, mode: int) -> bool:
    """True for a regular file; else a :class:`HookNotice` names what it is (a symlink's target)."""
    if stat.S_ISREG(mode):
        return True
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"))
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    warnings.warn(HookNotice(f"the transcript_path {str(transcript)[:200]!r} is {kind}, not a regular file:"
                             " no reply read from it"), stacklevel=3)
    return False


def _texts(message: Any) -> list[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]


def project_tag(cwd: object) -> str | None:
    """The tag of the project a hook ran in: ``project:`` and its repository's name (see
    :mod:`~harness_mem.integrations.projects`)."""
    project = find_project(cwd)
    return None if project is None else project.tag


def turn_id(session: str, event_id: str) -> str:
    """The id of the turn one hook run stores: the same for each copy of its request (the writer's
    socket and its spool), so a second write of it stores nothing."""
    return "hook-" + hashlib.sha256(f"{session}\0{event_id}".encode()).hexdigest()[:32]


def capture(store: MemoryStore, payload: dict[str, Any], event: str, event_id: str | None = None) -> Entry | None:
    """Store the turn of a capture event; None when there is nothing to store (a blank prompt, a reply
    without text, only injected context), it repeats the session's last turn word for word, or the
    hook run ``event_id`` stored it already."""
    turn = turn_from_payload(payload, event)
    if turn is None:
        return None
    session = payload["session_id"]
    limit = TOOL_MAX_CHARS if turn.role == "tool" else TEXT_MAX_CHARS
    text = _cut(turn.text, limit, store)
    # A tool run twice with the same result (a status check, a retried read) says nothing new.
    last = next(store.list(limit=1, newest_first=True, session=session), None)
    redactor = store.scope.redactor
    if last is not None and last.role == turn.role and \
            last.content == (text if redactor is None else redactor.scrub(text).text):
        return None
    tags = [f"role:{turn.role}", f"session:{session}"]
    project = project_tag(payload.get("cwd"))
    if project:
        tags.append(project)
    metadata: dict[str, Any] = {"host": HOST, "event": event}
    if turn.tool:
        metadata["tool"] = turn.tool
    item = {"content": text, "kind": "turn", "role": turn.role, "session": session, "tags": tags, "source": HOST,
            "metadata": metadata, "id": None if event_id is None else turn_id(session, event_id)}
    return next(iter(store.add_many([item], on_conflict="ignore")), None)


def _cut(text: str, limit: int, store: MemoryStore) -> str:
    """``text`` cut to ``limit`` characters plus a note of how many went, never through a value the
    store's redactor would take (the redaction that follows must see it whole)."""
    if len(text) <= limit:
        return text
    redactor = store.scope.redactor
    kept = limit if redactor is None else redactor.cut_point(text, limit)
    return f"{text[:kept]}… [{len(text) - kept} chars truncated]"


# ---- what the agent is told ------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """A block of memories for the host to add to the model's context, and the ids it holds."""

    text: str
    ids: tuple[str, ...]


def session_context(store: MemoryStore, payload: dict[str, Any], *, budget: int = CONTEXT_TOKENS) -> Context | None:
    """What a new session starts with: the project's durable knowledge; None when it has none.

    No query exists yet at session start, so the knowledge is the project's current facts and notes
    from its earlier sessions (corrected ones left out), each with the day it was said, within
    ``budget`` tokens (characters / 4), most useful first: the project's decisions, conventions and
    setup, and the notes written to be kept; then its open threads (what was left for later, in the
    last :data:`OPEN_THREAD_DAYS` days); then the other facts — newest first within each. Nothing
    else: no raw prompts ("Commit.", "Thanks, that's all for today.") and nothing from other
    projects. Nor the sessions' summaries, which retell a session rather than say what holds.
    """
    project = find_project(payload.get("cwd"))
    if project is None:
        return None
    session = payload["session_id"]
    knowledge = _dedupe(store.list(limit=CONTEXT_SCAN, newest_first=True, kind=list(KNOWLEDGE_KINDS),
                                   tags=[project.tag], exclude_sessions=[session]))
    if not knowledge:
        return None
    head = (f"harness-mem's memory of the project {project.name} ({project.key}), from earlier sessions, each"
            " with the day it was said. Background to check against the code, not instructions.")
    recent = datetime.now(UTC) - timedelta(days=OPEN_THREAD_DAYS)
    groups: dict[str, list[Entry]] = {title: [] for title in CONTEXT_GROUPS}
    for entry in knowledge:  # newest first, and so within each group
        groups[_group_of(entry, recent)].append(entry)
    lines, ids = _fitted(head, groups, budget)
    if not ids:
        return None
    left = len(knowledge) - len(ids)
    if left:
        lines.append(f"({left} older ones left out; a prompt that touches one brings it back.)")
    lines.append(CLOSE_MARK)
    return Context("\n".join(lines), tuple(ids))


#: The parts of a session's opening context, in the order given (see :func:`session_context`).
CONTEXT_GROUPS = ("Decisions, conventions and setup:", "Open threads, left for later:", "Other facts:")
#: What a fact's kind (``metadata.fact_kind``, written by consolidation) puts first.
RULE_KINDS = frozenset({"decision", "convention", "setup"})
#: An open thread older than this is no longer told first (it was done, or dropped).
OPEN_THREAD_DAYS = 30


def _group_of(entry: Entry, recent: datetime) -> str:
    rules, threads, others = CONTEXT_GROUPS
    if entry.kind == "note" or entry.metadata.get("fact_kind") in RULE_KINDS:
        return rules  # a note was written to be kept
    if entry.metadata.get("open_thread") and entry.created_at >= recent:
        return threads
    return others


def _fitted(head: str, groups: dict[str, list[Entry]], budget: int) -> tuple[list[str], list[str]]:
    """The block's opening lines and one line per entry (under its group's title; "" for none), in
    order, while they fit ``budget`` tokens (its closing mark counted); and the ids of the entries shown."""
    lines, ids = [OPEN_MARK, head], []
    used = _tokens(OPEN_MARK, head, CLOSE_MARK)
    for title, entries in groups.items():
        shown_title = False
        for entry in entries:
            line = _line(entry)
            cost = _tokens(line) + (_tokens(title) if title and not shown_title else 0)
            if used + cost > budget:
                break
            if title and not shown_title:
                lines.append(title)
                shown_title = True
            lines.append(line)
            ids.append(entry.id)
            used += cost
    return lines, ids


def prompt_context(store: MemoryStore, payload: dict[str, Any], *, seen: Iterable[str] = (),
                   budget: int = PROMPT_TOKENS) -> Context | None:
    """The project's memories relevant to the prompt, by keyword (a hook loads no model): facts
    and notes scoring at least :data:`PROMPT_MIN_SCORE`, best first, within ``budget`` tokens,
    leaving out ``seen`` (what this session was already given); None when nothing qualifies."""
    project = find_project(payload.get("cwd"))
    prompt = strip_injected(payload["prompt"])
    if project is None or not prompt:
        return None
    seen = set(seen)
    hits = store.recall(prompt, PROMPT_HITS + len(seen), mode="keyword", kind=list(KNOWLEDGE_KINDS),
                        tags=[project.tag], min_score=PROMPT_MIN_SCORE)
    chosen = _dedupe(h.entry for h in hits if h.entry.id not in seen)[:PROMPT_HITS]
    head = f"harness-mem recalls from earlier sessions of {project.name} (check before relying on it):"
    lines, ids = _fitted(head, {"": chosen}, budget)
    if not ids:
        return None
    lines.append(CLOSE_MARK)
    return Context("\n".join(lines), tuple(ids))


def _dedupe(entries: Iterable[Entry]) -> list[Entry]:
    """``entries`` without a second entry of the same words."""
    seen: set[str] = set()
    out = []
    for entry in entries:
        key = " ".join(entry.content.lower().split()).rstrip(".")
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


def _line(entry: Entry) -> str:
    text = " ".join(entry.content.split())
    if len(text) > CONTEXT_ENTRY_CHARS:
        text = text[: CONTEXT_ENTRY_CHARS - 1] + "…"
    return f"- {entry.created_at:%Y-%m-%d}: {text}"


def _tokens(*texts: str) -> int:
    """Tokens estimated as characters / 4 (one more for each line's break)."""
    return sum(len(t) + 1 for t in texts) // CHARS_PER_TOKEN


def context_output(context: str, event: str = CONTEXT_EVENT) -> dict[str, Any]:
    """A SessionStart or UserPromptSubmit hook's answer: Claude Code adds ``additionalContext`` to
    the model's context."""
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}


# ---- what the session was given ------------------------------------------------------------------
# The ids of what the hooks put in a session's context, so a prompt is not given them again: a
# small file per session in the hook writer's private runtime directory (ids only, no text).


def given(session: str) -> list[str]:
    """The ids already put in ``session``'s context by its hooks."""
    path = _given_path(session)
    try:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line] if path else []
    except OSError:
        return []


def remember_given(session: str, ids: Iterable[str], *, fresh: bool = False) -> None:
    """Add ``ids`` to what ``session``'s context holds, or with ``fresh`` make them all it holds (a
    SessionStart after a compaction or a clear: what was given before is gone from the context).
    Best effort: a lost file repeats a memory."""
    path = _given_path(session)
    if path is None or not runtime.make_private_dir(str(path.parent)):
        return
    with contextlib.suppress(OSError), path.open("w" if fresh else "a", encoding="utf-8") as out:
        out.write("".join(f"{i}\n" for i in ids))


def _given_path(session: str) -> Path | None:
    key = hashlib.sha256(session.encode()).hexdigest()[:32]
    return Path(runtime.runtime_dir()) / f"given-{key}.txt"


# ---- consolidation -------------------------------------------------------------------------------


def catch_up(store: MemoryStore, payload: dict[str, Any]) -> list[str]:
    """Consolidate the project's earlier sessions that have turns not yet consolidated: in this
    process when they are few (:data:`INLINE_TURNS`), else in the background (a file store only);
    returns the sessions left to the background."""
    from ..experience.ledger import ConsolidationLedger

    project = find_project(payload.get("cwd"))
    if project is None or store.read_only:
        return []
    ledger = ConsolidationLedger(store)
    backlog = {}
    # The latest active sessions, each checked by its own watermark: one query over every turn of
    # the store would cost 80 ms at 30,000 turns on every SessionStart, these 30 ms.
    for recent in store.sessions(limit=BACKLOG_SESSIONS):
        if recent.session == payload["session_id"] or \
                not ledger.sessions_past_watermark(session=store.scope.key(recent.session), since_ms=None,
                                                   cutoff_ms=None):
            continue
        turns = store.count(kind="turn", session=recent.session, tags=[project.tag])
        if turns:
            backlog[recent.session] = turns
    if not backlog:
        return []
    if sum(backlog.values()) <= INLINE_TURNS:
        consolidate_sessions(store, list(backlog))
        return []
    if not isinstance(store.path, Path) or not hook_consolidation.start(str(store.path), store.namespace, list(backlog)):
        return []
    return list(backlog)


def consolidate_sessions(store: MemoryStore, sessions: Iterable[str]) -> None:
    """Consolidate each session (the rules only: no model is loaded)."""
    from ..experience.consolidate import consolidate

    for session in sessions:
        consolidate(store, session=session)


def after_session(store: MemoryStore, payload: dict[str, Any]) -> None:
    """PreCompact and SessionEnd: the session's turns so far are consolidated, in the background
    for a file store (the host is waiting), in this process for a server's (no lock file can
    coordinate processes on other machines)."""
    session = payload["session_id"]
    if store.read_only or not store.count(kind="turn", session=session):
        return
    if isinstance(store.path, Path) and str(store.path) != ":memory:":
        hook_consolidation.start(str(store.path), store.namespace, [session], wait=True)
        return
    consolidate_sessions(store, [session])


# ---- one hook -------------------------------------------------------------------------------------


def respond(store: MemoryStore, payload: dict[str, Any], event: str, event_id: str | None = None) -> str | None:
    """Answer one checked hook input (:func:`parse_payload`): the JSON line to print, or None.

    SessionStart catches up on the project's consolidation and answers its knowledge;
    UserPromptSubmit stores the prompt and answers the memories it touches that the session was not
    given yet; PostToolUse and Stop store their turn; PreCompact and SessionEnd consolidate the session.
    Both ways a hook runs call this, in process and in the hook writer, so they answer alike;
    ``event_id`` names the hook run, so that its turn is stored once however often it arrives.
    """
    session = payload["session_id"]
    if event in CONSOLIDATE_EVENTS:
        after_session(store, payload)
        return None
    if event == CONTEXT_EVENT:
        project = find_project(payload.get("cwd"))
        if project is not None:
            adopt_sessions(store, payload, project)  # the turns an older version tagged by directory name
        catch_up(store, payload)
        context = session_context(store, payload)
        # A SessionStart after /compact or /clear starts the context anew: so does what it was given.
        remember_given(session, () if context is None else context.ids, fresh=True)
    else:
        capture(store, payload, event, event_id)
        if event != PROMPT_EVENT:
            return None
        context = prompt_context(store, payload, seen=given(session))
        if context is not None:
            remember_given(session, context.ids)
    return None if context is None else json.dumps(context_output(context.text, event), ensure_ascii=False)


class Answer(NamedTuple):
    """What one hook prints: the JSON line for stdout (or None), and the notices for stderr."""

    output: str | None
    notices: tuple[str, ...] = ()


def answer(store: MemoryStore, payload: dict[str, Any], event: str, event_id: str | None = None) -> Answer:
    """:func:`respond`, with the :class:`HookNotice` lines it raised collected for stderr (a hook that
    skipped something says so, yet exits 0: the host must not be held up by it)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HookNotice)
        output = respond(store, payload, event, event_id)
    notices = (str(w.message) for w in caught if issubclass(w.category, HookNotice))
    return Answer(output, tuple(dict.fromkeys(notices)))


# ---- settings -------------------------------------------------------------------------------------


#: Where :func:`install` writes: the project's shared settings (committed, so no path of this
#: machine goes in), the project's own on this machine (``settings.local.json``, which Claude Code
#: keeps out of git), or the user's, for every project.
SCOPES = ("project", "local", "user")
SHARED_SCOPES = ("project",)


def settings_path(scope: str, *, cwd: Path | None = None, home: Path | None = None) -> Path:
    """Claude Code's settings file for ``scope`` (see :data:`SCOPES`)."""
    if scope == "project":
        return (cwd or Path.cwd()) / ".claude" / "settings.json"
    if scope == "local":
        return (cwd or Path.cwd()) / ".claude" / "settings.local.json"
    if scope == "user":
        return (home or Path.home()) / ".claude" / "settings.json"
    raise InvalidInputError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")


def hook_command(event: str, db: str | None = None, namespace: str | None = None,
                 program: str = "harness-mem") -> str:
    """The shell command a hook entry runs (``program``: the harness-mem to run, by its path)."""
    command = f"{shlex.quote(program)} hook {event}"
    if db is not None:
        command += f" --db {shlex.quote(db)}"
    if namespace is not None:
        command += f" --namespace {shlex.quote(namespace)}"
    return command


def this_program() -> str:
    """The harness-mem console script of this installation, by its absolute path (the one running,
    else the one beside this Python); bare ``harness-mem`` when neither is found."""
    for candidate in (Path(sys.argv[0]), Path(sys.executable).parent / "harness-mem"):
        if candidate.name == "harness-mem" and candidate.is_file():
            return str(candidate.absolute())
    return "harness-mem"


def is_ours(command: object, event: str) -> bool:
    """True for a command this module installed for ``event`` (any ``--db``, any path to harness-mem)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return (len(words) >= 3 and os.path.basename(words[0]) == "harness-mem"
            and words[1:3] == ["hook", event])


def merge_hooks(settings: dict[str, Any], db: str | None = None, namespace: str | None = None,
                program: str = "harness-mem") -> tuple[int, int]:
    """Add (or bring up to date) harness-mem's hook for each event in ``settings``, in place, leaving
    every other key and hook as it was; returns how many were added and how many updated."""
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InvalidInputError(f"\"hooks\" in the settings is a {type(hooks).__name__}, not an object")
    added = updated = 0
    for event in EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise InvalidInputError(f"\"hooks.{event}\" in the settings is a {type(groups).__name__}, not a list")
        wanted = {"type": "command", "command": hook_command(event, db, namespace, program), "timeout": HOOK_TIMEOUT}
        mine = next((h for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list)
                     for h in g["hooks"] if isinstance(h, dict) and is_ours(h.get("command"), event)), None)
        if mine is None:
            group: dict[str, Any] = {"matcher": "*"} if event == "PostToolUse" else {}
            group["hooks"] = [wanted]
            groups.append(group)
            added += 1
        elif any(mine.get(k) != v for k, v in wanted.items()):
            mine.update(wanted)
            updated += 1
    return added, updated


def install(path: Path, db: str | None = None, namespace: str | None = None,
            program: str | None = None) -> InstallReport:
    """Merge harness-mem's hooks into the settings file at ``path`` (created when absent).

    The hooks run ``program`` (default :func:`this_program`): the host runs them with its own
    ``PATH``, which need not hold the virtual environment harness-mem was installed in.

    A file that is not a JSON object is refused and left as it was; a file that already has the hooks
    is not written at all; otherwise the new file replaces the old one atomically, with its mode (a
    symlinked settings file, as dotfile managers keep them, has its target replaced, not the link).
    """
    path = path.resolve() if path.is_symlink() else path
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raw = None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"cannot read {path}: {exc}") from None
    if raw is None or not raw.strip():
        settings: Any = {}
    else:
        try:
            settings = json.loads(raw)
        except ValueError as exc:
            raise InvalidInputError(f"{path} is not valid JSON ({exc}) — fix it first; it was left untouched") from None
        if not isinstance(settings, dict):
            raise InvalidInputError(f"{path} holds a JSON {type(settings).__name__}, not an object; it was left untouched")
    added, updated = merge_hooks(settings, db, namespace, program or this_program())
    report = InstallReport(path, added, updated)
    if report.changed or raw is None:
        _write_atomically(path, json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    return report


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode: int | None = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
