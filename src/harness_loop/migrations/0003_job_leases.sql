-- Job leases: workers in several processes drain one run (harness_loop.workers), each job claimed by
-- one of them at a time. `lease_owner` is the worker ("host:pid:token"); it renews `lease_until` (ms)
-- while the job runs, and a job whose lease lapsed (its worker died or stalled) may be claimed by
-- another. On a job waiting out its retry backoff, with no owner, `lease_until` is when it may run
-- again. The orchestrator executing a run in one process holds the run's lease instead, never these.
ALTER TABLE jobs ADD COLUMN lease_owner TEXT;

ALTER TABLE jobs ADD COLUMN lease_until INTEGER;
