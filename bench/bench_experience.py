"""Transcript capture and offline consolidation: what they cost.

Three measurements, each on a fresh database in a temporary directory:

* **hook side** — how long ``TranscriptRecorder.note_*`` holds the caller, per turn (p50, p99,
  max), while the background writer runs in the same event loop. Turns are a realistic mix: user
  questions, assistant answers, and tool results from 100 bytes to 20 kB (JSON objects, which the
  writer — not the hook — serialises).
* **writer throughput** — turns/s from the first enqueue of a burst until ``aclose()`` returns, next
  to ``MemoryStore.add_many`` of the very same turns (what the writer calls underneath). The
  difference is the recorder's own work: dedup, truncation, JSON and the queue. Also into an
  ``AsyncMemoryStore``, whose writes run in a worker thread.
* **consolidation** — ``consolidate()`` over 1,000 sessions × 50 turns: the first run (every
  session becomes an episode), a second run (nothing new: must write nothing), and an incremental
  run after 10 sessions received 5 turns each.

Every store is opened with ``embedder=None`` (keyword index only): embedding would dominate and is
measured by ``bench_store.py``. The store's default write-path redaction is on, as in real use
(writer throughput is also shown with it off, to separate the two costs).

Run::

    .venv/bin/python bench/bench_experience.py
    .venv/bin/python bench/bench_experience.py --turns 50000 --sessions 2000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from harness_mem.aio import AsyncMemoryStore
from harness_mem.experience.consolidate import consolidate
from harness_mem.experience.transcript import TranscriptRecorder
from harness_mem.store import MemoryStore

WORDS = (
    "deploy build cache token release branch config schema index query latency replica backup restore "
    "certificate gateway cluster queue worker metrics alert rollback canary tenant region quota secret"
).split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def tool_result(rng: random.Random) -> dict[str, Any]:
    size = rng.choice([100, 400, 1_500, 5_000, 20_000])
    return {"exit": rng.choice([0, 0, 0, 1]), "stdout": ("x" * 60 + "\n") * (size // 61)}


def script(rng: random.Random, count: int) -> list[tuple[str, Any]]:
    """A plausible stream of turns: user, then rounds of assistant + tool calls, ~10% repeated polls."""
    turns: list[tuple[str, Any]] = []
    while len(turns) < count:
        turns.append(("user", sentence(rng, rng.randint(8, 30))))
        for _ in range(rng.randint(2, 6)):
            turns.append(("assistant", sentence(rng, rng.randint(10, 60))))
            result = tool_result(rng)
            turns.append(("tool", ("shell", result)))
            if rng.random() < 0.1:
                turns.append(("tool", ("shell", result)))  # an echo the writer drops
    return turns[:count]


def note(rec: TranscriptRecorder, turn: tuple[str, Any]) -> None:
    role, body = turn
    if role == "user":
        rec.note_user(body)
    elif role == "assistant":
        rec.note_assistant(body)
    else:
        rec.note_tool(*body)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- hook side --------------------------------------------------------------------------------------


async def hook_side(path: Path, turns: list[tuple[str, Any]]) -> dict[str, float]:
    """Per-call enqueue time while the writer drains concurrently (a checkpoint every 8 turns)."""
    timings: list[float] = []
    with MemoryStore(path, embedder=None) as store:
        async with TranscriptRecorder(store, session="hook") as rec:
            for i, turn in enumerate(turns):
                started = time.perf_counter_ns()
                note(rec, turn)
                timings.append(time.perf_counter_ns() - started)
                if i % 8 == 7:
                    await anyio.lowlevel.checkpoint()  # an agent loop awaits between turns
        written = rec.stats.written
    return {
        "p50_ns": percentile(timings, 0.50),
        "p99_ns": percentile(timings, 0.99),
        "max_ns": max(timings),
        "mean_ns": statistics.fmean(timings),
        "written": written,
    }


# ---- writer throughput ------------------------------------------------------------------------------------


async def writer(path: Path, turns: list[tuple[str, Any]], redact: bool) -> tuple[float, TranscriptRecorder]:
    with MemoryStore(path, embedder=None, redactor="default" if redact else None) as store:
        started = time.perf_counter()
        async with TranscriptRecorder(store, session="burst") as rec:
            for turn in turns:
                note(rec, turn)
        return time.perf_counter() - started, rec


async def async_writer(path: Path, turns: list[tuple[str, Any]]) -> tuple[float, TranscriptRecorder]:
    """The same burst into an AsyncMemoryStore: writes in its worker thread, off the event loop."""
    async with AsyncMemoryStore(path, embedder=None) as store:
        started = time.perf_counter()
        async with TranscriptRecorder(store, session="burst") as rec:
            for turn in turns:
                note(rec, turn)
        return time.perf_counter() - started, rec


def add_many(path: Path, turns: list[tuple[str, Any]], redact: bool) -> tuple[float, int]:
    """The same turns, formatted as the writer stores them, through add_many directly."""
    now = datetime.now(UTC)
    items = []
    last = None
    for role, body in turns:
        text = body if role != "tool" else f"[{body[0]}] {json.dumps(body[1], separators=(',', ':'))}"
        if (role, text) == last:
            continue
        last = (role, text)
        if len(text) > 2000:
            text = f"{text[:2000]}… [{len(text) - 2000} chars truncated]"
        items.append({"content": text, "role": role, "session": "burst", "source": "transcript",
                      "tags": [f"role:{role}", "session:burst"], "expires_at": now + timedelta(days=30)})
    with MemoryStore(path, embedder=None, redactor="default" if redact else None) as store:
        started = time.perf_counter()
        written = store.add_many(items, batch_size=256)
        return time.perf_counter() - started, len(written)


# ---- consolidation ------------------------------------------------------------------------------------------


def build_sessions(store: MemoryStore, sessions: int, per_session: int, rng: random.Random) -> int:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    items: list[dict[str, Any]] = []
    for s in range(sessions):
        at = start + timedelta(minutes=30 * s)
        session = f"run-{s:05d}"
        for i in range(per_session):
            if i == 0:
                role, text = "user", sentence(rng, 20)
            elif i == per_session - 1:
                role, text = "assistant", sentence(rng, 15) + ("\nResult: success" if s % 3 else "\nResult: failure")
            elif i % 2:
                role, text = "assistant", sentence(rng, rng.randint(10, 40))
            else:
                tool = rng.choice(["shell", "read_file", "http_get", "write_file"])
                role, text = "tool", f"[{tool}] " + json.dumps({"exit": 0, "out": sentence(rng, 30)})
            items.append({"content": text, "role": role, "session": session, "source": "transcript",
                          "tags": [f"role:{role}", f"session:{session}"],
                          "created_at": at + timedelta(seconds=i)})
    return len(store.add_many(items, batch_size=2_000))


def consolidation(path: Path, sessions: int, per_session: int, rng: random.Random) -> dict[str, Any]:
    started = time.perf_counter()
    with MemoryStore(path, embedder=None, redactor=None) as store:  # synthetic text: nothing to redact
        turns = build_sessions(store, sessions, per_session, rng)
    built = time.perf_counter() - started
    with MemoryStore(path, embedder=None) as store:
        started = time.perf_counter()
        first = consolidate(store)
        first_s = time.perf_counter() - started

        started = time.perf_counter()
        second = consolidate(store)
        second_s = time.perf_counter() - started

        for s in range(0, sessions, max(1, sessions // 10)):
            session = f"run-{s:05d}"
            store.add_many([{"content": sentence(rng, 12), "role": "assistant" if i % 2 else "user",
                             "session": session} for i in range(5)])
        started = time.perf_counter()
        third = consolidate(store)
        third_s = time.perf_counter() - started
    return {
        "turns": turns, "build_s": built,
        "first_s": first_s, "first": first.summary(),
        "second_s": second_s, "second": second.summary(),
        "incremental_s": third_s, "incremental": third.summary(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20_000, help="turns for the capture benchmarks (default 20000)")
    parser.add_argument("--sessions", type=int, default=1_000, help="sessions to consolidate (default 1000)")
    parser.add_argument("--turns-per-session", type=int, default=50, help="turns per session (default 50)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    turns = script(rng, args.turns)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"python {sys.version.split()[0]}, {args.turns:,} turns, embedder=None\n")

        hook = anyio.run(hook_side, root / "hook.db", turns)
        print("hook side (note_* while the writer runs; redaction on)")
        print(f"  p50 {hook['p50_ns'] / 1000:.2f} µs   p99 {hook['p99_ns'] / 1000:.2f} µs"
              f"   max {hook['max_ns'] / 1000:.1f} µs   mean {hook['mean_ns'] / 1000:.2f} µs"
              f"   ({hook['written']:,.0f} turns written)\n")

        print("writer throughput (burst enqueue → aclose), vs add_many of the same rows")
        for redact in (True, False):
            label = "redaction on " if redact else "redaction off"
            seconds, rec = anyio.run(writer, root / f"writer-{redact}.db", turns, redact)
            direct, written = add_many(root / f"direct-{redact}.db", turns, redact)
            stats = rec.stats
            print(f"  {label}  recorder {stats.written / seconds:>7,.0f} turns/s   add_many {written / direct:>7,.0f}"
                  f" turns/s   recorder overhead {100 * (seconds / direct - 1):+.0f} %")
        seconds, rec = anyio.run(async_writer, root / "async.db", turns)
        print(f"  AsyncMemoryStore (redaction on, writes in a worker thread)  recorder"
              f" {rec.stats.written / seconds:>7,.0f} turns/s")
        print(f"  ({stats.written:,} turns written, {stats.duplicates:,} echoes dropped, {stats.truncated:,} truncated"
              " — add_many gets them pre-formatted, outside its timer)\n")

        n, per = args.sessions, args.turns_per_session
        result = consolidation(root / "consolidate.db", n, per, rng)
        print(f"consolidation, {n:,} sessions × {per} turns ({result['turns']:,} turns; redaction on)")
        print(f"  first run        {result['first_s']:7.2f} s   {result['first']}")
        print(f"  second run       {result['second_s']:7.2f} s   {result['second']}")
        print(f"  incremental run  {result['incremental_s']:7.2f} s   {result['incremental']}")


if __name__ == "__main__":
    main()
