-- What the health page and `stats` count, kept as the entries change instead of counted by reading
-- every entry (as SQLite's 0017 does). In namespace_state, beside the keyword counters and under
-- the same row-level security (a confined role reads its namespaces' counts alone): one counter a
-- namespace and group of entries alike in what is counted, keyed 'entries:' and the JSON array
-- [kind, role, redactions, forgotten]. Every row of `entries` is counted, expired ones too: a
-- reader takes off those expired since, through entries_by_expiry. Triggers keep them, as the
-- owner (SECURITY DEFINER), a statement's rows at once, whichever path changed them.

-- A counter's key holds a role, which may be an identity's pseudonym or words a caller chose: like
-- the entries' text (0011) it stays out of the planner's statistics, and a counter that reaches zero
-- goes, so the key leaves the database with the last entry that had it (forget, purge, rekey).
ALTER TABLE namespace_state ALTER COLUMN key SET STATISTICS 0;
SELECT pg_clear_attribute_stats(current_schema()::text, 'namespace_state', 'key', false);

-- The counter an entry belongs to.
CREATE FUNCTION entry_count_key(kind TEXT, role TEXT, redactions TEXT, forgotten BOOLEAN) RETURNS TEXT
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'entries:' || json_build_array(kind, role, redactions, forgotten)::text $$;

INSERT INTO namespace_state (namespace, key, value)
SELECT namespace, entry_count_key(kind, role, redactions, forgotten_at IS NOT NULL), count(*)
FROM entries GROUP BY 1, 2;

CREATE FUNCTION count_added_entries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT namespace, entry_count_key(kind, role, redactions, forgotten_at IS NOT NULL), count(*)
    FROM added GROUP BY 1, 2
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    RETURN NULL;
END $$;

CREATE FUNCTION count_removed_entries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT namespace, entry_count_key(kind, role, redactions, forgotten_at IS NOT NULL), -count(*)
    FROM removed GROUP BY 1, 2
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    DELETE FROM namespace_state WHERE value = 0 AND (namespace, key) IN (
        SELECT namespace, entry_count_key(kind, role, redactions, forgotten_at IS NOT NULL) FROM removed);
    RETURN NULL;
END $$;

-- An update is its old rows taken off and its new ones added; the counters it leaves as they were
-- are not written.
CREATE FUNCTION count_changed_entries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT namespace, key, sum(n) FROM (
        SELECT namespace, entry_count_key(kind, role, redactions, forgotten_at IS NOT NULL) AS key, -1 AS n FROM removed
        UNION ALL
        SELECT namespace, entry_count_key(kind, role, redactions, forgotten_at IS NOT NULL), 1 FROM added
    ) AS change GROUP BY 1, 2 HAVING sum(n) <> 0
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    DELETE FROM namespace_state WHERE value = 0 AND (namespace, key) IN (
        SELECT namespace, entry_count_key(kind, role, redactions, forgotten_at IS NOT NULL) FROM removed);
    RETURN NULL;
END $$;

CREATE TRIGGER entries_added_counts AFTER INSERT ON entries
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION count_added_entries();
CREATE TRIGGER entries_removed_counts AFTER DELETE ON entries
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION count_removed_entries();
CREATE TRIGGER entries_changed_counts AFTER UPDATE ON entries
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION count_changed_entries();
