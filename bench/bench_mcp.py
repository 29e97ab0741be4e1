"""What an MCP host waits for from ``harness-mem mcp``: the handshake, the first recall, a warm recall.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_mcp.py                 # 100k-entry store, 5 rounds
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_mcp.py --n 20000 --json

Each round starts a fresh ``harness-mem mcp`` process (the venv's command, the real default
embedder) and speaks JSON-RPC to it over stdio as a host does, timing from the spawn:

- ``initialize``: until its answer arrives (the goal is 1.5 s; no model may load before it), and the
  CPU time the server process had used by then (from ``/proc``): on a busy machine the wall time
  stretches with the load, the CPU time much less, so it tells what an idle machine would see;
- the first ``recall`` sent right after the handshake: it answers by keyword while the model loads;
- the model ready: the first recall that answers in hybrid mode (polled every 50 ms);
- warm ``recall``: p50 and p95 of hybrid recalls (k=10) of different queries once the model is up,
  against the same queries through ``MemoryStore.recall`` in this process, in the same round: the
  difference is what the protocol, the process boundary and the result models cost.

Rounds run on an empty file and on an N-entry store (built like bench_embedder's, from its caches in
``--cache``). The load average is printed with the figures: on a busy machine every number grows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_embedder import big_store  # noqa: E402
from bench_store import make_queries  # noqa: E402

from harness_mem.store import MemoryStore  # noqa: E402

HARNESS_MEM = Path(sys.executable).with_name("harness-mem")


class Session:
    """One ``harness-mem mcp`` process and a minimal JSON-RPC client for it."""

    def __init__(self, db: Path) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([str(HARNESS_MEM), "mcp", "--db", str(db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "HF_HUB_OFFLINE": "1"})
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The result of one request and the seconds it took."""
        assert self.proc.stdout is not None
        self.next_id += 1
        began = time.perf_counter()
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"harness-mem mcp exited during {method}")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise SystemExit(f"{method} failed: {message['error']}")
                return message["result"], time.perf_counter() - began

    def recall(self, query: str) -> tuple[str, float]:
        result, seconds = self.request("tools/call", {"name": "recall", "arguments": {"query": query, "k": 10}})
        if result.get("isError"):
            raise SystemExit(f"recall failed: {result['content'][0]['text']}")
        return result["structuredContent"]["mode"], seconds

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (Linux), or NaN elsewhere."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def in_process_p50_ms(db: Path, queries: list[str]) -> float:
    """The p50 of the same warm recalls straight through the library: a store opened afresh (so no
    query embedding is cached from an earlier round), its model loaded by one other query first."""
    took = []
    with MemoryStore(db) as store:
        store.recall("warm up", 10)
        for query in queries:
            began = time.perf_counter()
            store.recall(query, 10)
            took.append(time.perf_counter() - began)
    return 1000 * statistics.median(took)


def one_round(db: Path, queries: list[str]) -> dict[str, float | str]:
    session = Session(db)
    try:
        _, _ = session.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                              "clientInfo": {"name": "bench", "version": "0"}})
        initialize = time.perf_counter() - session.started
        initialize_cpu = session.cpu_seconds()
        session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        first_mode, first = session.recall(queries[0])
        mode = first_mode
        while mode != "hybrid":
            time.sleep(0.05)
            mode, _ = session.recall(queries[0])
        ready = time.perf_counter() - session.started
        warm = [session.recall(query)[1] for query in queries[1:]]
    finally:
        session.close()
    warm.sort()
    return {"initialize_s": initialize, "initialize_cpu_s": initialize_cpu, "first_recall_s": first,
            "first_recall_mode": first_mode, "model_ready_s": ready,
            "warm_recall_p50_ms": 1000 * statistics.median(warm),
            "warm_recall_p95_ms": 1000 * warm[int(0.95 * (len(warm) - 1))],
            "in_process_p50_ms": in_process_p50_ms(db, queries[1:])}


def summary(rounds: list[dict[str, float | str]]) -> dict[str, float | str]:
    out: dict[str, float | str] = {}
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        if isinstance(values[0], str):
            out[key] = "/".join(sorted(set(map(str, values))))
        else:
            numbers = [float(v) for v in values]
            out[key] = statistics.median(numbers)
            out[key.replace("_s", "_min_s") if key.endswith("_s") else key + "_min"] = min(numbers)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="entries in the big store")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=51, help="recalls per round (the first is the cold one)")
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)

    big = big_store(args.cache, args.n)
    MemoryStore(big).close()  # migrations, if the cached file is older than this version: not timed
    queries = make_queries(args.queries)
    results: dict[str, dict[str, float | str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        stores = {"empty file": Path(scratch) / "empty.db", f"{args.n:,} entries": big}
        samples: dict[str, list[dict[str, float | str]]] = {name: [] for name in stores}
        for _ in range(args.rounds):  # the stores interleaved, so a burst of load hits both alike
            for name, path in stores.items():
                samples[name].append(one_round(path, queries))
        results = {name: summary(rounds) for name, rounds in samples.items()}
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"rounds": args.rounds, "load_average": load, "cpus": os.cpu_count(), "results": results}))
        return
    print(f"harness-mem mcp: median (min) of {args.rounds} rounds; load average {load[0]:.1f} on {os.cpu_count()} CPUs")
    for name, r in results.items():
        print(f"  {name}:")
        print(f"    initialize answered       {r['initialize_s']:.2f} s ({r['initialize_min_s']:.2f})  goal ≤ 1.5 s;"
              f" CPU used by then {r['initialize_cpu_s']:.2f} s ({r['initialize_cpu_min_s']:.2f})")
        print(f"    first recall after it      {1000 * float(r['first_recall_s']):.0f} ms"
              f" ({1000 * float(r['first_recall_min_s']):.0f}), mode {r['first_recall_mode']}")
        print(f"    model ready (from spawn)  {r['model_ready_s']:.2f} s ({r['model_ready_min_s']:.2f})")
        print(f"    warm recall               p50 {r['warm_recall_p50_ms']:.1f} ms, p95 {r['warm_recall_p95_ms']:.1f} ms;"
              f" MemoryStore.recall in process p50 {r['in_process_p50_ms']:.1f} ms")


if __name__ == "__main__":
    main()
