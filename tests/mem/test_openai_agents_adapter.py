"""The OpenAI Agents SDK adapter, differentially: the same script of session operations on the SDK's
own ``SQLiteSession`` and on ``HarnessMemSession`` gives the same answers (an item holding personal data
too: it comes back as given, while the file holds it redacted); the memory tools are the tool spec's, and run through the SDK's own invoke path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, SQLiteSession
from agents.items import ModelResponse
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.tool import invoke_function_tool
from agents.tool_context import ToolContext
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from harness_mem.integrations.openai_agents import (
    SOURCE,
    HarnessMemSession,
    item_role,
    item_text,
    memory_tools,
)
from harness_mem.store import MemoryStore
from harness_mem.tools import OPERATIONS

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the SDK runs on asyncio alone


ASK = {"role": "user", "content": "what is the weather in Paris?"}
CALL = {"type": "function_call", "id": "fc_0a1b2c3d4e5f67890a1b2c3d4e5f6789", "call_id": "call_Xy7Qk2LmN9pR4sT6vW8zA1bC",
        "name": "get_weather", "arguments": '{"city": "Paris"}', "status": "completed"}
OUTPUT = {"type": "function_call_output", "call_id": "call_Xy7Qk2LmN9pR4sT6vW8zA1bC", "output": "sunny, 21 C"}
REASONING = {"type": "reasoning", "id": "rs_68a1b2c3d4e5f60718293a4b5c6d7e8f",
             "summary": [{"type": "summary_text", "text": "The tool said sunny."}],
             "encrypted_content": "gAAAAABoWx3Kq9v1T0bZr8Yc2LmN4pQ7sU6wX5yA3zB1cD9eF8gH7iJ6kL5mN4oP3qR2sT1uV0w=="}
REPLY = {"type": "message", "id": "msg_68a1b2c3d4e5f60718293a4b5c6d7e8f0123456789", "role": "assistant",
         "status": "completed", "content": [{"type": "output_text", "text": "It is sunny in Paris.",
                                             "annotations": [], "logprobs": []}]}
UNICODE = {"role": "user", "content": [{"type": "input_text", "text": "naïve café ☕, 東京"}]}
PERSONAL = {"role": "user", "content": "mail the forecast to ada.lovelace@example.com"}

async def script(session: Any) -> list[Any]:
    """The operations, and everything each one answered."""
    answers: list[Any] = []
    await session.add_items([ASK, CALL, OUTPUT])
    answers.append(await session.get_items())
    await session.add_items([REASONING, REPLY])
    answers.append(await session.get_items(limit=2))
    answers.append(await session.get_items(limit=0))
    answers.append(await session.get_items(limit=-1))
    answers.append(await session.pop_item())
    answers.append(await session.get_items())
    await session.add_items([])
    await session.add_items([PERSONAL, UNICODE])
    answers.append(await session.get_items(limit=3))
    answers.append(await session.get_items(limit=50))
    while (popped := await session.pop_item()) is not None:
        answers.append(popped)
    answers.append(await session.get_items())
    await session.add_items([ASK, REPLY])
    await session.clear_session()
    answers.append(await session.get_items())
    answers.append(await session.pop_item())
    await session.add_items([UNICODE])
    answers.append(await session.get_items())
    return answers


@pytest.mark.parametrize("session_id", ["chat-1", "support:ada.lovelace@example.com"])
async def test_the_same_script_gives_the_sdks_answers(engine_target: str, session_id: str) -> None:
    reference = SQLiteSession(session_id)
    expected = await script(reference)
    reference.close()
    with MemoryStore(engine_target, embedder=None) as store:
        # Another session in the same store stays as it was through all of it.
        bystander = HarnessMemSession(store, "bystander")
        await bystander.add_items([ASK, REPLY])
        got = await script(HarnessMemSession(store, session_id))
        assert await bystander.get_items() == [ASK, REPLY]
        assert got == expected
        resting = HarnessMemSession(store, session_id + "/at-rest")
        await resting.add_items([PERSONAL])
        assert await resting.get_items() == [PERSONAL]
        with store.stored_forms():  # nothing raw at rest: the text redacted, the item's values pseudonyms
            stored = json.dumps([(e.session, e.content, e.metadata) for e in store.list(session=resting.session_id)])
    assert PERSONAL in got[6] and "ada.lovelace@example.com" not in stored and "<EMAIL" in stored
    assert [REASONING, REPLY] in got  # ids, call ids and encrypted reasoning pass unredacted


async def test_turns_are_stored_with_role_text_and_session(store: MemoryStore) -> None:
    session = HarnessMemSession(store, "chat-1")
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    await session.add_items([ASK, CALL, OUTPUT, REASONING, REPLY])
    entries = list(store.list(session="chat-1"))
    assert [(e.kind, e.role, e.source) for e in entries] == [
        ("turn", "user", SOURCE), ("turn", "assistant", SOURCE), ("turn", "tool", SOURCE),
        ("turn", "assistant", SOURCE), ("turn", "assistant", SOURCE)]
    assert [e.content for e in entries] == [
        "what is the weather in Paris?", 'get_weather({"city": "Paris"})', "sunny, 21 C", "The tool said sunny.",
        "It is sunny in Paris."]
    assert [item_role(i) for i in (ASK, OUTPUT)] == ["user", "tool"]
    assert item_text({"type": "input_image", "image_url": "https://example.org/a.png"}) == "[input_image]"
    # The turns are recall's to find, as any transcript's.
    hits = store.recall("weather Paris", kind="turn", mode="keyword")
    assert hits and hits[0].entry.session == "chat-1"


async def test_settings_limit_and_turns_written_by_others(store: MemoryStore) -> None:
    session = HarnessMemSession(store, "chat-1", session_settings=SessionSettings(limit=2))
    store.add("a turn the agent loop captured", role="user", session="chat-1")
    store.add("a tool result it captured", role="tool", session="chat-1")
    await session.add_items([REPLY])
    assert await session.get_items() == [{"role": "user", "content": "a tool result it captured"}, REPLY]
    assert (await session.get_items(limit=5))[0] == {"role": "user", "content": "a turn the agent loop captured"}


async def test_pop_and_clear_forget(store: MemoryStore) -> None:
    session = HarnessMemSession(store, "chat-1")
    await session.add_items([ASK, PERSONAL])
    assert await session.pop_item() == PERSONAL
    assert store.count(session="chat-1") == 1
    assert store.recall("forecast", kind="turn", mode="keyword") == []  # forgotten, not merely hidden here
    await session.clear_session()
    assert store.count(session="chat-1") == 0
    assert store.purge() == 2  # tombstones: their text leaves the file at the purge


# ---- tools ------------------------------------------------------------------------------------------


def context(tool: FunctionTool, arguments: str) -> ToolContext[None]:
    return ToolContext(context=None, tool_name=tool.name, tool_call_id="call_test", tool_arguments=arguments)


async def call(tools: list[FunctionTool], name: str, arguments: dict[str, Any] | str) -> Any:
    """Invoke a tool the way the SDK's runner does, and the JSON it answers."""
    tool = next(t for t in tools if t.name == name)
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return json.loads(await invoke_function_tool(function_tool=tool, context=context(tool, raw), arguments=raw))


async def test_the_tools_are_the_tool_spec(store: MemoryStore) -> None:
    tools = memory_tools(store)
    assert [t.name for t in tools] == [op.name for op in OPERATIONS]
    for tool, op in zip(tools, OPERATIONS, strict=True):
        assert isinstance(tool, FunctionTool)
        assert (tool.description, tool.params_json_schema) == (op.description, op.parameters)


async def test_a_tool_call_end_to_end(store: MemoryStore) -> None:
    tools = memory_tools(store)
    remembered = await call(tools, "remember", {"content": "the user prefers metric units", "kind": "fact",
                                                "tags": ["preference"]})
    assert remembered["deduped"] is False
    entry = store.get(remembered["id"])
    assert (entry.content, entry.kind, entry.source, entry.tags) == (
        "the user prefers metric units", "fact", SOURCE, ("preference",))
    found = await call(tools, "recall", {"query": "metric units", "mode": "keyword"})
    assert [hit["id"] for hit in found["hits"]] == [remembered["id"]]
    # The call straight through on_invoke_tool, as the runner makes it, answers the same.
    tool = next(t for t in tools if t.name == "get_memory")
    arguments = json.dumps({"id": remembered["id"]})
    detail = json.loads(await tool.on_invoke_tool(context(tool, arguments), arguments))
    assert detail["memory"]["content"] == "the user prefers metric units"


@pytest.mark.parametrize(("name", "arguments", "says"), [
    ("get_memory", {"id": "no-such-id"}, "recall or recent_activity give the ids"),
    ("recall", {"query": "x", "colour": "red"}, "unknown argument 'colour'"),
    ("recall", {"query": "x", "k": "5"}, "k"),
    ("recall", "{not json", "not JSON"),
    ("recall", "[1, 2]", "one JSON object"),
    ("forget", {"id": "ada.lovelace@example.com"}, "<EMAIL>"),
])
async def test_errors_go_back_to_the_model_as_text(store: MemoryStore, name: str, arguments: Any, says: str) -> None:
    answer = await call(memory_tools(store), name, arguments)
    assert set(answer) == {"error"}
    assert says in answer["error"]
    assert "harness-mem " not in answer["error"]  # never a command line for the model
    assert "ada.lovelace@example.com" not in answer["error"]


async def test_recall_leaves_out_the_current_session(store: MemoryStore) -> None:
    earlier, current = HarnessMemSession(store, "monday"), HarnessMemSession(store, "tuesday")
    await earlier.add_items([{"role": "user", "content": "the deploy window is Thursday night"}])
    await current.add_items([{"role": "user", "content": "when is the deploy window?"}])
    query = {"query": "deploy window", "kind": "turn", "mode": "keyword"}
    everyone = await call(memory_tools(store), "recall", query)
    assert {hit["session"] for hit in everyone["hits"]} == {"monday", "tuesday"}
    others = await call(memory_tools(store, current_session="tuesday"), "recall", query)
    assert [hit["content"] for hit in others["hits"]] == ["the deploy window is Thursday night"]
    activity = await call(memory_tools(store, current_session="tuesday"), "recent_activity", {})
    assert {m["session"] for m in activity["memories"]} == {"monday"}
    # Without a kind, every lane: the earlier session's turn, beside a note, never the current one's.
    await call(memory_tools(store), "remember", {"content": "deploy window changes need a ticket"})
    every = await call(memory_tools(store, current_session="tuesday"), "recall",
                       {"query": "deploy window", "mode": "keyword"})
    assert sorted(hit["content"] for hit in every["hits"]) == [
        "deploy window changes need a ticket", "the deploy window is Thursday night"]


async def test_the_current_session_is_left_out_when_it_names_a_person(store: MemoryStore) -> None:
    mine = "support:ada.lovelace@example.com"
    await HarnessMemSession(store, mine).add_items([{"role": "user", "content": "reset my deploy key"}])
    await HarnessMemSession(store, "other").add_items([{"role": "user", "content": "rotate the deploy key"}])
    others = await call(memory_tools(store, current_session=mine), "recall",
                        {"query": "deploy key", "kind": "turn", "mode": "keyword"})
    assert [hit["content"] for hit in others["hits"]] == ["rotate the deploy key"]


# ---- a run of the SDK's own runner ------------------------------------------------------------------


class ScriptedModel(Model):
    """A model that calls ``remember`` on its first turn and then answers: the runner's loop, no LLM."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        if len(self.inputs) == 1:
            arguments = json.dumps({"content": "the user prefers metric units", "kind": "fact"})
            return ModelResponse(output=[ResponseFunctionToolCall(
                type="function_call", id="fc_1", call_id="call_1", name="remember", arguments=arguments,
                status="completed")], usage=Usage(), response_id=None)
        return ModelResponse(output=[ResponseOutputMessage(
            type="message", id=f"msg_{len(self.inputs)}", role="assistant", status="completed",
            content=[ResponseOutputText(type="output_text", text="Noted.", annotations=[])])],
            usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def test_a_run_of_the_sdks_runner_keeps_its_history_and_memories(store: MemoryStore) -> None:
    model = ScriptedModel()
    agent = Agent(name="helper", model=model, tools=memory_tools(store, current_session="chat-1"))
    session = HarnessMemSession(store, "chat-1")
    config = RunConfig(tracing_disabled=True)
    first = await Runner.run(agent, "I like metric units", session=session, run_config=config)
    assert first.final_output == "Noted."
    history = await session.get_items()
    assert [item.get("type", "message") for item in history] == [
        "message", "function_call", "function_call_output", "message"]
    assert [e.content for e in store.list(kind="fact")] == ["the user prefers metric units"]
    await Runner.run(agent, "and Celsius", session=session, run_config=config)
    # The second run's model saw the first run's items, as the session gave them back, then the new input.
    assert model.inputs[-1][: len(history)] == history
    assert model.inputs[-1][len(history)] == {"role": "user", "content": "and Celsius"}


async def test_the_tools_of_a_store_reading_a_shared_namespace_recall_both(tmp_path: Any) -> None:
    db = tmp_path / "team.db"
    for namespace, note in (("ada", "ada deploys the billing service on fridays"),
                            ("team", "the team deploys billing through the release train"),
                            ("bob", "bob deploys billing by hand")):
        with MemoryStore(db, namespace=namespace, embedder=None) as one:
            one.add(note, id=f"{namespace}-deploy")
    with MemoryStore(db, namespaces=["ada", "team"], embedder=None) as shared:
        found = await call(memory_tools(shared), "recall", {"query": "deploys billing"})
        assert {(h["id"], h["namespace"]) for h in found["hits"]} == {("ada-deploy", "ada"), ("team-deploy", "team")}
        await call(memory_tools(shared), "remember", {"content": "ada notes the freeze starts monday"})
        assert shared.count() == 2  # written into ada's own
