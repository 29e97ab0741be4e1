-- Namespaces enforced by the database for team use. A role listed here (by `harness-mem grant`)
-- reads and writes only its namespace: row-level security on the entries, whatever the client
-- asks. Roles not listed (the owner who migrates, a one-role team) are not confined.
CREATE TABLE namespace_roles (
    role TEXT PRIMARY KEY,
    namespace TEXT NOT NULL
);

-- The namespace the connecting role is confined to, or NULL. SECURITY DEFINER: a confined role
-- needs no right on namespace_roles to be checked against it (and cannot change it).
CREATE FUNCTION confined_namespace() RETURNS TEXT
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT namespace FROM namespace_roles WHERE role = session_user $$;

ALTER TABLE entries ENABLE ROW LEVEL SECURITY;
CREATE POLICY entries_of_the_role ON entries
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());
