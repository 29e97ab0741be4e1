"""LangChain chat history on a harness-mem store.

::

    from harness_mem import MemoryStore
    from harness_mem.integrations.langchain import HarnessMemChatMessageHistory

    history = HarnessMemChatMessageHistory(MemoryStore("agent.db"), "chat-1")

Each message is one ``turn`` of the session: role ``user``, ``assistant``, ``system`` or ``tool``
from the message's type (a ``ChatMessage`` keeps its own role), content the message's text (what
recall searches; an AI message that only calls tools is its calls), and the message itself, as
LangChain serialises it (``{"type", "data"}``), kept in the entry's metadata under ``message``:
that is what :attr:`~HarnessMemChatMessageHistory.messages` rebuilds. Metadata is redacted value
by value, so the message comes back equal to the one added: a value that is personal data is
sealed and read back as given (:mod:`harness_mem.identities`), while a credential, or personal data
inside a longer text, comes back redacted as the content does.

The store is synchronous and serves one call at a time: the history's calls on one store take
turns, so the base class's async methods (which run the sync ones in an executor) are safe.
Writes are not deferred: :meth:`~HarnessMemChatMessageHistory.add_messages` returns once its
messages are committed, so they survive even a ``kill -9`` right after it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)

from ..errors import InvalidInputError
from ..models import MAX_CONTENT_CHARS, Entry
from ..store import MemoryStore

__all__ = ["SOURCE", "HarnessMemChatMessageHistory", "message_role", "message_text"]

#: The ``source`` of the turns this history writes.
SOURCE = "langchain"

def message_role(message: BaseMessage) -> str:
    """The turn's role: user, assistant, system or tool by the message's class; a ChatMessage's own."""
    if isinstance(message, ChatMessage):
        return message.role
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage | FunctionMessage):
        return "tool"
    return message.type


def message_text(message: BaseMessage) -> str:
    """The text recall searches: the message's text, or the tools an AI message calls."""
    text = str(message.text)
    if not text.strip() and isinstance(message, AIMessage) and message.tool_calls:
        text = "\n".join(f"{call['name']}({json.dumps(call['args'], ensure_ascii=False)})"
                         for call in message.tool_calls)
    if not text.strip():
        text = f"[{message.type}]"
    return text[:MAX_CONTENT_CHARS]


def _message(entry: Entry) -> BaseMessage:
    kept = entry.metadata.get("message")
    if isinstance(kept, dict):
        return messages_from_dict([kept])[0]
    # A turn written by something else (the agent loop, a hook) in the same session.
    if entry.role == "user":
        return HumanMessage(content=entry.content)
    if entry.role == "assistant":
        return AIMessage(content=entry.content)
    if entry.role == "system":
        return SystemMessage(content=entry.content)
    return ChatMessage(role=entry.role or "user", content=entry.content)


class HarnessMemChatMessageHistory(BaseChatMessageHistory):
    """One session of a harness-mem store as LangChain's chat message history.

    :param store: the store the turns go to.
    :param session_id: the session (stored as a session name, pseudonymised if it holds personal data).
    """

    def __init__(self, store: MemoryStore, session_id: str) -> None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise InvalidInputError("a session id must be a non-empty string")
        self.store = store
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"<HarnessMemChatMessageHistory {self.session_id!r} in {self.store!r}>"

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # the base declares an attribute
        """The session's messages, oldest first."""
        with self.store.lock:
            entries = list(self.store.list(session=self.session_id))
        return [_message(entry) for entry in entries]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` as turns, in one transaction."""
        rows = [{"content": message_text(m), "role": message_role(m), "kind": "turn", "session": self.session_id,
                 "source": SOURCE, "metadata": {"message": {"type": m.type, "data": m.model_dump(mode="json")}}}
                for m in messages]
        if rows:
            with self.store.lock:
                self.store.add_many(rows)

    def clear(self) -> None:
        """Forget the session's turns (their text leaves the file at the next purge)."""
        with self.store.lock:
            self.store.forget(session=self.session_id)
