"""A child process for the capture crash test: an agent loop with memory and a slow tool, waiting to be killed.

Usage: ``python capture_child.py DB LOG ROUNDS SLEEP``

A scripted model calls ``slow_page(i)`` for i = 0 .. ROUNDS-1, one call per round, then answers.
Each call sleeps SLEEP seconds and, just before returning, appends ``done <i> <time.time()>`` to
LOG (one write per line, so a SIGKILL cannot leave half a line). The run's session id is the first
line of LOG. The parent kills us mid-run and then reads DB.
"""

from __future__ import annotations

import sys
import time

import anyio

from harness_loop.chat import ModelOutput, ScriptedModel, ToolCall
from harness_loop.hooks import Event, HookEvent
from harness_loop.loop import AgentLoop
from harness_loop.memory import attach_memory
from harness_loop.tools import tool
from harness_mem import MemoryStore


def page_text(i: int) -> str:
    return f"page {i}: the billing ledger row {i * 7} is reconciled"


def log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


async def main(db: str, log_path: str, rounds: int, sleep: float) -> None:
    @tool
    async def slow_page(i: int) -> str:
        """Read one page, slowly."""
        await anyio.sleep(sleep)
        text = page_text(i)
        log(log_path, f"done {i} {time.time():.6f}")
        return text

    script: list[ModelOutput | str] = [
        ModelOutput.with_calls(ToolCall.of("slow_page", i=i), text=f"reading page {i}") for i in range(rounds)
    ]
    loop = AgentLoop(ScriptedModel([*script, "all pages read"]), [slow_page])

    def announce(event: HookEvent) -> None:
        log(log_path, f"session {event.session}")

    loop.hooks.add(announce, Event.SESSION_START)
    with MemoryStore(db, embedder=None) as store, attach_memory(loop, store):
        await loop.run("read every page of the billing ledger")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
