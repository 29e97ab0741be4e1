"""The memory browser's pages on a large store: what a page costs over the SQL it needs.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_ui.py --cache /work/cache/ui1m              # 100,000 turns
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_ui.py --cache /work/cache/ui1m --n 1000000 --json

A keyword-only store of N turns in N/50 sessions (bench_store's corpus; built once into --cache).
Each page is requested through the whole app in process (security middleware, routing, the store
call on its worker thread, the template), with a signed-in client, and timed against the raw SQL
that fetches what the page shows, on the same connection, interleaved (each first in turn), in the
same run: the ratio is what the page costs over the query it cannot do without. Deep pages start
after an item in the middle of the list (keyset), as the page's "next" link does. The health page
is timed on an unchanged store and, apart, right after a write (a note written before each view,
not timed), against the query that counts the entries afresh (what a view after a write cost
before the store kept its counts); the notes are forgotten and purged after. ``stats`` (what
``harness-mem stats`` reports) is timed against the same count. No network: the client speaks
ASGI to the app directly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import make_queries, make_rows, percentile  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from harness_mem.store import MemoryStore  # noqa: E402
from harness_mem.ui.app import build_app  # noqa: E402
from harness_mem.ui.security import Guard  # noqa: E402

PORT = 8123


def large_store(cache: Path, n: int) -> Path:
    path = cache / f"ui-store-{n}.db"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with MemoryStore(partial, embedder=None, redactor=None) as store:
        rows = make_rows(n)
        for start in range(0, n, 50_000):
            store.add_many(rows[start:start + 50_000])
    partial.rename(path)
    return path


def fts_query(query: str) -> str:
    """The words of ``query`` as an FTS5 OR query (what a keyword recall matches, at least)."""
    return " OR ".join(f'"{word}"' for word in query.split())


def timed(call: Callable[[int], Any], i: int) -> float:
    """Milliseconds ``call(i)`` took."""
    started = time.perf_counter()
    call(i)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/harness-mem-bench"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    with MemoryStore(large_store(args.cache, args.n), embedder=None) as store:
        guard = Guard("127.0.0.1", PORT)
        client = TestClient(build_app(store, guard), base_url=f"http://127.0.0.1:{PORT}")
        client.get(f"/?token={guard.access_token}")
        queries = make_queries(args.repeat)
        middle = f"s{args.n // 100}"  # halfway down the list of sessions
        entry_id = f"t{args.n // 2}"
        conn = store.storage.conn  # type: ignore[attr-defined]

        def sql(text: str, *params: object) -> Callable[[int], Any]:
            return lambda i: conn.execute(text, params).fetchall()

        current = "namespace = 'default' AND forgotten_at IS NULL AND superseded_by IS NULL"
        # What the sessions page needs: the newest turns back to 51 sessions' latest, and their sizes.
        sessions_sql = ("WITH latest AS MATERIALIZED (SELECT session, max(created_at) AS at FROM (SELECT session,"
                        f" created_at FROM entries WHERE {current} AND created_at <= ? ORDER BY created_at DESC"
                        " LIMIT 2550) GROUP BY session ORDER BY at DESC LIMIT 51) SELECT l.session, count(*),"
                        " min(e.created_at), max(e.created_at) FROM latest l CROSS JOIN entries e"
                        " WHERE e.namespace = 'default' AND e.session = l.session GROUP BY l.session")
        end_ms = int(conn.execute("SELECT max(created_at) FROM entries").fetchone()[0])
        middle_ms = int(conn.execute("SELECT max(created_at) FROM entries WHERE session = ?", (middle,)).fetchone()[0])
        cases: dict[str, tuple[Callable[[int], Any], Callable[[int], Any]]] = {
            "search (keyword)": (
                lambda i: client.get("/", params={"q": queries[i], "mode": "keyword"}),
                lambda i: conn.execute("SELECT rowid, bm25(entries_fts) FROM entries_fts WHERE entries_fts MATCH ?"
                                       " ORDER BY bm25(entries_fts) LIMIT 20", (fts_query(queries[i]),)).fetchall()),
            "entry": (lambda i: client.get(f"/entries/{entry_id}"),
                      sql("SELECT * FROM entries WHERE namespace = 'default' AND id = ?", entry_id)),
            "sessions, first page": (lambda i: client.get("/sessions"), sql(sessions_sql, end_ms)),
            "sessions, deep page": (lambda i: client.get("/sessions", params={"after": middle}),
                                    sql(sessions_sql, middle_ms)),
            "a session": (lambda i: client.get(f"/sessions/{middle}"),
                          sql(f"SELECT * FROM entries WHERE {current} AND session = ? ORDER BY created_at, pk LIMIT 51",
                              middle)),
            "facts (none among N turns)": (
                lambda i: client.get("/facts"),
                sql(f"SELECT * FROM entries WHERE {current} AND kind = 'fact' AND kind <> 'turn'"
                    " ORDER BY created_at DESC, pk DESC LIMIT 51")),
            "episodes": (lambda i: client.get("/episodes"),
                         sql("SELECT * FROM episodes WHERE namespace = 'default' ORDER BY created_at DESC, pk DESC"
                             " LIMIT 51")),
            "skills": (lambda i: client.get("/skills"),
                       sql("SELECT * FROM skills WHERE namespace = 'default' ORDER BY name LIMIT 51")),
            "health": (lambda i: client.get("/health"), sql("SELECT value FROM entry_counts")),
        }
        report: dict[str, dict[str, float]] = {}
        for name, (page, direct) in cases.items():
            page(0), direct(0)  # warm
            page_ms: list[float] = []
            direct_ms: list[float] = []
            for i in range(args.repeat):  # interleaved, each first in turn: the same load and caches on both
                first, second = (page_ms, page), (direct_ms, direct)
                for times, call in (first, second) if i % 2 else (second, first):
                    times.append(timed(call, i))
            report[name] = {"page_p50_ms": statistics.median(page_ms), "page_p95_ms": percentile(page_ms, 0.95),
                            "sql_p50_ms": statistics.median(direct_ms),
                            "ratio_p50": statistics.median(page_ms) / max(statistics.median(direct_ms), 1e-6)}
        # Right after a write: the page against the one query that would count every entry afresh.
        notes: list[str] = []

        def after_a_write(i: int) -> float:
            notes.append(store.add(f"bench note {i}", kind="note").id)
            return timed(lambda i: client.get("/health"), i)

        fresh = [after_a_write(i) for i in range(args.repeat)]
        scan = [timed(sql("SELECT kind, role, redactions, count(*) FROM entries NOT INDEXED"
                          " WHERE namespace = 'default' GROUP BY 1, 2, 3"), i) for i in range(3)]
        for note in notes:
            store.forget(note)
        store.purge()
        # `harness-mem stats`: the same counters, and what no counter holds (sessions, the largest, bytes by table).
        stats_ms = [timed(lambda i: store.stats(), i) for i in range(3)]
        report["stats (the CLI's)"] = {"page_p50_ms": statistics.median(stats_ms),
                                       "page_p95_ms": percentile(stats_ms, 0.95), "sql_p50_ms": statistics.median(scan),
                                       "ratio_p50": statistics.median(stats_ms) / max(statistics.median(scan), 1e-6)}
        report["health, after a write"] = {"page_p50_ms": statistics.median(fresh), "page_p95_ms": percentile(fresh, 0.95),
                                           "sql_p50_ms": statistics.median(scan),
                                           "ratio_p50": statistics.median(fresh) / max(statistics.median(scan), 1e-6)}
    if args.json:
        print(json.dumps({"n": args.n, "pages": report}))
        return
    print(f"{args.n:,} turns; p50/p95 ms over {args.repeat} requests each")
    print(f"{'page':<28}{'page p50':>10}{'p95':>8}{'SQL p50':>9}{'ratio':>8}")
    for name, row in report.items():
        print(f"{name:<28}{row['page_p50_ms']:>10.1f}{row['page_p95_ms']:>8.1f}{row['sql_p50_ms']:>9.2f}"
              f"{row['ratio_p50']:>8.1f}")


if __name__ == "__main__":
    main()
