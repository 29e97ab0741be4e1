-- The experience layer: episodes (one per agent run), and the skills distilled from them with their
-- revision history. harness_mem.experience reads and writes these tables.

-- One row per episode. Its rendered text also lives in `entries` (kind 'episode') so that it is
-- recalled like any memory; `entry_id` links the two, and deleting that entry deletes the episode.
-- The fields are what was actually stored, i.e. after redaction. `pk` is internal (it keys the link
-- table); `id` is the public identity, unique per namespace, and equal to the entry's id when the
-- episode was recorded through ExperienceStore.
CREATE TABLE episodes (
    pk INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    namespace TEXT NOT NULL DEFAULT 'default',
    entry_id TEXT,                  -- NULL: structural only, not recallable
    situation TEXT NOT NULL,
    tools TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tools)),     -- call order, duplicates kept
    skills TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(skills)),   -- skills the run followed
    outcome TEXT NOT NULL,
    success INTEGER CHECK (success IN (0, 1)),                       -- NULL = nobody said
    tags TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags)),
    created_at INTEGER NOT NULL,    -- milliseconds since the Unix epoch, UTC
    UNIQUE (namespace, id),
    FOREIGN KEY (namespace, entry_id) REFERENCES entries (namespace, id) ON DELETE CASCADE
);

CREATE INDEX episodes_by_time ON episodes (namespace, created_at);
CREATE INDEX episodes_by_entry ON episodes (namespace, entry_id);

-- The current version of each skill: the whole SKILL.md document is canonical; `description` and
-- `metadata` are copies of its front matter for listing and filtering without parsing YAML.
-- `version` counts saves in this database (1 = first); it is not the ledger's model-revision count,
-- which lives inside the document (metadata.experience.revision).
CREATE TABLE skills (
    pk INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL DEFAULT 'default',
    name TEXT NOT NULL,
    skill_md TEXT NOT NULL,
    description TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    version INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (namespace, name)
);

-- Every saved version, oldest first, with why it changed. `episode_id` names the episode that
-- prompted it; it is a plain value, not a foreign key, so history outlives deleted episodes.
CREATE TABLE skill_revisions (
    pk INTEGER PRIMARY KEY,
    skill_pk INTEGER NOT NULL REFERENCES skills (pk) ON DELETE CASCADE,
    version INTEGER NOT NULL CHECK (version >= 1),
    skill_md TEXT NOT NULL,
    origin TEXT NOT NULL,           -- distilled | revised | imported | saved
    rationale TEXT NOT NULL DEFAULT '',
    episode_id TEXT,
    created_at INTEGER NOT NULL,
    UNIQUE (skill_pk, version)
);

-- Which episodes a skill was distilled or revised from.
CREATE TABLE skill_sources (
    skill_pk INTEGER NOT NULL REFERENCES skills (pk) ON DELETE CASCADE,
    episode_pk INTEGER NOT NULL REFERENCES episodes (pk) ON DELETE CASCADE,
    role TEXT NOT NULL DEFAULT 'distilled',   -- distilled | revised
    created_at INTEGER NOT NULL,
    PRIMARY KEY (skill_pk, episode_pk)
) WITHOUT ROWID;

CREATE INDEX skill_sources_by_episode ON skill_sources (episode_pk);
