-- Corrections keep history and forgetting leaves a tombstone: nothing is overwritten in place.
-- A superseded entry stays, pointing at the entry that replaced it; recall hides it unless asked.
-- A forgotten entry loses its keyword and vector rows at once, and its content at the next purge.
ALTER TABLE entries ADD COLUMN superseded_by TEXT;
ALTER TABLE entries ADD COLUMN superseded_at INTEGER;
ALTER TABLE entries ADD COLUMN forgotten_at INTEGER;

-- remember() finds an exact duplicate (same namespace, kind and content) without a scan.
CREATE INDEX entries_by_content ON entries (namespace, kind, content_hash);
-- Recall skips superseded entries: the few there are, looked up per namespace.
CREATE INDEX entries_superseded ON entries (namespace) WHERE superseded_by IS NOT NULL;
CREATE INDEX entries_forgotten ON entries (forgotten_at) WHERE forgotten_at IS NOT NULL;

-- The readable view shows what recall can return, and which entry replaced an older one.
DROP VIEW memories;
CREATE VIEW memories AS
SELECT
    id,
    namespace,
    kind,
    role,
    session,
    strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1000.0, 'unixepoch') AS time,
    content,
    tags,
    superseded_by
FROM entries
WHERE forgotten_at IS NULL;
