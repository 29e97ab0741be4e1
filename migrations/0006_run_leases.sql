-- Which process is executing a run, so that two never execute (or resume) the same one at once.
-- `lease_owner` is "host:pid:token"; the owner renews `lease_until` (ms) while it runs and clears
-- both when it stops. A lease past `lease_until`, or held by a process of this host that no longer
-- exists, may be taken over.
ALTER TABLE runs ADD COLUMN lease_owner TEXT;
ALTER TABLE runs ADD COLUMN lease_until INTEGER;
