-- The sync log (harness_mem.sync): every operation this store made or applied, once it syncs.
-- `operation` is the canonical JSON; NULL once the entry an `add` wrote is forgotten (its hash stays,
-- so a replay of it is recognised). `seq` is the order this store logged them in.
CREATE TABLE sync_ops (
    seq INTEGER PRIMARY KEY,
    op_hash TEXT NOT NULL UNIQUE,
    device TEXT NOT NULL,
    hlc_wall INTEGER NOT NULL,
    hlc_tick INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    entry_id TEXT,
    op TEXT NOT NULL,
    operation TEXT,
    origin_chunk TEXT
);
CREATE INDEX sync_ops_by_stamp ON sync_ops (hlc_wall, hlc_tick);
CREATE INDEX sync_ops_by_entry ON sync_ops (namespace, entry_id);

-- How far this store has read each other device's chunks.
CREATE TABLE sync_peers (
    device TEXT PRIMARY KEY,
    manifest_seq INTEGER NOT NULL DEFAULT 0,
    chunks_applied INTEGER NOT NULL DEFAULT 0,
    last_seen INTEGER
);
