-- One provenance field for everything derived from turns: `metadata.source_turns` (SQLite's 0014).
-- An episode consolidated from a run cites every turn of its session up to its watermark (the
-- `consolidations` row), or, without one, every turn written before it.
UPDATE entries e SET metadata = jsonb_set(e.metadata::jsonb, '{source_turns}', coalesce((
    SELECT jsonb_agg(t.id ORDER BY t.created_at, t.pk) FROM entries t
    WHERE t.namespace = e.namespace AND t.session = e.session AND t.kind = 'turn'
      AND t.pk <= coalesce((SELECT c.last_pk FROM consolidations c
                            WHERE c.namespace = e.namespace AND c.session = e.session), e.pk)
), '[]'::jsonb))::text
WHERE e.kind = 'episode' AND e.session IS NOT NULL
  AND jsonb_typeof(e.metadata::jsonb -> 'consolidated_from') = 'object'
  AND NOT (e.metadata::jsonb ? 'source_turns');
