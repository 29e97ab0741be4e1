-- A vector search looks up each of its candidates (some 200 past its k, where entries keep later
-- windows) under the recall's filters, for its speaker: a random page of the entries' table each,
-- most of them cold at the server's default shared_buffers in a large store (at 200,000 entries
-- the search statement took 1.27x the raw query warm, 1.5-1.8x in the bench). The columns those
-- lookups read, beside the pk, in an index of their own (12 MB against the table's 154 there) that
-- an index-only scan answers where the visibility map marks the pages (VACUUM: autovacuum, and
-- the end of a large import).
CREATE INDEX entries_candidates ON entries (pk)
    INCLUDE (namespace, forgotten_at, superseded_by, expires_at, source, kind, role, session);
