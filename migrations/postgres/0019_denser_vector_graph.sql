-- The HNSW graph over entry_vectors is built with ef_construction 128 (pgvector's default is 64): at
-- 200,000 entries the default graph kept about .03 of each question's exact ten nearest out of a
-- search's reach however wide it walked (hnsw.ef_search 1000 found .969 of them), and recall ranked
-- unlike SQLite (bench/bench_exact_neighbours.py). entry_vectors is made when a model is first
-- bound, not by a migration, its index with the engine's HNSW_OPTIONS (the same options as here);
-- a store that has the index already gets it built again here (unless it has these options), which
-- takes minutes at 200,000 entries. The new graph is built beside the old one, which recall keeps
-- reading meanwhile (building an index stops writes, not reads), and takes its name at the end.
DO $$
BEGIN
    IF to_regclass('entry_vectors_hnsw') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_class
            WHERE oid = to_regclass('entry_vectors_hnsw') AND reloptions @> ARRAY['m=16', 'ef_construction=128']) THEN
        DROP INDEX IF EXISTS entry_vectors_hnsw_denser;
        CREATE INDEX entry_vectors_hnsw_denser ON entry_vectors USING hnsw (embedding halfvec_cosine_ops)
            WITH (m = 16, ef_construction = 128);
        DROP INDEX entry_vectors_hnsw;
        ALTER INDEX entry_vectors_hnsw_denser RENAME TO entry_vectors_hnsw;
    END IF;
END $$;
