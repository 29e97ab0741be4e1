-- Sign bits of every entry's embedding: the in-memory prefilter loads these (48 bytes an entry for
-- 384 dimensions) instead of every float vector. The float vectors themselves live in the vec0 table
-- `entries_vec`, created when a store first binds an embedding model, because its dimension is the
-- model's (the model's identity is recorded in `settings`, keys `embedder.*`).
CREATE TABLE entry_bits (
    pk INTEGER PRIMARY KEY REFERENCES entries (pk) ON DELETE CASCADE,
    bits BLOB NOT NULL
);

-- Bumped by every transaction that changes vectors, so each process knows when to reload its cache.
INSERT INTO settings (key, value) VALUES ('vectors.generation', '0');
