"""A long-lived store on PostgreSQL outlives a restart of its server.

A server of its own (tests/postgres_server.py), stopped and started again by the tests on the same
data directory and port, under a store opened before: in this process, and in a real
``harness-mem mcp --db postgresql://…`` process driven over stdio by the MCP SDK's client.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from postgres_server import PostgresServer

from harness_mem import MemoryStore
from harness_mem.errors import StorageError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """A server of this module's own: restarting the session's would cut every other test's store."""
    with PostgresServer(settings={"work_mem": "7MB"}) as started:
        yield started


@pytest.fixture
def target(server: PostgresServer) -> str:
    from engine_targets import fresh_schema

    return fresh_schema(server)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text, text
    return text


def test_the_settings_a_server_is_started_with_hold_after_its_restart(server: PostgresServer) -> None:
    # The benchmarks size the server's buffers so (bench_postgres.py --shared-buffers).
    def work_mem() -> str:
        with server.connect() as conn:
            return str(conn.execute("SHOW work_mem").fetchone()[0])

    assert work_mem() == "7MB"
    server.restart()
    assert work_mem() == "7MB"
    with pytest.raises(ValueError, match="not a plain server setting"):
        PostgresServer(settings={"work_mem": "7MB -c fsync=on"})


def test_a_store_opened_before_a_restart_reads_and_writes_after_it(server: PostgresServer, target: str) -> None:
    with MemoryStore(target, embedder=None) as store:
        store.add("the release train leaves on Thursdays", session="s1", id="before")
        server.restart()
        assert [e.id for e in store.list(session="s1")] == ["before"]  # a read, on a fresh connection
        server.restart()
        store.add("the hotfix branch is cut from the tag", session="s1", id="after")  # a write, likewise
        assert [h.entry.id for h in store.recall("hotfix branch", mode="keyword")] == ["after"]
        assert store.count() == 2


def test_while_the_server_is_down_a_call_fails_in_one_line_and_the_next_one_works(
        server: PostgresServer, target: str) -> None:
    with MemoryStore(target, embedder=None) as store:
        store.add("the cache is warmed at midnight", id="kept")
        server.halt()
        try:
            with pytest.raises(StorageError) as refused:
                store.add("written while the server is down", id="lost")
            assert "reconnect" in _one_line(refused.value) and "postgresql://" in str(refused.value)
            with pytest.raises(StorageError) as unread:
                store.count()
            _one_line(unread.value)
        finally:
            server.resume()
        assert [e.id for e in store.list()] == ["kept"]


def test_a_write_whose_connection_is_cut_is_reported_and_not_sent_again(server: PostgresServer, target: str) -> None:
    with MemoryStore(target, embedder=None) as store, server.connect() as admin:
        backend = store.storage.conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[attr-defined]
        with pytest.raises(StorageError) as cut, store.storage.transaction():
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
            store.add("a write whose connection the server cut", id="cut")
        assert "lost the connection" in _one_line(cut.value)
        with store.storage.snapshot():  # the next read's one view is taken on the fresh connection
            assert store.storage.query("SHOW transaction_isolation") == [("repeatable read",)]  # type: ignore[attr-defined]
        assert store.count() == 0  # not committed, and not sent again on another connection
        store.add("the next write works", id="next")
        assert [e.id for e in store.list()] == ["next"]


def test_the_mcp_server_answers_tool_calls_after_the_database_restarts(server: PostgresServer, target: str) -> None:
    import anyio

    mcp = pytest.importorskip("mcp")

    async def talk() -> None:
        params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "harness_mem", "mcp", "--db", target],
                                           env={**os.environ, "HARNESS_MEM_EMBEDDER": "none"})
        async with mcp.Client(params, read_timeout_seconds=120) as client:
            async def call(tool: str, **arguments: Any) -> dict[str, Any]:
                result = await client.call_tool(tool, arguments)
                assert not result.is_error, result.content[0].text
                return dict(json.loads(result.content[0].text))

            await call("remember", content="the on-call rota changes on Mondays")
            await anyio.to_thread.run_sync(server.restart)
            found = await call("recall", query="on-call rota")
            assert [hit["content"] for hit in found["hits"]] == ["the on-call rota changes on Mondays"]
            await call("remember", content="the incident channel is #ops-fire")
            assert len((await call("recall", query="incident channel"))["hits"]) == 1

    anyio.run(talk)


def test_a_recall_whose_commit_is_unanswered_when_the_server_restarts_leaves_the_next_call_working(
        server: PostgresServer, target: str) -> None:
    # A recall's read snapshot ends with a COMMIT whose answer is read before the next statement:
    # a restart in between leaves that answer unread on a dead connection, which the next call
    # replaces without an error.
    with MemoryStore(target, embedder=None) as store:
        store.add("the build cache lives on the shared volume", id="cache")
        for _ in range(2):
            assert [h.entry.id for h in store.recall("build cache", mode="keyword")] == ["cache"]
            server.restart()
        store.add("the artefacts expire after a week", id="artefacts")
        assert [h.entry.id for h in store.recall("artefacts expire", mode="keyword")] == ["artefacts"]
