-- One provenance field for everything derived from turns: `metadata.source_turns`, which forgetting
-- follows. Segments and facts always filled it; an episode consolidated from a run said only how far
-- it went (`metadata.consolidated_from`). Such an episode cites every turn of its session up to its
-- watermark (the `consolidations` row), or, without one, every turn written before it.
UPDATE entries SET metadata = json_set(metadata, '$.source_turns', (
    SELECT json_group_array(id) FROM (
        SELECT t.id FROM entries t
        WHERE t.namespace = entries.namespace AND t.session = entries.session AND t.kind = 'turn'
          AND t.pk <= coalesce((SELECT c.last_pk FROM consolidations c
                                WHERE c.namespace = entries.namespace AND c.session = entries.session), entries.pk)
        ORDER BY t.created_at, t.pk
    )
))
WHERE kind = 'episode' AND session IS NOT NULL
  AND json_type(metadata, '$.consolidated_from') = 'object'
  AND json_type(metadata, '$.source_turns') IS NULL;
