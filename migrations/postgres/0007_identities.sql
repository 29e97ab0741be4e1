-- Identity values sealed with a key kept outside the database (SQLite's 0012_identities).
CREATE TABLE identities (
    namespace TEXT NOT NULL,
    stored TEXT NOT NULL,
    key_id TEXT NOT NULL,
    sealed BYTEA NOT NULL,
    PRIMARY KEY (namespace, stored)
);

-- Namespaces enforced by the database, as for the other tables (0003, 0004).
ALTER TABLE identities ENABLE ROW LEVEL SECURITY;
CREATE POLICY identities_of_the_role ON identities
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());
