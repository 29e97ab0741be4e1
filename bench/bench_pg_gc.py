"""How long a writer waits while PostgreSQL's gc rewrites a large table, against VACUUM FULL.

    python bench/bench_pg_gc.py [--mb 300] [--forget 100] [--json]

Builds an ``entries`` table of about ``--mb`` MB on a server started here (as the tests start it),
forgets ``--forget`` entries, and then, with a writer in another process adding an entry every
50 ms, times each of the writer's adds while (1) ``VACUUM FULL entries`` runs (what gc's rewrite
was), (2) gc's rewrite runs alone (the tables copied beside writers in steps, swapped in one short
transaction) and (3) a whole ``gc`` runs (the purge's deletes, then the rewrite). Reports each one's
length and the writer's longest wait, in the same run on the same table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helper the tests use

from engine_targets import fresh_schema  # noqa: E402
from postgres_server import PostgresServer  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402

# The writer beside: adds an entry every 50 ms until the stop file appears, then prints its waits.
WRITER = """
import json, sys, time
from pathlib import Path
from harness_mem import MemoryStore
dsn, stop, ready = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
waits = []
with MemoryStore(dsn, embedder=None) as store:
    store.add("the writer's first entry")
    ready.touch()
    while not stop.exists():
        began = time.monotonic()
        store.add(f"written beside gc {len(waits)}")
        waits.append(time.monotonic() - began)
        time.sleep(0.05)
print(json.dumps(waits))
"""


def build(dsn: str, megabytes: int, server: PostgresServer) -> int:
    """Entries of about 2 KB through the store, then copied in SQL (new ids) until the table holds
    ``megabytes``; returns its rows."""
    words = "deploy rollback canary migration latency budget incident pager review schema".split()
    with MemoryStore(dsn, embedder=None, redactor=None) as store:
        store.add_many([{"text": " ".join(words[(i + j) % len(words)] + str(j % 97) for j in range(300)),
                         "session": f"s{i % 50}", "role": "user"} for i in range(2000)])
    schema = dsn.split("search_path%3D", 1)[1].split(",", 1)[0]
    with server.connect() as conn:
        conn.execute(f"SET search_path = {schema}")
        columns = ("namespace, kind, content, role, session, tags, source, metadata, created_at, content_hash,"
                   " tokens, token_count")
        copy = 0
        while conn.execute("SELECT pg_total_relation_size('entries')").fetchone()[0] < megabytes << 20:  # type: ignore[index]
            copy += 1
            conn.execute(f"INSERT INTO entries (id, {columns}) SELECT id || '-' || %s, {columns} FROM entries"
                         " WHERE id NOT LIKE '%%-%%'", (str(copy),))
        conn.execute("VACUUM ANALYZE entries")
        return int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])  # type: ignore[index]


def beside_writer(dsn: str, scratch: Path, work: Callable[[], object]) -> dict[str, float]:
    """Runs ``work()`` with the writer beside it; its length and the writer's waits."""
    stop, ready = scratch / "stop", scratch / "ready"
    stop.unlink(missing_ok=True)
    ready.unlink(missing_ok=True)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, dsn, str(stop), str(ready)], stdout=subprocess.PIPE,
                              text=True)
    while not ready.exists():
        time.sleep(0.05)
    time.sleep(0.5)  # a few adds before, for the writer's usual time
    began = time.monotonic()
    work()
    took = time.monotonic() - began
    time.sleep(0.5)
    stop.touch()
    out, _ = writer.communicate(timeout=120)
    waits = json.loads(out)
    return {"seconds": round(took, 2), "adds": len(waits), "longest_wait_s": round(max(waits), 3),
            "median_wait_s": round(sorted(waits)[len(waits) // 2], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=300, help="the entries table's size to build")
    parser.add_argument("--forget", type=int, default=100, help="entries forgotten before each gc")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, PostgresServer() as server:
        dsn = fresh_schema(server)
        began = time.monotonic()
        rows = build(dsn, args.mb, server)
        with MemoryStore(dsn, embedder=None) as store:
            size = store.storage.size_bytes()
            built = time.monotonic() - began

            # What gc's rewrite was: the whole table written anew under an ACCESS EXCLUSIVE lock.
            old = beside_writer(dsn, Path(scratch), lambda: store.storage.conn.execute("VACUUM FULL entries"))
            # gc's rewrite alone (the same tables written anew), then a whole gc: the purge's deletes too.
            steps = beside_writer(dsn, Path(scratch), store.storage.rewrite)
            for entry in store.list(limit=args.forget):
                store.forget(entry.id)
            new = beside_writer(dsn, Path(scratch), store.gc)
        result = {"rows": rows, "megabytes": round(size / 2**20), "built_s": round(built, 1),
                  "vacuum_full": old, "rewrite_in_steps": steps, "gc": new,
                  "longest_wait_ratio": round(steps["longest_wait_s"] / old["longest_wait_s"], 3)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{rows} entries, {result['megabytes']} MB (built in {result['built_s']} s)")
    for name in ("vacuum_full", "rewrite_in_steps", "gc"):
        r = result[name]
        print(f"{name:<16} {r['seconds']:>7} s; writer: {r['adds']} adds, longest wait {r['longest_wait_s']} s,"  # type: ignore[index]
              f" median {r['median_wait_s']} s")  # type: ignore[index]
    print(f"longest wait, rewrite in steps / VACUUM FULL: {result['longest_wait_ratio']}")


if __name__ == "__main__":
    main()
