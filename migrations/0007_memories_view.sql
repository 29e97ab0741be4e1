-- A readable view of the memories, for people who open the file with sqlite-utils, datasette or the
-- sqlite3 shell: one row per entry (expired ones included until they are purged), times as ISO-8601
-- UTC text instead of milliseconds, tags as a JSON array. The library never reads it.
CREATE VIEW memories AS
SELECT
    id,
    namespace,
    kind,
    role,
    session,
    strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1000.0, 'unixepoch') AS time,
    content,
    tags
FROM entries;
