"""The run store's tables behind one seam: every statement written once, the engines' few differences apart.

:class:`~harness_loop.runstore.RunStore` keeps every rule about *values* (redaction, records, checks,
who may hold a lease) and reaches the ``runs``, ``jobs`` and ``run_events`` tables only through a
:class:`RunTables`. Its operations (below) are the SQL both engines share, written once with ``?``
placeholders; an engine supplies the primitives they run on and the few places where the engines
differ:

- :mod:`harness_loop.runtables_sqlite`: one file, every write under ``BEGIN IMMEDIATE``, which
  already serialises the writers, so no row is ever locked by hand;
- :mod:`harness_loop.runtables_postgres`: a server, several processes writing at once, so the rows a
  write decides on are locked (``FOR NO KEY UPDATE``, ``FOR UPDATE``), a job is claimed with
  ``FOR UPDATE SKIP LOCKED`` (workers in several processes drain one run without waiting on each
  other), and appends to a run's event log take a lock of that run's own.

Locks are always taken in one order, so writers never wait on each other in a circle: the run row
first (:meth:`RunTables.lock_run`), then job rows, and the run's event log
(:meth:`RunTables.lock_log`) last. A claim takes no run row lock: it locks the job row it takes,
skipping rows others hold rather than waiting for them, then the log.

What every settle of a run waits for is the run's row, and every claim and settle the run's log,
each until its holder commits; so a worker's claim and settle are each one :meth:`RunTables.batch`:
on PostgreSQL one round trip for the reads, then the writes and the commit sent together, and a
lock on the run is held for one round trip, not one per statement. The event log is numbered in
the database (no round trip between reading the last ``seq`` and writing the next).

The tables are the same on both engines, column for column and in the same order (SQLite's
``harness_loop/migrations/``, PostgreSQL's ``harness_loop/migrations/postgres/``): the row tuples
the reads return are in the order of :data:`RUN_COLUMNS` and :data:`JOB_COLUMNS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness_mem.redaction import Redactor

__all__ = ["EVENT_COLUMNS", "JOB_COLUMNS", "RUN_COLUMNS", "RunTables"]

RUN_COLUMNS = (
    "id, namespace, goal, state, max_tokens, spent_tokens, replans, reason, metadata, created_at, updated_at,"
    " redacted"
)
JOB_COLUMNS = (
    "run_id, job_id, position, prompt, deps, retry, state, attempts, visits, result_text, input_tokens,"
    " output_tokens, spent_tokens, last_error, prior_attempt, feedback, updated_at"
)
EVENT_COLUMNS = "run_id, seq, at, kind, job_id, data"

_JOB_UPDATE = (
    "UPDATE jobs SET state = ?, attempts = ?, visits = ?, result_text = ?, input_tokens = ?,"
    " output_tokens = ?, spent_tokens = ?, last_error = ?, prior_attempt = ?, feedback = ?, updated_at = ?"
    " WHERE run_id = ? AND job_id = ?"
)
_JOB_INSERT = f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES ({', '.join('?' * 17)})"
_RUN_INSERT = f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({', '.join('?' * 12)})"
_RUN_UPDATE = (
    "UPDATE runs SET state = ?, max_tokens = ?, spent_tokens = ?, replans = ?, reason = ?,"
    " metadata = ?, updated_at = ?, redacted = CASE WHEN ? THEN redacted ELSE 0 END"
    " WHERE id = ? AND namespace = ?"
)

# A job may be claimed when it waits (pending, queued, or retrying past its backoff: `lease_until`
# is then the time it may start again) and every job it depends on has succeeded, or when it is
# running under a lease that lapsed (its worker died or stalled) or under none (an orchestrator that
# is gone left it so). Its run must be live and not executed by an orchestrator (whose run lease
# covers every job). `{deps}` is the engine's table of `j`'s deps, each looked up by the primary key
# (a scalar subquery: as an anti-join, PostgreSQL's planner hashed the run's every job for each job
# it checked). The whole row comes back (the claim needs no second read), the lease holder after it.
_READY_JOB = (
    "SELECT {columns}, j.lease_owner FROM jobs AS j"
    " WHERE j.run_id = ?"
    " AND EXISTS (SELECT 1 FROM runs AS r WHERE r.id = j.run_id AND r.namespace = ? AND r.state NOT IN ({finished})"
    " AND (r.lease_until IS NULL OR r.lease_until <= ?))"
    " AND ((j.state = 'running' AND (j.lease_until IS NULL OR j.lease_until <= ?))"
    " OR (j.state IN ('pending', 'queued', 'retrying') AND (j.lease_until IS NULL OR j.lease_until <= ?)"
    " AND NOT EXISTS (SELECT 1 FROM {deps} WHERE COALESCE((SELECT u.state FROM jobs AS u"
    " WHERE u.run_id = j.run_id AND u.job_id = d.value), '') <> 'succeeded')))"
    " ORDER BY j.position LIMIT 1{lock}"
)
_READY_COLUMNS = ", ".join(f"j.{name.strip()}" for name in JOB_COLUMNS.split(","))

# Events are appended with one statement per batch, numbered in the database after the log's last
# one (under the log's lock): no round trip between reading the last `seq` and writing. A batch of
# this many rows stays under SQLite's limit of 500 terms in one compound SELECT.
_EVENT_BATCH = 64


def _event_insert(rows: int) -> str:
    values = " UNION ALL ".join(["SELECT ? AS n, ? AS kind, ? AS job_id, ? AS data", *["SELECT ?, ?, ?, ?"] * (rows - 1)])
    return (
        f"INSERT INTO run_events ({EVENT_COLUMNS}) SELECT ?, last.seq + v.n, ?, v.kind, v.job_id, v.data"
        " FROM (SELECT COALESCE(MAX(seq), 0) AS seq FROM run_events WHERE run_id = ?) AS last,"
        f" ({values}) AS v ORDER BY v.n"
    )


def _marks(n: int) -> str:
    return ", ".join("?" * n)


class RunTables(ABC):
    """The run tables of one database: the engine's primitives, and the operations built on them."""

    #: ``"sqlite"`` or ``"postgresql"``.
    engine: str
    #: A table of the deps of the job row ``j``, one row per dep id in a column ``d.value``.
    deps_of_job: str
    #: What follows the ready-job query to lock the row it picks (and skip rows others hold).
    claim_lock: str = ""
    #: What follows a single-row read to lock the row it reads.
    row_lock: str = ""
    #: What follows a read of a run's row to lock it as :meth:`lock_run` does.
    run_lock: str = ""
    #: True where a read sent in a :meth:`batch` can be answered after the block (a server's
    #: pipeline); elsewhere reads are answered at once.
    answers_later: bool = False

    # ---- the engine's primitives -----------------------------------------------------------------

    @abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement (``?`` placeholders); a cursor with ``fetchone``, ``fetchall``, ``rowcount``."""

    @abstractmethod
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """One write transaction: committed at the end of the block, rolled back on any exception."""

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[None]:
        """Several reads that see one state (inside a transaction: that transaction's)."""

    def batch(self) -> AbstractContextManager[None]:
        """One write transaction, as :meth:`transaction`, whose statements go to a server (where there
        is one) without waiting for each one's answer: only when a result is read, and at the commit.
        A write's ``rowcount`` is not known before the block ends."""
        return self.transaction()

    @abstractmethod
    def migrate(self) -> None:
        """Apply the pending migrations of the run tables (and of what they come after)."""

    @abstractmethod
    def redactor(self) -> Redactor:
        """The database's own redactor, its pseudonyms keyed as its memory store's are (see
        :func:`harness_mem.pseudonyms.database_redactor`)."""

    @abstractmethod
    def close(self) -> None: ...

    @property
    @abstractmethod
    def integrity_error(self) -> type[Exception]:
        """What the driver raises when a write breaks a constraint."""

    @abstractmethod
    def is_duplicate_run(self, exc: Exception) -> bool:
        """True when ``exc`` (an integrity error) says a run with that id exists already."""

    @abstractmethod
    def lock_run(self, run_id: str) -> None:
        """Lock the run's row until the transaction ends (a no-op where writers are serialised anyway)."""

    @abstractmethod
    def lock_log(self, run_id: str) -> None:
        """Lock the run's event log until the transaction ends, so two appends cannot take one ``seq``."""

    # ---- writes (inside :meth:`transaction`) --------------------------------------------------

    def insert_run(self, row: Sequence[Any]) -> None:
        """One row in :data:`RUN_COLUMNS` order."""
        self.execute(_RUN_INSERT, row)

    def update_run(self, row: Sequence[Any], *, counted: bool = True) -> bool:
        """(state, max_tokens, spent_tokens, replans, reason, metadata, updated_at, still_redacted,
        id, namespace); False when there is no such run. Not ``counted``: the caller knows the row
        exists (it holds its lock), and True is returned without waiting for the count."""
        cursor = self.execute(_RUN_UPDATE, row)
        return bool(cursor.rowcount) if counted else True

    def insert_jobs(self, rows: Sequence[Sequence[Any]]) -> None:
        """Rows in :data:`JOB_COLUMNS` order."""
        if rows:
            self.executemany(_JOB_INSERT, rows)

    def update_job(self, row: Sequence[Any], *, counted: bool = True) -> bool:
        """A job's moving columns (see ``_JOB_UPDATE``); False when the row does not exist yet (not
        ``counted``: as :meth:`update_run`)."""
        cursor = self.execute(_JOB_UPDATE, row)
        return bool(cursor.rowcount) if counted else True

    def append_events(self, run_id: str, rows: Sequence[tuple[str | None, str | None, str]], at: int) -> None:
        """Append ``(kind, job_id, data)`` rows to the run's log, numbered after its last event."""
        if not rows:
            return
        self.lock_log(run_id)
        for start in range(0, len(rows), _EVENT_BATCH):
            batch = rows[start:start + _EVENT_BATCH]
            params: list[Any] = [run_id, at, run_id]
            for n, (kind, job_id, data) in enumerate(batch, 1):  # after the batch before, now the last
                params += (n, kind, job_id, data)
            self.execute(_event_insert(len(batch)), params)

    def run_lease(self, run_id: str, namespace: str) -> tuple[str | None, int | None] | None:
        """The run's lease (holder, until), its row locked; None when there is no such run."""
        self.lock_run(run_id)
        row = self.execute(
            "SELECT lease_owner, lease_until FROM runs WHERE id = ? AND namespace = ?", (run_id, namespace)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def set_run_lease(self, run_id: str, namespace: str, owner: str | None, until: int | None) -> None:
        self.execute(
            "UPDATE runs SET lease_owner = ?, lease_until = ? WHERE id = ? AND namespace = ?",
            (owner, until, run_id, namespace),
        )

    def release_run_lease(self, run_id: str, namespace: str, owner: str) -> None:
        self.execute(
            "UPDATE runs SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND namespace = ? AND lease_owner = ?",
            (run_id, namespace, owner),
        )

    def job_lease_holder(self, run_id: str, other_than: str, now: int) -> str | None:
        """Who holds a live lease on one of the run's running jobs (not ``other_than``), if anyone."""
        row = self.execute(
            "SELECT lease_owner FROM jobs WHERE run_id = ? AND state = 'running' AND lease_owner IS NOT NULL"
            " AND lease_owner <> ? AND lease_until > ? ORDER BY position LIMIT 1",
            (run_id, other_than, now),
        ).fetchone()
        return None if row is None else str(row[0])

    def ready_job(self, run_id: str, namespace: str, now: int, finished: Collection[str]) -> tuple[Any, ...] | None:
        """The first job that may be claimed now, its row locked: its columns in :data:`JOB_COLUMNS`
        order, then its ``lease_owner``; None when none may."""
        sql = _READY_JOB.format(columns=_READY_COLUMNS, finished=_marks(len(finished)), deps=self.deps_of_job,
                                lock=self.claim_lock)
        row = self.execute(sql, (run_id, namespace, *sorted(finished), now, now, now)).fetchone()
        return None if row is None else tuple(row)

    def take_job(self, run_id: str, job_id: str, attempts: int, visits: int, owner: str, until: int, now: int) -> None:
        """Mark the job running under ``owner``'s lease until ``until``."""
        self.execute(
            "UPDATE jobs SET state = 'running', attempts = ?, visits = ?, lease_owner = ?, lease_until = ?,"
            " updated_at = ? WHERE run_id = ? AND job_id = ?",
            (attempts, visits, owner, until, now, run_id, job_id),
        )

    def renew_job(self, run_id: str, job_id: str, owner: str, until: int) -> bool:
        """Extend ``owner``'s lease on the running job; False when it no longer holds it."""
        return bool(self.execute(
            "UPDATE jobs SET lease_until = ? WHERE run_id = ? AND job_id = ? AND state = 'running' AND lease_owner = ?",
            (until, run_id, job_id, owner),
        ).rowcount)

    def settle_view(
        self, run_id: str, namespace: str, job_id: str, finished: Collection[str]
    ) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None, int]:
        """What a settle decides on, read in its transaction: the run's row, locked first (as
        :meth:`lock_run`), the job's row locked (its :data:`JOB_COLUMNS`, then ``lease_owner``), and
        how many of the run's jobs are in none of the ``finished`` states. The three reads are sent
        together (in a :meth:`batch`, one round trip); each still starts once the one before it has
        its lock, so the count sees every settle that held the run before this one."""
        run = self.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ? AND namespace = ?{self.run_lock}",
                           (run_id, namespace))
        job = self.execute(f"SELECT {JOB_COLUMNS}, lease_owner FROM jobs WHERE run_id = ? AND job_id = ?{self.row_lock}",
                           (run_id, job_id))
        count = self.execute(
            f"SELECT COUNT(*) FROM jobs WHERE run_id = ? AND state NOT IN ({_marks(len(finished))})",
            (run_id, *sorted(finished)),
        )
        run_row, job_row = run.fetchone(), job.fetchone()
        return (None if run_row is None else tuple(run_row), None if job_row is None else tuple(job_row),
                int(count.fetchone()[0]))

    def end_job_lease(self, run_id: str, job_id: str, not_before: int | None) -> None:
        """Clear the job's lease; ``not_before`` (ms) is when a retrying job may be claimed again."""
        self.execute(
            "UPDATE jobs SET lease_owner = NULL, lease_until = ? WHERE run_id = ? AND job_id = ?",
            (not_before, run_id, job_id),
        )

    def prune_events(self, older_than: int, finished: Collection[str]) -> int:
        """Delete finished runs' events logged before ``older_than``, each run's last one kept."""
        return int(self.execute(
            "DELETE FROM run_events WHERE at < ? AND run_id IN"
            f" (SELECT id FROM runs WHERE state IN ({_marks(len(finished))}))"
            " AND seq < (SELECT max(seq) FROM run_events AS last WHERE last.run_id = run_events.run_id)",
            (older_than, *sorted(finished)),
        ).rowcount)

    # ---- reads -----------------------------------------------------------------------------------

    def run_row(self, run_id: str, namespace: str) -> tuple[Any, ...] | None:
        row = self.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ? AND namespace = ?", (run_id, namespace)).fetchone()
        return None if row is None else tuple(row)

    def run_exists(self, run_id: str, namespace: str) -> bool:
        return self.execute("SELECT 1 FROM runs WHERE id = ? AND namespace = ?", (run_id, namespace)).fetchone() is not None

    def job_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        """The run's jobs in insertion order."""
        return [tuple(r) for r in self.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE run_id = ? ORDER BY position", (run_id,)
        ).fetchall()]

    def job_row(self, run_id: str, job_id: str) -> tuple[Any, ...] | None:
        row = self.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE run_id = ? AND job_id = ?", (run_id, job_id)).fetchone()
        return None if row is None else tuple(row)

    def job_rows_among(self, run_id: str, job_ids: Sequence[str]) -> list[tuple[Any, ...]]:
        """The run's jobs among ``job_ids``, in insertion order."""
        return self.job_rows_later(run_id, job_ids)()

    def job_rows_later(self, run_id: str, job_ids: Sequence[str]) -> Callable[[], list[tuple[Any, ...]]]:
        """:meth:`job_rows_among`, asked now and answered when called: in a :meth:`batch` on a server
        (:attr:`answers_later`), call it after the block, and the read costs no round trip of its own."""
        if not job_ids:
            return list
        cursor = self.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE run_id = ? AND job_id IN ({_marks(len(job_ids))}) ORDER BY position",
            (run_id, *job_ids),
        )
        if self.answers_later:
            return lambda: [tuple(r) for r in cursor.fetchall()]
        rows = [tuple(r) for r in cursor.fetchall()]
        return lambda: rows

    def run_rows(self, namespace: str, state: str | None, limit: int | None) -> list[tuple[Any, ...]]:
        """The namespace's runs, newest first (the id breaks a tie)."""
        sql = f"SELECT {RUN_COLUMNS} FROM runs WHERE namespace = ?"
        params: list[Any] = [namespace]
        if state is not None:
            sql += " AND state = ?"
            params.append(state)
        sql += " ORDER BY created_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(limit, 0))
        return [tuple(r) for r in self.execute(sql, params).fetchall()]

    def job_counts(self, run_ids: Sequence[str]) -> list[tuple[str, str, int]]:
        """(run_id, state, jobs) for each state that occurs among each run's jobs."""
        if not run_ids:
            return []
        return [(r[0], r[1], int(r[2])) for r in self.execute(
            f"SELECT run_id, state, COUNT(*) FROM jobs WHERE run_id IN ({_marks(len(run_ids))}) GROUP BY run_id, state",
            list(run_ids),
        ).fetchall()]

    def event_rows(self, run_id: str, after: int, limit: int | None) -> list[tuple[Any, ...]]:
        """The run's events with ``seq > after``, oldest first, in :data:`EVENT_COLUMNS` order."""
        sql = f"SELECT {EVENT_COLUMNS} FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq"
        params: list[Any] = [run_id, after]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(limit, 0))
        return [tuple(r) for r in self.execute(sql, params).fetchall()]
