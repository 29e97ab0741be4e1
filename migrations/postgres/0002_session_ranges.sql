-- A session prefix (`--session-prefix conv-26:`) is answered as a range of session ids in code-point
-- order: an index on the ids in the "C" collation serves it whatever the database's own collation.
CREATE INDEX entries_by_session_bytes ON entries (namespace, (session COLLATE "C"));
