"""Orchestrator runs as rows: the storage half of harness_loop's DAG orchestrator.

A run is three kinds of row in the memory file (created by harness_loop's migration set,
:data:`MIGRATIONS`): the run itself (goal, state, token budget and spend), one row per job
(its place in the DAG and where its state machine stands), and an append-only event log with a
sequence number per run. The orchestrator owns every rule about *what* happens; this module only
stores and reads, and renders what ``harness-loop runs list|show|events`` prints.

The write primitive is :meth:`RunStore.save`: the run row, any number of job rows and any number
of events in one ``BEGIN IMMEDIATE`` transaction. The orchestrator calls it once per state
transition and acts only after it returns, which is what makes ``kill -9`` survivable: the file
always holds a state the orchestrator had committed to, never half of one.

**Redaction.** A goal, a prompt, a result or an error message carries PII as readily as a memory
entry does, so every text and JSON value the run store writes passes the redactor first: the file's
own (the one a :class:`~harness_mem.MemoryStore` on it uses), unless the caller passes another or
None. Identifiers (run ids, job ids, dependencies, the namespace, lease holders) are pseudonymised
(:meth:`~harness_mem.Redactor.pseudonymise`), so two stay two and a lookup by the raw id finds the
run; everything else is scrubbed. Each run records whether its writes were redacted (``redacted``).
What a resumed run reads back is the redacted text: a job id holding PII comes back as its
pseudonym, so a router attached to the raw id no longer matches it.

:class:`InMemoryRunStore` has the same interface and semantics without a file, for tests and for
measuring what persistence costs.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from harness_mem.db import Connection, connect, driver, redaction_secret, write_transaction
from harness_mem.errors import DuplicateIdError, InvalidInputError, NotFoundError
from harness_mem.migrations import HARNESS_MEM, Migration, MigrationSet
from harness_mem.models import dumps, format_time, from_ms, now_ms
from harness_mem.redaction import Redactor

from .states import JobState, RunState, label

if TYPE_CHECKING:
    from harness_mem import MemoryStore

# harness_loop's tables have their own migration set: SQL files in ``harness_loop/migrations/``
# (inside the package, so the wheel carries them), recorded in ``_migrations_harness_loop``. It comes
# after harness_mem's set, which brings a runs table made by an older version up to the columns
# this set expects.
MIGRATIONS = MigrationSet("harness_loop", resources.files("harness_loop") / "migrations", after=(HARNESS_MEM,))


def migrate(conn: Connection) -> list[Migration]:
    """Apply harness_mem's pending migrations, then harness_loop's; returns the ones this call ran."""
    done = HARNESS_MEM.migrate(conn)
    return done + MIGRATIONS.migrate(conn)


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


# ---- SQLite ------------------------------------------------------------------------------------

_RUN_COLUMNS = (
    "id, namespace, goal, state, max_tokens, spent_tokens, replans, reason, metadata, created_at, updated_at,"
    " redacted"
)
_JOB_COLUMNS = (
    "run_id, job_id, position, prompt, deps, retry, state, attempts, visits, result_text, input_tokens,"
    " output_tokens, spent_tokens, last_error, prior_attempt, feedback, updated_at"
)
_JOB_UPDATE = (
    "UPDATE jobs SET state = ?, attempts = ?, visits = ?, result_text = ?, input_tokens = ?,"
    " output_tokens = ?, spent_tokens = ?, last_error = ?, prior_attempt = ?, feedback = ?, updated_at = ?"
    " WHERE run_id = ? AND job_id = ?"
)
_JOB_INSERT = f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES ({', '.join('?' * 17)})"


# How many scrubbed values a run store remembers, and the longest it remembers.
_REMEMBERED = 1024
_REMEMBERED_CHARS = 4096


class RunStore:
    """Runs, jobs and run events in the memory file, scoped to one namespace.

    Give it a connection from :func:`harness_mem.db.connect` on a file migrated by
    :func:`migrate`, or use :meth:`open`, which connects, migrates both
    harness_mem's and harness_loop's sets, and owns the connection, or :meth:`on`, which shares a
    memory store's connection and redactor.

    :param redactor: what every written text passes: ``"default"`` is the file's own redactor
        (keyed by the file's secret, like the memory store's); None stores text as given, and
        each run written so records ``redacted = 0``.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        namespace: str = "default",
        redactor: Redactor | Literal["default"] | None = "default",
    ) -> None:
        self._conn = conn
        self._redactor: Redactor | None = (
            Redactor.default(secret=redaction_secret(conn)) if redactor == "default" else redactor
        )
        self._namespace = self._key(namespace)
        self._owns_connection = False
        self._scrubbed: dict[str, str] = {}

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        namespace: str = "default",
        redactor: Redactor | Literal["default"] | None = "default",
    ) -> RunStore:
        """Open the file at ``path`` and apply both migration sets; :meth:`close` closes it."""
        conn = connect(path).conn
        try:
            migrate(conn)
            store = cls(conn, namespace=namespace, redactor=redactor)
        except BaseException:
            conn.close()
            raise
        store._owns_connection = True
        return store

    @classmethod
    def on(cls, memory: MemoryStore) -> RunStore:
        """The runs of ``memory``'s file and namespace, on its connection and with its redactor
        (None when it was opened with redaction off); applies harness_loop's migrations."""
        MIGRATIONS.migrate(memory.db.conn)
        return cls(memory.db.conn, namespace=memory.namespace, redactor=memory.redactor)

    @property
    def namespace(self) -> str:
        """The namespace as stored (its pseudonym when the name holds PII)."""
        return self._namespace

    @property
    def redactor(self) -> Redactor | None:
        return self._redactor

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

    def close(self) -> None:
        if self._owns_connection:
            self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes

    def create(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        """Insert a new run with its jobs and first events in one transaction."""
        _check_records(run, jobs)
        now = now_ms()
        conn = self._conn
        try:
            with write_transaction(conn):
                conn.execute(
                    f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (self._key(run.id), self._namespace, self._text(run.goal), run.state, run.max_tokens,
                     run.spent_tokens, run.replans, self._text(run.reason), self._json(run.metadata), now, now,
                     int(self._redactor is not None)),
                )
                conn.executemany(_JOB_INSERT, [self._job_row(job, now) for job in jobs])
                self._append(run.id, events, now)
        except driver().IntegrityError as exc:
            if "runs.id" in str(exc):
                raise DuplicateIdError(f"a run with id {run.id!r} already exists — pick another id") from None
            raise InvalidInputError(f"run {run.id!r} cannot be stored: {exc}") from None

    def save(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        """Update the run row, upsert ``jobs`` and append ``events``, all in one transaction.

        A job row's ``prompt``, ``deps``, ``retry`` and ``position`` are written when it is first
        inserted and never changed afterwards.
        """
        _check_records(run, jobs)
        now = now_ms()
        conn = self._conn
        run_id = self._key(run.id)
        with write_transaction(conn):
            updated = conn.execute(
                "UPDATE runs SET state = ?, max_tokens = ?, spent_tokens = ?, replans = ?, reason = ?,"
                " metadata = ?, updated_at = ?, redacted = CASE WHEN ? THEN redacted ELSE 0 END"
                " WHERE id = ? AND namespace = ?",
                (run.state, run.max_tokens, run.spent_tokens, run.replans, self._text(run.reason),
                 self._json(run.metadata), now, int(self._redactor is not None), run_id, self._namespace),
            ).rowcount
            if not updated:
                raise NotFoundError(f"no run {run.id!r} — create it first")
            for job in jobs:
                changed = conn.execute(
                    _JOB_UPDATE,
                    (job.state, job.attempts, job.visits, self._text(job.result_text), job.input_tokens,
                     job.output_tokens, job.spent_tokens, self._text(job.last_error),
                     self._text(job.prior_attempt), self._text(job.feedback), now, run_id, self._key(job.job_id)),
                ).rowcount
                if not changed:
                    conn.execute(_JOB_INSERT, self._job_row(job, now))
            self._append(run.id, events, now)

    def _append(self, run_id: str, events: Sequence[NewEvent], now: int) -> None:
        if not events:
            return
        run_id = self._key(run_id)
        # Safe under BEGIN IMMEDIATE: no other writer can take the same seq in between.
        (last,) = self._conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = ?", (run_id,)
        ).fetchone()
        self._conn.executemany(
            "INSERT INTO run_events (run_id, seq, at, kind, job_id, data) VALUES (?, ?, ?, ?, ?, ?)",
            [(run_id, last + i, now, self._text(ev.kind),
              None if ev.job_id is None else self._key(ev.job_id), self._json(ev.data))
             for i, ev in enumerate(events, 1)],
        )

    def claim(self, run_id: str, owner: str, *, ttl_ms: int = LEASE_MS) -> str | None:
        """Take the run's lease for ``owner`` (or renew it); None when taken, else who holds it."""
        now = now_ms()
        key, owner = self._key(run_id), self._key(owner)
        with write_transaction(self._conn):
            row = self._conn.execute(
                "SELECT lease_owner, lease_until FROM runs WHERE id = ? AND namespace = ?", (key, self._namespace)
            ).fetchone()
            if row is None:
                raise NotFoundError(_not_found(run_id))
            holder, until = row
            if holder != owner and not _lease_is_free(holder, until, now):
                return str(holder)
            self._conn.execute(
                "UPDATE runs SET lease_owner = ?, lease_until = ? WHERE id = ? AND namespace = ?",
                (owner, now + ttl_ms, key, self._namespace),
            )
        return None

    def release(self, run_id: str, owner: str) -> None:
        """Give the lease up, if ``owner`` holds it."""
        with write_transaction(self._conn):
            self._conn.execute(
                "UPDATE runs SET lease_owner = NULL, lease_until = NULL"
                " WHERE id = ? AND namespace = ? AND lease_owner = ?",
                (self._key(run_id), self._namespace, self._key(owner)),
            )

    def prune_events(self, older_than: int) -> int:
        """Delete the events logged before ``older_than`` (ms since the epoch) by finished runs
        (completed, failed or cancelled), in every namespace: pruning is done for the whole file,
        as purging expired entries is. A live run's log is never touched, and a run's last event
        stays (it says how the run ended, and its number is where the next one continues). The
        run and job rows stay. Returns how many events went.
        """
        finished = tuple(sorted(TERMINAL_RUN_STATES))
        with write_transaction(self._conn):
            return int(self._conn.execute(
                "DELETE FROM run_events WHERE at < ? AND run_id IN"
                f" (SELECT id FROM runs WHERE state IN ({', '.join('?' * len(finished))}))"
                " AND seq < (SELECT max(seq) FROM run_events AS last WHERE last.run_id = run_events.run_id)",
                (older_than, *finished),
            ).rowcount)

    # -- reads

    def load(self, run_id: str) -> StoredRun:
        """The run and its jobs in insertion order."""
        key = self._key(run_id)
        row = self._conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ? AND namespace = ?", (key, self._namespace)
        ).fetchone()
        if row is None:
            raise NotFoundError(_not_found(run_id))
        jobs = self._conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE run_id = ? ORDER BY position", (key,)
        ).fetchall()
        return StoredRun(_run_from_row(row), tuple(_job_from_row(job) for job in jobs))

    def list_runs(self, *, limit: int | None = None, state: str | None = None) -> list[RunSummary]:
        """Runs in this namespace, newest first, with their job counts per state."""
        if state is not None and state not in RUN_STATES:
            raise InvalidInputError(f"unknown run state {state!r} — use one of: {', '.join(RUN_STATES)}")
        sql = f"SELECT {_RUN_COLUMNS} FROM runs WHERE namespace = ?"
        params: list[Any] = [self._namespace]
        if state is not None:
            sql += " AND state = ?"
            params.append(state)
        sql += " ORDER BY created_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(limit, 0))
        runs = [_run_from_row(row) for row in self._conn.execute(sql, params).fetchall()]
        counts: dict[str, dict[str, int]] = {run.id: {} for run in runs}
        if runs:
            marks = ", ".join("?" * len(runs))
            for run_id, job_state, n in self._conn.execute(
                f"SELECT run_id, state, COUNT(*) FROM jobs WHERE run_id IN ({marks}) GROUP BY run_id, state",
                [run.id for run in runs],
            ).fetchall():
                counts[run_id][job_state] = n
        return [RunSummary(run, counts[run.id]) for run in runs]

    def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[EventRecord]:
        """The run's events with ``seq > after``, oldest first."""
        key = self._key(run_id)
        if not self._conn.execute(
            "SELECT 1 FROM runs WHERE id = ? AND namespace = ?", (key, self._namespace)
        ).fetchone():
            raise NotFoundError(_not_found(run_id))
        sql = "SELECT run_id, seq, at, kind, job_id, data FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq"
        params: list[Any] = [key, after]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(limit, 0))
        return [
            EventRecord(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]))
            for r in self._conn.execute(sql, params).fetchall()
        ]


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
            f"{s.run.id}  {label(s.run.state):<10}  {done}/{s.total_jobs} jobs  {s.run.spent_tokens} tokens"
            f"  {format_time(from_ms(s.run.created_at))}  {_one_line(s.run.goal, 60)}"
        )
    return "\n".join(lines)
