"""One tool spec (``harness_mem.tools``): the MCP server and the agent loop render the same operations
with the same limits, a hit has one JSON shape everywhere, and the limits are enforced with an error
written for the model in both renderings."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_embedder import _LAUNCHER, HashedEmbedder, cli_process
from jsonschema import Draft202012Validator

from harness_loop.chat import Message, ModelOutput, Role, ScriptedModel, ToolCall
from harness_loop.loop import AgentLoop
from harness_loop.memory_tools import memory_tools
from harness_mem.models import Hit
from harness_mem.schema import json_schema
from harness_mem.store import MemoryStore
from harness_mem.tools import MAX_K, OPERATIONS, operation

pytestmark = pytest.mark.anyio

mcp = pytest.importorskip("mcp")
Client, StdioServerParameters = mcp.Client, mcp.StdioServerParameters

from harness_mem.mcp_server import MemoryTools, build_server  # noqa: E402  # after the SDK's importorskip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with MemoryStore(tmp_path / "m.db", embedder=HashedEmbedder()) as opened:
        yield opened


async def test_both_renderings_offer_the_same_operations_with_the_same_limits(store: MemoryStore) -> None:
    async with Client(build_server(MemoryTools(store))) as client:
        served = {tool.name: tool for tool in (await client.list_tools()).tools}
    looped = {tool.name: tool for tool in memory_tools(store)}
    spec = {op.name: op for op in OPERATIONS}
    assert set(served) == set(looped) == set(spec) == {
        "remember", "recall", "recall_sessions", "get_memory", "update_memory", "forget", "recent_activity",
        "find_skills"}
    for name, op in spec.items():
        assert served[name].input_schema == looped[name].parameters == op.parameters, name
        assert served[name].description == looped[name].description == op.description, name
        assert served[name].annotations.read_only_hint is looped[name].read_only is op.read_only, name
        assert bool(served[name].annotations.destructive_hint) is op.destructive, name
    # The figures the drift was about, one of each now.
    assert served["remember"].input_schema["properties"]["content"]["maxLength"] == 65_536
    assert looped["recall"].parameters["properties"]["k"]["maximum"] == MAX_K == 100
    assert "supersede" not in looped and served["forget"].annotations.destructive_hint is True


async def test_a_hit_has_one_shape_in_recall_json_mcp_and_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MemoryStore(db, embedder=HashedEmbedder()) as store:
        store.remember("we chose argon2id for password hashing", kind="fact", tags=["security"],
                       metadata={"ticket": 42})
        [api_hit] = store.recall("argon2id password hashing")
        async with Client(build_server(MemoryTools(store))) as client:
            answer = await client.call_tool("recall", {"query": "argon2id password hashing"})
            served = await client.list_tools()
    schema = json_schema("hit")
    printed = cli_process("--db", str(db), "schema", "hit")
    assert printed.returncode == 0 and json.loads(printed.stdout) == schema
    recalled = cli_process("--db", str(db), "recall", "argon2id password hashing", "--json")
    assert recalled.returncode == 0, recalled.stderr
    [cli_hit] = [json.loads(line) for line in recalled.stdout.splitlines()]
    [mcp_hit] = answer.structured_content["hits"]
    api = api_hit.model_dump(mode="json")

    fields = set(schema["properties"])
    assert set(api) == set(cli_hit) == set(mcp_hit) == fields
    assert {"id", "content", "kind", "tags", "metadata", "score", "snippet", "truncated"} <= fields
    for shape in (api, cli_hit, mcp_hit):
        Draft202012Validator(schema).validate(shape)
        assert shape["id"] == api["id"] and shape["tags"] == ["security"] and shape["metadata"] == {"ticket": 42}
    assert api == cli_hit and api_hit.to_dict() == api
    # MCP's published output schema holds the same hit.
    recall_schema = {t.name: t for t in served.tools}["recall"].output_schema
    Draft202012Validator(recall_schema).validate(answer.structured_content)
    assert Hit.json_schema("serialization") == schema


def _loop_messages(outcome: Any) -> list[Message]:
    return [m for m in outcome.transcript if m.role is Role.TOOL]


LIMITS: list[tuple[str, dict[str, Any], str]] = [
    ("recall", {"query": "deploy", "k": MAX_K + 1}, "k: Input should be less than or equal to 100"),
    ("remember", {"content": "x" * 65_537}, "content: String should have at most 65536 characters"),
    ("get_memory", {"id": "x", "history_limit": 101}, "history_limit: Input should be less than or equal to 100"),
    ("recall", {"query": "deploy", "exclude_kind": ["everything"]}, "exclude_kind.0: Input should be"),
    ("remember", {"content": "x", "metadata": {"blob": "y" * 20_000}}, "metadata: is larger than 16,384"),
]


async def test_the_limits_are_enforced_with_the_same_model_facing_error_over_mcp_and_in_the_loop(
        store: MemoryStore, tmp_path: Path) -> None:
    async with Client(build_server(MemoryTools(store))) as client:
        served = [await client.call_tool(name, arguments) for name, arguments, _ in LIMITS]
    script: list[ModelOutput | str] = [ModelOutput.with_calls(ToolCall.of(name, **arguments))
                                       for name, arguments, _ in LIMITS]
    loop = AgentLoop(ScriptedModel([*script, "done"]), memory_tools(store), workspace=tmp_path)
    looped = _loop_messages(await loop.run("misuse the memory tools"))
    assert len(looped) == len(LIMITS)
    for (name, _, expected), answer, message in zip(LIMITS, served, looped, strict=True):
        assert answer.is_error, name
        text = answer.content[0].text
        error = json.loads(message.content)["error"]
        assert expected in text and expected in error, (text, error)
        assert text == f"Error executing tool {name}: {error}"  # the same line, MCP's prefix aside
        assert len(text) < 400 and "x" * 100 not in text  # never the value itself
    assert store.count() == 0


async def test_errors_say_which_tool_to_call_and_never_quote_a_secret(store: MemoryStore) -> None:
    secret = "AKIAIOSFODNN7EXAMPLE"
    async with Client(build_server(MemoryTools(store))) as client:
        unknown = (await client.call_tool("get_memory", {"id": secret})).content[0].text
        fixed = (await client.call_tool("update_memory", {"id": "01NOSUCH", "content": "x"})).content[0].text
    for text in (unknown, fixed):
        assert "recall or recent_activity" in text and "harness-mem" not in text, text
    assert "no entry with id" in unknown and secret not in unknown


async def test_remember_takes_metadata_role_and_expiry_and_recall_filters_role_until_and_exclusions(
        store: MemoryStore) -> None:
    async with Client(build_server(MemoryTools(store))) as client:
        async def call(tool: str, **arguments: Any) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content[0].text
            return dict(result.structured_content)

        kept = await call("remember", content="the deploy freeze starts in December", kind="fact", role="user",
                          session="s-1", metadata={"source": "standup", "n": 3}, tags=["ops"])
        brief = await call("remember", content="the deploy train leaves at noon today", ttl_days=0.5, session="s-2")
        dated = await call("remember", content="the deploy key rotates monthly", expires_at="2999-01-01T00:00:00Z",
                           tags=["keys"])
        entry = store.get(kept["id"])
        assert (entry.role, entry.session, entry.metadata) == ("user", "s-1", {"source": "standup", "n": 3})
        assert store.get(brief["id"]).expires_at is not None and store.get(dated["id"]).expires_at is not None
        assert store.get(kept["id"]).expires_at is None

        def ids(answer: dict[str, Any]) -> set[str]:
            return {hit["id"] for hit in answer["hits"]}

        everything = ids(await call("recall", query="deploy"))
        assert everything == {kept["id"], brief["id"], dated["id"]}
        assert ids(await call("recall", query="deploy", role="user")) == {kept["id"]}
        assert ids(await call("recall", query="deploy", exclude_session=["s-1", "s-2"])) == {dated["id"]}
        assert ids(await call("recall", query="deploy", exclude_tag=["ops", "keys"])) == {brief["id"]}
        assert ids(await call("recall", query="deploy", exclude_kind=["fact"])) == {brief["id"], dated["id"]}
        assert ids(await call("recall", query="deploy", until="2000-01-01T00:00:00Z")) == set()
        hit = (await call("recall", query="deploy freeze December", k=1))["hits"][0]
        assert hit["metadata"] == {"source": "standup", "n": 3} and hit["role"] == "user"
        shown = await call("get_memory", id=kept["id"])
        assert shown["memory"]["metadata"] == {"source": "standup", "n": 3}


async def test_the_server_serves_the_namespace_it_is_given(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    params = StdioServerParameters(command=sys.executable,
                                   args=["-c", _LAUNCHER, "mcp", "--db", str(db), "--namespace", "work"],
                                   env=dict(os.environ))
    async with Client(params, read_timeout_seconds=120) as client:
        done = await client.call_tool("remember", {"content": "the work laptop is a ThinkPad"})
        assert not done.is_error, done.content[0].text
    with MemoryStore(db, namespace="work", embedder=HashedEmbedder()) as work:
        assert [e.content for e in work.list()] == ["the work laptop is a ThinkPad"]
    with MemoryStore(db, embedder=HashedEmbedder()) as default:
        assert default.count() == 0


def test_operations_are_found_by_name_and_refuse_unknown_arguments() -> None:
    assert operation("recall").read_only and not operation("forget").read_only
    with pytest.raises(Exception, match="unknown argument 'querry' — it takes: query, k"):
        operation("recall").parse({"querry": "x"})
    with pytest.raises(Exception, match="no memory tool named 'supersede'"):
        operation("supersede")
