"""Claude Code's transcripts, read into the turns its hooks would have captured.

Claude Code writes one JSON Lines file per session under ``~/.claude/projects/<project>/`` (and a
sub-agent's under ``<session>/subagents/``). A record has ``type`` (``user``, ``assistant``,
``summary``, ``system``, snapshots…), ``uuid``, ``sessionId``, ``timestamp``, ``cwd``,
``gitBranch``, ``isSidechain``, ``isMeta`` and a ``message`` whose ``content`` is a string or a list
of blocks: ``text``, ``thinking``, ``tool_use`` (``id``, ``name``, ``input``) and, in the user
record that follows, ``tool_result`` (``tool_use_id``, ``content``).

What is kept is what the hooks keep: the user's prompts, the assistant's text, and each tool call
with its result as one ``tool`` turn written as the ``PostToolUse`` hook writes it
(:func:`~harness_mem.integrations.claude_code.tool_text`). What the host injected is left out:
``isMeta`` records, a compaction's summary, slash-command echoes (``<command-name>``,
``<local-command-stdout>`` …), ``<system-reminder>`` blocks and harness-mem's own recall block.
Thinking is left out as the hooks leave it out. A sub-agent's turns carry the tag ``sidechain``.

A turn's id is ``claude-code:`` and its record's uuid (a tool turn adds its call's id), so a
session copied into a resumed one is stored once, and a second import finds every turn it stored.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..integrations.claude_code import HOST, project_tag, strip_injected, tool_text
from .turns import (
    CALL_WITHOUT_RESULT,
    INJECTED,
    NO_TEXT,
    NO_TIME,
    RESULT_WITHOUT_CALL,
    ImportedTurn,
    Item,
    Resume,
    Skipped,
    block_pattern,
    load_record,
    record_kind,
    said,
    texts_of,
)

NAME = "claude-code"
TITLE = "Claude Code transcript"
SIDECHAIN_TAG = "sidechain"

# The blocks Claude Code puts into a user record that the user did not type.
_HOST_BLOCKS = block_pattern([
    "system-reminder", "command-name", "command-message", "command-args", "command-contents",
    "local-command-stdout", "local-command-stderr", "local-command-caveat", "user-prompt-submit-hook",
])
_INTERRUPTED = "[Request interrupted by user"


def default_root(home: Path | None = None, environ: dict[str, str] | None = None) -> Path:
    """Where Claude Code keeps its transcripts: ``$CLAUDE_CONFIG_DIR/projects``, else ``~/.claude/projects``."""
    config = (environ if environ is not None else os.environ).get("CLAUDE_CONFIG_DIR")
    return Path(config).expanduser() / "projects" if config else (home or Path.home()) / ".claude" / "projects"


def recognises(records: list[dict[str, Any]]) -> bool:
    """True when one of a file's first records has a Claude Code record's shape."""
    return any(isinstance(r.get("type"), str) and (isinstance(r.get("sessionId"), str) or "leafUuid" in r)
               for r in records)


def read(path: Path, lines: Iterable[tuple[int, bytes | str]]) -> Iterator[Item]:
    """The turns of the transcript at ``path`` (its numbered lines), and a :class:`Skipped` for
    every record, or part of one, that gives none."""
    calls: dict[str, tuple[str, Any, int]] = {}  # tool_use id -> (name, input, line), until its result comes
    last_time: str | None = None
    for number, raw in lines:
        record = load_record(raw)
        if record is None:
            continue
        if isinstance(record, Skipped):
            yield record
            continue
        kind = record.get("type")
        if kind not in ("user", "assistant"):
            yield record_kind(kind)
            continue
        if isinstance(record.get("timestamp"), str):
            last_time = record["timestamp"]
        if record.get("isMeta") or record.get("isCompactSummary"):
            yield Skipped(INJECTED)
            continue
        if record.get("isApiErrorMessage"):  # the host's note that a request failed, not a reply
            yield Skipped("API error message")
            continue
        message = record.get("message")
        if not isinstance(message, dict):
            yield Skipped("no message")
            continue
        if last_time is None:
            yield Skipped(NO_TIME)
            continue
        yield from _turns(path, number, record, kind, message.get("content"), calls, last_time)
    for _ in calls:
        yield Skipped(CALL_WITHOUT_RESULT)
    # A call still waiting for its result is read again next time, when the result may be there.
    yield Resume(min((line for *_, line in calls.values()), default=None))


def _project(cwd: object) -> str | None:
    """:func:`~harness_mem.integrations.claude_code.project_tag`, once per directory (not per record)."""
    return _project_of(cwd) if isinstance(cwd, str) else None


@functools.lru_cache(maxsize=256)
def _project_of(cwd: str) -> str | None:
    return project_tag(cwd)


def _turns(path: Path, number: int, record: dict[str, Any], role: str, content: object,
           calls: dict[str, tuple[str, Any, int]], when: str) -> Iterator[Item]:
    given = record.get("sessionId")
    session = given if isinstance(given, str) and given else path.stem
    uuid = record.get("uuid")
    base = f"{NAME}:{uuid}" if isinstance(uuid, str) and uuid else f"{NAME}:{path.stem}:{number}"
    tags = [f"role:{role}", f"session:{session}"]
    metadata: dict[str, Any] = {"host": HOST, "event": "import"}
    cwd = record.get("cwd")
    project = _project(cwd)
    if project:
        tags.append(project)
        metadata["cwd"] = cwd
    if isinstance(record.get("gitBranch"), str) and record["gitBranch"]:
        metadata["git_branch"] = record["gitBranch"]
    if record.get("isSidechain"):
        tags.append(SIDECHAIN_TAG)
        metadata["sidechain"] = True
        if isinstance(record.get("agentId"), str):
            metadata["agent"] = record["agentId"]

    def turn(id: str, turn_role: str, text: str, **more: Any) -> ImportedTurn:
        return ImportedTurn(id, turn_role, text, session, when, (f"role:{turn_role}", *tags[1:]), {**metadata, **more})

    blocks = content if isinstance(content, list) else []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
            calls[block["id"]] = (str(block.get("name") or "tool"), block.get("input"), number)
        elif block.get("type") == "tool_result":
            use_id = block.get("tool_use_id")
            call = calls.pop(use_id, None) if isinstance(use_id, str) else None
            if call is None:
                yield Skipped(RESULT_WITHOUT_CALL)
                continue
            name, tool_input, _ = call
            result = block.get("content")
            body = "\n".join(texts_of(result, "text")) if isinstance(result, list) else result
            more = {"tool": name, **({"error": True} if block.get("is_error") else {})}
            yield turn(f"{base}:{use_id}", "tool", strip_injected(tool_text(name, tool_input, body)), **more)
        elif block.get("type") in ("thinking", "redacted_thinking"):
            yield Skipped("thinking block")
        elif block.get("type") in ("image", "document"):  # pasted in: memory keeps text
            yield Skipped(f"{block['type']} block")
    texts = texts_of(content, "text")
    if not texts:
        if not blocks:
            yield Skipped(NO_TEXT)
        return
    text = "\n\n".join(texts)
    if not text.strip():
        yield Skipped(NO_TEXT)
        return
    text = said(role, text, _HOST_BLOCKS, _INTERRUPTED)
    yield turn(base, role, text) if text else Skipped(INJECTED if role == "user" else NO_TEXT)
