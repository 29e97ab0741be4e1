"""What ``PRAGMA secure_delete`` costs, and what ``harness-mem gc`` takes, at 100k entries.

    python bench/bench_gc.py               # 100k synthetic turns (bench_store's), 2,000 deletes
    python bench/bench_gc.py --n 20000 --json

Every connection harness_mem opens runs with ``secure_delete = ON`` (deleted bytes are zeroed, not
left readable in free pages). This measures it against the same work with it OFF, and with FAST
(zeroes only what costs no extra I/O: free pages keep their old content), set on the store's
connection; each mode on its own file built the same way, the modes interleaved and rotated round
after round (the best round of each is kept), so that a busy machine hurts none of them alone:

- import: ``import_jsonl`` of the same lines (one process, ``workers=0``, so both sides do the same
  work in the same place);
- delete: ``MemoryStore.delete`` of the same ids, one transaction each, as ``harness-mem delete`` does;
- purge: the same share of entries set to expire, then ``purge_expired`` in one transaction;
- gc: ``MemoryStore.gc()`` after the deletes and the purge (keyword-index merge, WAL checkpoint,
  incremental vacuum), then ``gc(vacuum=True)`` (a full VACUUM) for comparison.

``--beside-writer`` measures something else: how long a writer in another process waits while gc
runs on a large file (``--mb``, built in a temporary directory). The writer adds one entry every
20 ms and times each ``add``; gc runs once on a store where entries were deleted (dead keyword-index
tokens, free pages: gc purges nothing, ``quiet``) and once where entries were forgotten (gc purges
them and rewrites the tables holding their text, ``purge``). It prints the longest wait, and fails
when a write failed, was lost, or (with ``--max-wait S``) waited longer than S seconds in either case.
``--hog N`` runs N busy processes beside them (load about N + 2): maintenance steps are bounded by the
time they hold the lock, so a busy machine must shorten the steps, not lengthen the wait.
``--built PATH`` keeps the large file there and reuses it (building takes minutes); ``--case`` runs
one case only. ``--trace`` records every statement both sides run, stamped with the wall clock, and
puts each write that waited over 0.5 s down to what held it: the writer's own slowest statement (its
BEGIN waiting for the lock, or its COMMIT doing work of its own) and gc's lock holds meanwhile, each
with its statement count, its commit's time and its slowest statement:

    python bench/bench_gc.py --beside-writer --mb 500 --max-wait 1
    python bench/bench_gc.py --beside-writer --mb 500 --hog 10 --max-wait 1 --built /tmp/gc500.db
    python bench/bench_gc.py --beside-writer --mb 2000 --built /tmp/gc2000.db --case quiet --trace
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_store import make_rows

from harness_mem.jsonl import import_jsonl
from harness_mem.store import MemoryStore

MODES = ("ON", "FAST", "OFF")  # ON is what harness_mem uses; FAST zeroes only what costs no extra I/O


def build(path: Path, lines: list[str], *, mode: str) -> tuple[MemoryStore, float]:
    store = MemoryStore(path, embedder=None)
    store.db.execute(f"PRAGMA secure_delete = {mode}")
    started = time.perf_counter()
    report = import_jsonl(store, lines, workers=0)
    elapsed = time.perf_counter() - started
    assert report.added == len(lines) and not report.errors, report.errors[:3]
    return store, elapsed


def one_side(path: Path, lines: list[str], ids: list[str], expiring: list[str], *, mode: str,
             collect: bool) -> dict[str, float]:
    store, import_s = build(path, lines, mode=mode)
    started = time.perf_counter()
    for entry_id in ids:
        assert store.delete(entry_id)
    delete_s = time.perf_counter() - started
    with store.transaction():
        store.db.conn.executemany("UPDATE entries SET expires_at = 1 WHERE namespace = ? AND id = ?",
                                  [(store.namespace, i) for i in expiring])
    started = time.perf_counter()
    purged = store.purge_expired()
    purge_s = time.perf_counter() - started
    assert purged == len(expiring)
    result = {"import_s": import_s, "delete_ms_each": delete_s / len(ids) * 1000, "purge_s": purge_s}
    if collect:
        started = time.perf_counter()
        report = store.gc()
        result["gc_s"] = time.perf_counter() - started
        result["gc_bytes_before"] = report["bytes_before"]
        result["gc_bytes_after"] = report["bytes_after"]
        started = time.perf_counter()
        report = store.gc(vacuum=True)
        result["gc_vacuum_s"] = time.perf_counter() - started
        result["vacuum_bytes_after"] = report["bytes_after"]
    store.close()
    for leftover in path.parent.glob(path.name + "*"):
        leftover.unlink()
    return result


# The writer beside gc: adds an entry every 20 ms until the stop file appears, then prints its waits
# (and, traced, when each add began and ended by the wall clock, and every statement it ran).
WRITER = """
import json, sys, time
from pathlib import Path
from harness_mem.store import MemoryStore
path, stop, traced = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "trace"
waits, failures, ids, adds, statements = [], [], [], [], []
with MemoryStore(path, embedder=None, redactor=None) as store:
    if traced:
        store.db.conn.set_trace_callback(lambda sql: statements.append((time.time(), sql[:160])))
    print("ready", flush=True)
    while not stop.exists():
        began, wall = time.perf_counter(), time.time()
        try:
            ids.append(store.add(f"written beside gc {len(ids)}").id)
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
        waits.append(time.perf_counter() - began)
        adds.append((wall, time.time()))
        time.sleep(0.02)
print(json.dumps({"waits": waits, "failures": failures, "ids": ids, "adds": adds, "statements": statements}))
"""


def spans(statements: list[tuple[float, str]], end: float) -> list[tuple[float, float, str]]:
    """(start, end, sql) of each statement run at the top (not a trigger's or a virtual table's
    own, which SQLite traces as "-- ..."): it ran until the next one began (an upper bound)."""
    top = [(t, sql) for t, sql in statements if not sql.lstrip().startswith("--")]
    ends = [t for t, _ in top[1:]] + [end]
    return [(t, e, sql) for (t, sql), e in zip(top, ends, strict=True)]


def lock_holds(gc_spans: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """(start, end, what) of each write transaction gc ran, and of each statement that takes the
    write lock on its own (a TRUNCATE checkpoint): from the statement after BEGIN IMMEDIATE (the
    lock is held by then) to the end of COMMIT; what says how many statements, the slowest, and
    the COMMIT's own time (writing the step's pages to the log)."""
    holds, began, slowest, n = [], None, (0.0, ""), 0
    for start, end, sql in gc_spans:
        head = sql.lstrip().upper()
        if head.startswith("BEGIN IMMEDIATE"):
            began, slowest, n = end, (0.0, ""), 0
        elif began is not None and head.startswith(("COMMIT", "ROLLBACK")):
            holds.append((began, end, f"{n} statements, commit {end - start:.2f} s, slowest {slowest[0]:.2f} s: {slowest[1]}"))
            began = None
        elif began is not None:
            slowest, n = max(slowest, (end - start, sql[:110])), n + 1
        elif "CHECKPOINT(TRUNCATE)" in head.replace(" ", ""):
            holds.append((start, end, sql[:110]))
    return holds


def blame(gc_statements: list[tuple[float, str]], gc_end: float, found: dict[str, Any],
          over: float = 0.5) -> list[str]:
    """A line for each add that waited over ``over`` seconds: its own slowest statement, and what gc
    did meanwhile (the lock holds overlapping it, the longest first, with their slowest statement);
    then gc's five longest lock holds, waited for or not."""
    gc_spans = spans(gc_statements, gc_end)
    holds = lock_holds(gc_spans)
    writer_spans = spans([(t, sql) for t, sql in found["statements"]], time.time())
    origin = gc_statements[0][0] if gc_statements else 0.0
    lines = []
    for (began, ended), wait in zip(found["adds"], found["waits"], strict=True):
        if wait <= over:
            continue
        own = max(((e - s, sql) for s, e, sql in writer_spans if began <= s < ended), default=(0.0, "?"))
        meanwhile = sorted(((min(e, ended) - max(s, began), e - s, what) for s, e, what in holds
                            if s < ended and e > began), reverse=True)
        lines.append(f"wait {wait:.2f} s at +{began - origin:.1f} s: writer's slowest {own[0]:.2f} s in {own[1][:60]!r}")
        lines += [f"    gc held the lock {total:.2f} s ({overlap:.2f} s of it meanwhile): {what}"
                  for overlap, total, what in meanwhile[:3]]
    longest = sorted(((e - s, s, what) for s, e, what in holds), reverse=True)[:5]
    lines += [f"gc lock hold {took:.2f} s at +{s - origin:.1f} s: {what}" for took, s, what in longest]
    return lines


def build_large(path: Path, megabytes: int) -> int:
    """A store of ~``megabytes`` MB: bulky notes first (a third of it, 50 kB each, session "bulky"),
    then 100-word notes (20,000 distinct words); returns how many entries."""
    rng = random.Random(5)
    vocabulary = [f"w{i:05d}" for i in range(20_000)]
    n = 0
    with MemoryStore(path, embedder=None, redactor=None) as store:
        while path.stat().st_size < megabytes * 1_000_000 // 3:
            store.add_many([{"text": f"bulky {n + i} " + "z" * 50_000, "session": "bulky"} for i in range(500)])
            n += 500
        while path.stat().st_size < megabytes * 1_000_000:
            store.add_many([{"text": " ".join(rng.choices(vocabulary, k=100))} for _ in range(5000)])
            n += 5000
    return n


def gc_beside_writer(path: Path, *, forget: bool, share: int = 20, trace: bool = False) -> dict[str, object]:
    """Delete the bulky notes and every ``share``-th other one (``quiet``: gc merges the keyword
    index and hands free pages back), or forget every ``share``-th (``purge``: gc purges and
    rewrites); then run gc with a writer process beside it."""
    with MemoryStore(path, embedder=None) as store, store.transaction():
        entries = list(store.list())
        doomed = [e.id for i, e in enumerate(entries) if i % share == 0 or (not forget and e.session == "bulky")]
        for entry_id in doomed:
            store.forget(entry_id) if forget else store.delete(entry_id)
        kept = len(entries) - len(doomed)
    stop = path.parent / "stop"
    stop.unlink(missing_ok=True)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(stop), "trace" if trace else "-"],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    time.sleep(1)
    started = time.perf_counter()
    statements: list[tuple[float, str]] = []
    with MemoryStore(path, embedder=None) as store:
        if trace:
            store.db.conn.set_trace_callback(lambda sql: statements.append((time.time(), sql[:160])))
        report = store.gc()
    gc_s, gc_end = time.perf_counter() - started, time.time()
    time.sleep(1)
    stop.touch()
    found = json.loads(writer.communicate()[0].splitlines()[-1])
    with MemoryStore(path, embedder=None) as store:
        lost = kept + len(found["ids"]) - store.count()
    return {"gc_s": round(gc_s, 2), "longest_wait_s": round(max(found["waits"]), 3), "writes": len(found["waits"]),
            "failures": found["failures"][:3], "lost": lost, "purged": report["expired_purged"] + report["forgotten_purged"],
            "vacuum": report["vacuum"], "mb_before": round(report["bytes_before"] / 1e6, 1),
            "blame": blame(statements, gc_end, found) if trace else []}


# A busy process: the CPU load a shared machine puts beside gc.
HOG = "while True: pass"


def beside_writer(megabytes: int, max_wait: float | None, as_json: bool, *, hogs: int = 0,
                  kept: Path | None = None, cases: tuple[str, ...] = ("quiet", "purge"), trace: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        built = kept or Path(tmp) / "built.db"
        if not built.exists():
            build_large(built, megabytes)
        with MemoryStore(built, embedder=None) as store:
            n = store.count()
        results = {}
        busy = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
        try:
            for case, forget in (("quiet", False), ("purge", True)):
                if case not in cases:
                    continue
                path = Path(tmp) / f"{case}.db"
                for leftover in Path(tmp).glob(path.name + "*"):
                    leftover.unlink()
                shutil.copy(built, path)
                results[case] = gc_beside_writer(path, forget=forget, trace=trace)
                results[case]["load"] = round(os.getloadavg()[0], 1)
        finally:
            for hog in busy:
                hog.kill()
                hog.wait()
    if as_json:
        print(json.dumps({"entries": n, "hogs": hogs, **results}))
    else:
        print(f"{n:,} entries, {built.stat().st_size / 1e6:.0f} MB, {hogs} busy processes beside")
        for case, r in results.items():
            print(f"{case:<6} gc {r['gc_s']:.1f} s ({r['purged']} purged, vacuum {r['vacuum']});"
                  f" longest write wait {r['longest_wait_s']:.2f} s over {r['writes']} writes;"
                  f" failed {len(r['failures'])}, lost {r['lost']}; load {r['load']}")  # type: ignore[arg-type]
            for line in r["blame"]:  # type: ignore[attr-defined]
                print("   ", line)
    bad = [case for case, r in results.items() if r["failures"] or r["lost"]]
    for case, r in results.items():
        if max_wait is not None and float(r["longest_wait_s"]) > max_wait:  # type: ignore[arg-type]
            bad.append(f"{case}: a writer waited over {max_wait} s")
    if bad:
        sys.exit(f"failed: {', '.join(bad)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beside-writer", action="store_true", help="measure a writer's waits beside gc instead")
    parser.add_argument("--mb", type=int, default=500, help="the large file's size (with --beside-writer)")
    parser.add_argument("--max-wait", type=float, help="fail when a writer waited longer (seconds)")
    parser.add_argument("--hog", type=int, default=0, help="busy processes beside gc and the writer (with --beside-writer)")
    parser.add_argument("--built", type=Path, help="keep the large file here and reuse it (with --beside-writer)")
    parser.add_argument("--case", choices=("quiet", "purge"), action="append",
                        help="run only this case (with --beside-writer; both by default)")
    parser.add_argument("--trace", action="store_true",
                        help="trace both sides' statements and put each wait over 0.5 s down to gc's lock holds")
    parser.add_argument("--n", type=int, default=100_000, help="turn entries to import")
    parser.add_argument("--deletes", type=int, default=2000, help="entries deleted one by one")
    parser.add_argument("--expire", type=float, default=0.1, help="share of entries purged as expired")
    parser.add_argument("--repeat", type=int, default=2, help="rounds (modes interleaved; best kept)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.beside_writer:
        beside_writer(args.mb, args.max_wait, args.json, hogs=args.hog, kept=args.built,
                      cases=tuple(args.case or ("quiet", "purge")), trace=args.trace)
        return

    rows = make_rows(args.n)
    lines = [json.dumps(row) for row in rows]
    rng = random.Random(3)
    chosen = rng.sample([str(row["id"]) for row in rows], args.deletes + int(args.n * args.expire))
    ids, expiring = chosen[: args.deletes], chosen[args.deletes:]
    best: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeat):
            for mode in MODES[round_ % 3:] + MODES[:round_ % 3]:  # rotated: no mode is always first
                found = one_side(Path(tmp) / f"{mode}.db", lines, ids, expiring, mode=mode,
                                 collect=mode == "ON" and round_ == 0)
                kept = best.setdefault(mode, found)
                for key, value in found.items():
                    kept[key] = min(kept[key], value) if key.endswith(("_s", "_each")) else value
    on, fast, off = best["ON"], best["FAST"], best["OFF"]
    result = {
        "n": args.n, "deletes": len(ids), "expired": len(expiring), "repeat": args.repeat,
        "on": on, "fast": fast, "off": off,
        "ratio_import": on["import_s"] / off["import_s"],
        "ratio_delete": on["delete_ms_each"] / off["delete_ms_each"],
        "ratio_purge": on["purge_s"] / off["purge_s"],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.n:,} entries; {len(ids):,} deleted one by one; {len(expiring):,} purged as expired;"
          f" best of {args.repeat}")
    for name, key, unit in (("import", "import_s", "s"), ("delete", "delete_ms_each", "ms each"),
                            ("purge", "purge_s", "s")):
        print(f"{name:<7} ON {on[key]:.2f} {unit}  FAST {fast[key]:.2f}  OFF {off[key]:.2f}"
              f"   ON/OFF ×{on[key] / off[key]:.2f}")
    print(f"gc      {on['gc_s']:.2f} s ({on['gc_bytes_before'] / 1e6:.1f} MB -> {on['gc_bytes_after'] / 1e6:.1f} MB)")
    print(f"gc --vacuum {on['gc_vacuum_s']:.2f} s (-> {on['vacuum_bytes_after'] / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
