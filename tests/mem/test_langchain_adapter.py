"""The LangChain adapter, differentially: the same script on LangChain's own
``InMemoryChatMessageHistory`` and on ``HarnessMemChatMessageHistory`` gives the same messages (one
holding personal data too: it comes back as given, while the file holds it redacted)."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from harness_mem.integrations.langchain import SOURCE, HarnessMemChatMessageHistory, message_text
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


SYSTEM = SystemMessage(content="You are a weather assistant.")
CALLS = AIMessage(content="", id="run-1", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"}],
                  response_metadata={"model_name": "gpt-test"},
                  usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15})
RESULT = ToolMessage(content="sunny, 21 C", tool_call_id="call_1", name="get_weather", artifact={"raw": [21, "C"]})
UNICODE = HumanMessage(content=[{"type": "text", "text": "naïve café ☕, 東京"}], name="ada")
CRITIC = ChatMessage(role="critic", content="too terse")
PERSONAL = HumanMessage(content="mail it to ada.lovelace@example.com")
LATER = [AIMessage(content="Sent."), HumanMessage(content="thanks")]



def reference() -> InMemoryChatMessageHistory:
    # LangChain 1.6.4 deprecated its chat histories (for LangGraph's short-term memory): the
    # reference warns on its first construction in a process; the adapter (a subclass of the base) never.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The class `InMemoryChatMessageHistory` was deprecated", DeprecationWarning)
        return InMemoryChatMessageHistory()


def script(history: BaseChatMessageHistory, seen: list[list[BaseMessage]]) -> None:
    history.add_user_message("what is the weather in Paris?")
    history.add_ai_message("Let me look.")
    seen.append(list(history.messages))
    history.add_messages([SYSTEM, CALLS, RESULT, UNICODE, CRITIC])
    history.add_messages([])
    seen.append(list(history.messages))
    history.add_message(PERSONAL)
    seen.append(list(history.messages))
    history.clear()
    seen.append(list(history.messages))
    history.add_messages(LATER)
    seen.append(list(history.messages))


async def async_script(history: BaseChatMessageHistory, seen: list[list[BaseMessage]]) -> None:
    await history.aadd_messages([SYSTEM, PERSONAL, CALLS])
    seen.append(list(await history.aget_messages()))
    await history.aclear()
    seen.append(list(await history.aget_messages()))
    await history.aadd_messages(LATER)
    seen.append(list(await history.aget_messages()))


def originals(seen: list[list[BaseMessage]]) -> list[list[BaseMessage]]:
    # The reference hands back the very objects it was given: map them to the script's constants by identity.
    by_value = {m.model_dump_json(): m for m in (SYSTEM, CALLS, RESULT, UNICODE, CRITIC, PERSONAL, *LATER)}
    return [[by_value.get(m.model_dump_json(), m) for m in messages] for messages in seen]


def test_the_same_script_gives_langchains_messages(engine_target: str) -> None:
    expected: list[list[BaseMessage]] = []
    script(reference(), expected)
    got: list[list[BaseMessage]] = []
    with MemoryStore(engine_target, embedder=None) as store:
        bystander = HarnessMemChatMessageHistory(store, "bystander")
        bystander.add_messages(LATER)
        script(HarnessMemChatMessageHistory(store, "chat-1"), got)
        assert bystander.messages == LATER  # another session is untouched by all of it
        resting = HarnessMemChatMessageHistory(store, "at-rest")
        resting.add_messages([PERSONAL])
        assert resting.messages == [PERSONAL]
        with store.stored_forms():  # nothing raw at rest: the text redacted, the message's values pseudonyms
            stored = json.dumps([(e.content, e.metadata) for e in store.list(session="at-rest")])
    assert got == originals(expected)
    assert any(PERSONAL in messages for messages in got)
    assert "ada.lovelace@example.com" not in stored and "<EMAIL" in stored
    assert [type(m) for m in got[1]] == [type(m) for m in expected[1]]


async def test_the_async_methods_give_the_same_answers(engine_target: str) -> None:
    expected: list[list[BaseMessage]] = []
    await async_script(reference(), expected)
    got: list[list[BaseMessage]] = []
    with MemoryStore(engine_target, embedder=None) as store:
        await async_script(HarnessMemChatMessageHistory(store, "support:ada.lovelace@example.com"), got)
    assert got == originals(expected)


def test_messages_are_turns_with_roles_and_text(store: MemoryStore) -> None:
    history = HarnessMemChatMessageHistory(store, "chat-1")
    history.add_messages([HumanMessage(content="hi"), CALLS, RESULT, SYSTEM, CRITIC])
    entries = list(store.list(session="chat-1"))
    assert [(e.kind, e.role, e.source) for e in entries] == [
        ("turn", "user", SOURCE), ("turn", "assistant", SOURCE), ("turn", "tool", SOURCE),
        ("turn", "system", SOURCE), ("turn", "critic", SOURCE)]
    assert entries[1].content == 'get_weather({"city": "Paris"})'
    assert message_text(UNICODE) == "naïve café ☕, 東京"
    hits = store.recall("sunny", kind="turn", mode="keyword")
    assert hits[0].entry.role == "tool"  # its text is the recall's to find
    history.clear()
    assert store.count(session="chat-1") == 0
    assert store.purge() == 5  # forgotten: the text leaves the file at the purge


def test_turns_written_by_others_are_messages_too(store: MemoryStore) -> None:
    store.add("what did we decide?", role="user", session="chat-1")
    store.add("argon2id", role="assistant", session="chat-1")
    store.add("grep found 3 files", role="tool", session="chat-1")
    messages: list[Any] = HarnessMemChatMessageHistory(store, "chat-1").messages
    assert messages == [HumanMessage(content="what did we decide?"), AIMessage(content="argon2id"),
                        ChatMessage(role="tool", content="grep found 3 files")]
