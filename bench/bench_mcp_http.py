"""``harness-mem mcp`` over Streamable HTTP against stdio, in the same run: the handshake and warm recalls.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_mcp_http.py                # 20k entries, 50 recalls
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_mcp_http.py --n 5000 --json

A keyword-only store (no model on either side: what is measured is the transport) of ``--n`` notes
is served twice, each time by a fresh process: over stdio (the SDK's client spawns it) and over HTTP
on 127.0.0.1 with a bearer token (the SDK's HTTP client connects). For each: from the spawn to the
answer of ``initialize``, and p50/p95 of ``--recalls`` keyword recalls (k=10) of different queries
after a first one. The rounds alternate so that a busy machine hurts both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from harness_mem.store import MemoryStore

TOKEN = "bench-token-" + "x" * 24
WORDS = ("deploy rollback schema index vector cache bucket budget latency queue worker lease retry backoff"
         " auth refactor ledger migration sqlite checkpoint planner critic summary episode").split()


def build(db: Path, n: int) -> None:
    rng = random.Random(3)
    with MemoryStore(db, embedder=None) as store:
        for start in range(0, n, 5000):
            store.add_many([{"content": " ".join(rng.choices(WORDS, k=12)) + f" n{start + i}"}
                            for i in range(min(5000, n - start))])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def timed_session(client: Client, queries: list[str]) -> list[float]:
    times = []
    for query in queries:
        began = time.perf_counter()
        result = await client.call_tool("recall", {"query": query, "k": 10, "mode": "keyword"})
        times.append(time.perf_counter() - began)
        assert not result.is_error, result.content[0].text
    return times[1:]  # the first warms the caches


async def over_stdio(db: Path, queries: list[str]) -> tuple[float, list[float]]:
    command = Path(sys.executable).parent / "harness-mem"
    params = StdioServerParameters(command=str(command), args=["--embedder", "none", "mcp", "--db", str(db)],
                                   env=dict(os.environ))
    began = time.perf_counter()
    async with Client(params, read_timeout_seconds=120) as client:
        ready = time.perf_counter() - began
        return ready, await timed_session(client, queries)


async def over_http(db: Path, queries: list[str]) -> tuple[float, list[float]]:
    port = free_port()
    command = Path(sys.executable).parent / "harness-mem"
    began = time.perf_counter()
    proc = subprocess.Popen([str(command), "--embedder", "none", "mcp", "--db", str(db), "--http", f"127.0.0.1:{port}"],
                            env={**os.environ, "HARNESS_MEM_MCP_TOKEN": TOKEN}, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            while True:  # the host retries until the server listens; so does this
                try:
                    async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120) as client:
                        ready = time.perf_counter() - began
                        return ready, await timed_session(client, queries)
                except Exception:
                    if proc.poll() is not None or time.perf_counter() - began > 60:
                        raise
                    await asyncio.sleep(0.02)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def ms(values: list[float], q: float) -> float:
    return round(1000 * statistics.quantiles(values, n=100)[int(q) - 1], 2) if len(values) > 1 else round(1000 * values[0], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--recalls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(7)
    queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.recalls + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "memory.db"
        build(db, args.n)
        ready: dict[str, list[float]] = {"stdio": [], "http": []}
        recalls: dict[str, list[float]] = {"stdio": [], "http": []}
        for _ in range(args.rounds):
            for name, run in (("stdio", over_stdio), ("http", over_http)):
                took, times = asyncio.run(run(db, queries))
                ready[name].append(took)
                recalls[name].extend(times)
    report: dict[str, Any] = {"entries": args.n, "load": os.getloadavg()[0]}
    for name in ("stdio", "http"):
        report[name] = {"initialize_s": round(statistics.median(ready[name]), 2),
                        "recall_p50_ms": ms(recalls[name], 50), "recall_p95_ms": ms(recalls[name], 95)}
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.n:,} entries, keyword recalls, load {report['load']:.1f}")
    for name in ("stdio", "http"):
        r = report[name]
        print(f"{name:<6} initialize {r['initialize_s']:.2f} s from the spawn; recall p50 {r['recall_p50_ms']} ms,"
              f" p95 {r['recall_p95_ms']} ms")


if __name__ == "__main__":
    main()
