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
-- The forgets an incoming add is checked against.
CREATE INDEX sync_ops_forgets ON sync_ops (namespace, hlc_wall, hlc_tick) WHERE op = 'forget';
-- The chunks a device must rewrite without forgotten words: found without reading the log.
CREATE INDEX sync_ops_forgotten_adds ON sync_ops (device, origin_chunk) WHERE op = 'add' AND operation IS NULL;
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

-- Namespaces enforced by the database, as for the other tables (0012): read where granted, written
-- where granted to write.
DO $$
DECLARE
    found TEXT;
    readable CONSTANT TEXT := '((SELECT readable_namespaces()) IS NULL OR namespace = ANY ((SELECT readable_namespaces())::TEXT[]))';
    writable CONSTANT TEXT := '((SELECT writable_namespaces()) IS NULL OR namespace = ANY ((SELECT writable_namespaces())::TEXT[]))';
BEGIN
    FOR found IN SELECT unnest(ARRAY['sync_ops', 'sync_forgotten'])
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', found);
        EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING %s', found || '_read', found, readable);
        EXECUTE format('CREATE POLICY %I ON %I FOR INSERT WITH CHECK %s', found || '_added', found, writable);
        EXECUTE format('CREATE POLICY %I ON %I FOR UPDATE USING %s WITH CHECK %s', found || '_changed', found,
                       writable, writable);
        EXECUTE format('CREATE POLICY %I ON %I FOR DELETE USING %s', found || '_removed', found, writable);
    END LOOP;
END $$;
-- Which chunks were read is the owner's to keep.
ALTER TABLE sync_chunks ENABLE ROW LEVEL SECURITY;
CREATE POLICY sync_chunks_of_the_owner ON sync_chunks
    USING ((SELECT readable_namespaces()) IS NULL) WITH CHECK ((SELECT readable_namespaces()) IS NULL);

-- A confined role's writes are logged too: it reads the device id (the owner sets it).
CREATE OR REPLACE FUNCTION setting_shown_to_confined(setting TEXT) RETURNS BOOLEAN
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT setting IN ('data.version', 'store.keyword_only', 'pseudonyms.keyed', 'identities.key_id',
                             'gc.expired_at', 'gc.purge_pending', 'sync.device')
              OR setting LIKE 'embedder.%'
              OR (setting = 'redaction.secret'
                  AND EXISTS (SELECT 1 FROM settings WHERE key = 'pseudonyms.keyed' AND value = 'outside')) $$;

-- Roles granted before: their writes are logged once the store syncs.
DO $$
DECLARE
    granted TEXT;
BEGIN
    FOR granted IN SELECT DISTINCT role FROM namespace_roles WHERE role IN (SELECT rolname FROM pg_roles) LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON sync_ops, sync_forgotten TO %I', granted);
    END LOOP;
END $$;
