"""One process of the soak tests (tests/mem/test_soak.py, test_soak_postgres.py): a writer or a
reader on a shared store.

Run as ``python soak_worker.py ROLE NUMBER DB WORKDIR [KEYWORD_ONLY]`` (ROLE is ``writer`` or
``reader``; DB a file or a ``postgresql://`` DSN; KEYWORD_ONLY the number of the writer that stores
no vectors, ``KEYWORD_ONLY_WRITER`` unless given). It opens the store, says it is ready (a file
``ready-ROLE-NUMBER``), waits for the test's ``go`` file, which holds the earliest moment to stop
(seconds since the epoch), and works until then and until the test's ``stop`` file appears (once
every maintenance command ran beside the load: on a loaded machine that takes longer). Each
operation is small, so a loaded machine does fewer of them rather than overrunning the deadline.

A writer logs every write and delete the store acknowledged to ``ROLE-NUMBER.log`` (one line
``add|del|forget|sup|exp ID`` each), after the call returned, so the log is what the file must
hold. It only ever deletes, forgets, replaces or corrects its own entries, so replaying its log
gives the exact set of its ids the file must hold at the end; ``exp`` entries expire within
``MAX_TTL_S`` and are never touched again (nor kept in a session that is forgotten whole).

Both roles write their operation counts and their slowest operation to ``ROLE-NUMBER.json`` on
the way out. Any error ends the process with a traceback: the test fails on that, on a non-zero
exit and on a lock error ("database is locked", a PostgreSQL lock timeout or deadlock).
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from fake_embedder import HashedEmbedder

from harness_mem.errors import MissingVectorsWarning, NotFoundError
from harness_mem.store import MemoryStore

# Entries are a few of these words and a token of their own (the id, or a remember's marker), so
# keyword and semantic queries made of them match many entries, and each entry one exactly.
WORDS = (
    "deploy rollback schema index vector cache bucket budget latency queue worker lease retry backoff"
    " auth refactor ledger argon hashing session cookie migration sqlite wal checkpoint vacuum"
    " planner critic summary episode skill lesson archive metric trace span export import tenant"
).split()
SESSIONS_PER_WRITER = 4
MAX_TTL_S = 2.0
#: The writer that stores no vectors (embedder None): its entries are what ``reindex`` embeds.
KEYWORD_ONLY_WRITER = 7


def text(rng: random.Random, token: str) -> str:
    return " ".join([*rng.sample(WORDS, 4), token])


class Writer:
    def __init__(self, store: MemoryStore, number: int, log: Any, rng: random.Random) -> None:
        self.store, self.number, self.log, self.rng = store, number, log, rng
        self.counts: Counter[str] = Counter()
        self.serial = 0
        self.live: dict[str, str | None] = {}  # acknowledged ids still stored → their session
        self.superseded: set[str] = set()
        self.checks_vectors = store.embedder is not None

    def ack(self, verb: str, entry_id: str) -> None:
        """Record an acknowledged change; called only after the store's call returned."""
        self.log.write(f"{verb} {entry_id}\n")
        self.log.flush()

    def new_id(self) -> str:
        self.serial += 1
        return f"w{self.number}x{self.serial}"  # one word for the tokenizers: no other entry has it

    def session(self) -> str:
        return f"w{self.number}s{self.rng.randrange(SESSIONS_PER_WRITER)}"

    def step(self) -> str:
        ops = [(self.add_note, 30), (self.add_turns, 25), (self.remember, 15), (self.replace, 5),
               (self.supersede, 5), (self.delete, 10), (self.forget, 9), (self.forget_session, 1),
               (self.add_expiring, 4)]
        op = self.rng.choices([f for f, _ in ops], weights=[w for _, w in ops])[0]
        op()
        return op.__name__

    def add_note(self) -> None:
        entry_id = self.new_id()
        content = text(self.rng, entry_id)
        entry = self.store.add(content, id=entry_id, tags=self.rng.sample(["a", "b", "c"], self.rng.randrange(3)))
        assert entry.id == entry_id, entry
        self.ack("add", entry_id)
        self.live[entry_id] = None
        self.counts["writes"] += 1
        if self.checks_vectors and self.rng.random() < 0.25:
            # This process's vector cache must see its own committed write at once, whatever the
            # other processes changed in between.
            hits = self.store.recall(content, k=1, mode="semantic")
            assert hits and hits[0].entry.id == entry_id, (entry_id, [h.entry.id for h in hits])
            self.counts["self_recalls"] += 1

    def add_expiring(self) -> None:
        """An entry that expires in a moment (a turn of a session of its own, or a note): whoever
        opens the file or runs gc after that purges it."""
        entry_id = self.new_id()
        session = f"w{self.number}e" if self.rng.random() < 0.5 else None
        self.store.add(text(self.rng, entry_id), id=entry_id, session=session, role="user" if session else None,
                       ttl_days=self.rng.uniform(0.2, MAX_TTL_S) / 86_400)
        self.ack("exp", entry_id)
        self.counts["expiring"] += 1

    def add_turns(self) -> None:
        session = self.session()
        items = []
        for i in range(self.rng.randint(1, 3)):
            entry_id = self.new_id()
            items.append({"content": text(self.rng, entry_id), "id": entry_id, "session": session,
                          "role": ("user", "assistant")[i % 2]})
        stored = self.store.add_many(items)
        assert [e.id for e in stored] == [item["id"] for item in items], stored
        for item in items:
            self.ack("add", item["id"])
            self.live[item["id"]] = session
        self.counts["writes"] += len(items)

    def remember(self) -> None:
        self.serial += 1
        session = self.session() if self.rng.random() < 0.5 else None
        result = self.store.remember(text(self.rng, f"w{self.number}r{self.serial}"), session=session)
        assert not result.deduped, result  # the marker makes every text new
        self.ack("add", result.id)
        self.live[result.id] = session
        self.counts["writes"] += 1

    def _pick(self, *, current: bool = False) -> str | None:
        """One of this writer's stored ids (``current``: one no correction replaced), or None."""
        choices = [i for i in self.live if not (current and i in self.superseded)]
        return self.rng.choice(choices) if choices else None

    def replace(self) -> None:
        entry_id = self._pick(current=True)
        if entry_id is None or self.live[entry_id] is not None:  # notes only: a turn keeps its place
            return
        self.serial += 1
        self.store.add(f"{text(self.rng, entry_id)} w{self.number}p{self.serial}", id=entry_id, on_conflict="replace")
        self.ack("add", entry_id)
        self.counts["writes"] += 1

    def supersede(self) -> None:
        old = self._pick(current=True)
        if old is None:
            return
        self.serial += 1
        result = self.store.supersede(old, text(self.rng, f"w{self.number}c{self.serial}"))
        assert not result.deduped and result.supersedes == old, result
        self.ack("add", result.id)
        self.ack("sup", old)
        self.live[result.id] = self.live[old]
        self.superseded.add(old)
        self.counts["writes"] += 1

    def delete(self) -> None:
        entry_id = self._pick()
        if entry_id is None:
            return
        assert self.store.delete(entry_id), entry_id  # nobody else deletes this writer's entries
        self.ack("del", entry_id)
        del self.live[entry_id]
        self.superseded.discard(entry_id)
        self.counts["deletes"] += 1

    def forget(self) -> None:
        entry_id = self._pick()
        if entry_id is None:
            return
        assert self.store.forget(entry_id) == 1, entry_id
        self.ack("forget", entry_id)
        del self.live[entry_id]
        self.superseded.discard(entry_id)
        self.counts["forgets"] += 1

    def forget_session(self) -> None:
        """Forget a whole session: exactly the entries this writer stored there must go."""
        session = self.session()
        expected = [i for i, s in self.live.items() if s == session]
        assert self.store.forget(session=session) == len(expected), (session, expected)
        for entry_id in expected:
            self.ack("forget", entry_id)
            del self.live[entry_id]
            self.superseded.discard(entry_id)
        self.counts["forgets"] += len(expected)


class Reader:
    def __init__(self, store: MemoryStore, rng: random.Random) -> None:
        self.store, self.rng = store, rng
        self.counts: Counter[str] = Counter()
        self.seen: list[str] = []

    def step(self) -> str:
        roll = self.rng.random()
        if roll < 0.6:
            mode = self.rng.choice(["keyword", "semantic", "hybrid"])
            query = " ".join(self.rng.sample(WORDS, self.rng.randint(1, 3)))
            session = f"w{self.rng.randrange(8)}s{self.rng.randrange(SESSIONS_PER_WRITER)}"
            hits = self.store.recall(query, k=5, mode=mode,  # type: ignore[arg-type]
                                     session=session if self.rng.random() < 0.2 else None)
            self.seen = [hit.entry.id for hit in hits] or self.seen
            self.counts[f"recall_{mode}"] += 1
            return f"recall_{mode}"
        elif roll < 0.75:
            if self.seen:
                with contextlib.suppress(NotFoundError):  # deleted or forgotten since it was recalled
                    self.store.get(self.rng.choice(self.seen))
                self.counts["get"] += 1
            return "get"
        elif roll < 0.85:
            summaries = self.store.sessions(limit=10)
            if summaries:
                self.store.session_turns(self.rng.choice(summaries).session, limit=10)
            self.counts["sessions"] += 1
            return "sessions"
        elif roll < 0.92:
            self.store.stats()
            self.counts["stats"] += 1
            return "stats"
        else:
            self.store.recall_sessions(self.rng.choice(WORDS), k=3)
            self.counts["recall_sessions"] += 1
            return "recall_sessions"


def wait_for_go(workdir: Path) -> float:
    """The stop time the test writes into ``go`` once every process is ready."""
    waited = time.monotonic() + 300
    while time.monotonic() < waited:
        go = workdir / "go"
        if go.exists():
            return float(go.read_text())
        time.sleep(0.02)
    raise SystemExit("the soak test never said go")


def main(role: str, number: int, db: str, workdir: Path, keyword_only: int = KEYWORD_ONLY_WRITER) -> None:
    name = f"{role}-{number}"
    rng = random.Random(f"{name}-{time.time_ns()}")
    # The keyword-only writer leaves entries without vectors until a reindex: recall says so.
    warnings.simplefilter("ignore", MissingVectorsWarning)
    embedder = None if role == "writer" and number == keyword_only else HashedEmbedder()
    with MemoryStore(db, embedder=embedder) as store, open(workdir / f"{name}.log", "w") as log:
        worker: Writer | Reader = Writer(store, number, log, rng) if role == "writer" else Reader(store, rng)
        (workdir / f"ready-{name}").touch()
        stop = wait_for_go(workdir)
        slowest = (0.0, "")
        while time.time() < stop or not (workdir / "stop").exists():
            began = time.monotonic()
            try:
                op = worker.step()
            except BaseException:  # how long it took tells a lock wait that ran out from one refused at once
                print(f"{name}: an operation failed after {time.monotonic() - began:.2f} s", file=sys.stderr)
                raise
            slowest = max(slowest, (time.monotonic() - began, op))
            time.sleep(rng.uniform(0, 0.01))  # a little think time: the machine is shared
    (workdir / f"{name}.json").write_text(json.dumps({"counts": worker.counts, "slowest": slowest}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]),
         *(int(n) for n in sys.argv[5:6]))
