-- The sync log (SQLite's 0015_sync_log): every operation this store made or applied, once it syncs.
CREATE TABLE sync_ops (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    op_hash TEXT NOT NULL UNIQUE,
    device TEXT NOT NULL,
    hlc_wall BIGINT NOT NULL,
    hlc_tick BIGINT NOT NULL,
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
-- Text out of the planner's samples, as for the entries (0011).
ALTER TABLE sync_ops ALTER COLUMN operation SET STATISTICS 0;

-- Every entry a forget named, with the forget's stamp: an add of it stamped before is never applied.
CREATE TABLE sync_forgotten (
    namespace TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    hlc_wall BIGINT NOT NULL,
    hlc_tick BIGINT NOT NULL,
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

-- Namespaces enforced by the database, as for the other tables.
ALTER TABLE sync_ops ENABLE ROW LEVEL SECURITY;
CREATE POLICY sync_ops_of_the_role ON sync_ops
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());
-- Which chunks were read is the owner's to keep; what was forgotten, each namespace's own.
ALTER TABLE sync_chunks ENABLE ROW LEVEL SECURITY;
CREATE POLICY sync_chunks_of_the_owner ON sync_chunks
    USING (confined_namespace() IS NULL) WITH CHECK (confined_namespace() IS NULL);
ALTER TABLE sync_forgotten ENABLE ROW LEVEL SECURITY;
CREATE POLICY sync_forgotten_of_the_role ON sync_forgotten
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());

-- A confined role's writes are logged too: it reads the device id (the owner sets it).
CREATE OR REPLACE FUNCTION setting_shown_to_confined(setting TEXT) RETURNS BOOLEAN
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT setting IN ('data.version', 'store.keyword_only', 'pseudonyms.keyed', 'identities.key_id',
                             'gc.expired_at', 'gc.purge_pending', 'sync.device')
              OR setting LIKE 'embedder.%'
              OR (setting = 'redaction.secret'
                  AND EXISTS (SELECT 1 FROM settings WHERE key = 'pseudonyms.keyed' AND value = 'outside')) $$;
