"""One store, several adapters, several threads: they take turns on the store's one connection
(``MemoryStore.lock``), so nothing fails and nothing is lost."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from langchain_core.messages import HumanMessage

from harness_mem import MemoryStore
from harness_mem.integrations.langchain import HarnessMemChatMessageHistory
from harness_mem.integrations.langgraph import HarnessMemStore
from harness_mem.integrations.openai_agents import HarnessMemSession

ROUNDS = 40


def test_adapters_sharing_a_store_take_turns(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        graph_store = HarnessMemStore(store)
        assert graph_store.lock is store.lock  # the same lock, whoever holds the store
        history = HarnessMemChatMessageHistory(store, "chat-lc")
        session = HarnessMemSession(store, "chat-agents")
        failures: list[BaseException] = []

        def locked_add(text: str) -> None:  # the caller's own thread, taking its turn as the adapters do
            with store.lock:
                store.add(text)

        def run(work: object) -> None:
            try:
                for i in range(ROUNDS):
                    work(i)  # type: ignore[operator]
            except BaseException as exc:  # reported below
                failures.append(exc)

        works = [
            lambda i: history.add_messages([HumanMessage(content=f"langchain message {i}")]),
            lambda i: asyncio.run(session.add_items([{"role": "user", "content": f"agents item {i}"}])),
            lambda i: graph_store.put(("docs",), f"k{i}", {"text": f"graph value {i}"}),
            lambda i: locked_add(f"plain note {i}"),
        ]
        threads = [threading.Thread(target=run, args=(work,)) for work in works]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(history.messages) == ROUNDS
        assert len(asyncio.run(session.get_items())) == ROUNDS
        assert len(graph_store.search(("docs",), limit=100)) == ROUNDS
        assert store.count() == 4 * ROUNDS
        assert store.integrity_check() == []
