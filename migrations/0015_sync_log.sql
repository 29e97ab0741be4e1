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
    related_id TEXT,  -- a supersede's new version
    op TEXT NOT NULL,
    operation TEXT,
    origin_chunk TEXT
);
CREATE INDEX sync_ops_by_stamp ON sync_ops (hlc_wall, hlc_tick);
CREATE INDEX sync_ops_by_entry ON sync_ops (namespace, entry_id);
CREATE INDEX sync_ops_by_related ON sync_ops (namespace, related_id) WHERE related_id IS NOT NULL;
-- The forgets an incoming add is checked against.
CREATE INDEX sync_ops_forgets ON sync_ops (namespace, hlc_wall, hlc_tick) WHERE op = 'forget';
-- The chunks a device must rewrite without forgotten words: found without reading the log.
CREATE INDEX sync_ops_forgotten_adds ON sync_ops (device, origin_chunk) WHERE op = 'add' AND operation IS NULL;

-- Every entry a forget named, with the forget's stamp: an add of it stamped before is never applied.
CREATE TABLE sync_forgotten (
    namespace TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    hlc_wall INTEGER NOT NULL,
    hlc_tick INTEGER NOT NULL,
    PRIMARY KEY (namespace, entry_id, hlc_wall, hlc_tick)
);

-- The chunks of other devices this store has read: applied, or quarantined (read, refused, reported).
CREATE TABLE sync_chunks (
    device TEXT NOT NULL,
    chunk TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    PRIMARY KEY (device, chunk)
);
