"""What Claude Code waits for from ``harness-mem hook EVENT``: a fresh process per hook.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_hooks.py             # 3,000 entries, 30 runs each
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_hooks.py --n 5000 --runs 50 --json

The store is seeded with ``--n`` entries that have vectors (the tests' hashed embedder: the hook
path loads no model, so which one made them does not matter), a tenth of them the project's facts
and the rest turns of its earlier sessions, consolidated as their SessionEnd hooks would have done
(so SessionStart finds no backlog: the steady state). Then, timed from spawn to exit:

- capture through the writer: ``harness-mem hook PostToolUse`` with a Bash result (the most
  frequent event) while the store's hook writer runs (``harness_mem.hook_writer``), each run a
  different result so none is dropped as a repeat (goal: p50 ≤ 150 ms);
- capture in process: the same with no writer to reach (a runtime directory others may enter, which
  a hook refuses), the path a hook takes when its writer is not up yet or was killed;
- a prompt through the writer: ``harness-mem hook UserPromptSubmit`` (stored, and the project's
  memories it touches recalled by keyword), each run a new session so nothing is left out as given;
- session start: ``harness-mem hook SessionStart``, through the writer and in process (goal: ≤ 1 s);
- the floors under them: ``python -c pass``, ``import harness_mem.entry`` (what a hook through the
  writer imports), ``import harness_mem.cli`` (what any other ``harness-mem`` command pays before it
  runs) and ``import harness_mem.store`` (what a write in process pays).

Each row gives wall-time p50/p95 and the CPU time p50 (user + system, from ``getrusage``): on a busy
machine the wall time stretches with the load, the CPU time much less. The load average is printed
with them. The writer runs in a runtime directory of the benchmark's own and is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fake_embedder import HashedEmbedder  # noqa: E402

from harness_mem.experience.consolidate import consolidate  # noqa: E402
from harness_mem.store import MemoryStore  # noqa: E402

HARNESS_MEM = Path(sys.executable).with_name("harness-mem")
CWD = "/work/shop"
PROJECT = "project:/work/shop"  # no git repository there: the project is the directory


def seed(path: Path, n: int) -> None:
    items = []
    for i in range(n):
        if i % 10 == 0:
            items.append({"content": f"decision {i}: the cart module keeps totals in decimal, rule {i % 97}",
                          "kind": "fact", "tags": [PROJECT]})
        else:
            session = f"earlier-{i // 50}"
            items.append({"content": f"step {i}: ran the checkout tests, {i % 13} failures in cart_{i % 31}.py",
                          "role": "user" if i % 3 == 0 else "tool", "session": session,
                          "tags": [PROJECT, f"session:{session}"]})
    with MemoryStore(path, embedder=HashedEmbedder()) as store:
        for start in range(0, n, 500):
            store.add_many(items[start:start + 500])
        consolidate(store)


def payload(event: str, i: int) -> bytes:
    base = {"session_id": "bench-session", "transcript_path": "/nonexistent.jsonl", "cwd": CWD,
            "permission_mode": "default", "hook_event_name": event}
    if event == "UserPromptSubmit":
        base |= {"session_id": f"bench-prompt-{i}", "prompt": f"why does the cart module keep totals in decimal ({i})?"}
    elif event == "PostToolUse":
        base |= {"tool_name": "Bash", "tool_input": {"command": f"pytest -q tests/test_cart_{i}.py"},
                 "tool_response": {"stdout": f"{i} passed in 0.{i:02d}s", "stderr": "", "interrupted": False},
                 "tool_use_id": f"toolu_{i:08d}"}
    else:
        base |= {"source": "startup"}
    return json.dumps(base).encode()


def timed(command: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float]:
    """Wall time from spawn to exit, and the CPU time the process used (user + system), in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, input=stdin, capture_output=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode().strip()}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls = [wall for wall, _ in samples]
    cpus = [cpu for _, cpu in samples]
    return {"p50_ms": round(statistics.median(walls) * 1000, 1), "p95_ms": round(percentile(walls, 0.95) * 1000, 1),
            "cpu_p50_ms": round(statistics.median(cpus) * 1000, 1)}


def start_writer(db: Path, runtime: Path, env: dict[str, str]) -> int:
    """Bring up the store's writer as a session's first hook does; its pid."""
    timed([str(HARNESS_MEM), "hook", "SessionStart", "--db", str(db)], payload("SessionStart", 0), env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for lock in runtime.glob("*.lock"):
            text = lock.read_text().strip()
            if lock.with_suffix(".sock").exists() and text.isdigit():
                return int(text)
        time.sleep(0.05)
    raise SystemExit("the hook writer did not come up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="entries in the store")
    parser.add_argument("--runs", type=int, default=30, help="processes per measurement")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runtime, shared = Path(tmp) / "run", Path(tmp) / "shared"
        runtime.mkdir(mode=0o700)
        shared.mkdir()
        shared.chmod(0o777)  # a hook uses no writer here: the in-process path
        env = dict(os.environ, HF_HUB_OFFLINE="1", HARNESS_MEM_RUNTIME_DIR=str(runtime))
        env.pop("HARNESS_MEM_RAISE_ERRORS", None)
        alone = dict(env, HARNESS_MEM_RUNTIME_DIR=str(shared))
        db = Path(tmp) / "memory.db"
        seed(db, args.n)
        hook = [str(HARNESS_MEM), "hook"]
        python = [sys.executable, "-c"]

        def imports(module: str) -> list[tuple[float, float]]:
            return [timed([*python, f"import {module}"], b"", env) for _ in range(args.runs)]

        def hooks(event: str, environ: dict[str, str], first: int) -> list[tuple[float, float]]:
            return [timed([*hook, event, "--db", str(db)], payload(event, first + i), environ) for i in range(args.runs)]

        rows = {
            "python -c pass": [timed([*python, "pass"], b"", env) for _ in range(args.runs)],
            "import harness_mem.entry": imports("harness_mem.entry"),
            "import harness_mem.cli": imports("harness_mem.cli"),
            "import harness_mem.store": imports("harness_mem.store"),
        }
        writer = start_writer(db, runtime, env)
        try:
            rows["capture, writer running"] = hooks("PostToolUse", env, 0)
            rows["UserPromptSubmit, writer running"] = hooks("UserPromptSubmit", env, 0)
            rows["SessionStart, writer running"] = hooks("SessionStart", env, 0)
        finally:
            os.kill(writer, signal.SIGTERM)
        rows["capture, in process"] = hooks("PostToolUse", alone, args.runs)
        rows["SessionStart, in process"] = hooks("SessionStart", alone, 0)
        with MemoryStore(db, embedder=None) as store:
            captured = store.count(session="bench-session")
    report = {"entries": args.n, "runs": args.runs, "captured": captured, "load": [round(x, 2) for x in os.getloadavg()],
              **{name: figures(samples) for name, samples in rows.items()}}
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.n} entries, {args.runs} fresh processes each, load average {report['load']}")
    for name in rows:
        row = report[name]
        print(f"  {name:30} p50 {row['p50_ms']:7.1f} ms   p95 {row['p95_ms']:7.1f} ms   CPU p50 {row['cpu_p50_ms']:6.1f} ms")
    print(f"  turns captured: {captured} of {2 * args.runs}")


if __name__ == "__main__":
    main()
