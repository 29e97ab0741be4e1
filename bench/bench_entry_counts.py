"""What keeping the entry counts costs a write: the same rows written with the counting triggers
and without them (dropped from a scratch store), alternately, in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_entry_counts.py [--n 20000] [--rounds 3]

Each round writes ``--n`` keyword-only turns in batches of 5,000 into a fresh file of each kind; the
ratio (with / without) is the triggers' share of a write.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import make_rows  # noqa: E402

from harness_mem.store import MemoryStore  # noqa: E402

TRIGGERS = ("entry_counts_added", "entry_counts_removed", "entry_counts_changed")
BATCH = 5_000


def write_seconds(rows: list[dict[str, object]], *, counted: bool) -> float:
    with tempfile.TemporaryDirectory() as scratch, MemoryStore(Path(scratch) / "m.db", embedder=None,
                                                               redactor=None) as store:
        if not counted:
            for name in TRIGGERS:
                store.storage.conn.execute(f"DROP TRIGGER {name}")  # type: ignore[attr-defined]
        started = time.perf_counter()
        for start in range(0, len(rows), BATCH):
            store.add_many(rows[start:start + BATCH])
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = make_rows(args.n)
    counted: list[float] = []
    uncounted: list[float] = []
    for i in range(args.rounds):  # alternately, each first in turn: the same load on both
        for with_triggers in ((True, False) if i % 2 == 0 else (False, True)):
            (counted if with_triggers else uncounted).append(write_seconds(rows, counted=with_triggers))
    with_, without = statistics.median(counted), statistics.median(uncounted)
    print(f"{args.n:,} turns, median of {args.rounds}: with the counts {with_:.2f} s, without {without:.2f} s,"
          f" ratio {with_ / without:.2f}")


if __name__ == "__main__":
    main()
