"""What a hook costs the host while another process holds the store's write lock (a long ``gc --vacuum``).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_hook_lock.py            # 5 hooks each way
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_hook_lock.py --hooks 10 --json

A process takes the write lock (``BEGIN IMMEDIATE``) and keeps it while ``--hooks`` PostToolUse
hooks run one after another, each a fresh ``harness-mem hook`` process timed from spawn to exit:
first through the store's hook writer (held up behind the lock), then in process (no writer to
reach: a runtime directory others may enter). Then the lock is let go, and the turns stored are
counted once the writer and the hooks' background work are done. The goal: every hook back within
Claude Code's timeout for them (10 s) while the lock is held, and each turn stored exactly once.
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

HOLD_LOCK = (
    "import sqlite3, sys\n"
    "connection = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "connection.execute('BEGIN IMMEDIATE')\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
    "connection.execute('ROLLBACK')\n"
)
HOOK_TIMEOUT_S = 10.0


def hook(db: Path, payload: dict[str, object], env: dict[str, str]) -> float:
    """One hook's wall time in seconds, from spawn to exit."""
    program = str(Path(sys.executable).parent / "harness-mem")
    started = time.monotonic()
    done = subprocess.run([program, "hook", "PostToolUse", "--db", str(db)], input=json.dumps(payload).encode(),
                          capture_output=True, env=env, timeout=120, check=False)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"a hook failed: {done.stderr.decode()[-300:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hooks", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from harness_mem.store import MemoryStore

    with tempfile.TemporaryDirectory(prefix="hm-lock-") as tmp:
        root = Path(tmp)
        db, runtime, loose = root / "memory.db", root / "rt", root / "loose"
        runtime.mkdir(mode=0o700)
        loose.mkdir()
        loose.chmod(0o755)
        MemoryStore(db, embedder=None).close()
        env = dict(os.environ, HARNESS_MEM_RUNTIME_DIR=str(runtime), HARNESS_MEM_WRITER_IDLE_SECONDS="120")
        # A first hook brings the writer up (no lock held yet).
        hook(db, tool_payload("warm-up", 0), env)
        while not list(runtime.glob("*.sock")):
            time.sleep(0.05)
        times: dict[str, list[float]] = {"writer": [], "in process": []}
        with subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) as holder:
            assert holder.stdout is not None and holder.stdin is not None
            holder.stdout.readline()
            for n in range(args.hooks):
                times["writer"].append(hook(db, tool_payload("writer", n), env))
            for n in range(args.hooks):
                times["in process"].append(hook(db, tool_payload("in-process", n), {**env, "HARNESS_MEM_RUNTIME_DIR": str(loose)}))
            holder.stdin.close()
        expected = 1 + 2 * args.hooks
        deadline = time.monotonic() + 300
        while (count := stored(db)) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # anything stored twice would show by now
        count = stored(db)
        for pid_file in runtime.glob("*.lock"):
            text = pid_file.read_text().strip()
            if text.isdigit():
                with_suppressed_kill(int(text))
    result = {"load": os.getloadavg()[0], "hooks": args.hooks, "host_timeout_s": HOOK_TIMEOUT_S,
              **{f"{way} max s": round(max(values), 2) for way, values in times.items()},
              **{f"{way} p50 s": round(statistics.median(values), 2) for way, values in times.items()},
              "turns expected": expected, "turns stored": count}
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")


def tool_payload(tag: str, n: int) -> dict[str, object]:
    return {"session_id": "bench-lock", "cwd": "/tmp", "hook_event_name": "PostToolUse", "tool_name": "Bash",
            "tool_input": {"command": f"make test {tag}"}, "tool_response": {"stdout": f"run {tag} {n}", "stderr": ""}}


def stored(db: Path) -> int:
    from harness_mem.store import MemoryStore

    with MemoryStore(db, embedder=None, read_only=True) as store:
        return store.count(session="bench-lock")


def with_suppressed_kill(pid: int) -> None:
    """Stop the benchmark's own writer (SIGTERM: it removes its socket)."""
    import contextlib
    import signal

    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
