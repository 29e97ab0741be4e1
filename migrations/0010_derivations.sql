-- Consolidation's derived entries: topic segments (kind 'summary') and facts (kind 'fact'), written
-- with source 'consolidation' and metadata.source_turns. One row per session: the watermark (turns
-- numbered up to `derived_pk` have been derived from) and what was written so far. harness_mem's
-- experience/ledger.py reads and writes this table. Facts keep their watermark here now: the facts
-- columns of `consolidations` (0005) are no longer read.
CREATE TABLE derivations (
    namespace TEXT NOT NULL DEFAULT 'default',
    session TEXT NOT NULL,
    derived_pk INTEGER NOT NULL,
    segments INTEGER NOT NULL DEFAULT 0 CHECK (segments >= 0),
    facts INTEGER NOT NULL DEFAULT 0 CHECK (facts >= 0),
    updated_at INTEGER NOT NULL,       -- milliseconds since the Unix epoch, UTC
    PRIMARY KEY (namespace, session)
) WITHOUT ROWID;

-- The derived entries of a namespace or session, found without a scan: recall's default lane
-- leaves them out, and forgetting a turn forgets the ones citing it.
CREATE INDEX entries_derived ON entries (namespace, session) WHERE source = 'consolidation';
