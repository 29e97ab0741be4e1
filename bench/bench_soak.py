"""A soak of one SQLite store shared by many processes: every acknowledged write is stored (#24).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_soak.py --quick          # about 60 s, a smoke run
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_soak.py                  # 600 s, 8 writers, 4 readers
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_soak.py --seconds 300 --writers 4 --json

One keyword-only store file (``MemoryStore(path, embedder=None)``: no model, so the two cores go to
the locking, not to embedding) is shared, for ``--seconds``, by real processes:

- ``--writers`` writer processes, each with its own store handle, writing in a loop: ``add``,
  ``add_many`` batches, ``remember``, ``supersede`` and ``forget`` of its own entries, turns of its
  own sessions, and entries that expire 20 s after they are written. Every entry carries a token of
  its own; every acknowledged write (the call returned) goes to the process's ledger file at once,
  with how long the call took (a call longer than 2 s is a "long wait");
- ``--readers`` reader processes: keyword recall, list, sessions, session turns, get, count;
- one maintenance process running the CLI as an operator would: ``harness-mem gc`` every tenth of
  the run (60 s at 600 s), ``harness-mem purge`` every 0.15 of it (90 s), ``harness-mem reindex``
  at a third and two thirds (on a keyword-only file it rebuilds the keyword index, a batch of
  entries per transaction);
- ``--mcp`` client processes, each starting ``harness-mem mcp --db FILE`` as a stdio subprocess and
  speaking raw JSON-RPC to it: initialize, then remember / recall / get_memory / forget; every
  request must be answered (60 s at most) and succeed, the recall of a token just remembered must
  find it, and get_memory must give its content back.

Writers and readers pause between operations (``--pause``, mean seconds) so that the machine stays
usable; the throughput printed is what was measured with those pauses, and the CPU time the
children used is printed with it.

At the end, with every process gone, the file is checked: each acknowledged entry that was not
forgotten (and has not expired) is readable with its exact content, each forgotten or expired one is
not, ``list`` holds exactly the entries expected (no phantom, none missing), keyword recall finds a
sample of live tokens and none of the forgotten ones, and ``PRAGMA integrity_check`` is ``ok``. No
process may leave a traceback on its stderr. The exit status is 1 when a promise broke: a lost or
changed write, a forgotten entry still readable, a phantom, an integrity problem, a traceback, a
failed write, read, MCP request or maintenance command. A wait longer than 2 s is printed, not
failed (gc's rewrite after a purge holds the write lock for about 6 s per GB of file).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HARNESS_MEM = Path(sys.executable).with_name("harness-mem")
LONG_WAIT_S = 2.0
EXPIRING_TTL_S = 20.0
MCP_ANSWER_TIMEOUT_S = 60.0
STARTUP_GRACE_S = 4.0  # every process imports the library before the common start
WORDS = ("release checklist rollout plan database migration index recall session budget deadline review "
         "password hashing argon2id decision preference editor tabs spaces deploy staging production cache "
         "latency benchmark vector keyword schema backup restore quota tenant invoice meeting agenda").split()


# ---- what every worker shares ---------------------------------------------------------------------


class Ledger:
    """One process's record of what the store acknowledged, a JSON line per event, flushed at once:
    what a crash leaves in it was acknowledged before the crash."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8")

    def acked(self, id: str, content: str, token: str, expires: float | None = None) -> None:
        self.write({"ack": id, "content": content, "token": token, "expires": expires})

    def write(self, event: dict[str, Any]) -> None:
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class Timings:
    """Each operation's kind, wall-clock start and seconds, and the errors, saved as JSON at the end."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, float, float]] = []
        self.errors: list[str] = []
        self.notes: Counter[str] = Counter()

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"ops": self.ops, "errors": self.errors, "notes": dict(self.notes)}))


def wait_for_start(start: float) -> None:
    time.sleep(max(0.0, start - time.time()))


def phrase(rng: random.Random, n: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


# ---- the roles ------------------------------------------------------------------------------------


def run_writer(args: argparse.Namespace) -> None:
    from harness_mem.store import MemoryStore

    name = f"w{args.index}"
    rng = random.Random(args.index)
    ledger, timings = Ledger(args.out / f"ledger-{name}.jsonl"), Timings()
    store = MemoryStore(args.db, embedder=None)
    current: list[str] = []  # acknowledged, not forgotten, not superseded: what supersede and forget pick from
    seq = 0
    session, turns_left = "", 0

    def entry(label: str) -> tuple[str, str]:
        nonlocal seq
        seq += 1
        token = f"soak{name}n{seq}"
        return token, f"{label} {token} {phrase(rng)}"

    operations = ["add", "add_many", "remember", "supersede", "forget", "turn", "expiring"]
    weights = [3, 1, 2, 1, 1, 3, 0.5]
    wait_for_start(args.start)
    while time.time() < args.until:
        op = rng.choices(operations, weights)[0]
        if op in ("supersede", "forget") and not current:
            op = "add"
        began_wall, began = time.time(), time.perf_counter()
        try:
            if op == "add":
                token, content = entry("note")
                added = store.add(content, tags=[name])
                ledger.acked(added.id, content, token)
                current.append(added.id)
            elif op == "add_many":
                batch = [entry("batch") for _ in range(rng.randint(5, 25))]
                written = store.add_many([{"content": content, "tags": [name, "batch"]} for _, content in batch])
                for (token, content), stored in zip(batch, written, strict=True):
                    ledger.acked(stored.id, content, token)
                    current.append(stored.id)
            elif op == "remember":
                token, content = entry("fact")
                done = store.remember(content, kind="fact", tags=[name])
                ledger.acked(done.id, content, token)
                current.append(done.id)
            elif op == "supersede":
                old = current.pop(rng.randrange(len(current)))
                token, content = entry("correction")
                done = store.supersede(old, content)
                ledger.acked(done.id, content, token)
                ledger.write({"superseded": old})
                current.append(done.id)
            elif op == "forget":
                gone = current.pop(rng.randrange(len(current)))
                if store.forget(gone) != 1:
                    timings.errors.append(f"forget {gone} forgot nothing")
                ledger.write({"forgot": gone})
            elif op == "turn":
                if turns_left == 0:
                    session, turns_left = f"{name}-s{seq}", rng.randint(3, 12)
                turns_left -= 1
                token, content = entry("turn")
                turn = store.add(content, role=rng.choice(["user", "assistant"]), session=session)
                ledger.acked(turn.id, content, token)
                current.append(turn.id)
            else:
                token, content = entry("expiring")
                brief = store.add(content, ttl_days=EXPIRING_TTL_S / 86400)
                assert brief.expires_at is not None
                ledger.acked(brief.id, content, token, expires=brief.expires_at.timestamp())
        except Exception as exc:  # a failed write is a finding, reported at the end, not a crash
            timings.errors.append(f"{op}: {type(exc).__name__}: {exc}"[:300])
        timings.ops.append((op, began_wall, time.perf_counter() - began))
        time.sleep(rng.uniform(0, 2 * args.pause))
    store.close()
    ledger.close()
    timings.save(args.out / f"result-{name}.json")


def run_reader(args: argparse.Namespace) -> None:
    from harness_mem.errors import NotFoundError
    from harness_mem.store import MemoryStore

    name = f"r{args.index}"
    rng = random.Random(1000 + args.index)
    timings = Timings()
    store = MemoryStore(args.db, embedder=None)
    seen: list[str] = []
    wait_for_start(args.start)
    while time.time() < args.until:
        op = rng.choice(["recall", "list", "sessions", "get", "count"])
        began_wall, began = time.time(), time.perf_counter()
        try:
            if op == "recall":
                store.recall(phrase(rng, 3), 10, "keyword")
            elif op == "list":
                seen = [entry.id for entry in store.list(limit=50, newest_first=True)]
            elif op == "sessions":
                found = store.sessions(limit=20)
                if found:
                    store.session_turns(rng.choice(found).session, limit=20)
            elif op == "get":
                if seen:
                    try:
                        store.get(rng.choice(seen))
                    except NotFoundError:
                        timings.notes["get raced a forget or expiry"] += 1
            else:
                store.count()
        except Exception as exc:
            timings.errors.append(f"{op}: {type(exc).__name__}: {exc}"[:300])
        timings.ops.append((op, began_wall, time.perf_counter() - began))
        time.sleep(rng.uniform(0, 2 * args.pause))
    store.close()
    timings.save(args.out / f"result-{name}.json")


class McpClient:
    """A ``harness-mem mcp`` subprocess and raw JSON-RPC frames over its stdio."""

    def __init__(self, db: Path, stderr: Path) -> None:
        self.err = stderr.open("wb")
        self.proc = subprocess.Popen([str(HARNESS_MEM), "mcp", "--db", str(db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err)
        self.buffer = b""
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def line(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no answer within {MCP_ANSWER_TIMEOUT_S:.0f} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("the server closed its stdout")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request (notifications the server sends meanwhile are skipped)."""
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        deadline = time.monotonic() + MCP_ANSWER_TIMEOUT_S
        while True:
            message = json.loads(self.line(deadline))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"JSON-RPC error {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"tool error: {result['content'][0]['text']}")
        structured: dict[str, Any] = result["structuredContent"]
        return structured

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.err.close()


def run_mcp(args: argparse.Namespace) -> None:
    name = f"m{args.index}"
    rng = random.Random(2000 + args.index)
    ledger, timings = Ledger(args.out / f"ledger-{name}.jsonl"), Timings()
    client = McpClient(args.db, args.out / f"stderr-{name}-server.txt")
    client.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "bench-soak", "version": "0"}})
    client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    remembered: list[tuple[str, str]] = []  # (id, content) not yet forgotten
    seq = 0
    wait_for_start(args.start)
    while time.time() < args.until:
        op = rng.choices(["remember", "get_memory", "forget"], [3, 1, 1])[0]
        if op != "remember" and not remembered:
            op = "remember"
        began_wall, began = time.time(), time.perf_counter()
        try:
            if op == "remember":
                seq += 1
                token = f"soak{name}n{seq}"
                content = f"mcp {token} {phrase(rng)}"
                done = client.call("remember", content=content)
                ledger.acked(done["id"], content, token)
                remembered.append((done["id"], content))
                # Read your own write: the token is in no other entry, so it must come back first.
                timings.ops.append(("remember", began_wall, time.perf_counter() - began))
                began_wall, began, op = time.time(), time.perf_counter(), "recall"
                hits = client.call("recall", query=token, k=3)["hits"]
                if not hits or hits[0]["id"] != done["id"]:
                    timings.errors.append(f"recall {token} did not find {done['id']}: {hits!r:.200}")
            elif op == "get_memory":
                id, content = rng.choice(remembered)
                detail = client.call("get_memory", id=id)
                if detail["memory"]["content"] != content:
                    timings.errors.append(f"get_memory {id} gave other content: {detail['memory']['content']!r:.100}")
            else:
                id, _ = remembered.pop(rng.randrange(len(remembered)))
                done = client.call("forget", id=id)
                if done["ids"] != [id]:
                    timings.errors.append(f"forget {id} forgot {done['ids']}")
                ledger.write({"forgot": id})
        except Exception as exc:
            timings.errors.append(f"{op}: {type(exc).__name__}: {exc}"[:300])
            if client.proc.poll() is not None:
                break  # the server is gone: nothing more to ask it
        timings.ops.append((op, began_wall, time.perf_counter() - began))
        time.sleep(rng.uniform(0, 2 * args.pause))
    code = client.close()
    if code != 0:
        timings.errors.append(f"harness-mem mcp exited with status {code}")
    ledger.close()
    timings.save(args.out / f"result-{name}.json")


def run_maintenance(args: argparse.Namespace) -> None:
    span = args.until - args.start
    gc_every, purge_every = max(15.0, span / 10), max(20.0, span * 0.15)
    reindex_at = [args.start + span / 3, args.start + 2 * span / 3]
    next_gc, next_purge = args.start + gc_every, args.start + purge_every
    events: list[dict[str, Any]] = []

    def command(name: str, *extra: str) -> None:
        began_wall, began = time.time(), time.perf_counter()
        done = subprocess.run([str(HARNESS_MEM), "--db", str(args.db), name, *extra],
                              capture_output=True, text=True, timeout=600)
        event = {"command": name, "start": began_wall, "seconds": time.perf_counter() - began,
                 "status": done.returncode, "stderr": done.stderr[-2000:]}
        if name == "gc" and done.returncode == 0:
            report = json.loads(done.stdout)
            event.update({key: report.get(key) for key in ("expired_purged", "forgotten_purged", "bytes_after")})
        elif name == "purge" and done.returncode == 0:
            event["purged"] = int(done.stderr.split()[1])  # "Purged N entries …"
        events.append(event)

    wait_for_start(args.start)
    while time.time() < args.until:
        now = time.time()
        if reindex_at and now >= reindex_at[0]:
            reindex_at.pop(0)
            command("reindex", "--quiet")
        elif now >= next_gc:
            next_gc += gc_every
            command("gc", "--json")
        elif now >= next_purge:
            next_purge += purge_every
            command("purge")
        else:
            time.sleep(0.5)
    (args.out / "result-maintenance.json").write_text(json.dumps({"events": events}))


# ---- the conductor --------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def verify(db: Path, out: Path, rng: random.Random) -> dict[str, Any]:
    """What the file holds against what the ledgers say was acknowledged."""
    from harness_mem.errors import NotFoundError
    from harness_mem.store import MemoryStore

    acked: dict[str, dict[str, Any]] = {}
    forgotten: set[str] = set()
    superseded: set[str] = set()
    for ledger in sorted(out.glob("ledger-*.jsonl")):
        for line in ledger.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if "ack" in event:
                acked[event["ack"]] = event
            elif "forgot" in event:
                forgotten.add(event["forgot"])
            else:
                superseded.add(event["superseded"])
    lost, changed, resurrected, expired = [], [], [], 0
    with MemoryStore(db, embedder=None) as store:
        listed_from = time.time()
        listed = {entry.id for entry in store.list()}
        listed_until = time.time()
        for id, event in acked.items():
            expires, now = event["expires"], time.time()
            gone = id in forgotten or (expires is not None and expires < now - 1)
            if expires is not None and not gone and expires < now + 1:
                continue  # expiring just now: either answer is right
            try:
                stored = store.get(id)
            except NotFoundError:
                if not gone:
                    lost.append(id)
                expired += int(gone and id not in forgotten)
                continue
            if gone:
                resurrected.append(id)
            elif stored.content != event["content"]:
                changed.append(id)
        # What list had to give when it ran; an entry that expired meanwhile may be in it or not.
        expected_listed = {id for id, event in acked.items() if id not in forgotten and id not in superseded
                           and (event["expires"] is None or event["expires"] > listed_until + 1)}
        expiring_then = {id for id, event in acked.items()
                         if event["expires"] is not None and listed_from - 1 <= event["expires"] <= listed_until + 1}
        listed -= expiring_then
        live = sorted(expected_listed)
        recall_missed = [id for id in rng.sample(live, min(300, len(live)))
                         if id not in [hit.entry.id for hit in store.recall(acked[id]["token"], 3, "keyword")]]
        dead = sorted(forgotten)
        recall_forgotten = [id for id in rng.sample(dead, min(200, len(dead)))
                            if store.recall(acked[id]["token"], 3, "keyword")]
        integrity = store.integrity_check()
    size = db.stat().st_size
    return {"acknowledged": len(acked), "forgotten": len(forgotten), "superseded": len(superseded),
            "expired": expired, "lost": lost, "changed": changed, "resurrected": resurrected,
            "phantoms": sorted(listed - expected_listed), "missing_from_list": sorted(expected_listed - listed),
            "recall_missed": recall_missed, "recall_found_forgotten": recall_forgotten,
            "integrity": integrity or ["ok"], "file_bytes": size, "listed": len(listed)}


def spawn(args: argparse.Namespace, out: Path, role: str, index: int, start: float, until: float) -> subprocess.Popen[bytes]:
    name = {"writer": "w", "reader": "r", "mcp": "m"}.get(role, role) + (str(index) if role != "maintenance" else "")
    command = [sys.executable, __file__, "--role", role, "--index", str(index), "--db", str(args.db),
               "--out", str(out), "--start", str(start), "--until", str(until), "--pause", str(args.pause)]
    return subprocess.Popen(command, stdout=(out / f"stdout-{name}.txt").open("wb"),
                            stderr=(out / f"stderr-{name}.txt").open("wb"), env={**os.environ, "HF_HUB_OFFLINE": "1"})


def conduct(args: argparse.Namespace) -> int:
    out = Path(tempfile.mkdtemp(prefix="harness-mem-soak-"))
    args.db = out / "soak.db"
    from harness_mem.store import MemoryStore

    MemoryStore(args.db, embedder=None).close()  # created keyword-only: every handle after finds it so
    start = time.time() + STARTUP_GRACE_S
    until = start + args.seconds
    procs = {f"w{i}": spawn(args, out, "writer", i, start, until) for i in range(args.writers)}
    procs |= {f"r{i}": spawn(args, out, "reader", i, start, until) for i in range(args.readers)}
    procs |= {f"m{i}": spawn(args, out, "mcp", i, start, until) for i in range(args.mcp)}
    procs["maintenance"] = spawn(args, out, "maintenance", 0, start, until)
    print(f"soak: {args.seconds:.0f} s, {args.writers} writers, {args.readers} readers, {args.mcp} MCP servers,"
          f" gc/purge/reindex; files in {out}", file=sys.stderr)
    statuses = {}
    for name, proc in procs.items():
        try:
            statuses[name] = proc.wait(timeout=max(60.0, until - time.time() + 660))
        except subprocess.TimeoutExpired:
            proc.kill()
            statuses[name] = proc.wait()
    wall = time.time() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()

    results = {path.stem.removeprefix("result-"): json.loads(path.read_text()) for path in out.glob("result-*.json")}
    checked = verify(args.db, out, random.Random(0))
    tracebacks = sorted(path.name for path in out.glob("stderr-*.txt")
                        if b"Traceback" in path.read_bytes())
    crashed = sorted(f"{name} (status {code})" for name, code in statuses.items() if code != 0)
    missing_results = sorted(set(procs) - set(results))

    def of(name: str, prefix: str) -> bool:
        return name[:1] == prefix and name[1:].isdigit()  # w3, r0, m1; not "maintenance"

    def ops_of(prefix: str) -> list[tuple[str, float, float]]:
        return [(op, began, seconds) for name, r in results.items() if of(name, prefix)
                for op, began, seconds in r.get("ops", [])]

    def errors_of(prefix: str) -> list[str]:
        return [f"{name}: {e}" for name, r in results.items() if of(name, prefix) for e in r.get("errors", [])]

    writes, reads, mcp_ops = ops_of("w"), ops_of("r"), ops_of("m")
    events = results.get("maintenance", {}).get("events", [])
    write_seconds = [s for _, _, s in writes]
    long_waits = sorted((op for op in writes if op[2] > LONG_WAIT_S), key=lambda op: -op[2])

    def during(began: float, seconds: float) -> str:
        """The maintenance commands running while an operation waited."""
        names = [e["command"] for e in events if e["start"] < began + seconds and began < e["start"] + e["seconds"]]
        return ", ".join(names) or "no maintenance command"

    summary = {
        "seconds": args.seconds, "wall_seconds": wall, "writers": args.writers, "readers": args.readers, "mcp": args.mcp,
        "children_cpu_seconds": usage.ru_utime + usage.ru_stime, "load_average": load,
        "write_ops": Counter(op for op, _, _ in writes), "writes_acknowledged": checked["acknowledged"],
        "write_p50_ms": 1000 * percentile(write_seconds, 0.5), "write_p99_ms": 1000 * percentile(write_seconds, 0.99),
        "write_max_ms": 1000 * max(write_seconds, default=float("nan")),
        "long_waits": [{"op": op, "at_s": began - start, "seconds": s, "during": during(began, s)}
                       for op, began, s in long_waits],
        "write_errors": errors_of("w"),
        "read_ops": len(reads), "read_p50_ms": 1000 * percentile([s for *_, s in reads], 0.5),
        "read_p99_ms": 1000 * percentile([s for *_, s in reads], 0.99),
        "read_max_ms": 1000 * max([s for *_, s in reads], default=float("nan")),
        "reader_errors": errors_of("r"),
        "reader_notes": sum((Counter(r.get("notes", {})) for n, r in results.items() if of(n, "r")), Counter()),
        "mcp_requests": len(mcp_ops), "mcp_failures": errors_of("m"),
        "mcp_p50_ms": 1000 * percentile([s for *_, s in mcp_ops], 0.5),
        "mcp_max_ms": 1000 * max([s for *_, s in mcp_ops], default=float("nan")),
        "maintenance": [{k: v for k, v in e.items() if k != "stderr"} | {"at_s": e["start"] - start} for e in events],
        "maintenance_failures": [f"{e['command']} exited {e['status']}: {e['stderr'].strip()[-300:]}"
                                 for e in events if e["status"] != 0],
        "verify": checked, "tracebacks": tracebacks, "crashed": crashed, "no_result": missing_results,
    }
    broken = {
        "lost writes": checked["lost"], "changed writes": checked["changed"],
        "forgotten or expired still readable": checked["resurrected"], "phantom entries": checked["phantoms"],
        "missing from list": checked["missing_from_list"], "recall missed a live token": checked["recall_missed"],
        "recall found a forgotten token": checked["recall_found_forgotten"],
        "integrity": [] if checked["integrity"] == ["ok"] else checked["integrity"],
        "tracebacks": tracebacks, "crashed": crashed, "no result file": missing_results,
        "write errors": summary["write_errors"], "reader errors": summary["reader_errors"],
        "MCP failures": summary["mcp_failures"], "maintenance failures": summary["maintenance_failures"],
    }
    if args.json:
        print(json.dumps(summary | {"broken": {k: v for k, v in broken.items() if v}}, default=str))
    else:
        report(summary)
    for problem, items in broken.items():
        if items:
            print(f"BROKEN: {problem}: {len(items)} — {items[:5]}", file=sys.stderr)
    if not any(broken.values()) and not args.keep:
        shutil.rmtree(out)
    return 1 if any(broken.values()) else 0


def report(s: dict[str, Any]) -> None:
    v = s["verify"]
    writes = sum(s["write_ops"].values())
    cpu = s["children_cpu_seconds"]
    print(f"soak of {s['seconds']:.0f} s ({s['wall_seconds']:.0f} s wall): {s['writers']} writers, {s['readers']} readers,"
          f" {s['mcp']} MCP servers; children's CPU {cpu:.0f} s ({cpu / s['wall_seconds']:.2f} cores on average);"
          f" load average {' '.join(f'{x:.2f}' for x in s['load_average'])}")
    print("\n| figure | value |\n|---|---|")
    rows = [
        ("write calls (by kind)", f"{writes} ({', '.join(f'{k} {n}' for k, n in sorted(s['write_ops'].items()))})"),
        ("entries acknowledged (writers + MCP)", f"{v['acknowledged']} ({v['acknowledged'] / s['seconds']:.1f}/s)"),
        ("forgotten / superseded / expired", f"{v['forgotten']} / {v['superseded']} / {v['expired']}"),
        ("write latency p50 / p99 / max", f"{s['write_p50_ms']:.1f} / {s['write_p99_ms']:.1f} / {s['write_max_ms']:.0f} ms"),
        (f"writes waiting > {LONG_WAIT_S:.0f} s", str(len(s["long_waits"]))),
        ("write errors", str(len(s["write_errors"]))),
        ("reads: calls, p50 / p99 / max",
         f"{s['read_ops']}, {s['read_p50_ms']:.1f} / {s['read_p99_ms']:.1f} / {s['read_max_ms']:.0f} ms"),
        ("reader errors", f"{len(s['reader_errors'])} ({dict(s['reader_notes']) or 'no races'})"),
        ("MCP requests: answered, p50 / max", f"{s['mcp_requests']}, {s['mcp_p50_ms']:.1f} / {s['mcp_max_ms']:.0f} ms"),
        ("MCP failures", str(len(s["mcp_failures"]))),
        ("stored: lost / changed / still readable after forget", f"{len(v['lost'])} / {len(v['changed'])} / {len(v['resurrected'])}"),
        ("list: entries, phantoms, missing", f"{v['listed']}, {len(v['phantoms'])}, {len(v['missing_from_list'])}"),
        ("recall: live tokens missed / forgotten found", f"{len(v['recall_missed'])} / {len(v['recall_found_forgotten'])}"),
        ("integrity_check", "; ".join(v["integrity"])),
        ("tracebacks in stderr", ", ".join(s["tracebacks"]) or "none"),
        ("file size at the end", f"{v['file_bytes'] / 1e6:.1f} MB"),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")
    print("\n| maintenance (a CLI process: its start-up included) | at s | seconds | status | purged (expired, forgotten) |\n|---|---|---|---|---|")
    for e in s["maintenance"]:
        purged = (f"{e.get('expired_purged')}, {e.get('forgotten_purged')}" if e["command"] == "gc"
                  else f"{e['purged']} (both)" if "purged" in e else "")
        print(f"| {e['command']} | {e['at_s']:.0f} | {e['seconds']:.2f} | {e['status']} | {purged} |")
    if s["long_waits"]:
        print(f"\nwrites that waited more than {LONG_WAIT_S:.0f} s (longest first):")
        for w in s["long_waits"][:10]:
            print(f"  {w['op']} at {w['at_s']:.0f} s: {w['seconds']:.2f} s, during {w['during']}")
    longest = max(s["maintenance"], key=lambda e: e["seconds"], default=None)
    if longest:
        print(f"\nlongest maintenance command: {longest['command']} at {longest['at_s']:.0f} s, {longest['seconds']:.2f} s")
    for label, errors in (("write", s["write_errors"]), ("reader", s["reader_errors"]), ("MCP", s["mcp_failures"])):
        for error in errors[:5]:
            print(f"{label} error: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--quick", action="store_true", help="A smoke run of 60 s.")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--mcp", type=int, default=2, help="MCP servers, each driven by a client process.")
    parser.add_argument("--pause", type=float, default=0.1, help="Mean seconds between one process's operations.")
    parser.add_argument("--json", action="store_true", help="One JSON object instead of the tables.")
    parser.add_argument("--keep", action="store_true", help="Keep the store and the logs even when all went well.")
    # The workers: this script started again in another role.
    parser.add_argument("--role", choices=["writer", "reader", "mcp", "maintenance"], help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--start", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--until", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role is None:
        if args.quick:
            args.seconds = 60.0
        sys.exit(conduct(args))
    {"writer": run_writer, "reader": run_reader, "mcp": run_mcp, "maintenance": run_maintenance}[args.role](args)


if __name__ == "__main__":
    main()
