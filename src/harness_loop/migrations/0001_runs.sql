-- Orchestrator runs: one row per run, one row per job, and an append-only event log per run.
-- harness_loop's orchestrator writes them, one transaction per state transition.
--
-- Files made before this set existed already hold these tables (harness_mem's retired migrations
-- 0002_runs and 0006_run_leases created them, with the same columns in the same order), so every
-- statement here is IF NOT EXISTS: on such a file the migration changes nothing and only records that
-- the set now owns them. harness_mem's set always migrates first, so their lease columns are there.

-- States are stored by their snake_case names (`dead_lettered`); the display labels are hyphenated
-- (`dead-lettered`). harness_loop.states defines both.
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL DEFAULT 'default',
    goal TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN (
        'created', 'planning', 'executing', 'waiting', 'aggregating', 'completed', 'failed', 'cancelled'
    )),
    max_tokens INTEGER CHECK (max_tokens IS NULL OR max_tokens >= 0),   -- NULL = no budget
    spent_tokens INTEGER NOT NULL DEFAULT 0 CHECK (spent_tokens >= 0),
    replans INTEGER NOT NULL DEFAULT 0 CHECK (replans >= 0),             -- planner calls so far
    reason TEXT,                                                         -- why it failed or stopped
    metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    created_at INTEGER NOT NULL,   -- milliseconds since the Unix epoch, UTC
    updated_at INTEGER NOT NULL,
    -- Which process is executing the run, so that two never execute (or resume) it at once.
    -- `lease_owner` is "host:pid:token"; the owner renews `lease_until` (ms) while it runs and clears
    -- both when it stops. A lease past `lease_until`, or held by a process of this host that no longer
    -- exists, may be taken over.
    lease_owner TEXT,
    lease_until INTEGER
);

CREATE INDEX IF NOT EXISTS runs_by_time ON runs (namespace, created_at);

-- `prompt`, `deps`, `retry` and `position` are fixed once the row exists; the rest moves with the
-- job's state machine. `position` is the insertion order, which is also the launch order among
-- ready jobs. A NULL `result_text` means "no result" (distinct from an empty answer).
CREATE TABLE IF NOT EXISTS jobs (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    job_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    prompt TEXT NOT NULL,
    deps TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(deps)),
    retry TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(retry)),
    state TEXT NOT NULL CHECK (state IN (
        'pending', 'queued', 'running', 'succeeded', 'failed', 'retrying', 'dead_lettered', 'cancelled'
    )),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    visits INTEGER NOT NULL DEFAULT 0 CHECK (visits >= 0),
    result_text TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0,    -- of the current result
    output_tokens INTEGER NOT NULL DEFAULT 0,
    spent_tokens INTEGER NOT NULL DEFAULT 0,    -- every attempt of every visit, failed ones included
    last_error TEXT,
    prior_attempt TEXT,
    feedback TEXT,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, job_id),
    UNIQUE (run_id, position)
);

-- The event log: append-only, `seq` strictly increasing per run (1, 2, 3, …).
CREATE TABLE IF NOT EXISTS run_events (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL CHECK (seq > 0),
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    job_id TEXT,
    data TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(data)),
    PRIMARY KEY (run_id, seq)
);

CREATE TRIGGER IF NOT EXISTS run_events_seq_increases BEFORE INSERT ON run_events
WHEN NEW.seq <= COALESCE((SELECT MAX(seq) FROM run_events WHERE run_id = NEW.run_id), 0)
BEGIN
    SELECT RAISE(ABORT, 'run_events is append-only: seq must increase');
END;

CREATE TRIGGER IF NOT EXISTS run_events_no_update BEFORE UPDATE ON run_events
BEGIN
    SELECT RAISE(ABORT, 'run_events is append-only');
END;

-- Deleting a whole run (its row first, the log by cascade) stays possible; editing a live log is not.
CREATE TRIGGER IF NOT EXISTS run_events_no_delete BEFORE DELETE ON run_events
WHEN EXISTS (SELECT 1 FROM runs WHERE id = OLD.run_id)
BEGIN
    SELECT RAISE(ABORT, 'run_events is append-only');
END;
