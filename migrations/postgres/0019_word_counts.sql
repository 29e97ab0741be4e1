-- How many entries of each keyword lane hold each word, kept as the entries change, as FTS5 keeps
-- its doclists' sizes. A semantic recall weighs its hits' coverage by how rare the question's words
-- are: each new word was counted by reading every entry holding it (23 ms for a word of 1,000 or
-- more entries at 200,000, twice the raw vector query for a question of common words). Now it is
-- a row a namespace.
--
-- One row a (lane, word, namespace), the word a lexeme of `tokens` as stored: readable where the
-- namespace's entries are, so a confined role sums its namespaces' counts alone and learns no word
-- of another's. Like the entries' text (0011) the words stay out of the planner's statistics, and a
-- count that reaches zero goes: a word leaves with the last entry holding it (forget, purge,
-- rekey). Triggers keep the counts as the owner (SECURITY DEFINER), a statement's rows at once.
CREATE TABLE word_counts (
    derived BOOLEAN NOT NULL,
    word TEXT NOT NULL,
    namespace TEXT NOT NULL,
    entries BIGINT NOT NULL,
    PRIMARY KEY (derived, word, namespace)
) WITH (fillfactor = 50);  -- room on each page: a count's update stays there (a HOT update, no index entry)
ALTER TABLE word_counts ALTER COLUMN word SET STATISTICS 0;
ALTER TABLE word_counts ALTER COLUMN namespace SET STATISTICS 0;

ALTER TABLE word_counts ENABLE ROW LEVEL SECURITY;
CREATE POLICY word_counts_read ON word_counts FOR SELECT
    USING ((SELECT readable_namespaces()) IS NULL OR namespace = ANY ((SELECT readable_namespaces())::TEXT[]));

DO $$
DECLARE
    granted TEXT;
BEGIN
    FOR granted IN SELECT role FROM confined_roles WHERE role IN (SELECT rolname FROM pg_roles) LOOP
        EXECUTE format('GRANT SELECT ON word_counts TO %I', granted);
    END LOOP;
END $$;

-- An entry's words: its tokens' lexemes, each once (its lane: derived when consolidation wrote it).
CREATE FUNCTION entry_words(tokens TSVECTOR) RETURNS SETOF TEXT
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT unnest(tsvector_to_array(tokens)) $$;

CREATE FUNCTION recount_words() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    DELETE FROM word_counts;
    INSERT INTO word_counts (derived, word, namespace, entries)
    SELECT source IS NOT DISTINCT FROM 'consolidation', word, namespace, count(*)
    FROM entries CROSS JOIN LATERAL entry_words(tokens) AS word WHERE tokens IS NOT NULL
    GROUP BY 1, 2, 3;
END $$;

REVOKE EXECUTE ON FUNCTION recount_words() FROM PUBLIC;  -- the owner's: it reads every entry

SELECT recount_words();

-- An entry's words come with it, and go with it; a change of its tokens, lane or namespace takes its
-- old words off and adds its new ones (an update that changes none of them changes no count).
CREATE FUNCTION count_added_words() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO word_counts (derived, word, namespace, entries)
    SELECT source IS NOT DISTINCT FROM 'consolidation', word, namespace, count(*)
    FROM added CROSS JOIN LATERAL entry_words(tokens) AS word WHERE tokens IS NOT NULL
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3  -- in the index's order: a 1,000-row batch's counts 20% sooner
    ON CONFLICT (derived, word, namespace) DO UPDATE SET entries = word_counts.entries + excluded.entries;
    RETURN NULL;
END $$;

CREATE FUNCTION count_removed_words() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO word_counts (derived, word, namespace, entries)
    SELECT source IS NOT DISTINCT FROM 'consolidation', word, namespace, -count(*)
    FROM removed CROSS JOIN LATERAL entry_words(tokens) AS word WHERE tokens IS NOT NULL
    GROUP BY 1, 2, 3
    ON CONFLICT (derived, word, namespace) DO UPDATE SET entries = word_counts.entries + excluded.entries;
    DELETE FROM word_counts WHERE entries = 0 AND (derived, word, namespace) IN (
        SELECT source IS NOT DISTINCT FROM 'consolidation', word, namespace
        FROM removed CROSS JOIN LATERAL entry_words(tokens) AS word WHERE tokens IS NOT NULL);
    RETURN NULL;
END $$;

CREATE FUNCTION count_changed_words() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO word_counts (derived, word, namespace, entries)
    SELECT derived, word, namespace, sum(n) FROM (
        SELECT r.source IS NOT DISTINCT FROM 'consolidation' AS derived, r.namespace, r.tokens, -1 AS n
        FROM removed r JOIN added a ON a.pk = r.pk
        WHERE r.tokens IS NOT NULL AND (r.tokens, r.source, r.namespace) IS DISTINCT FROM (a.tokens, a.source, a.namespace)
        UNION ALL
        SELECT a.source IS NOT DISTINCT FROM 'consolidation', a.namespace, a.tokens, 1
        FROM added a JOIN removed r ON r.pk = a.pk
        WHERE a.tokens IS NOT NULL AND (r.tokens, r.source, r.namespace) IS DISTINCT FROM (a.tokens, a.source, a.namespace)
    ) AS changed CROSS JOIN LATERAL entry_words(changed.tokens) AS word
    GROUP BY 1, 2, 3 HAVING sum(n) <> 0
    ON CONFLICT (derived, word, namespace) DO UPDATE SET entries = word_counts.entries + excluded.entries;
    DELETE FROM word_counts WHERE entries = 0 AND (derived, word, namespace) IN (
        SELECT r.source IS NOT DISTINCT FROM 'consolidation', word, r.namespace
        FROM removed r JOIN added a ON a.pk = r.pk CROSS JOIN LATERAL entry_words(r.tokens) AS word
        WHERE r.tokens IS NOT NULL AND (r.tokens, r.source, r.namespace) IS DISTINCT FROM (a.tokens, a.source, a.namespace));
    RETURN NULL;
END $$;

CREATE TRIGGER entries_added_words AFTER INSERT ON entries
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION count_added_words();
CREATE TRIGGER entries_removed_words AFTER DELETE ON entries
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION count_removed_words();
CREATE TRIGGER entries_changed_words AFTER UPDATE ON entries
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION count_changed_words();
