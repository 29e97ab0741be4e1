-- Spaces a team shares: a role is granted namespaces one by one (`harness-mem db grant ROLE NS
-- [--read-only]`), each to read and write or to read alone, and `db revoke` takes one back.
--
-- Before, a role had one namespace and granting another replaced it. Now:
--   * namespace_roles holds one row a grant (role, namespace, read_only);
--   * confined_roles lists every role ever granted: revoking its last namespace leaves it confined
--     to none (it reads nothing), never unconfined;
--   * every policy reads a namespace where the role was granted it, and writes (insert, update,
--     delete) one it may write. An update never moves a row out of a namespace the role may only
--     read: its old row must pass the write policy too.
-- The granted namespaces are read once a statement: `(SELECT f())` is an init plan, not a call a row.

CREATE TABLE confined_roles (role TEXT PRIMARY KEY);
INSERT INTO confined_roles (role) SELECT role FROM namespace_roles;

ALTER TABLE namespace_roles DROP CONSTRAINT namespace_roles_pkey;
ALTER TABLE namespace_roles ADD COLUMN read_only BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE namespace_roles ADD PRIMARY KEY (role, namespace);

-- The namespaces the connecting role may read (NULL: not confined). SECURITY DEFINER: a confined
-- role needs no right on the grants to be checked against them (and cannot change them).
CREATE FUNCTION readable_namespaces() RETURNS TEXT[]
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT CASE WHEN EXISTS (SELECT 1 FROM confined_roles WHERE role = session_user)
                      THEN ARRAY(SELECT namespace FROM namespace_roles WHERE role = session_user ORDER BY namespace)
                 END $$;

-- Those of them it may also write (NULL: not confined).
CREATE FUNCTION writable_namespaces() RETURNS TEXT[]
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT CASE WHEN EXISTS (SELECT 1 FROM confined_roles WHERE role = session_user)
                      THEN ARRAY(SELECT namespace FROM namespace_roles WHERE role = session_user AND NOT read_only
                                 ORDER BY namespace)
                 END $$;

-- Each table holding a namespace's rows: read where granted, written where granted to write.
DO $$
DECLARE
    found TEXT;
    readable CONSTANT TEXT := '((SELECT readable_namespaces()) IS NULL OR namespace = ANY ((SELECT readable_namespaces())::TEXT[]))';
    writable CONSTANT TEXT := '((SELECT writable_namespaces()) IS NULL OR namespace = ANY ((SELECT writable_namespaces())::TEXT[]))';
BEGIN
    FOR found IN SELECT unnest(ARRAY['entries', 'episodes', 'skills', 'consolidations', 'derivations', 'identities'])
    LOOP
        EXECUTE format('DROP POLICY %I ON %I', found || '_of_the_role', found);
        EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING %s', found || '_read', found, readable);
        EXECUTE format('CREATE POLICY %I ON %I FOR INSERT WITH CHECK %s', found || '_added', found, writable);
        EXECUTE format('CREATE POLICY %I ON %I FOR UPDATE USING %s WITH CHECK %s', found || '_changed', found,
                       writable, writable);
        EXECUTE format('CREATE POLICY %I ON %I FOR DELETE USING %s', found || '_removed', found, writable);
    END LOOP;
END $$;

-- Rows that belong to another (a skill's revisions and sources, an entry's vectors and passages):
-- read with it, written only where it may be written.
CREATE FUNCTION namespace_writable(name TEXT) RETURNS BOOLEAN
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT writable_namespaces() IS NULL OR name = ANY (writable_namespaces()) $$;

DROP POLICY skill_revisions_of_the_role ON skill_revisions;
CREATE POLICY skill_revisions_read ON skill_revisions FOR SELECT
    USING (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk));
CREATE POLICY skill_revisions_written ON skill_revisions
    USING (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk AND namespace_writable(s.namespace)))
    WITH CHECK (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk AND namespace_writable(s.namespace)));
DROP POLICY skill_sources_of_the_role ON skill_sources;
CREATE POLICY skill_sources_read ON skill_sources FOR SELECT
    USING (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk));
CREATE POLICY skill_sources_written ON skill_sources
    USING (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk AND namespace_writable(s.namespace)))
    WITH CHECK (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk AND namespace_writable(s.namespace))
                AND EXISTS (SELECT 1 FROM episodes ep WHERE ep.pk = episode_pk));

-- The vectors' tables are made when a model is first bound (the engine gives them these policies).
DO $$
DECLARE
    found TEXT;
BEGIN
    FOR found IN SELECT unnest(ARRAY['entry_vectors', 'entry_passages']) LOOP
        IF to_regclass(found) IS NOT NULL THEN
            EXECUTE format('DROP POLICY IF EXISTS %I ON %I', found || '_of_the_role', found);
            EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING (EXISTS (SELECT 1 FROM entries e WHERE e.pk = %I.pk))',
                           found || '_read', found, found);
            EXECUTE format('CREATE POLICY %I ON %I USING (EXISTS (SELECT 1 FROM entries e WHERE e.pk = %I.pk'
                           ' AND namespace_writable(e.namespace))) WITH CHECK (EXISTS (SELECT 1 FROM entries e'
                           ' WHERE e.pk = %I.pk AND namespace_writable(e.namespace)))',
                           found || '_written', found, found, found);
        END IF;
    END LOOP;
END $$;

-- Each namespace's counts and data version: readable where its entries are (the database keeps them).
DROP POLICY namespace_state_of_the_role ON namespace_state;
CREATE POLICY namespace_state_read ON namespace_state FOR SELECT
    USING ((SELECT readable_namespaces()) IS NULL OR namespace = ANY ((SELECT readable_namespaces())::TEXT[]));

-- Settings stay the owner's to write; a confined role reads the keys it needs.
DROP POLICY settings_read ON settings;
DROP POLICY settings_written_by_the_owner ON settings;
CREATE POLICY settings_read ON settings FOR SELECT
    USING ((SELECT readable_namespaces()) IS NULL OR setting_shown_to_confined(key));
CREATE POLICY settings_written_by_the_owner ON settings FOR ALL
    USING ((SELECT readable_namespaces()) IS NULL) WITH CHECK ((SELECT readable_namespaces()) IS NULL);

-- A write transaction is counted in every namespace the role may write (it can have written any).
CREATE OR REPLACE FUNCTION bump_data_version() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    IF readable_namespaces() IS NULL THEN
        UPDATE settings SET value = (value::bigint + 1)::text WHERE key = 'data.version';
    ELSE
        INSERT INTO namespace_state (namespace, key, value)
        SELECT granted, 'data.version', 1 FROM unnest(writable_namespaces()) AS granted
        ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + 1;
    END IF;
END $$;

-- The migrations' record: read by every role, written by the owner alone (as settings).
ALTER TABLE _migrations ENABLE ROW LEVEL SECURITY;
CREATE POLICY migrations_read ON _migrations FOR SELECT USING (true);
CREATE POLICY migrations_written_by_the_owner ON _migrations FOR ALL
    USING ((SELECT readable_namespaces()) IS NULL) WITH CHECK ((SELECT readable_namespaces()) IS NULL);

DROP FUNCTION confined_namespace();
