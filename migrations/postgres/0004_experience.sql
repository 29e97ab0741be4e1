-- The experience layer on PostgreSQL: episodes, skills with their revision history and sources,
-- and the consolidation watermarks. The same tables and columns as SQLite's (harness_mem's 0003 and
-- 0005), typed for PostgreSQL: times are milliseconds since the Unix epoch, UTC (BIGINT); JSON is
-- text checked to parse; internal pks are identities. harness_mem.experience reads and writes these
-- tables through one set of statements on both engines (harness_mem.experience.tables).

-- One row per episode; its rendered text is also an entry (kind 'episode'), linked by `entry_id`:
-- deleting that entry deletes the episode. `id` is the public identity, unique per namespace.
CREATE TABLE episodes (
    pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL,
    namespace TEXT NOT NULL DEFAULT 'default',
    entry_id TEXT,                  -- NULL: structural only, not recallable
    situation TEXT NOT NULL,
    tools TEXT NOT NULL DEFAULT '[]' CHECK (tools::jsonb IS NOT NULL),    -- call order, duplicates kept
    skills TEXT NOT NULL DEFAULT '[]' CHECK (skills::jsonb IS NOT NULL),  -- skills the run followed
    outcome TEXT NOT NULL,
    success SMALLINT CHECK (success IN (0, 1)),                                           -- NULL = nobody said
    tags TEXT NOT NULL DEFAULT '[]' CHECK (tags::jsonb IS NOT NULL),
    created_at BIGINT NOT NULL,
    UNIQUE (namespace, id),
    FOREIGN KEY (namespace, entry_id) REFERENCES entries (namespace, id) ON DELETE CASCADE
);

CREATE INDEX episodes_by_time ON episodes (namespace, created_at);
CREATE INDEX episodes_by_entry ON episodes (namespace, entry_id);

-- The current version of each skill: the whole SKILL.md document is canonical; `description` and
-- `metadata` are copies of its front matter. `version` counts saves in this database (1 = first).
CREATE TABLE skills (
    pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace TEXT NOT NULL DEFAULT 'default',
    name TEXT NOT NULL,
    skill_md TEXT NOT NULL,
    description TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}' CHECK (metadata::jsonb IS NOT NULL),
    version INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (namespace, name)
);

-- Every saved version, oldest first, with why it changed. `episode_id` is a plain value, not a
-- foreign key, so history outlives deleted episodes.
CREATE TABLE skill_revisions (
    pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    skill_pk BIGINT NOT NULL REFERENCES skills (pk) ON DELETE CASCADE,
    version INTEGER NOT NULL CHECK (version >= 1),
    skill_md TEXT NOT NULL,
    origin TEXT NOT NULL,           -- distilled | revised | imported | saved
    rationale TEXT NOT NULL DEFAULT '',
    episode_id TEXT,
    created_at BIGINT NOT NULL,
    UNIQUE (skill_pk, version)
);

-- Which episodes a skill was distilled or revised from.
CREATE TABLE skill_sources (
    skill_pk BIGINT NOT NULL REFERENCES skills (pk) ON DELETE CASCADE,
    episode_pk BIGINT NOT NULL REFERENCES episodes (pk) ON DELETE CASCADE,
    role TEXT NOT NULL DEFAULT 'distilled',   -- distilled | revised
    created_at BIGINT NOT NULL,
    PRIMARY KEY (skill_pk, episode_pk)
);

CREATE INDEX skill_sources_by_episode ON skill_sources (episode_pk);

-- One row per consolidated session: how far its turns (by entries.pk) have been folded into its
-- episode, and how far its facts have been extracted (0: none yet).
CREATE TABLE consolidations (
    namespace TEXT NOT NULL DEFAULT 'default',
    session TEXT NOT NULL,
    episode_id TEXT NOT NULL,
    last_pk BIGINT NOT NULL,
    last_turn_id TEXT NOT NULL,
    turns INTEGER NOT NULL CHECK (turns >= 0),
    facts_pk BIGINT NOT NULL DEFAULT 0,
    facts INTEGER NOT NULL DEFAULT 0 CHECK (facts >= 0),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, session)
);

-- Namespaces enforced by the database, as for the entries (0003): a confined role sees only its
-- namespace's rows; the revisions and sources follow the skill (and episode) they belong to.
ALTER TABLE episodes ENABLE ROW LEVEL SECURITY;
CREATE POLICY episodes_of_the_role ON episodes
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());
ALTER TABLE skills ENABLE ROW LEVEL SECURITY;
CREATE POLICY skills_of_the_role ON skills
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());
ALTER TABLE consolidations ENABLE ROW LEVEL SECURITY;
CREATE POLICY consolidations_of_the_role ON consolidations
    USING (confined_namespace() IS NULL OR namespace = confined_namespace())
    WITH CHECK (confined_namespace() IS NULL OR namespace = confined_namespace());
ALTER TABLE skill_revisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY skill_revisions_of_the_role ON skill_revisions
    USING (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk))
    WITH CHECK (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk));
ALTER TABLE skill_sources ENABLE ROW LEVEL SECURITY;
CREATE POLICY skill_sources_of_the_role ON skill_sources
    USING (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk))
    WITH CHECK (EXISTS (SELECT 1 FROM skills s WHERE s.pk = skill_pk)
                AND EXISTS (SELECT 1 FROM episodes ep WHERE ep.pk = episode_pk));
