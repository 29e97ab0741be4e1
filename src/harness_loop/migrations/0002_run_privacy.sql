-- Runs carry PII as readily as memory does (a goal, a prompt, an error message), so the run store
-- redacts what it writes, and records here whether it did: 1 = every write of this run passed the
-- redactor, 0 = at least one was made with redaction turned off, NULL = written before runs were
-- redacted at all.
ALTER TABLE runs ADD COLUMN redacted INTEGER CHECK (redacted IS NULL OR redacted IN (0, 1));

-- A finished run's old events may now be pruned (`harness-loop runs gc`); a live run's log stays
-- append-only, and deleting a whole run still takes its log with it.
DROP TRIGGER IF EXISTS run_events_no_delete;

CREATE TRIGGER run_events_no_delete BEFORE DELETE ON run_events
WHEN EXISTS (SELECT 1 FROM runs WHERE id = OLD.run_id AND state NOT IN ('completed', 'failed', 'cancelled'))
BEGIN
    SELECT RAISE(ABORT, 'run_events is append-only while its run is live');
END;
