-- Consolidation's derived entries (SQLite's 0010_derivations): one row per session, its watermark
-- and what was written from it.
CREATE TABLE derivations (
    namespace TEXT NOT NULL DEFAULT 'default',
    session TEXT NOT NULL,
    derived_pk BIGINT NOT NULL,
    segments INTEGER NOT NULL DEFAULT 0 CHECK (segments >= 0),
    facts INTEGER NOT NULL DEFAULT 0 CHECK (facts >= 0),
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, session)
);

-- Namespaces enforced by the database, as for the other tables (0003, 0004).
ALTER TABLE derivations ENABLE ROW LEVEL SECURITY;
CREATE POLICY derivations_of_the_role ON derivations
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());

-- The derived entries of a namespace or session, found without a scan (see SQLite's 0010).
CREATE INDEX entries_derived ON entries (namespace, session) WHERE source = 'consolidation';
