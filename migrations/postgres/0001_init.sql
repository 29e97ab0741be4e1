-- The memory store on PostgreSQL: canonical entries with their derived keyword rows, and settings.
-- The same columns as SQLite's `entries` (harness_mem's 0001, 0009), so a row moves between engines
-- as it is. Times are milliseconds since the Unix epoch, UTC; tags and metadata are JSON text.

CREATE TABLE entries (
    pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL,
    namespace TEXT NOT NULL DEFAULT 'default',
    kind TEXT NOT NULL CHECK (kind IN ('note', 'turn', 'episode', 'fact', 'summary')),
    content TEXT NOT NULL,
    role TEXT,
    session TEXT,
    tags TEXT NOT NULL DEFAULT '[]' CHECK (tags::jsonb IS NOT NULL),
    source TEXT,
    metadata TEXT NOT NULL DEFAULT '{}' CHECK (metadata::jsonb IS NOT NULL),
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    content_hash TEXT NOT NULL,
    redactions TEXT,
    superseded_by TEXT,
    superseded_at BIGINT,
    forgotten_at BIGINT,
    -- Derived, written with the row: the keyword index's tokens (the same tokens SQLite's FTS5
    -- stores: unicode61, diacritics removed, Porter stems) with their positions, and their count
    -- (what BM25 normalises by). NULL once the entry is forgotten.
    tokens TSVECTOR,
    token_count INTEGER,
    UNIQUE (namespace, id)
);

CREATE INDEX entries_tokens ON entries USING gin (tokens);
CREATE INDEX entries_by_time ON entries (namespace, created_at);
CREATE INDEX entries_by_session ON entries (namespace, session, created_at);
CREATE INDEX entries_by_kind ON entries (namespace, kind, created_at);
CREATE INDEX entries_by_expiry ON entries (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX entries_by_role ON entries (namespace, lower(role));
CREATE INDEX entries_by_hash ON entries (namespace, kind, content_hash);
CREATE INDEX entries_superseded ON entries (namespace) WHERE superseded_by IS NOT NULL;
CREATE INDEX entries_forgotten ON entries (pk) WHERE forgotten_at IS NOT NULL;

CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

INSERT INTO settings (key, value) VALUES ('data.version', '0');
