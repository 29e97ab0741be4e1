"""Codex CLI's session files, read into the turns a coding agent's hooks would have captured.

Codex writes one JSON Lines "rollout" per session under ``~/.codex/sessions/YYYY/MM/DD/``. Its first
line is ``{"type": "session_meta", "payload": {"id", "cwd", "timestamp", "git"…}}``; after it come
``response_item`` lines, whose payload is a ``message`` (``role``, ``content`` of ``input_text`` /
``output_text`` blocks), a ``function_call`` (``name``, ``arguments``, ``call_id``), its
``function_call_output`` (``call_id``, ``output``), a ``reasoning`` item…, and lines that repeat
or frame them (``event_msg``, ``turn_context``), which give no turn. Older files open with a bare
``{"id", "timestamp", "instructions"}`` line followed by the items themselves, without a type
wrapper or times of their own: such items take the session's start as their time.

As for Claude Code, a tool call and its output make one ``tool`` turn written as the hooks write
one; developer and system messages, and the ``<environment_context>``, ``<user_instructions>``
and AGENTS.md blocks Codex sends as user messages, are left out. Codex records carry no ids, and
its files only grow, so a turn's id is ``codex:``, the session's id and the line's number.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..integrations.claude_code import project_tag, strip_injected, tool_text
from .turns import (
    CALL_WITHOUT_RESULT,
    INJECTED,
    NO_TEXT,
    RESULT_WITHOUT_CALL,
    ImportedTurn,
    Item,
    Resume,
    Skipped,
    block_pattern,
    load_record,
    parsed_json,
    record_kind,
    said,
    texts_of,
)

NAME = "codex"
TITLE = "Codex CLI session file"

_WRAPPED = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
_ITEMS = ("message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
          "local_shell_call", "reasoning", "web_search_call")
_HOST_BLOCKS = block_pattern(["environment_context", "user_instructions", "INSTRUCTIONS", "turn_aborted"])
_AGENTS_FILE = "# AGENTS.md instructions"
_TEXT_BLOCKS = ("input_text", "output_text", "text")


def default_root(home: Path | None = None, environ: dict[str, str] | None = None) -> Path:
    """Where Codex keeps its session files: ``$CODEX_HOME/sessions``, else ``~/.codex/sessions``."""
    codex_home = (environ if environ is not None else os.environ).get("CODEX_HOME")
    return Path(codex_home).expanduser() / "sessions" if codex_home else (home or Path.home()) / ".codex" / "sessions"


def recognises(records: list[dict[str, Any]]) -> bool:
    """True when a file's first record is a Codex session header (either generation's); an older
    header, a bare id and time, counts only with an item of that generation after it."""
    if not records or _header(records[0]) is None:
        return False
    return records[0].get("type") == "session_meta" or any(
        "record_type" in r or r.get("type") in _ITEMS for r in records[1:])


# An older header holds an id and a time and none of an entry's own fields (a harness-mem import
# line may have an id and a timestamp too).
_ENTRY_FIELDS = frozenset({"text", "content", "role", "kind", "session", "tags"})


def _header(record: dict[str, Any]) -> dict[str, Any] | None:
    """The session header's fields, or None when ``record`` is no header."""
    payload = record.get("payload")
    if record.get("type") == "session_meta" and isinstance(payload, dict) and isinstance(payload.get("id"), str):
        return payload
    if "type" not in record and isinstance(record.get("id"), str) and isinstance(record.get("timestamp"), str) \
            and not _ENTRY_FIELDS & record.keys():
        return record  # the older files' first line
    return None


def read(path: Path, lines: Iterable[tuple[int, bytes | str]]) -> Iterator[Item]:
    """The turns of the session file at ``path`` (its numbered lines), and a :class:`Skipped` for
    every line that gives none."""
    session: dict[str, Any] | None = None  # what the header said: id, time, tags, metadata
    header_line: tuple[int, ...] = ()
    calls: dict[str, tuple[str, Any, int]] = {}  # call_id -> (name, arguments, line), until its output comes
    for number, raw in lines:
        record = load_record(raw)
        if record is None:
            continue
        if isinstance(record, Skipped):
            yield record
            continue
        header = _header(record)
        if header is not None:
            session, header_line = _session(header, record), (number,)
            continue
        kind = record.get("type")
        if kind in _WRAPPED:
            if kind != "response_item" or not isinstance(record.get("payload"), dict):
                yield record_kind(kind)
                continue
            item: dict[str, Any] = record["payload"]
        elif "record_type" in record:
            yield record_kind(record.get("record_type"))
            continue
        elif kind in _ITEMS:
            item = record
        else:
            yield record_kind(kind)
            continue
        if session is None:
            yield Skipped("before the session header")
            continue
        when = record.get("timestamp") if isinstance(record.get("timestamp"), str) else session["time"]
        yield from _turns(item, number, session, when, calls)
    for _ in calls:
        yield Skipped(CALL_WITHOUT_RESULT)
    # The next read needs the header again (the session's id and project), and any call still
    # waiting for its output.
    yield Resume(min((line for *_, line in calls.values()), default=None), header_line)


def _session(header: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    session_id = header["id"]
    time = header.get("timestamp") if isinstance(header.get("timestamp"), str) else record.get("timestamp")
    metadata: dict[str, Any] = {"host": NAME, "event": "import"}
    tags = [f"session:{session_id}"]
    project = project_tag(header.get("cwd"))
    if project:
        tags.append(project)
        metadata["cwd"] = header["cwd"]
    git = header.get("git")
    if isinstance(git, dict) and isinstance(git.get("branch"), str) and git["branch"]:
        metadata["git_branch"] = git["branch"]
    return {"id": session_id, "time": time, "tags": tags, "metadata": metadata}


def _turns(item: dict[str, Any], number: int, session: dict[str, Any], when: str | None,
           calls: dict[str, tuple[str, Any, int]]) -> Iterator[Item]:
    kind = item.get("type")
    if when is None:
        yield Skipped("no timestamp")
        return

    def turn(role: str, text: str, **more: Any) -> ImportedTurn:
        return ImportedTurn(f"{NAME}:{session['id']}:{number}", role, text, session["id"], when,
                            (f"role:{role}", *session["tags"]), {**session["metadata"], **more})

    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant"):
            yield Skipped(INJECTED)  # developer and system messages: the host's instructions
            return
        text = "\n\n".join(texts_of(item.get("content"), *_TEXT_BLOCKS))
        if not text.strip():
            yield Skipped(NO_TEXT)
            return
        text = said(role, text, _HOST_BLOCKS, _AGENTS_FILE)
        yield turn(role, text) if text else Skipped(INJECTED if role == "user" else NO_TEXT)
    elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
        call_id = item.get("call_id") or item.get("id")
        if isinstance(call_id, str):
            name = item.get("name") or ("shell" if kind == "local_shell_call" else "tool")
            given = item.get("arguments", item.get("input", item.get("action")))
            calls[call_id] = (str(name), parsed_json(given), number)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        call = calls.pop(item["call_id"], None) if isinstance(item.get("call_id"), str) else None
        if call is None:
            yield Skipped(RESULT_WITHOUT_CALL)
            return
        name, arguments, _ = call
        yield turn("tool", strip_injected(tool_text(name, arguments, _output(item.get("output")))), tool=name)
    else:
        yield record_kind(kind, "item")


def _output(output: object) -> object:
    """A tool's output as the model read it: Codex wraps a shell's in JSON (``output``, ``metadata``)."""
    value = parsed_json(output)
    if isinstance(value, dict):
        for key in ("output", "content"):
            if isinstance(value.get(key), str):
                return value[key]
    return value
