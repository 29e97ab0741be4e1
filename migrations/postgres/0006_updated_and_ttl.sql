-- When an entry was last written and the time to live it was written with (see SQLite's 0011).
ALTER TABLE entries ADD COLUMN updated_at BIGINT;
ALTER TABLE entries ADD COLUMN ttl_ms BIGINT CHECK (ttl_ms IS NULL OR ttl_ms > 0);
