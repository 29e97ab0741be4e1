-- The memory store: canonical entries, their keyword index, and store-wide settings.

-- Canonical rows. `pk` is internal: it keys the derived indexes (FTS5, vec0) and never leaves the
-- library. `id` is the public identity, unique per namespace.
CREATE TABLE entries (
    pk INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    namespace TEXT NOT NULL DEFAULT 'default',
    kind TEXT NOT NULL CHECK (kind IN ('note', 'turn', 'episode', 'fact', 'summary')),
    content TEXT NOT NULL,
    role TEXT,
    session TEXT,
    tags TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags)),
    source TEXT,
    metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    created_at INTEGER NOT NULL,   -- milliseconds since the Unix epoch, UTC
    expires_at INTEGER,            -- same unit; NULL = never
    content_hash TEXT NOT NULL,
    -- What redaction replaced, by kind ({"EMAIL": 2}); never the values. NULL: stored with redaction off.
    redactions TEXT CHECK (redactions IS NULL OR json_valid(redactions)),
    UNIQUE (namespace, id)
);

CREATE INDEX entries_by_time ON entries (namespace, created_at);
CREATE INDEX entries_by_session ON entries (namespace, session, created_at);
CREATE INDEX entries_by_expiry ON entries (expires_at) WHERE expires_at IS NOT NULL;
-- Recall looks up which roles a query names ("what did Caroline say"), case-insensitively.
CREATE INDEX entries_by_role ON entries (namespace, lower(role));

-- Derived keyword index over "role: content" (the speaker is searchable), with CJK runs expanded
-- into bigrams by the library. Contentless: the text already lives in `entries`; rowid = entries.pk.
CREATE VIRTUAL TABLE entries_fts USING fts5(
    text,
    content = '',
    contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

-- Store-wide settings: embedding model identity, redaction choices, and the like.
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
