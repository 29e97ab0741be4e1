-- Compact copies of every entry's embedding, for fast search: the sign bits (48 bytes for 384
-- dimensions) that the in-memory prefilter loads, and a float16 copy for rescoring the shortlist.
-- The exact float32 vectors live in the vec0 table `entries_vec`, created when a store first binds an
-- embedding model, because its dimension is the model's (its identity is in `settings`, `embedder.*`).
CREATE TABLE entry_vectors (
    pk INTEGER PRIMARY KEY REFERENCES entries (pk) ON DELETE CASCADE,
    bits BLOB NOT NULL,
    half BLOB NOT NULL
);

-- Bumped by every transaction that changes vectors, so each process knows when to reload its cache.
INSERT INTO settings (key, value) VALUES ('vectors.generation', '0');
