-- Orchestrator runs on PostgreSQL: one row per run, one row per job, and an append-only event log
-- per run. The same tables as the SQLite set's (harness_loop/migrations/0001-0003), column for column
-- and in the same order, so the run store's statements are the same on both engines; times are
-- milliseconds since the Unix epoch (UTC) and JSON values are text, as there. Ids compare and sort
-- byte by byte (COLLATE "C"), as SQLite's do.

-- States are stored by their snake_case names (`dead_lettered`); harness_loop.states defines them.
CREATE TABLE runs (
    id TEXT COLLATE "C" PRIMARY KEY,
    namespace TEXT COLLATE "C" NOT NULL DEFAULT 'default',
    goal TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN (
        'created', 'planning', 'executing', 'waiting', 'aggregating', 'completed', 'failed', 'cancelled'
    )),
    max_tokens BIGINT CHECK (max_tokens IS NULL OR max_tokens >= 0),   -- NULL = no budget
    spent_tokens BIGINT NOT NULL DEFAULT 0 CHECK (spent_tokens >= 0),
    replans INTEGER NOT NULL DEFAULT 0 CHECK (replans >= 0),           -- planner calls so far
    reason TEXT,                                                       -- why it failed or stopped
    metadata TEXT NOT NULL DEFAULT '{}' CHECK (metadata::jsonb IS NOT NULL),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    -- The orchestrator executing the run ("host:pid:token") and until when (ms), renewed while it runs.
    lease_owner TEXT,
    lease_until BIGINT,
    -- 1 = every write of this run passed the redactor, 0 = at least one was made with it turned off.
    redacted INTEGER CHECK (redacted IS NULL OR redacted IN (0, 1))
);

CREATE INDEX runs_by_time ON runs (namespace, created_at);

-- `prompt`, `deps`, `retry` and `position` are fixed once the row exists; the rest moves with the
-- job's state machine. `position` is the insertion order, also the launch order among ready jobs.
-- A NULL `result_text` means "no result" (distinct from an empty answer). `lease_owner` and
-- `lease_until` are a worker's lease on the job (see harness_loop.workers), or, on a job waiting out
-- its retry backoff, when it may run again.
CREATE TABLE jobs (
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    job_id TEXT COLLATE "C" NOT NULL,
    position INTEGER NOT NULL,
    prompt TEXT NOT NULL,
    deps TEXT NOT NULL DEFAULT '[]' CHECK (deps::jsonb IS NOT NULL),
    retry TEXT NOT NULL DEFAULT '{}' CHECK (retry::jsonb IS NOT NULL),
    state TEXT NOT NULL CHECK (state IN (
        'pending', 'queued', 'running', 'succeeded', 'failed', 'retrying', 'dead_lettered', 'cancelled'
    )),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    visits INTEGER NOT NULL DEFAULT 0 CHECK (visits >= 0),
    result_text TEXT,
    input_tokens BIGINT NOT NULL DEFAULT 0,    -- of the current result
    output_tokens BIGINT NOT NULL DEFAULT 0,
    spent_tokens BIGINT NOT NULL DEFAULT 0,    -- every attempt of every visit, failed ones included
    last_error TEXT,
    prior_attempt TEXT,
    feedback TEXT,
    updated_at BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until BIGINT,
    PRIMARY KEY (run_id, job_id),
    UNIQUE (run_id, position)
);

-- The event log: append-only, `seq` strictly increasing per run (1, 2, 3, …).
CREATE TABLE run_events (
    run_id TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL CHECK (seq > 0),
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    job_id TEXT COLLATE "C",
    data TEXT NOT NULL DEFAULT '{}' CHECK (data::jsonb IS NOT NULL),
    PRIMARY KEY (run_id, seq)
);

-- The SQLite set's three triggers, by the same names, on one function. A finished run's old events
-- may be pruned (`harness-loop runs gc`), and deleting a whole run takes its log along; editing a
-- log, or deleting from a live run's, is refused.
CREATE FUNCTION run_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.seq <= COALESCE((SELECT max(seq) FROM run_events WHERE run_id = NEW.run_id), 0) THEN
            RAISE EXCEPTION 'run_events is append-only: seq must increase'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'run_events is append-only' USING ERRCODE = 'integrity_constraint_violation';
    ELSIF EXISTS (SELECT 1 FROM runs WHERE id = OLD.run_id AND state NOT IN ('completed', 'failed', 'cancelled')) THEN
        RAISE EXCEPTION 'run_events is append-only while its run is live'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER run_events_seq_increases BEFORE INSERT ON run_events
    FOR EACH ROW EXECUTE FUNCTION run_events_append_only();

CREATE TRIGGER run_events_no_update BEFORE UPDATE ON run_events
    FOR EACH ROW EXECUTE FUNCTION run_events_append_only();

CREATE TRIGGER run_events_no_delete BEFORE DELETE ON run_events
    FOR EACH ROW EXECUTE FUNCTION run_events_append_only();
