"""What syncing costs: a fresh device against importing the same entries, and an incremental sync.

    python bench/bench_sync.py [--n 20000] [--repeat 5] [--json]

A store is filled with ``--n`` transcript turns (sessions of 20, keyword-only: the model's cost is
the same for any way in, and is measured by bench_embedder). Then, in one run:

- its first sync (the log started over what it holds, one chunk written);
- a fresh device's first sync from that folder, against ``import`` of the same entries' export into
  another fresh store (the ratio is the figure: the design holds a fresh device to import's speed);
- an incremental round, ``--repeat`` times: ten entries added on the first device, its sync (write),
  then the second device's sync (read and apply), each in milliseconds (median).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from harness_mem.jsonl import import_jsonl
from harness_mem.store import MemoryStore


def timed(action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000, help="entries in the first device (default 20,000)")
    parser.add_argument("--repeat", type=int, default=5, help="incremental rounds (default 5)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        folder = root / "Sync"
        laptop = MemoryStore(root / "laptop.db", embedder=None)
        laptop.add_many([{"content": f"turn {i} of session {i // 20}: we talked about the deploy window and port {i}",
                          "session": f"s{i // 20}", "role": "user" if i % 2 else "assistant", "id": f"t{i}"}
                         for i in range(args.n)])
        first = timed(lambda: laptop.sync(folder))
        lines = [json.dumps(line) for line in laptop.export()]
        with MemoryStore(root / "imported.db", embedder=None) as imported:
            importing = timed(lambda: import_jsonl(imported, lines))
        desktop = MemoryStore(root / "desktop.db", embedder=None)
        fresh = timed(lambda: desktop.sync(folder))
        assert desktop.count() == args.n, desktop.count()
        writes, reads = [], []
        for round_ in range(args.repeat):
            laptop.add_many([{"content": f"round {round_} note {i}"} for i in range(10)])
            writes.append(timed(lambda: laptop.sync(folder)) * 1000)
            reads.append(timed(lambda: desktop.sync(folder)) * 1000)
        laptop.close()
        desktop.close()
    figures = {
        "entries": args.n,
        "first_sync_s": round(first, 3),
        "fresh_device_s": round(fresh, 3),
        "import_s": round(importing, 3),
        "fresh_device_entries_per_s": round(args.n / fresh),
        "import_entries_per_s": round(args.n / importing),
        "fresh_device_vs_import": round(importing / fresh, 2),
        "incremental_write_ms": round(statistics.median(writes), 1),
        "incremental_apply_ms": round(statistics.median(reads), 1),
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{args.n:,} entries, keyword-only")
    print(f"  first sync (log started, one chunk written)   {first:8.2f} s")
    print(f"  fresh device's first sync                      {fresh:8.2f} s  ({figures['fresh_device_entries_per_s']:,}/s)")
    print(f"  import of the same entries                     {importing:8.2f} s  ({figures['import_entries_per_s']:,}/s)")
    print(f"  fresh device ÷ import speed                    {figures['fresh_device_vs_import']:8.2f}")
    print(f"  incremental, 10 entries: write {figures['incremental_write_ms']} ms, apply {figures['incremental_apply_ms']} ms"
          f" (median of {args.repeat})")


if __name__ == "__main__":
    main()
