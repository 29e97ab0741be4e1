"""The memory browser's pages on a large store: what a page costs over the store calls it makes.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_ui.py               # 100,000 turns
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_ui.py --n 1000000 --json

A keyword-only store of N turns in N/50 sessions (bench_store's corpus; built once into --cache).
Each page is requested through the whole app in process (security middleware, routing, the store
call on its worker thread, the template), with a signed-in client, and timed against the same store
calls made from Python, interleaved (each first in turn), in the same run: the ratio is what the
page adds. No network:
the client speaks ASGI to the app directly.
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
from harness_mem.ui import pages  # noqa: E402
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
        middle, last_sessions = f"s{args.n // 100}", max(args.n // 50 - pages.PAGE_SIZE, 0)
        entry_id = f"t{args.n // 2}"
        cases: dict[str, tuple[Callable[[int], Any], Callable[[int], Any]]] = {
            "search (keyword)": (
                lambda i: client.get("/", params={"q": queries[i], "mode": "keyword"}),
                lambda i: pages.search(store, pages.SearchForm(query=queries[i], mode="keyword"))),
            "entry": (lambda i: client.get(f"/entries/{entry_id}"), lambda i: pages.entry_page(store, entry_id)),
            "sessions, first page": (lambda i: client.get("/sessions"), lambda i: pages.sessions(store, {})),
            "sessions, last page": (
                lambda i: client.get("/sessions", params={"offset": last_sessions}),
                lambda i: pages.sessions(store, {"offset": str(last_sessions)})),
            "a session": (lambda i: client.get(f"/sessions/{middle}"), lambda i: pages.session_page(store, middle, {})),
            "facts": (lambda i: client.get("/facts"), lambda i: pages.facts(store, {})),
            "health": (lambda i: client.get("/health"), lambda i: pages.health_page(store, with_checks=False)),
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
                            "store_p50_ms": statistics.median(direct_ms),
                            "ratio_p50": statistics.median(page_ms) / max(statistics.median(direct_ms), 1e-6)}
    if args.json:
        print(json.dumps({"n": args.n, "pages": report}))
        return
    print(f"{args.n:,} turns; p50/p95 ms over {args.repeat} requests each")
    print(f"{'page':<22}{'page p50':>10}{'p95':>8}{'store p50':>11}{'ratio':>7}")
    for name, row in report.items():
        print(f"{name:<22}{row['page_p50_ms']:>10.1f}{row['page_p95_ms']:>8.1f}{row['store_p50_ms']:>11.1f}"
              f"{row['ratio_p50']:>7.2f}")


if __name__ == "__main__":
    main()
