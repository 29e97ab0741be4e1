"""The OpenAI Agents SDK on a harness-mem store: a session, and the memory tools.

::

    from harness_mem import MemoryStore
    from harness_mem.integrations.openai_agents import HarnessMemSession, memory_tools

    store = MemoryStore("agent.db")
    agent = Agent(name="helper", tools=memory_tools(store, current_session="chat-1"))
    await Runner.run(agent, "hello", session=HarnessMemSession(store, "chat-1"))

:class:`HarnessMemSession` follows the SDK's ``Session`` protocol (structurally, as the SDK asks of
third-party sessions). Each item is one ``turn`` of the session: its role is the item's (or, for an
item without one, ``assistant`` for a call the model made and ``tool`` for a call's output), its
content the item's text (what recall searches), and the item itself is kept whole in the entry's
metadata under ``item``, which is what :meth:`~HarnessMemSession.get_items` gives back. Metadata is
redacted value by value, so the item keeps its shape (ids, call ids and encrypted reasoning pass
unchanged) and comes back equal to what was added: a value that is personal data (an e-mail, a
phone number) is stored as its pseudonym with the raw value sealed outside the file's reach
(:mod:`harness_mem.identities`) and read back as given, while a credential, or personal data inside
a longer text, comes back redacted as the content does.

:func:`memory_tools` renders :data:`harness_mem.tools.OPERATIONS` as the SDK's ``FunctionTool`` s:
the name, description and JSON schema of each operation, arguments checked by the spec, errors
returned to the model as one line (:func:`harness_mem.tools.for_model`) rather than ending the run.

The store is synchronous; each call runs in a worker thread (as the SDK's ``SQLiteSession`` does),
one at a time per store, so sessions and tools of one store can share it from concurrent tasks.
Writes are not deferred: :meth:`~HarnessMemSession.add_items` returns once its items are committed,
so they survive even a ``kill -9`` right after it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

from agents import FunctionTool
from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit
from agents.tool_context import ToolContext

from ..errors import HarnessMemError, InvalidInputError
from ..models import MAX_CONTENT_CHARS, Entry
from ..rows import identity
from ..store import MemoryStore
from ..tools import OPERATIONS, Caller, Operation, for_model

__all__ = ["SOURCE", "HarnessMemSession", "item_role", "item_text", "memory_tools"]

#: The ``source`` of what this adapter writes: session items and the tools' memories.
SOURCE = "openai-agents"
#: The roles an SDK message may have: an entry written by something else becomes such a message.
MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})

_T = TypeVar("_T")
async def _in_thread(store: MemoryStore, work: Callable[[], _T]) -> _T:
    def locked() -> _T:
        with store.lock:
            return work()

    return await asyncio.to_thread(locked)


def item_role(item: TResponseInputItem) -> str:
    """Who an item is from: its own role, else ``tool`` for a call's output and ``assistant`` for
    what the model did (a function call, reasoning, a search)."""
    fields = cast(dict[str, Any], item)
    role = fields.get("role")
    if isinstance(role, str) and role:
        return role
    return "tool" if str(fields.get("type", "")).endswith("_output") else "assistant"


def _parts_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [part.get("text") or part.get("refusal") for part in value if isinstance(part, dict)]
        return "\n".join(text for text in texts if isinstance(text, str) and text)
    return ""


def item_text(item: TResponseInputItem) -> str:
    """An item as the text recall searches: a message's text, a call's name and arguments, an
    output's text, a reasoning summary; the item's type when it has no text (an image, say)."""
    fields = cast(dict[str, Any], item)
    text = _parts_text(fields.get("content"))
    if not text and "name" in fields and "arguments" in fields:
        text = f"{fields['name']}({fields['arguments']})"
    if not text and "output" in fields:
        text = _parts_text(fields["output"])
    if not text:
        text = _parts_text(fields.get("summary"))
    if not text.strip():
        text = f"[{fields.get('type') or 'message'}]"
    return text[:MAX_CONTENT_CHARS]


def _item(entry: Entry) -> TResponseInputItem:
    kept = entry.metadata.get("item")
    if isinstance(kept, dict):
        return cast(TResponseInputItem, kept)
    # A turn written by something else (the agent loop, a hook) in the same session: as a message.
    role = entry.role if entry.role in MESSAGE_ROLES else "user"
    return cast(TResponseInputItem, {"role": role, "content": entry.content})


class HarnessMemSession:
    """The SDK's session protocol over a harness-mem store: one session's items, as turns.

    :param store: the store the turns go to.
    :param session_id: the session (stored as a session name, pseudonymised if it holds personal data).
    :param session_settings: the SDK's settings; ``limit`` is the default of :meth:`get_items`.
    """

    def __init__(self, store: MemoryStore, session_id: str,
                 session_settings: SessionSettings | None = None) -> None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise InvalidInputError("a session id must be a non-empty string")
        self.store = store
        self.session_id = session_id
        self.session_settings: SessionSettings | None = session_settings or SessionSettings()

    def __repr__(self) -> str:
        return f"<HarnessMemSession {self.session_id!r} in {self.store!r}>"

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, the newest ``limit`` of them."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted == 0:
            return []

        def read() -> list[Entry]:
            if wanted is None or wanted < 0:  # negative: all of them, as SQLiteSession's LIMIT does
                return list(self.store.list(session=self.session_id))
            return list(self.store.list(session=self.session_id, limit=wanted, newest_first=True))[::-1]

        return [_item(entry) for entry in await _in_thread(self.store, read)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items`` as turns, in one transaction."""
        if not items:
            return
        rows = [{"content": item_text(item), "role": item_role(item), "kind": "turn", "session": self.session_id,
                 "source": SOURCE, "metadata": {"item": item}} for item in items]
        await _in_thread(self.store, lambda: self.store.add_many(rows))

    async def pop_item(self) -> TResponseInputItem | None:
        """Forget the newest item and return it (None when the session is empty)."""
        def pop() -> Entry | None:
            with self.store.transaction():
                newest = list(self.store.list(session=self.session_id, limit=1, newest_first=True))
                if newest:
                    self.store.forget(newest[0].id)
            return newest[0] if newest else None

        entry = await _in_thread(self.store, pop)
        return None if entry is None else _item(entry)

    async def clear_session(self) -> None:
        """Forget every entry of the session (their text leaves the file at the next purge)."""
        await _in_thread(self.store, lambda: self.store.forget(session=self.session_id))


# ---- tools ----------------------------------------------------------------------------------------


def _function_tool(store: MemoryStore, op: Operation, caller: Caller) -> FunctionTool:
    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return json.dumps({"error": "the arguments are not JSON: send one JSON object"})
        if not isinstance(parsed, dict):
            return json.dumps({"error": "the arguments must be one JSON object"})
        try:
            result = await _in_thread(store, lambda: op.run(store, parsed, caller))
            return result.model_dump_json()
        except HarnessMemError as exc:
            return json.dumps({"error": for_model(exc)})

    # Not strict: the spec's schema has optional arguments and free-form metadata, which strict
    # mode cannot express; the spec checks every argument itself.
    return FunctionTool(name=op.name, description=op.description, params_json_schema=op.parameters,
                        on_invoke_tool=invoke, strict_json_schema=False)


def memory_tools(store: MemoryStore, *, current_session: str | None = None,
                 source: str = SOURCE) -> list[FunctionTool]:
    """The memory tools of :data:`harness_mem.tools.OPERATIONS` as the SDK's ``FunctionTool`` s.

    :param current_session: the session the agent is running in: reads leave its turns out (the
        model has them in its context already), so a recall finds what other sessions said.
    :param source: the ``source`` of the memories the tools write.
    """
    exclude: Callable[[Entry], bool] | None = None
    if current_session is not None:
        # The session as given, or as stored (its pseudonym, when it holds personal data).
        names = {current_session, identity(current_session, store.redactor)}

        def exclude(entry: Entry) -> bool:
            return entry.session in names

    caller = Caller(source=source, exclude=exclude)
    return [_function_tool(store, op, caller) for op in OPERATIONS]
