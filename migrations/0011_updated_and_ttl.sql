-- When an entry was last written (ms since the epoch; NULL in rows from before: their created_at),
-- and the time to live it was written with (ms; NULL: none), which a read that asks renews
-- (`refresh_ttl`): what framework stores (LangGraph's) keep for each item.
ALTER TABLE entries ADD COLUMN updated_at INTEGER;
ALTER TABLE entries ADD COLUMN ttl_ms INTEGER CHECK (ttl_ms IS NULL OR ttl_ms > 0);
