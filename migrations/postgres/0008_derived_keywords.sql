-- What consolidation derives (topic segments, facts: source 'consolidation') has keyword statistics
-- of its own (SQLite's 0013 gives it its own index), so that its words never move the statistics
-- what was said is ranked by: the rows and tokens BM25 reads are counted for each lane apart.
INSERT INTO settings (key, value)
SELECT 'keywords.rows', count(*)::text FROM entries
WHERE tokens IS NOT NULL AND source IS DISTINCT FROM 'consolidation'
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

INSERT INTO settings (key, value)
SELECT 'keywords.tokens', coalesce(sum(token_count), 0)::text FROM entries
WHERE tokens IS NOT NULL AND source IS DISTINCT FROM 'consolidation'
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

INSERT INTO settings (key, value)
SELECT 'keywords.derived.rows', count(*)::text FROM entries
WHERE tokens IS NOT NULL AND source = 'consolidation'
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

INSERT INTO settings (key, value)
SELECT 'keywords.derived.tokens', coalesce(sum(token_count), 0)::text FROM entries
WHERE tokens IS NOT NULL AND source = 'consolidation'
ON CONFLICT (key) DO UPDATE SET value = excluded.value;
