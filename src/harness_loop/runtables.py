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

The tables are the same on both engines, column for column and in the same order (SQLite's
``harness_loop/migrations/``, PostgreSQL's ``harness_loop/migrations/postgres/``): the row tuples
the reads return are in the order of :data:`RUN_COLUMNS` and :data:`JOB_COLUMNS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any

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
# covers every job). `{deps}` is the engine's table of `j`'s deps.
_READY_JOB = (
    "SELECT j.job_id, j.state, j.attempts, j.visits, j.lease_owner FROM jobs AS j"
    " WHERE j.run_id = ?"
    " AND EXISTS (SELECT 1 FROM runs AS r WHERE r.id = j.run_id AND r.namespace = ? AND r.state NOT IN ({finished})"
    " AND (r.lease_until IS NULL OR r.lease_until <= ?))"
    " AND ((j.state = 'running' AND (j.lease_until IS NULL OR j.lease_until <= ?))"
    " OR (j.state IN ('pending', 'queued', 'retrying') AND (j.lease_until IS NULL OR j.lease_until <= ?)"
    " AND NOT EXISTS (SELECT 1 FROM {deps} WHERE NOT EXISTS (SELECT 1 FROM jobs AS u"
    " WHERE u.run_id = j.run_id AND u.job_id = d.value AND u.state = 'succeeded'))))"
    " ORDER BY j.position LIMIT 1{lock}"
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

    @abstractmethod
    def migrate(self) -> None:
        """Apply the pending migrations of the run tables (and of what they come after)."""

    @abstractmethod
    def redaction_secret(self) -> str | None:
        """The database's key for keyed pseudonyms, the one its memory store uses."""

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

    def update_run(self, row: Sequence[Any]) -> bool:
        """(state, max_tokens, spent_tokens, replans, reason, metadata, updated_at, still_redacted,
        id, namespace); False when there is no such run."""
        return bool(self.execute(_RUN_UPDATE, row).rowcount)

    def insert_jobs(self, rows: Sequence[Sequence[Any]]) -> None:
        """Rows in :data:`JOB_COLUMNS` order."""
        if rows:
            self.executemany(_JOB_INSERT, rows)

    def update_job(self, row: Sequence[Any]) -> bool:
        """A job's moving columns (see ``_JOB_UPDATE``); False when the row does not exist yet."""
        return bool(self.execute(_JOB_UPDATE, row).rowcount)

    def append_events(self, run_id: str, rows: Sequence[tuple[str | None, str | None, str]], at: int) -> None:
        """Append ``(kind, job_id, data)`` rows to the run's log, numbered after its last event."""
        if not rows:
            return
        self.lock_log(run_id)
        (last,) = self.execute("SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = ?", (run_id,)).fetchone()
        self.executemany(
            f"INSERT INTO run_events ({EVENT_COLUMNS}) VALUES ({_marks(6)})",
            [(run_id, last + i, at, kind, job_id, data) for i, (kind, job_id, data) in enumerate(rows, 1)],
        )

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
        """The first job that may be claimed now, its row locked: (job_id, state, attempts, visits,
        lease_owner); None when none may."""
        sql = _READY_JOB.format(finished=_marks(len(finished)), deps=self.deps_of_job, lock=self.claim_lock)
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

    def job_lease(self, run_id: str, job_id: str) -> tuple[str, str | None] | None:
        """(state, lease_owner) of a job, its row locked; None when there is no such job."""
        row = self.execute(
            f"SELECT state, lease_owner FROM jobs WHERE run_id = ? AND job_id = ?{self.row_lock}", (run_id, job_id)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def unfinished_jobs(self, run_id: str, finished: Collection[str]) -> int:
        """How many of the run's jobs are in none of the ``finished`` states."""
        return int(self.execute(
            f"SELECT COUNT(*) FROM jobs WHERE run_id = ? AND state NOT IN ({_marks(len(finished))})",
            (run_id, *sorted(finished)),
        ).fetchone()[0])

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
        if not job_ids:
            return []
        return [tuple(r) for r in self.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE run_id = ? AND job_id IN ({_marks(len(job_ids))}) ORDER BY position",
            (run_id, *job_ids),
        ).fetchall()]

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
