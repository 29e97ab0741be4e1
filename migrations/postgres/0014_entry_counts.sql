-- What the health page and `stats` count, kept as the entries change instead of counted by reading
-- every entry (as SQLite's 0017 does). In namespace_state, beside the keyword counters and under
-- the same row-level security (a confined role reads its namespaces' counts alone), with keys
-- 'entries', 'forgotten', 'kind:<kind>', 'role:<role>', 'unredacted' and 'redacted:<TYPE>' (the sum
-- of an entry's `redactions` counts). Every row of `entries` is counted, expired ones too: a reader
-- takes off those expired since, through entries_by_expiry. Triggers keep them, as the owner
-- (SECURITY DEFINER), in the statement that changed the entries, whichever path changed them.

-- An entry's keys and how much it adds to each.
CREATE FUNCTION entry_count_keys(kind TEXT, role TEXT, redactions TEXT, forgotten BOOLEAN)
    RETURNS TABLE (key TEXT, n BIGINT)
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT 'entries', 1::bigint
    UNION ALL SELECT 'kind:' || kind, 1
    UNION ALL SELECT 'forgotten', 1 WHERE forgotten
    UNION ALL SELECT 'role:' || role, 1 WHERE role IS NOT NULL
    UNION ALL SELECT 'unredacted', 1 WHERE redactions IS NULL
    UNION ALL SELECT 'redacted:' || j.key, trunc(j.value::text::numeric)::bigint
        FROM jsonb_each(CASE WHEN jsonb_typeof(redactions::jsonb) = 'object' THEN redactions::jsonb END) AS j
        WHERE jsonb_typeof(j.value) = 'number'
    $$;

INSERT INTO namespace_state (namespace, key, value)
SELECT e.namespace, k.key, sum(k.n)
FROM entries e CROSS JOIN LATERAL entry_count_keys(e.kind, e.role, e.redactions::text, e.forgotten_at IS NOT NULL) AS k
GROUP BY e.namespace, k.key;

CREATE FUNCTION count_added_entries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT a.namespace, k.key, sum(k.n)
    FROM added a CROSS JOIN LATERAL entry_count_keys(a.kind, a.role, a.redactions::text, a.forgotten_at IS NOT NULL) AS k
    GROUP BY a.namespace, k.key
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    RETURN NULL;
END $$;

CREATE FUNCTION count_removed_entries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT r.namespace, k.key, -sum(k.n)
    FROM removed r CROSS JOIN LATERAL entry_count_keys(r.kind, r.role, r.redactions::text, r.forgotten_at IS NOT NULL) AS k
    GROUP BY r.namespace, k.key
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    RETURN NULL;
END $$;

-- An update is its old rows taken off and its new ones added (a statement's rows at once).
CREATE FUNCTION count_changed_entries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT namespace, key, sum(n) FROM (
        SELECT r.namespace, k.key, -k.n AS n
        FROM removed r CROSS JOIN LATERAL entry_count_keys(r.kind, r.role, r.redactions::text, r.forgotten_at IS NOT NULL) AS k
        UNION ALL
        SELECT a.namespace, k.key, k.n
        FROM added a CROSS JOIN LATERAL entry_count_keys(a.kind, a.role, a.redactions::text, a.forgotten_at IS NOT NULL) AS k
    ) AS change GROUP BY namespace, key HAVING sum(n) <> 0
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    RETURN NULL;
END $$;

CREATE TRIGGER entries_added_counts AFTER INSERT ON entries
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION count_added_entries();
CREATE TRIGGER entries_removed_counts AFTER DELETE ON entries
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION count_removed_entries();
CREATE TRIGGER entries_changed_counts AFTER UPDATE ON entries
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION count_changed_entries();
