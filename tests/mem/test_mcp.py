"""``harness-mem mcp``: the real command in a real process, driven through the MCP SDK's own client.

The end-to-end tests spawn ``harness-mem mcp`` with the test embedder (the launcher of
``fake_embedder``) and talk to it over stdio exactly as a host does. One test starts it with the
real default model instead, and reads the process's memory map to check that answering
``initialize`` loaded no model runtime, and that the model does load once the handshake is over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest
from fake_embedder import _LAUNCHER, HashedEmbedder, cli_process

from harness_mem.experience.consolidate import consolidate
from harness_mem.experience.skills import Skill
from harness_mem.experience.store import ExperienceStore
from harness_mem.jsonl import import_jsonl
from harness_mem.mcp_server import HIT_CHARS, MAX_CONTENT_CHARS, MemoryTools, build_server
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.anyio

mcp = pytest.importorskip("mcp")
Client, StdioServerParameters = mcp.Client, mcp.StdioServerParameters

# The tools' work on a store (remember, recall, correct, forget; the model loading beside them)
# runs on both engines, at ``engine_target``. The rest is the server's own (its tools' schemas,
# errors and redaction counts, its start-up) on SQLite, and skills keep their tables there.
READERS = {"recall", "recall_sessions", "get_memory", "recent_activity", "find_skills"}
WRITERS = {"remember", "update_memory", "forget"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def served(db: Path | str, *, test_embedder: bool = True) -> AsyncIterator[Any]:
    """A client connected to ``harness-mem mcp --db DB`` in a new process."""
    args = ["-c", _LAUNCHER] if test_embedder else ["-m", "harness_mem"]
    # --no-project: the tests run inside this repository, whose tag would go on every memory.
    params = StdioServerParameters(command=sys.executable, args=[*args, "mcp", "--no-project", "--db", str(db)],
                                   env=dict(os.environ))
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


async def call(client: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; fails the test on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content  # the text is the same data
    return dict(result.structured_content)


async def error(client: Any, tool: str, arguments: dict[str, Any]) -> str:
    """A tool error's message, checked to be one short line."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} {str(arguments)[:80]} succeeded: {str(result.structured_content)[:200]}"
    text: str = result.content[0].text
    assert "\n" not in text and len(text) < 400, text[:600]
    assert text.startswith(("Error executing tool ", "Unknown tool: ")), text
    return text


async def test_tools_are_few_named_for_models_and_hint_who_only_reads(tmp_path: Path) -> None:
    async with served(tmp_path / "m.db") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == READERS | WRITERS
    for name, tool in tools.items():
        assert tool.annotations.read_only_hint is (name in READERS), name
        assert tool.output_schema and tool.output_schema["type"] == "object", name  # structured results
        assert "Limits:" in tool.description or name in ("get_memory", "forget"), name
        assert len(tool.description) > 200, name  # when to use it, what comes back
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["update_memory"].annotations.destructive_hint is False
    assert tools["recall"].input_schema["properties"]["k"]["maximum"] == 100
    assert tools["remember"].input_schema["properties"]["content"]["maxLength"] == MAX_CONTENT_CHARS


async def test_remember_recall_correct_and_forget(engine_target: str) -> None:
    async with served(engine_target) as client:
        first = await call(client, "remember", content="The staging database runs on port 5433", kind="fact",
                           tags=["infra"])
        assert first["deduped"] is False and first["supersedes"] is None
        again = await call(client, "remember", content="The staging database runs on port 5433", kind="fact")
        assert again == {**first, "deduped": True}
        await call(client, "remember", content="We deploy on Fridays after the standup")

        found = await call(client, "recall", query="which port does the staging database use")
        assert found["mode"] == "hybrid" and found["note"] is None
        assert found["hits"][0]["id"] == first["id"] and found["hits"][0]["tags"] == ["infra"]

        same = await call(client, "update_memory", id=first["id"], content="The staging database runs on port 5433 ")
        assert same == {**first, "deduped": True}  # the same text is no new version
        fixed = await call(client, "update_memory", id=first["id"], content="The staging database moved to port 6543")
        assert fixed["supersedes"] == first["id"] and fixed["id"] != first["id"]
        contents = [hit["content"] for hit in (await call(client, "recall", query="staging database port"))["hits"]]
        assert "The staging database moved to port 6543" in contents
        assert not any("5433" in text for text in contents)  # the corrected fact is gone from recall
        with_old = await call(client, "recall", query="staging database port", include_superseded=True)
        assert {first["id"], fixed["id"]} <= {hit["id"] for hit in with_old["hits"]}

        detail = await call(client, "get_memory", id=first["id"])
        assert [m["id"] for m in detail["history"]] == [first["id"], fixed["id"]]
        assert detail["current_id"] == fixed["id"] and detail["memory"]["superseded_by"] == fixed["id"]
        assert (await call(client, "get_memory", id=fixed["id"]))["memory"]["tags"] == ["infra"]  # carried over
        assert "already superseded" in await error(client, "update_memory", {"id": first["id"], "content": "x"})

        gone = await call(client, "forget", id=fixed["id"])
        assert gone == {"forgotten": 2, "ids": [first["id"], fixed["id"]]}  # every version
        after = await call(client, "recall", query="staging database port", include_superseded=True)
        assert not any("staging" in hit["content"] for hit in after["hits"])
        assert "no entry" in await error(client, "get_memory", {"id": first["id"]})
        recent = await call(client, "recent_activity")
        assert [m["content"] for m in recent["memories"]] == ["We deploy on Fridays after the standup"]


async def test_hostile_arguments_get_one_line_tool_errors_and_the_server_keeps_serving(tmp_path: Path) -> None:
    megabyte = "x" * (1 << 20)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("recall", {"query": megabyte}, "query: String should have at most 4096 characters"),
        ("remember", {"content": megabyte}, "content: String should have at most 65536 characters"),
        ("remember", {"content": "x", "tags": [megabyte]}, "tags.0: String should have at most 100 characters"),
        ("remember", {"content": "x", "tags": ["t"] * 10_000}, "tags: List should have at most 32 items"),
        ("recall", {"query": 42}, "query: Input should be a valid string"),
        ("recall", {"query": ["a", "b"]}, "query: Input should be a valid string"),
        ("recall", {"query": "a", "k": "ten"}, "k: Input should be a valid integer"),
        ("recall", {"query": "a", "k": True}, "k: Input should be a valid integer"),
        ("recall", {"query": "a", "k": 0}, "k: Input should be greater than or equal to 1"),
        ("recall", {"query": "a", "k": 10**30}, "k: Input should be less than or equal to 100"),
        ("recall", {"query": "a", "include_superseded": "yes"}, "include_superseded: Input should be a valid boolean"),
        ("recall", {"query": "a", "since": "the day before yesterday"}, "cannot read a time"),
        ("recall", {"query": "a", "querry": "b"}, "unknown argument 'querry' — it takes: query, k"),
        ("recall", {}, "query: Field required"),
        ("remember", {"tags": ["x"]}, "content: Field required"),
        ("remember", {"content": "x", "kind": "diary"}, "kind: Input should be 'note', 'fact' or 'summary'"),
        ("remember", {"content": "   "}, "content"),
        ("remember", {"content": "x", "session": {"nested": [1, 2]}}, "session"),
        ("get_memory", {"id": "01NOSUCHMEMORY"}, "no entry with id '01NOSUCHMEMORY'"),
        ("update_memory", {"id": "01NOSUCHMEMORY", "content": "x"}, "no entry with id '01NOSUCHMEMORY'"),
        ("forget", {"id": "01NOSUCHMEMORY"}, "no entry with id '01NOSUCHMEMORY'"),
        ("forget", {"id": ""}, "id: String should have at least 1 character"),
        ("recall_sessions", {"query": "a", "k": 21}, "k: Input should be less than or equal to 20"),
        ("recent_activity", {"limit": -1}, "limit: Input should be greater than or equal to 1"),
        ("find_skills", {"k": 1.5}, "k: Input should be a valid integer"),
        ("no_such_tool", {}, "no_such_tool"),
    ]
    async with served(tmp_path / "m.db") as client:
        kept = await call(client, "remember", content="the deploy key rotates every 90 days")
        for tool, arguments, expected in cases:
            message = await error(client, tool, arguments)
            assert expected in message, (tool, message)
        # FTS5 syntax is only text: no error, no injection, and the words still match.
        for query in ['"NEAR(" OR *', "deploy AND NOT", "key* ^ (", "'; DROP TABLE entries; --"]:
            await call(client, "recall", query=query)
        hits = (await call(client, "recall", query='deploy "NEAR(" OR *'))["hits"]
        assert [hit["id"] for hit in hits] == [kept["id"]]
        # Content near the limit, awkward characters: stored and read back whole.
        odd = "naïve café 🙂 \u200b tab\tnul-free — " + "z" * (MAX_CONTENT_CHARS - 100)
        stored = await call(client, "remember", content=odd)
        full = (await call(client, "get_memory", id=stored["id"]))["memory"]
        assert full["content"] == odd.strip() and full["truncated"] is False
        listed = (await call(client, "recent_activity", limit=1))["memories"][0]
        assert listed["truncated"] is True and len(listed["content"]) == HIT_CHARS + 1
        assert (await call(client, "recall", query="deploy key"))["hits"][0]["id"] == kept["id"]


async def test_secrets_are_redacted_and_counted(tmp_path: Path) -> None:
    async with served(tmp_path / "m.db") as client:
        done = await call(client, "remember", content="mail the report to ann.lee@example.com")
        assert done["redactions"] and sum(done["redactions"].values()) == 1
        shown = (await call(client, "get_memory", id=done["id"]))["memory"]["content"]
        assert "ann.lee@example.com" not in shown


async def test_sessions_recent_activity_and_skills(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MemoryStore(db, embedder=HashedEmbedder()) as store:
        store.add_many([
            {"content": "how do I rotate the TLS certificate", "role": "user", "session": "s-1",
             "created_at": "2024-03-01T10:00:00Z"},
            {"content": "run certbot renew, then reload nginx", "role": "assistant", "session": "s-1",
             "created_at": "2024-03-01T10:01:00Z"},
            {"content": "thanks, that worked", "role": "user", "session": "s-1", "created_at": "2024-03-01T10:02:00Z"},
            {"content": "what is for lunch", "role": "user", "session": "s-2", "created_at": "2024-03-02T12:00:00Z"},
        ])
        ExperienceStore(store).save_skill(Skill(
            name="rotate-tls-certificate", description="Renew and reload TLS certificates. Use when a certificate expires.",
            body="1. certbot renew\n2. nginx -s reload"))
    async with served(db) as client:
        # The same anchor whether the server answers by keyword (its model still loading) or in hybrid.
        found = await call(client, "recall_sessions", query="rotate the TLS certificate", k=2)
        best = found["sessions"][0]
        assert best["session"] == "s-1" and best["turns"] == 3
        assert best["anchor"]["content"] == "how do I rotate the TLS certificate"
        assert [m["content"] for m in best["around"]] == [
            "how do I rotate the TLS certificate", "run certbot renew, then reload nginx"]
        assert best["first"]["content"].startswith("how do I") and best["last"]["content"] == "thanks, that worked"

        # A recall naming no kind searches every lane, the turns of past conversations too.
        assert (await call(client, "recall", query="certbot renew nginx"))["hits"][0]["content"] == (
            "run certbot renew, then reload nginx")
        hit = (await call(client, "recall", query="certbot renew nginx", kind="turn", k=1, context=1))["hits"][0]
        assert [m["content"] for m in hit["context"]] == ["how do I rotate the TLS certificate", "thanks, that worked"]

        recent = await call(client, "recent_activity", limit=2, kind="turn")
        assert [m["content"] for m in recent["memories"]] == ["what is for lunch", "thanks, that worked"]
        assert [s["session"] for s in recent["sessions"]] == ["s-2", "s-1"]

        skills = await call(client, "find_skills", query="my TLS certificate expired")
        assert skills["total"] == 1 and skills["skills"][0]["name"] == "rotate-tls-certificate"
        assert "certbot renew" in skills["skills"][0]["skill_md"] and skills["skills"][0]["score"] > 0
        assert (await call(client, "find_skills", query="bake sourdough bread"))["skills"] == []
        listed = await call(client, "find_skills", include_instructions=False)
        assert listed["skills"][0]["skill_md"] is None and listed["skills"][0]["score"] is None


SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_conversation.jsonl"


async def test_recall_without_a_kind_searches_every_lane(engine_target: str) -> None:
    """A store of turns alone answers; once consolidated, what was derived ranks with the turns,
    each derived hit with the turns it came from, and no turn is listed twice."""
    with MemoryStore(engine_target, embedder=HashedEmbedder()) as store:
        import_jsonl(store, SAMPLE.read_bytes().splitlines())
    async with served(engine_target) as client:
        found = await call(client, "recall", query="password hashing", k=3)
        assert found["hits"][0]["content"] == "Password hashing: are we still on bcrypt?"
        assert found["hits"][0]["kind"] == "turn" and found["hits"][0]["score"] > 0.5
        assert all(hit["sources"] is None for hit in found["hits"])

    with MemoryStore(engine_target, embedder=HashedEmbedder()) as store:
        consolidate(store)
        derived = {e.id for e in store.list() if e.source == "consolidation"}
        assert derived
    async with served(engine_target) as client:
        hits = (await call(client, "recall", query="where do deploys go out", k=10))["hits"]
        kinds = {hit["kind"] for hit in hits}
        assert "turn" in kinds and kinds & {"fact", "summary"}  # both lanes, in one ranking
        drawn = [hit for hit in hits if hit["id"] in derived]
        assert drawn and any(hit["sources"] for hit in drawn)  # none when its turns are listed above it
        for hit in drawn:
            assert {source["id"] for source in hit["sources"] or ()} <= set(hit["metadata"]["source_turns"])
            assert all(source["kind"] == "turn" for source in hit["sources"] or ())
        listed = [hit["id"] for hit in hits] + [s["id"] for hit in drawn for s in hit["sources"] or ()]
        assert len(listed) == len(set(listed))  # a turn shown as a source is not a hit of its own too
        assert any("Tuesdays and Thursdays" in text for text in
                   [hit["content"] for hit in hits] + [s["content"] for hit in drawn for s in hit["sources"] or ()])
        # A kind named searches that kind alone, derived or not.
        facts = (await call(client, "recall", query="password hashing", kind="turn"))["hits"]
        assert facts and {hit["kind"] for hit in facts} == {"turn"}


class BlockedEmbedder(HashedEmbedder):
    """The test embedder, held back until ``release`` is set: a model that is still loading."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        assert self.release.wait(60), "the test never released the model"
        return super().embed(texts)


async def test_recall_answers_by_keyword_while_the_model_loads_and_writes_wait_for_it(engine_target: str) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        store.add("the release train leaves every second Tuesday")
    model = BlockedEmbedder()
    with MemoryStore(db_path, embedder=model) as store:
        tools = MemoryTools(store)
        async with Client(build_server(tools)) as client:
            early = await call(client, "recall", query="when does the release train leave")
            assert early["mode"] == "keyword" and "still loading" in early["note"]
            assert len(early["hits"]) == 1  # keywords still find it

            written: dict[str, Any] = {}

            async def write() -> None:
                written.update(await call(client, "remember", content="the freeze starts a week before"))

            async with anyio.create_task_group() as group:
                group.start_soon(write)
                await anyio.sleep(0.5)
                assert not written  # the write waits for the model rather than store a row without a vector
                model.release.set()
            assert written["deduped"] is False
            assert store.count_missing_vectors() == 0
            later = await call(client, "recall", query="when does the release train leave")
            assert later["mode"] == "hybrid" and later["note"] is None


async def test_a_model_that_cannot_load_is_reported_not_fatal(engine_target: str) -> None:
    db_path = engine_target
    class Broken(HashedEmbedder):
        def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            from harness_mem.errors import EmbedderError

            raise EmbedderError("the default embedding model is not installed — pip install 'harness-mem[embed]'")

    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        store.add("the release train leaves every second Tuesday")
    with MemoryStore(db_path, embedder=Broken()) as store:
        async with Client(build_server(MemoryTools(store))) as client:
            message = await error(client, "remember", {"content": "a new fact"})
            assert "not installed" in message
            answer = await call(client, "recall", query="release train")
            assert answer["mode"] == "keyword" and "not installed" in answer["note"] and answer["hits"]


def test_a_file_that_is_not_a_database_is_one_line_before_serving(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not SQLite\n" * 100)
    result = cli_process("mcp", "--db", str(junk), input=b"")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(b"Error: ") and result.stderr.count(b"\n") == 1, result.stderr


def test_the_cli_imports_no_mcp_sdk_until_the_command_runs() -> None:
    code = "import sys, harness_mem.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr


HEAVY = ("libonnxruntime", "onnxruntime_pybind", "libtorch", "libc10")


def _heavy_libraries(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [name for name in HEAVY if name in maps]


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
def test_initialize_loads_no_model_and_the_model_loads_after_the_handshake(tmp_path: Path) -> None:
    """The real default embedder: the handshake is answered with no model runtime in the process;
    after it the model loads in the background, and recall moves from keyword to hybrid."""
    from harness_mem.providers.embeddings import default_embedder_available

    if not default_embedder_available():
        pytest.skip("the default embedding model is not installed")
    db = tmp_path / "m.db"  # the server makes it, with vectors (the default model is installed)
    with subprocess.Popen([sys.executable, "-m", "harness_mem", "mcp", "--db", str(db)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            def request(id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode() + b"\n")
                proc.stdin.flush()
                while True:
                    message = json.loads(proc.stdout.readline())
                    if message.get("id") == id:
                        return dict(message)

            answer = request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                               "clientInfo": {"name": "test", "version": "0"}})
            assert answer["result"]["serverInfo"]["name"] == "harness-mem"
            assert _heavy_libraries(proc.pid) == []
            proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
            proc.stdin.flush()
            deadline = time.monotonic() + 120
            modes = []
            while time.monotonic() < deadline:
                result = request(2 + len(modes), "tools/call", {"name": "recall", "arguments": {"query": "anything"}})
                modes.append(result["result"]["structuredContent"]["mode"])
                if modes[-1] == "hybrid":
                    break
                time.sleep(0.2)
            assert modes[-1] == "hybrid", modes
            assert _heavy_libraries(proc.pid), "the model never loaded"
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
            if proc.returncode != 0:
                pytest.fail(proc.stderr.read().decode()[-2000:] if proc.stderr else "")


async def test_entries_without_a_vector_are_noted_for_the_model_without_a_command_to_run(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with MemoryStore(db, embedder=HashedEmbedder()) as store:
        store.add("deploys go to staging-eu")
    with MemoryStore(db, embedder=None) as store:
        store.add("deploys happen on Tuesdays")  # written by a keyword-only process: no vector
    with MemoryStore(db, embedder=HashedEmbedder()) as store:
        async with Client(build_server(MemoryTools(store))) as client:
            answer = await call(client, "recall", query="deploys")
    assert len(answer["hits"]) == 2  # the one without a vector is found by its words
    assert answer["note"] == "no vector yet for 1 of 2 entries, so keyword matching alone can find them"


@pytest.mark.anyio
async def test_a_server_run_in_a_repository_tags_what_it_writes_with_that_project(tmp_path: Path) -> None:
    from harness_mem.integrations import claude_code
    from harness_mem.integrations.projects import find_project

    repo = tmp_path / "shop"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", "git@github.com:acme/shop.git"], check=True)
    db = tmp_path / "memory.db"
    MemoryStore(db, embedder=None).close()
    params = StdioServerParameters(command=sys.executable, args=["-m", "harness_mem", "mcp", "--db", str(db)],
                                   env=dict(os.environ), cwd=str(repo))
    async with Client(params, read_timeout_seconds=120) as client:
        written = await call(client, "remember", content="We use pnpm, never npm, in this repository.",
                             tags=["convention"])
    project = find_project(str(repo))
    assert project is not None and project.tag == "project:github.com/acme/shop"
    with MemoryStore(db, embedder=None) as store:
        assert store.get(written["id"]).tags == ("convention", project.tag)
        context = claude_code.session_context(store, {"cwd": str(repo), "session_id": "next"})
    assert context is not None and "We use pnpm, never npm" in context.text  # the next session is told
