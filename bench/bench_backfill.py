"""What a backfill costs: months of a coding agent's transcripts imported, then imported again.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_backfill.py                    # 200 sessions x 200 records
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_backfill.py --format codex --sessions 50 --json

A projects folder is generated in Claude Code's shape (or Codex's session folders with ``--format
codex``): ``--sessions`` session files of ``--records`` records each, spread over ten projects, a
tenth of them sub-agent files. A session is the usual mix: prompts, replies, tool calls and their
results (a fiftieth of them long logs, cut on import), thinking, injected command echoes and
reminders, snapshots. Then ``harness-mem --embedder none import --format …`` runs as a fresh
process, keyword-only, three times on one store:

- the first run: everything is new (sessions and turns per second, MB read per second);
- a second run over the unchanged folder: what re-running costs when nothing is new (no file is
  read: each one's position is in the store's settings);
- a third run after a tenth of the sessions grew by ten records: only those records are read, and
  only their turns written.

Each row gives the wall time and the CPU time of the process (user + system); the load average is
printed with them, since the wall time stretches on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HARNESS_MEM = [sys.executable, "-m", "harness_mem"]
TOOLS = ("Bash", "Read", "Edit", "Grep")


def claude_record(session: str, n: int, cwd: str, sidechain: bool, rng: random.Random) -> list[dict[str, Any]]:
    """The records of step ``n`` of a Claude Code session: one to three lines."""
    stamp = f"2025-{1 + n % 12:02d}-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00.000Z"
    base = {"sessionId": session, "timestamp": stamp, "cwd": cwd, "gitBranch": "main", "isSidechain": sidechain,
            "version": "1.0.80", "userType": "external"}
    uid = f"{session}-{n}"
    shape = n % 10
    if shape == 0:
        return [{**base, "type": "user", "uuid": uid,
                 "message": {"role": "user", "content": f"step {n}: make the checkout tests pass, module cart_{n % 31}"}}]
    if shape == 1:
        return [{**base, "type": "user", "uuid": uid, "isMeta": True,
                 "message": {"role": "user", "content": "Caveat: generated while running local commands."}}]
    if shape == 2:
        return [{**base, "type": "file-history-snapshot", "messageId": uid, "snapshot": {}}]
    if shape in (3, 6):
        tool = TOOLS[n % len(TOOLS)]
        long = n % 50 == 3
        output = "".join(f"{i}: ok\n" for i in range(2000)) if long else f"{rng.randint(0, 9)} failed in cart_{n % 31}.py"
        return [
            {**base, "type": "assistant", "uuid": uid, "message": {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "look at the cart", "signature": "s"},
                {"type": "text", "text": f"Checking cart_{n % 31}.py."},
                {"type": "tool_use", "id": f"toolu_{uid}", "name": tool, "input": {"command": f"pytest -k cart_{n}"}}]}},
            {**base, "type": "user", "uuid": uid + "r", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{uid}", "content": output}]}},
        ]
    if shape == 4:
        return [{**base, "type": "user", "uuid": uid, "message": {"role": "user", "content": [
            {"type": "text", "text": f"keep decimals in totals {n}<system-reminder>file changed</system-reminder>"}]}}]
    return [{**base, "type": "assistant", "uuid": uid, "message": {"role": "assistant", "content": [
        {"type": "text", "text": f"Step {n}: the totals in cart_{n % 31}.py now use Decimal; {n % 7} tests left."}]}}]


def codex_records(session: str, n: int, rng: random.Random) -> list[dict[str, Any]]:
    stamp = f"2025-06-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00.000Z"
    shape = n % 6
    if shape == 0:
        item: dict[str, Any] = {"type": "message", "role": "user",
                                "content": [{"type": "input_text", "text": f"step {n}: fix cart_{n % 31}"}]}
    elif shape == 1:
        item = {"type": "message", "role": "user", "content": [{"type": "input_text",
                "text": "<environment_context>\n<cwd>/home/dev/shop</cwd>\n</environment_context>"}]}
    elif shape == 2:
        return [{"timestamp": stamp, "type": "event_msg", "payload": {"type": "token_count", "info": None}}]
    elif shape == 3:
        call = {"type": "function_call", "name": "shell", "call_id": f"c{n}",
                "arguments": json.dumps({"command": ["bash", "-lc", f"pytest -k cart_{n}"]})}
        out = json.dumps({"output": f"{rng.randint(0, 9)} failed", "metadata": {"exit_code": 1}})
        return [{"timestamp": stamp, "type": "response_item", "payload": call},
                {"timestamp": stamp, "type": "response_item",
                 "payload": {"type": "function_call_output", "call_id": f"c{n}", "output": out}}]
    elif shape == 4:
        item = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA"}
    else:
        item = {"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": f"Step {n}: cart_{n % 31} totals now use Decimal."}]}
    return [{"timestamp": stamp, "type": "response_item", "payload": item}]


def write_session(root: Path, fmt: str, index: int, records: int, start: int, rng: random.Random) -> Path:
    """Append ``records`` records (from step ``start``) to session ``index``'s file; its path."""
    project = f"project{index % 10}"
    session = f"s{index:05d}"
    lines: list[dict[str, Any]] = []
    if fmt == "claude-code":
        path = root / f"-home-dev-{project}" / f"{session}.jsonl"
        sidechain = index % 10 == 9
        if sidechain:
            path = root / f"-home-dev-{project}" / f"s{index - 1:05d}" / "subagents" / f"agent-{index}.jsonl"
        n = start
        while len(lines) < records:
            lines += claude_record(session, n, f"/home/dev/{project}", sidechain, rng)
            n += 1
    else:
        path = root / "2025" / "06" / f"{1 + index % 28:02d}" / f"rollout-2025-06-01T00-00-00-{session}.jsonl"
        if start == 0:
            lines.append({"timestamp": "2025-06-01T00:00:00.000Z", "type": "session_meta",
                          "payload": {"id": session, "timestamp": "2025-06-01T00:00:00.000Z",
                                      "cwd": f"/home/dev/{project}", "git": {"branch": "main"}}})
        n = start
        while len(lines) < records:
            lines += codex_records(session, n, rng)
            n += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.writelines(json.dumps(line) + "\n" for line in lines)
    return path


def timed_import(db: Path, fmt: str, root: Path) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([*HARNESS_MEM, "--db", str(db), "--embedder", "none", "import", "--format", fmt,
                           str(root), "--json", "-q"], capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"import failed: {proc.stderr.strip()}")
    report: dict[str, Any] = json.loads(proc.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), **report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", choices=["claude-code", "codex"], default="claude-code")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(36)
    with tempfile.TemporaryDirectory(prefix="bench-backfill-") as tmp:
        root, db = Path(tmp) / "history", Path(tmp) / "memory.db"
        paths = [write_session(root, args.format, i, args.records, 0, rng) for i in range(args.sessions)]
        size = sum(p.stat().st_size for p in set(paths))
        first = timed_import(db, args.format, root)
        second = timed_import(db, args.format, root)
        for i in range(0, args.sessions, 10):
            write_session(root, args.format, i, 10, 10_000, rng)
        third = timed_import(db, args.format, root)
        load = os.getloadavg()[0]
    rows = {"first run": first, "second run (nothing new)": second, "third run (a tenth grew)": third}
    if args.json:
        print(json.dumps({"format": args.format, "sessions": args.sessions, "records": args.records,
                          "bytes": size, "load": round(load, 2), "runs": rows}))
        return
    print(f"{args.format}: {args.sessions} session files x {args.records} records, {size / 1e6:.1f} MB;"
          f" keyword-only; load {load:.1f}")
    print(f"{'run':<26} {'wall s':>7} {'cpu s':>6} {'turns':>7} {'stored':>7} {'unread':>6} {'MB read':>8}"
          f" {'sessions/s':>10} {'turns/s':>8}")
    for name, row in rows.items():
        wall = row["wall_s"] or 1e-9
        print(f"{name:<26} {row['wall_s']:>7.2f} {row['cpu_s']:>6.2f} {row['turns']:>7} {row['already_stored']:>7}"
              f" {row['unchanged']:>6} {row['bytes'] / 1e6:>8.2f} {row['sessions'] / wall:>10.1f}"
              f" {row['turns'] / wall:>8.0f}")
    print(f"a second run costs {second['cpu_s'] / max(first['cpu_s'], 1e-9):.1%} of the first's CPU time"
          f" ({second['wall_s'] / max(first['wall_s'], 1e-9):.1%} of its wall time)")


if __name__ == "__main__":
    main()
