-- Store-wide settings are the owner's; what each namespace's writes change is its own.
--
-- A role confined by `db grant` could write `settings` (no row-level security there): rewriting
-- the store's keys or deleting the keyword counters changed what every other namespace found and
-- forgot. Now:
--   * namespace_state holds, for each namespace, its keyword counters (BM25's statistics, each
--     lane apart) and its data version, under row-level security like the entries. No role writes
--     it directly but the owner: triggers keep the counters as the entries' keyword rows change,
--     and bump_data_version() counts a write, both as the owner (SECURITY DEFINER), for the
--     namespace of the rows the caller could write;
--   * settings is written by the owner alone (a policy, and the confined roles' rights taken back),
--     and a confined role reads only the keys it needs. The in-file secret is one of them only in
--     a store whose pseudonyms are keyed outside it, where it is a salt that tests no guess
--     (see harness_mem.pseudonyms); in an older store it is the pseudonyms' key, and is not shown.
CREATE TABLE namespace_state (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value BIGINT NOT NULL,
    PRIMARY KEY (namespace, key)
);

ALTER TABLE namespace_state ENABLE ROW LEVEL SECURITY;
CREATE POLICY namespace_state_of_the_role ON namespace_state
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());

INSERT INTO namespace_state (namespace, key, value)
SELECT namespace, counter.key, CASE WHEN counter.key LIKE '%.rows' THEN count(*) ELSE coalesce(sum(token_count), 0) END
FROM entries CROSS JOIN (VALUES ('keywords.rows', false), ('keywords.tokens', false),
                                ('keywords.derived.rows', true), ('keywords.derived.tokens', true)) AS counter (key, derived)
WHERE tokens IS NOT NULL AND (source = 'consolidation') = counter.derived
GROUP BY namespace, counter.key;

DELETE FROM settings WHERE key LIKE 'keywords.%';

-- A keyword lane's counters follow its entries' rows. A write adds its rows in one statement, so
-- the rows it adds are counted once a statement; a row changed or deleted (forgotten, reindexed)
-- is counted alone: its old keyword row taken off, its new one added.
CREATE FUNCTION count_added_keywords() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT namespace, lane || part.suffix, CASE part.suffix WHEN '.rows' THEN count(*) ELSE coalesce(sum(token_count), 0) END
    FROM (SELECT namespace, token_count,
                 CASE WHEN source = 'consolidation' THEN 'keywords.derived' ELSE 'keywords' END AS lane
          FROM added WHERE tokens IS NOT NULL) AS indexed
    CROSS JOIN (VALUES ('.rows'), ('.tokens')) AS part (suffix)
    GROUP BY namespace, lane, part.suffix
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    RETURN NULL;
END $$;

CREATE FUNCTION count_changed_keywords() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
DECLARE
    lane TEXT;
BEGIN
    IF OLD.tokens IS NOT NULL THEN
        lane := CASE WHEN OLD.source = 'consolidation' THEN 'keywords.derived' ELSE 'keywords' END;
        INSERT INTO namespace_state (namespace, key, value)
        VALUES (OLD.namespace, lane || '.rows', -1), (OLD.namespace, lane || '.tokens', -coalesce(OLD.token_count, 0))
        ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.tokens IS NOT NULL THEN
        lane := CASE WHEN NEW.source = 'consolidation' THEN 'keywords.derived' ELSE 'keywords' END;
        INSERT INTO namespace_state (namespace, key, value)
        VALUES (NEW.namespace, lane || '.rows', 1), (NEW.namespace, lane || '.tokens', coalesce(NEW.token_count, 0))
        ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER entries_added_keyword_counts AFTER INSERT ON entries
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION count_added_keywords();
CREATE TRIGGER entries_changed_keyword_counts AFTER DELETE OR UPDATE OF tokens, token_count, source, namespace
    ON entries FOR EACH ROW EXECUTE FUNCTION count_changed_keywords();

-- One write transaction more: the owner's in settings, a confined role's in its namespace's row.
CREATE FUNCTION bump_data_version() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    IF confined_namespace() IS NULL THEN
        UPDATE settings SET value = (value::bigint + 1)::text WHERE key = 'data.version';
    ELSE
        INSERT INTO namespace_state (namespace, key, value) VALUES (confined_namespace(), 'data.version', 1)
        ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + 1;
    END IF;
END $$;

-- Whether a confined role may read the setting ``key``. SECURITY DEFINER: it reads settings as
-- their owner, whom no policy filters (a policy may not read its own table as the caller).
CREATE FUNCTION setting_shown_to_confined(setting TEXT) RETURNS BOOLEAN
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT setting IN ('data.version', 'store.keyword_only', 'pseudonyms.keyed', 'identities.key_id',
                             'gc.expired_at', 'gc.purge_pending')
              OR setting LIKE 'embedder.%'
              OR (setting = 'redaction.secret'
                  AND EXISTS (SELECT 1 FROM settings WHERE key = 'pseudonyms.keyed' AND value = 'outside')) $$;

ALTER TABLE settings ENABLE ROW LEVEL SECURITY;
CREATE POLICY settings_read ON settings FOR SELECT
    USING (confined_namespace() IS NULL OR setting_shown_to_confined(key));
CREATE POLICY settings_written_by_the_owner ON settings FOR ALL
    USING (confined_namespace() IS NULL) WITH CHECK (confined_namespace() IS NULL);

-- Roles granted before: settings read-only, their namespace's state readable.
DO $$
DECLARE
    granted TEXT;
BEGIN
    FOR granted IN SELECT role FROM namespace_roles WHERE role IN (SELECT rolname FROM pg_roles) LOOP
        EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON settings FROM %I', granted);
        EXECUTE format('GRANT SELECT ON namespace_state TO %I', granted);
    END LOOP;
END $$;
