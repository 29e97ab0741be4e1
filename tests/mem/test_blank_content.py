"""A memory that shows nothing (only NULs, spaces or other control and invisible characters) is
refused on every write path with one line saying why, and what was stored before stays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness_mem.cli import cli
from harness_mem.errors import InvalidInputError
from harness_mem.jsonl import import_jsonl
from harness_mem.mcp_server import MemoryTools, build_server
from harness_mem.store import MemoryStore

BLANK = ["\x00", "\x00\x00\x00", " \x00\t\x01\x7f ", "\x1b\x08", "\u200b\ufeff", "\u0085\u00a0"]
REASON = "an entry's content cannot be empty (or only spaces and control characters)"


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    with MemoryStore(tmp_path / "m.db", embedder=None) as opened:
        opened.add("kept", id="kept")
        yield opened


@pytest.mark.parametrize("text", BLANK)
def test_store_add_refuses_a_blank_memory(store: MemoryStore, text: str) -> None:
    with pytest.raises(InvalidInputError, match=r"content cannot be empty") as raised:
        store.add(text)
    assert str(raised.value) == REASON
    assert [e.id for e in store.list()] == ["kept"]


@pytest.mark.parametrize("text", BLANK)
def test_an_import_line_with_a_blank_memory_is_reported(store: MemoryStore, text: str) -> None:
    report = import_jsonl(store, [json.dumps({"text": text}), '{"text": "also kept"}'], workers=0)
    assert [(e.line, e.reason) for e in report.errors] == [(1, REASON)]
    assert report.added == 1 and store.count() == 2


def test_cli_add_refuses_a_blank_memory(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "add", "\x00"], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: {REASON}"


def test_a_visible_character_among_controls_is_a_memory(store: MemoryStore) -> None:
    assert store.add("\x00 ok \x00").content == "\x00 ok \x00"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_remember_refuses_a_blank_memory(store: MemoryStore, anyio_backend: str) -> None:
    mcp = pytest.importorskip("mcp")
    async with mcp.Client(build_server(MemoryTools(store))) as client:
        for text in BLANK:
            result: Any = await client.call_tool("remember", {"content": text})
            assert result.is_error
            message = result.content[0].text
            assert "\n" not in message and "is empty (or only spaces and control characters)" in message, message
    assert store.count() == 1
