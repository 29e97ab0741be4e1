-- Offline consolidation (`harness-mem consolidate`): which sessions' transcripts have been turned
-- into episodes (and facts), and how far. harness_mem.consolidate reads and writes this table.

-- One row per consolidated session. A turn is "new" when its entries.pk is above `last_pk`: pks grow
-- as rows are written, so this finds late writers too, and expiring old turns never makes a session
-- look changed. `episode_id` is the episode kept up to date for the session (updated in
-- place when new turns arrive). Facts have their own watermark because a model call can fail and
-- be retried later without redoing the episode; 0 means "no facts extracted yet".
CREATE TABLE consolidations (
    namespace TEXT NOT NULL DEFAULT 'default',
    session TEXT NOT NULL,
    episode_id TEXT NOT NULL,
    last_pk INTEGER NOT NULL,          -- the last turn folded into the episode
    last_turn_id TEXT NOT NULL,        -- that turn's public id, for people reading the table
    turns INTEGER NOT NULL CHECK (turns >= 0),              -- turns folded in so far
    facts_pk INTEGER NOT NULL DEFAULT 0,                    -- facts extracted up to this turn
    facts INTEGER NOT NULL DEFAULT 0 CHECK (facts >= 0),    -- facts written so far
    created_at INTEGER NOT NULL,       -- milliseconds since the Unix epoch, UTC
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, session)
) WITHOUT ROWID;
