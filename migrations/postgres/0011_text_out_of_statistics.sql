-- Stored text stays out of the planner's statistics. ANALYZE (autovacuum runs it) copies sampled
-- values into pg_statistic, where a forgotten entry's words would outlive its purge: the columns
-- that hold what was remembered (text, JSON, tokens, and index expressions over them) get no
-- statistics, and those already taken are cleared. Only the structural columns keep theirs.
DO $$
DECLARE
    found RECORD;
BEGIN
    FOR found IN
        SELECT c.relname, a.attname, a.attnum, c.relkind FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = current_schema()::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
          AND a.atttypid IN ('text'::regtype, 'tsvector'::regtype, 'jsonb'::regtype, 'json'::regtype, 'bytea'::regtype)
          AND (c.relkind = 'r' AND a.attname NOT IN ('namespace', 'kind', 'source', 'key', 'name')
               OR c.relkind = 'i' AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid = c.oid
                                                AND i.indkey[a.attnum - 1] = 0))
    LOOP
        IF found.relkind = 'r' THEN
            EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS 0', found.relname, found.attname);
        ELSE
            EXECUTE format('ALTER INDEX %I ALTER COLUMN %s SET STATISTICS 0', found.relname, found.attnum);
        END IF;
        PERFORM pg_clear_attribute_stats(current_schema()::text, found.relname::text, found.attname, false);
    END LOOP;
END $$;
