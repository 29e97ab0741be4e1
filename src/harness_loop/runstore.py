"""Orchestrator runs as rows: the storage half of harness_loop's DAG orchestrator.

A run is three kinds of row in the memory file, or in a PostgreSQL database (created by harness_loop's
migration sets: :data:`MIGRATIONS` for SQLite, ``harness_loop/migrations/postgres/`` for PostgreSQL):
the run itself (goal, state, token budget and spend), one row per job (its place in the DAG and
where its state machine stands), and an append-only event log with a sequence number per run. The
orchestrator owns every rule about *what* happens; this module only stores and reads, and renders
what ``harness-loop runs list|show|events`` prints.

The write primitive is :meth:`RunStore.save`: the run row, any number of job rows and any number
of events in one transaction (``BEGIN IMMEDIATE`` on SQLite). The orchestrator calls it once per
state transition and acts only after it returns, which is what makes ``kill -9`` survivable: the
database always holds a state the orchestrator had committed to, never half of one.

**Engines.** :meth:`RunStore.open` takes a SQLite file's path or a ``postgresql://`` URL. Every
statement goes through a :class:`~harness_loop.runtables.RunTables` (the SQL both engines share,
written once, and the few places where they differ: :mod:`harness_loop.runtables_sqlite`,
:mod:`harness_loop.runtables_postgres`); the rules about values here are the same on both.

**Leases.** An orchestrator executing a run holds the run's lease (:meth:`RunStore.claim`), so two
never execute one run at once. Workers in several processes can instead drain one run together
(:mod:`harness_loop.workers`): each holds a lease on the one job it runs (:meth:`RunStore.claim_job`,
``FOR UPDATE SKIP LOCKED`` on PostgreSQL), and a job whose worker died is taken over once its lease
lapses.

**Redaction.** A goal, a prompt, a result or an error message carries PII as readily as a memory
entry does, so every text and JSON value the run store writes passes the redactor first: the
database's own (the one a :class:`~harness_mem.MemoryStore` on it uses), unless the caller passes
another or None. Identifiers (run ids, job ids, dependencies, the namespace, lease holders) are
pseudonymised (:meth:`~harness_mem.Redactor.pseudonymise`), so two stay two and a lookup by the raw
id finds the run; everything else is scrubbed. Each run records whether its writes were redacted
(``redacted``). What a resumed run reads back is the redacted text: a job id holding PII comes back
as its pseudonym, so a router attached to the raw id no longer matches it.

:class:`InMemoryRunStore` has the same interface and semantics without a file, for tests and for
measuring what persistence costs.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from harness_mem.db import Connection
from harness_mem.engines import is_url
from harness_mem.errors import DuplicateIdError, InvalidInputError, NotFoundError
from harness_mem.models import counted, dumps, format_time, from_ms, now_ms
from harness_mem.redaction import Redactor

from .runtables import RunTables
from .runtables_sqlite import MIGRATIONS, SQLiteRunTables
from .runtables_sqlite import migrate as migrate  # re-exported: apply both SQLite sets to a connection
from .states import JobState, RunState, label

if TYPE_CHECKING:
    from harness_mem import MemoryStore


# The stored names, derived from the enums (harness_loop.states) so there is one definition.
RUN_STATES: tuple[str, ...] = tuple(state.value for state in RunState)
TERMINAL_RUN_STATES: frozenset[str] = frozenset(state.value for state in RunState if state.is_terminal())
JOB_STATES: tuple[str, ...] = tuple(state.value for state in JobState)
TERMINAL_JOB_STATES: frozenset[str] = frozenset(state.value for state in JobState if state.is_terminal())


# ---- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """One row of ``runs``."""

    id: str
    goal: str
    state: str = "created"
    namespace: str = "default"
    max_tokens: int | None = None
    spent_tokens: int = 0
    replans: int = 0
    reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: int = 0  # ms since the epoch; the store stamps it on create
    updated_at: int = 0  # ms since the epoch; the store stamps it on every save
    # As stored: True when every write of the run was redacted, False when one was not, None when
    # unknown (a run written before runs were redacted, or one that only lives in memory).
    redacted: bool | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_RUN_STATES

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "goal": self.goal,
            "state": self.state,
            "max_tokens": self.max_tokens,
            "spent_tokens": self.spent_tokens,
            "replans": self.replans,
            "reason": self.reason,
            "metadata": self.metadata,
            "created_at": format_time(from_ms(self.created_at)),
            "updated_at": format_time(from_ms(self.updated_at)),
            "redacted": self.redacted,
        }


@dataclass(frozen=True)
class JobRecord:
    """One row of ``jobs``: a job's definition and where its state machine stands."""

    run_id: str
    job_id: str
    position: int
    prompt: str
    deps: tuple[str, ...] = ()
    retry: dict[str, Any] = field(default_factory=dict)
    state: str = "pending"
    attempts: int = 0
    visits: int = 0
    result_text: str | None = None  # None = no result (an empty answer is "")
    input_tokens: int = 0
    output_tokens: int = 0
    spent_tokens: int = 0
    last_error: str | None = None
    prior_attempt: str | None = None
    feedback: str | None = None
    updated_at: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "id": self.job_id,
            "position": self.position,
            "prompt": self.prompt,
            "deps": list(self.deps),
            "retry": self.retry,
            "state": self.state,
            "attempts": self.attempts,
            "visits": self.visits,
            "result": self.result_text,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "spent_tokens": self.spent_tokens,
            "last_error": self.last_error,
            "prior_attempt": self.prior_attempt,
            "feedback": self.feedback,
            "updated_at": format_time(from_ms(self.updated_at)),
        }


@dataclass(frozen=True)
class NewEvent:
    """An event to append; the store gives it its ``seq`` and time."""

    kind: str
    job_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EventRecord:
    """One row of the append-only ``run_events`` log."""

    run_id: str
    seq: int
    at: int
    kind: str
    job_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "at": format_time(from_ms(self.at)),
            "kind": self.kind,
            "job_id": self.job_id,
            "data": self.data,
        }


@dataclass(frozen=True)
class StoredRun:
    """A run with its jobs in insertion order: everything ``runs show`` prints."""

    run: RunRecord
    jobs: tuple[JobRecord, ...] = ()

    def job(self, job_id: str) -> JobRecord:
        for job in self.jobs:
            if job.job_id == job_id:
                return job
        raise NotFoundError(f"run {self.run.id} has no job {job_id!r}")

    def counts(self) -> dict[str, int]:
        """Jobs per stored state, only the states that occur."""
        counts: dict[str, int] = {}
        for job in self.jobs:
            counts[job.state] = counts.get(job.state, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {**self.run.to_dict(), "jobs": [job.to_dict() for job in self.jobs]}


@dataclass(frozen=True)
class RunSummary:
    """A run and how many of its jobs are in each state: one line of ``runs list``."""

    run: RunRecord
    job_counts: dict[str, int] = field(default_factory=dict)

    @property
    def total_jobs(self) -> int:
        return sum(self.job_counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {**self.run.to_dict(), "jobs": self.total_jobs, "job_counts": self.job_counts}


# ---- leases ----------------------------------------------------------------------------------

# A run's lease lasts this long unless renewed; its holder renews it every third of that.
LEASE_MS = 30_000


def lease_owner() -> str:
    """A lease holder's name: this host and process, and a token for the holder within it."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _lease_is_free(holder: str | None, until: int | None, now: int) -> bool:
    """True when nobody holds the lease: none, expired, or its process on this host is gone."""
    if holder is None or until is None or until <= now:
        return True
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit() or os.name != "posix":
        return False
    try:
        os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True  # it crashed or was killed: its lease means nothing now
    except OSError:
        pass  # it exists, under another user
    return False


# ---- the interface -----------------------------------------------------------------------------


@runtime_checkable
class RunStoreLike(Protocol):
    """What the orchestrator needs from a store: :class:`RunStore` and :class:`InMemoryRunStore`."""

    def create(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        """Insert a new run with its jobs and first events, atomically."""
        ...

    def save(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        """Update the run, upsert the jobs and append the events, atomically."""
        ...

    def load(self, run_id: str) -> StoredRun:
        """The run and its jobs; NotFoundError if there is no such run."""
        ...

    def list_runs(self, *, limit: int | None = None, state: str | None = None) -> list[RunSummary]:
        """Runs, newest first."""
        ...

    def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[EventRecord]:
        """The run's events with ``seq > after``, in order; NotFoundError if there is no such run."""
        ...

    def claim(self, run_id: str, owner: str, *, ttl_ms: int = LEASE_MS) -> str | None:
        """Take the run's lease for ``owner`` (or renew it); None when taken, else who holds it."""
        ...

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease up, if ``owner`` holds it."""
        ...


def _check_records(run: RunRecord, jobs: Sequence[JobRecord]) -> None:
    if run.state not in RUN_STATES:
        raise InvalidInputError(f"unknown run state {run.state!r} — use one of: {', '.join(RUN_STATES)}")
    for job in jobs:
        if job.run_id != run.id:
            raise InvalidInputError(f"job {job.job_id!r} belongs to run {job.run_id!r}, not {run.id!r}")
        if job.state not in JOB_STATES:
            raise InvalidInputError(
                f"unknown job state {job.state!r} for {job.job_id!r} — use one of: {', '.join(JOB_STATES)}"
            )


# ---- the stored runs ---------------------------------------------------------------------------

# How many scrubbed values a run store remembers, and the longest it remembers.
_REMEMBERED = 1024
_REMEMBERED_CHARS = 4096


@dataclass(frozen=True)
class Settlement:
    """What a worker's attempt at a job leads to (:meth:`RunStore.settle_job`): the run row, the
    job rows that changed and the events, written like :meth:`RunStore.save` writes them.

    ``retry_at`` (ms since the epoch) is when the settled job may be claimed again, for a job that
    goes back to waiting out a retry backoff; None: as soon as it is ready.
    """

    run: RunRecord
    jobs: Sequence[JobRecord] = ()
    events: Sequence[NewEvent] = ()
    retry_at: int | None = None


@dataclass(frozen=True)
class Attempt:
    """What :meth:`RunStore.settle_job` tells its ``decide`` about the run, as stored at the settle:
    the run, the job, how many of the run's other jobs have not finished, the whole run on demand
    (``load()``, read in the settle's transaction; a run of many jobs is read only when needed), and
    the settle's time (ms since the epoch), which its rows and events are stamped with."""

    run: RunRecord
    job: JobRecord
    unfinished: int
    load: Callable[[], StoredRun]
    now: int


def _open_tables(target: str | os.PathLike[str]) -> RunTables:
    """The run tables at ``target``: a PostgreSQL server for a ``postgresql://`` URL, else a SQLite file."""
    if is_url(target):
        from .runtables_postgres import PostgresRunTables

        return PostgresRunTables.open(str(target))
    return SQLiteRunTables.open(target)


class RunStore:
    """Runs, jobs and run events in the memory file (or a PostgreSQL database), scoped to one namespace.

    Use :meth:`open`, which connects to a SQLite file or a ``postgresql://`` URL, migrates harness_mem's
    and harness_loop's sets and owns the connection, or :meth:`on`, which joins a memory store (its
    file's connection and its redactor). ``RunStore(conn)`` takes a connection from
    :func:`harness_mem.db.connect` on a file migrated by :func:`migrate`, or any :class:`RunTables`.

    Every statement goes through the tables (:mod:`harness_loop.runtables`): this class keeps the
    rules about values (redaction, records, leases) the same on both engines.

    :param redactor: what every written text passes: ``"default"`` is the database's own redactor
        (its pseudonyms keyed as the memory store's are, with the identity key); None stores text as given, and each run
        written so records ``redacted = 0``.
    """

    def __init__(
        self,
        conn: Connection | RunTables,
        *,
        namespace: str = "default",
        redactor: Redactor | Literal["default"] | None = "default",
        owns_connection: bool = False,
    ) -> None:
        self._tables: RunTables = conn if isinstance(conn, RunTables) else SQLiteRunTables(conn)
        self._redactor: Redactor | None = (
            self._tables.redactor() if redactor == "default" else redactor
        )
        self._namespace = self._key(namespace)
        #: Whether :meth:`close` closes the connection (it was opened for this store alone).
        self._owns_connection = owns_connection
        self._scrubbed: dict[str, str] = {}

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        namespace: str = "default",
        redactor: Redactor | Literal["default"] | None = "default",
    ) -> RunStore:
        """Open the SQLite file at ``path``, or the PostgreSQL database a ``postgresql://`` URL names,
        and apply both migration sets; :meth:`close` closes it."""
        return cls._owning(_open_tables(path), namespace=namespace, redactor=redactor)

    @classmethod
    def _owning(cls, tables: RunTables, *, namespace: str,
                redactor: Redactor | Literal["default"] | None) -> RunStore:
        """A store on tables opened for it alone: closed with it, and at once when the store fails."""
        try:
            return cls(tables, namespace=namespace, redactor=redactor, owns_connection=True)
        except BaseException:
            tables.close()
            raise

    @classmethod
    def on(cls, memory: MemoryStore) -> RunStore:
        """The runs of ``memory``'s database and namespace, with its redactor (None when it was opened
        with redaction off); applies harness_loop's migrations. On a SQLite file it shares the memory
        store's connection; on PostgreSQL it opens one of its own, which :meth:`close` closes."""
        if memory.storage.engine == "postgresql":
            from harness_mem.engines.postgres import PostgresStorage

            from .runtables_postgres import PostgresRunTables

            assert isinstance(memory.storage, PostgresStorage)
            tables = PostgresRunTables(memory.storage.dsn)
            try:
                tables.migrate()
            except BaseException:
                tables.close()
                raise
            return cls._owning(tables, namespace=memory.namespace, redactor=memory.redactor)
        MIGRATIONS.migrate(memory.db.conn)
        return cls(memory.db.conn, namespace=memory.namespace, redactor=memory.redactor)

    @property
    def namespace(self) -> str:
        """The namespace as stored (its pseudonym when the name holds PII)."""
        return self._namespace

    @property
    def redactor(self) -> Redactor | None:
        return self._redactor

    @property
    def tables(self) -> RunTables:
        """The tables this store reads and writes (for looking; write through the store)."""
        return self._tables

    @property
    def engine(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._tables.engine

    # -- redaction: every value written passes one of these

    def _key(self, value: str) -> str:
        """An identifier as stored and looked up: sensitive spans pseudonymised (see harness_mem.rows.identity)."""
        return value if self._redactor is None else self._redactor.pseudonymise(value).text

    def _text(self, value: str | None) -> str | None:
        if value is None or self._redactor is None:
            return value
        found = self._scrubbed.get(value)
        if found is None:
            found = self._redactor.scrub(value).text
            self._remember(value, found)
        return found

    def _json(self, value: Any) -> str:
        text = dumps(value)
        if self._redactor is None:
            return text
        found = self._scrubbed.get(text)
        if found is None:
            found = dumps(self._redactor.scrub_value(value).value)
            self._remember(text, found)
        return found

    def _remember(self, raw: str, scrubbed: str) -> None:
        """The orchestrator saves the same values at every transition (the run's metadata, a job's
        result until it changes): each is scrubbed once, while it is short enough to keep."""
        if len(raw) <= _REMEMBERED_CHARS:
            if len(self._scrubbed) >= _REMEMBERED:
                self._scrubbed.clear()
            self._scrubbed[raw] = scrubbed

    def _job_row(self, job: JobRecord, now: int) -> tuple[Any, ...]:
        return (
            self._key(job.run_id), self._key(job.job_id), job.position, self._text(job.prompt),
            dumps([self._key(dep) for dep in job.deps]), self._json(job.retry), job.state, job.attempts,
            job.visits, self._text(job.result_text), job.input_tokens, job.output_tokens, job.spent_tokens,
            self._text(job.last_error), self._text(job.prior_attempt), self._text(job.feedback), now,
        )

    def _event_rows(self, events: Sequence[NewEvent]) -> list[tuple[str | None, str | None, str]]:
        return [(self._text(ev.kind), None if ev.job_id is None else self._key(ev.job_id), self._json(ev.data))
                for ev in events]

    def close(self) -> None:
        if self._owns_connection:
            self._tables.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes

    def create(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        """Insert a new run with its jobs and first events in one transaction."""
        _check_records(run, jobs)
        now = now_ms()
        tables = self._tables
        key = self._key(run.id)
        try:
            with tables.transaction():
                tables.insert_run(
                    (key, self._namespace, self._text(run.goal), run.state, run.max_tokens, run.spent_tokens,
                     run.replans, self._text(run.reason), self._json(run.metadata), now, now,
                     int(self._redactor is not None)),
                )
                tables.insert_jobs([self._job_row(job, now) for job in jobs])
                tables.append_events(key, self._event_rows(events), now)
        except tables.integrity_error as exc:
            if tables.is_duplicate_run(exc):
                raise DuplicateIdError(f"a run with id {run.id!r} already exists — pick another id") from None
            raise InvalidInputError(f"run {run.id!r} cannot be stored: {exc}") from None

    def save(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        """Update the run row, upsert ``jobs`` and append ``events``, all in one transaction.

        A job row's ``prompt``, ``deps``, ``retry`` and ``position`` are written when it is first
        inserted and never changed afterwards.
        """
        _check_records(run, jobs)
        now = now_ms()
        with self._tables.transaction():
            self._write(run, jobs, events, now)

    def _write(self, run: RunRecord, jobs: Sequence[JobRecord], events: Sequence[NewEvent], now: int,
               existing: Collection[str] | None = None) -> None:
        """``save``'s writes, inside the caller's transaction. ``existing``: the caller holds the run's
        row locked and knows these job rows (stored ids) exist, so their updates are not waited on
        for a count (in a pipeline, the writes then go in one round trip)."""
        tables = self._tables
        run_id = self._key(run.id)
        if not tables.update_run(
            (run.state, run.max_tokens, run.spent_tokens, run.replans, self._text(run.reason),
             self._json(run.metadata), now, self._redactor is not None, run_id, self._namespace),
            counted=existing is None,
        ):
            raise NotFoundError(f"no run {run.id!r} — create it first")
        for job in jobs:
            job_id = self._key(job.job_id)
            if not tables.update_job(
                (job.state, job.attempts, job.visits, self._text(job.result_text), job.input_tokens,
                 job.output_tokens, job.spent_tokens, self._text(job.last_error), self._text(job.prior_attempt),
                 self._text(job.feedback), now, run_id, job_id),
                counted=existing is None or job_id not in existing,
            ):
                tables.insert_jobs([self._job_row(job, now)])
        tables.append_events(run_id, self._event_rows(events), now)

    def claim(self, run_id: str, owner: str, *, ttl_ms: int = LEASE_MS) -> str | None:
        """Take the run's lease for ``owner`` (or renew it); None when taken, else who holds it.

        A run whose jobs workers are draining (:meth:`claim_job`) is held by them while any of
        their job leases lives: the answer is then one of those workers.
        """
        now = now_ms()
        key, owner = self._key(run_id), self._key(owner)
        tables = self._tables
        with tables.transaction():
            lease = tables.run_lease(key, self._namespace)
            if lease is None:
                raise NotFoundError(_not_found(run_id))
            holder, until = lease
            if holder != owner and not _lease_is_free(holder, until, now):
                return str(holder)
            worker = tables.job_lease_holder(key, owner, now)
            if worker is not None:
                return worker
            tables.set_run_lease(key, self._namespace, owner, now + ttl_ms)
        return None

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease up, if ``owner`` holds it."""
        with self._tables.transaction():
            self._tables.release_run_lease(self._key(run_id), self._namespace, self._key(owner))

    # -- job leases: workers in several processes draining one run (harness_loop.workers)

    def claim_job(self, run_id: str, owner: str, *, ttl_ms: int = LEASE_MS) -> JobRecord | None:
        """Take the next job of the run that may run now (see :meth:`claim_job_and_deps`)."""
        claimed = self.claim_job_and_deps(run_id, owner, ttl_ms=ttl_ms)
        return None if claimed is None else claimed[0]

    def claim_job_and_deps(
        self, run_id: str, owner: str, *, ttl_ms: int = LEASE_MS
    ) -> tuple[JobRecord, list[JobRecord]] | None:
        """Take the next job of the run that may run now for ``owner``, under a lease of ``ttl_ms``.

        The job taken is the first in insertion order that waits (pending, queued, or past its retry
        backoff) with every dependency succeeded, or that is running under a lease that lapsed (its
        worker died) or under none (an orchestrator that is gone left it so): that attempt is taken
        over, not counted again. Returns the job as stored, now ``running``, and its deps as
        :meth:`jobs` returns them (all succeeded), read in the claim's transaction; None when no job
        may run now (the rest are done, running elsewhere or waiting for others), or while an
        orchestrator holds the run's lease. On PostgreSQL the row is taken with ``FOR UPDATE SKIP
        LOCKED``: workers never wait for each other's claims (only, for one round trip, for the
        run's event log).
        """
        now = now_ms()
        key, owner = self._key(run_id), self._key(owner)
        tables = self._tables
        # Two round trips on PostgreSQL: the pick (its row locked), then the writes with the commit.
        with tables.batch():
            ready = tables.ready_job(key, self._namespace, now, TERMINAL_RUN_STATES)
            if ready is None:
                if not tables.run_exists(key, self._namespace):
                    raise NotFoundError(_not_found(run_id))
                return None
            *row, holder = ready
            job = _job_from_row(row)
            attempts, visits = job.attempts, job.visits
            if job.state == JobState.RUNNING.value:  # its worker's lease lapsed: take the attempt over
                kind, data = "job.reclaimed", {"attempt": attempts, "from": holder, "worker": owner}
            else:
                attempts += 1
                if attempts == 1:
                    visits += 1  # a new entry begins with its first attempt
                kind, data = "job.running", {"attempt": attempts, "visit": visits, "worker": owner}
            tables.take_job(key, job.job_id, attempts, visits, owner, now + ttl_ms, now)
            tables.append_events(key, [(kind, job.job_id, self._json(data))], now)
            deps = tables.job_rows_later(key, [self._key(dep) for dep in job.deps])
        # The row as the claim left it: the same columns a second read would return.
        taken = replace(job, state=JobState.RUNNING.value, attempts=attempts, visits=visits, updated_at=now)
        return taken, [_job_from_row(dep) for dep in deps()]

    def renew_job(self, run_id: str, job_id: str, owner: str, *, ttl_ms: int = LEASE_MS) -> bool:
        """Extend ``owner``'s lease on a job it runs; False when it lost it (another took it over)."""
        with self._tables.transaction():
            return self._tables.renew_job(self._key(run_id), self._key(job_id), self._key(owner), now_ms() + ttl_ms)

    def settle_job(self, run_id: str, job_id: str, owner: str, decide: Callable[[Attempt], Settlement]) -> bool:
        """End ``owner``'s attempt at a job: in one transaction, check it still holds the job's
        lease, ask ``decide`` what follows from the run as stored now (an :class:`Attempt`), and
        write that (as :meth:`save` does) with the lease cleared. False, and nothing written, when
        the lease was lost: another worker took the job over, or the run was stopped meanwhile.
        """
        now = now_ms()
        key, job_key, owner = self._key(run_id), self._key(job_id), self._key(owner)
        tables = self._tables
        loaded: list[StoredRun] = []

        def load() -> StoredRun:
            loaded.append(self.load(run_id))
            return loaded[-1]

        # The run's row is locked from the first read to the commit, which settles of the run wait
        # for: on PostgreSQL that is one round trip (the reads) and the decision, then the writes
        # and the commit sent together.
        with tables.batch():
            run, job, unfinished = tables.settle_view(key, self._namespace, job_key, TERMINAL_JOB_STATES)
            if job is None:
                raise NotFoundError(f"run {run_id!r} has no job {job_id!r}")
            *row, holder = job
            record = _job_from_row(row)
            if (record.state, holder) != (JobState.RUNNING.value, owner):
                return False
            if run is None:
                raise NotFoundError(_not_found(run_id))
            settled = decide(Attempt(_run_from_row(run), record, unfinished - 1, load, now))  # this one is running
            _check_records(settled.run, settled.jobs)
            existing = {record.job_id, *(j.job_id for stored in loaded for j in stored.jobs)}  # as stored
            self._write(settled.run, settled.jobs, settled.events, now, existing)
            tables.end_job_lease(key, job_key, settled.retry_at)
        return True

    def prune_events(self, older_than: int) -> int:
        """Delete the events logged before ``older_than`` (ms since the epoch) by finished runs
        (completed, failed or cancelled), in every namespace: pruning is done for the whole file,
        as purging expired entries is. A live run's log is never touched, and a run's last event
        stays (it says how the run ended, and its number is where the next one continues). The
        run and job rows stay. Returns how many events went.
        """
        with self._tables.transaction():
            return self._tables.prune_events(older_than, TERMINAL_RUN_STATES)

    # -- reads

    def load(self, run_id: str) -> StoredRun:
        """The run and its jobs in insertion order."""
        key = self._key(run_id)
        with self._tables.snapshot():
            row = self._tables.run_row(key, self._namespace)
            if row is None:
                raise NotFoundError(_not_found(run_id))
            jobs = self._tables.job_rows(key)
        return StoredRun(_run_from_row(row), tuple(_job_from_row(job) for job in jobs))

    def run(self, run_id: str) -> RunRecord:
        """The run alone, without its jobs: one row (what a worker with nothing to claim asks)."""
        row = self._tables.run_row(self._key(run_id), self._namespace)
        if row is None:
            raise NotFoundError(_not_found(run_id))
        return _run_from_row(row)

    def jobs(self, run_id: str, job_ids: Iterable[str]) -> list[JobRecord]:
        """The run's jobs named in ``job_ids``, in insertion order (an id the run lacks is left out)."""
        return [_job_from_row(row) for row in self._tables.job_rows_among(self._key(run_id),
                                                                           [self._key(j) for j in job_ids])]

    def list_runs(self, *, limit: int | None = None, state: str | None = None) -> list[RunSummary]:
        """Runs in this namespace, newest first, with their job counts per state."""
        if state is not None and state not in RUN_STATES:
            raise InvalidInputError(f"unknown run state {state!r} — use one of: {', '.join(RUN_STATES)}")
        with self._tables.snapshot():
            runs = [_run_from_row(row) for row in self._tables.run_rows(self._namespace, state, limit)]
            counts: dict[str, dict[str, int]] = {run.id: {} for run in runs}
            for run_id, job_state, n in self._tables.job_counts([run.id for run in runs]):
                counts[run_id][job_state] = n
        return [RunSummary(run, counts[run.id]) for run in runs]

    def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[EventRecord]:
        """The run's events with ``seq > after``, oldest first."""
        key = self._key(run_id)
        with self._tables.snapshot():
            if not self._tables.run_exists(key, self._namespace):
                raise NotFoundError(_not_found(run_id))
            rows = self._tables.event_rows(key, after, limit)
        return [EventRecord(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]


def _not_found(run_id: str) -> str:
    return f"no run {run_id!r} — `harness-loop runs list` shows the runs in this namespace"


def _run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        id=row[0], namespace=row[1], goal=row[2], state=row[3], max_tokens=row[4], spent_tokens=row[5],
        replans=row[6], reason=row[7], metadata=json.loads(row[8]), created_at=row[9], updated_at=row[10],
        redacted=None if row[11] is None else bool(row[11]),
    )


def _job_from_row(row: Sequence[Any]) -> JobRecord:
    return JobRecord(
        run_id=row[0], job_id=row[1], position=row[2], prompt=row[3], deps=tuple(json.loads(row[4])),
        retry=json.loads(row[5]), state=row[6], attempts=row[7], visits=row[8], result_text=row[9],
        input_tokens=row[10], output_tokens=row[11], spent_tokens=row[12], last_error=row[13],
        prior_attempt=row[14], feedback=row[15], updated_at=row[16],
    )


# ---- in memory ---------------------------------------------------------------------------------


class InMemoryRunStore:
    """:class:`RunStore`'s interface and rules without a file (tests, benchmarks, throwaway runs)."""

    def __init__(self, *, namespace: str = "default") -> None:
        self._namespace = namespace
        self._runs: dict[str, RunRecord] = {}
        self._jobs: dict[str, dict[str, JobRecord]] = {}
        self._events: dict[str, list[EventRecord]] = {}
        self._leases: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    @property
    def namespace(self) -> str:
        return self._namespace

    def close(self) -> None:
        """Nothing to release; here so both stores can be closed the same way."""

    def create(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        _check_records(run, jobs)
        now = now_ms()
        with self._lock:
            if run.id in self._runs:
                raise DuplicateIdError(f"a run with id {run.id!r} already exists — pick another id")
            rows: dict[str, JobRecord] = {}
            positions: set[int] = set()
            for job in jobs:
                if job.job_id in rows or job.position in positions:
                    raise InvalidInputError(f"run {run.id!r} cannot be stored: duplicate job {job.job_id!r}")
                rows[job.job_id] = _stamped(job, job, now)
                positions.add(job.position)
            self._runs[run.id] = replace(run, namespace=self._namespace, created_at=now, updated_at=now)
            self._jobs[run.id] = rows
            self._events[run.id] = []
            self._append(run.id, events, now)

    def save(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        _check_records(run, jobs)
        now = now_ms()
        with self._lock:
            stored = self._runs.get(run.id)
            if stored is None:
                raise NotFoundError(f"no run {run.id!r} — create it first")
            self._runs[run.id] = RunRecord(
                run.id, run.goal, run.state, stored.namespace, run.max_tokens, run.spent_tokens, run.replans,
                run.reason, run.metadata, stored.created_at, now,
            )
            rows = self._jobs[run.id]
            for job in jobs:
                rows[job.job_id] = _stamped(job, rows.get(job.job_id) or job, now)
            self._append(run.id, events, now)

    def _append(self, run_id: str, events: Sequence[NewEvent], now: int) -> None:
        log = self._events[run_id]
        for ev in events:
            log.append(EventRecord(run_id, len(log) + 1, now, ev.kind, ev.job_id, dict(ev.data)))

    def claim(self, run_id: str, owner: str, *, ttl_ms: int = LEASE_MS) -> str | None:
        now = now_ms()
        with self._lock:
            if run_id not in self._runs:
                raise NotFoundError(_not_found(run_id))
            holder, until = self._leases.get(run_id, (None, None))
            if holder != owner and not _lease_is_free(holder, until, now):
                return holder
            self._leases[run_id] = (owner, now + ttl_ms)
        return None

    def release(self, run_id: str, owner: str) -> None:
        with self._lock:
            if self._leases.get(run_id, (None, None))[0] == owner:
                del self._leases[run_id]

    def load(self, run_id: str) -> StoredRun:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                raise NotFoundError(_not_found(run_id))
            jobs = sorted(self._jobs[run_id].values(), key=lambda j: j.position)
        return StoredRun(run, tuple(jobs))

    def list_runs(self, *, limit: int | None = None, state: str | None = None) -> list[RunSummary]:
        if state is not None and state not in RUN_STATES:
            raise InvalidInputError(f"unknown run state {state!r} — use one of: {', '.join(RUN_STATES)}")
        with self._lock:
            runs = [r for r in self._runs.values() if state is None or r.state == state]
            runs.sort(key=lambda r: (r.created_at, r.id), reverse=True)
            if limit is not None:
                runs = runs[: max(limit, 0)]
            summaries = []
            for run in runs:
                counts: dict[str, int] = {}
                for job in self._jobs[run.id].values():
                    counts[job.state] = counts.get(job.state, 0) + 1
                summaries.append(RunSummary(run, counts))
        return summaries

    def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[EventRecord]:
        with self._lock:
            if run_id not in self._runs:
                raise NotFoundError(_not_found(run_id))
            found = [ev for ev in self._events[run_id] if ev.seq > after]
        return found if limit is None else found[: max(limit, 0)]


def _stamped(job: JobRecord, definition: JobRecord, now: int) -> JobRecord:
    """``job``'s state with ``definition``'s fixed columns, stamped ``now`` (the constructor is much
    cheaper than ``dataclasses.replace``, and this runs once per job per transition)."""
    return JobRecord(
        job.run_id, job.job_id, definition.position, definition.prompt, definition.deps, definition.retry,
        job.state, job.attempts, job.visits, job.result_text, job.input_tokens, job.output_tokens,
        job.spent_tokens, job.last_error, job.prior_attempt, job.feedback, now,
    )


# ---- rendering ---------------------------------------------------------------------------------


def _one_line(text: str, width: int = 80) -> str:
    return " ".join(text.split())[:width]


def render(stored: StoredRun, *, detailed: bool = False) -> str:
    """A run report: a header, then one line per job in insertion order.

    Job lines have the shape ``"  - id: state (entered N×) — result[:80] — failed:
    err[:80]"`` (each tail only when present). ``detailed`` (for ``runs show``) adds attempts and
    tokens inside the parentheses.
    """
    run = stored.run
    budget = f" of {run.max_tokens}" if run.max_tokens is not None else ""
    lines = [f"run {run.id}: {label(run.state)} — {run.spent_tokens}{budget} tokens"]
    lines.append(f"goal: {_one_line(run.goal)}")
    if run.reason:
        lines.append(f"reason: {run.reason}")
    for job in stored.jobs:
        detail = f"entered {job.visits}×"
        if detailed:
            detail += f", attempts {job.attempts}, tokens {job.spent_tokens}"
        line = f"  - {job.job_id}: {label(job.state)} ({detail})"
        if job.result_text is not None:
            line += f" — {_one_line(job.result_text)}"
        if job.last_error:
            line += f" — failed: {_one_line(job.last_error)}"
        lines.append(line)
    return "\n".join(lines)


def render_events(events: Iterable[EventRecord]) -> str:
    """One line per event: ``seq  time  kind  job  data``."""
    lines = []
    for ev in events:
        data = dumps(ev.data) if ev.data else ""
        lines.append("  ".join(p for p in (f"{ev.seq:>4}", format_time(from_ms(ev.at)), ev.kind,
                                           ev.job_id or "-", data) if p))
    return "\n".join(lines)


def render_list(summaries: Iterable[RunSummary]) -> str:
    """One line per run: id, state, jobs done/total, tokens, created time, goal."""
    lines = []
    for s in summaries:
        done = s.job_counts.get("succeeded", 0)
        lines.append(
            f"{s.run.id}  {label(s.run.state):<10}  {done}/{s.total_jobs} jobs  {counted(s.run.spent_tokens, 'token')}"
            f"  {format_time(from_ms(s.run.created_at))}  {_one_line(s.run.goal, 60)}"
        )
    return "\n".join(lines)
