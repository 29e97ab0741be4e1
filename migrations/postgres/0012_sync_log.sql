-- The sync log (SQLite's 0015_sync_log): every operation this store made or applied, once it syncs.
CREATE TABLE sync_ops (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    op_hash TEXT NOT NULL UNIQUE,
    device TEXT NOT NULL,
    hlc_wall BIGINT NOT NULL,
    hlc_tick BIGINT NOT NULL,
    namespace TEXT NOT NULL,
    entry_id TEXT,
    op TEXT NOT NULL,
    operation TEXT,
    origin_chunk TEXT
);
CREATE INDEX sync_ops_by_stamp ON sync_ops (hlc_wall, hlc_tick);
CREATE INDEX sync_ops_by_entry ON sync_ops (namespace, entry_id);
-- Text out of the planner's samples, as for the entries (0011).
ALTER TABLE sync_ops ALTER COLUMN operation SET STATISTICS 0;

CREATE TABLE sync_peers (
    device TEXT PRIMARY KEY,
    manifest_seq BIGINT NOT NULL DEFAULT 0,
    chunks_applied BIGINT NOT NULL DEFAULT 0,
    last_seen BIGINT
);

-- Namespaces enforced by the database, as for the other tables.
ALTER TABLE sync_ops ENABLE ROW LEVEL SECURITY;
CREATE POLICY sync_ops_of_the_role ON sync_ops
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());
-- Which devices were read is the owner's to keep.
ALTER TABLE sync_peers ENABLE ROW LEVEL SECURITY;
CREATE POLICY sync_peers_of_the_owner ON sync_peers
    USING (confined_namespace() IS NULL) WITH CHECK (confined_namespace() IS NULL);

-- A confined role's writes are logged too: it reads the device id (the owner sets it).
CREATE OR REPLACE FUNCTION setting_shown_to_confined(setting TEXT) RETURNS BOOLEAN
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT setting IN ('data.version', 'store.keyword_only', 'pseudonyms.keyed', 'identities.key_id',
                             'gc.expired_at', 'gc.purge_pending', 'sync.device')
              OR setting LIKE 'embedder.%'
              OR (setting = 'redaction.secret'
                  AND EXISTS (SELECT 1 FROM settings WHERE key = 'pseudonyms.keyed' AND value = 'outside')) $$;
