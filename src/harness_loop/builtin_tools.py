"""Safe, read-only tools confined to the loop's workspace: ``read_file``, ``list_dir`` and ``grep``.

Every path is resolved (symlinks included) and refused if it leaves the workspace. Reads are paged
so that a large file -- a spilled tool result, say -- can be read piece by piece without its result
being spilled again. A line shown cut short (grep's first 300 characters, the head of one giant
line) is cut before a value the cut would go through: results reach transcripts and recordings,
which redact a value whole but cannot recognise half of one.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness_mem.redaction import cut_point

from .tools import Tool, ToolContext, tool

__all__ = ["WORKSPACE_SYSTEM", "grep", "list_dir", "read_file", "workspace_tools"]

MAX_READ_BYTES = 20_000
MAX_LIST = 500


def _inside(ctx: ToolContext, path: str) -> Path:
    root = ctx.workspace.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise PermissionError(f"{path} is outside the workspace {root}; only paths inside it can be used")
    return target


@tool(read_only=True)
def read_file(ctx: ToolContext, path: str, offset: int = 1, limit: int = 400) -> str:
    """Read a text file in the workspace, a page of lines at a time.

    :param path: the file, relative to the workspace (absolute paths inside it work too).
    :param offset: the first line to return, counting from 1.
    :param limit: the most lines to return.
    """
    target = _inside(ctx, path)
    lines = target.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    start = max(offset, 1) - 1
    page: list[str] = []
    size = 0
    for line in lines[start : start + max(limit, 1)]:
        if size + len(line.encode()) > MAX_READ_BYTES:
            if not page:  # one giant line (minified code, a spilled blob): show its head, not all of it
                head = line.encode()[:MAX_READ_BYTES].decode("utf-8", errors="ignore")
                head = head[: cut_point(line, len(head))]
                return f"{head}\n[line {start + 1} is {len(line.encode())} bytes; only its start is shown — use grep]"
            break
        page.append(line)
        size += len(line.encode())
    end = start + len(page)
    text = "".join(page)
    if end < len(lines):
        text += f"\n[lines {start + 1}-{end} of {len(lines)}; read on with offset={end + 1}]"
    return text


@tool(read_only=True)
def list_dir(ctx: ToolContext, path: str = ".") -> list[str]:
    """List a directory in the workspace; subdirectories end with '/'.

    :param path: the directory, relative to the workspace.
    """
    target = _inside(ctx, path)
    entries = sorted(target.iterdir(), key=lambda p: p.name)
    names = [p.name + ("/" if p.is_dir() else "") for p in entries[:MAX_LIST]]
    if len(entries) > MAX_LIST:
        names.append(f"[{len(entries) - MAX_LIST} more entries not shown]")
    return names


@tool(read_only=True)
def grep(ctx: ToolContext, pattern: str, path: str = ".", max_matches: int = 100) -> list[str]:
    """Find lines matching a regular expression in a file, or in every file under a directory.

    :param pattern: a Python regular expression.
    :param path: a file or directory, relative to the workspace.
    :param max_matches: stop after this many matching lines.
    """
    regex = re.compile(pattern)
    target = _inside(ctx, path)
    root = ctx.workspace.resolve()
    files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
    matches: list[str] = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable: not greppable text
        for n, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                matches.append(f"{f.relative_to(root)}:{n}: {line[: cut_point(line, 300)]}")
                if len(matches) >= max_matches:
                    return [*matches, f"[stopped at {max_matches} matches]"]
    return matches


#: The system prompt that goes with :func:`workspace_tools` (what ``harness-loop run`` uses).
WORKSPACE_SYSTEM = (
    "You are a careful assistant working in a local workspace. Use the tools to look at files before "
    "answering; never guess a file's content. Answer concisely when you are done."
)


def workspace_tools() -> list[Tool]:
    """The built-in read-only tools."""
    return [read_file, list_dir, grep]
