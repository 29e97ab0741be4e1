-- A transcript turn's sentences are stored as passages beside a long entry's windows
-- (harness_mem.passages), and recall matches them at a wider margin: a passage says which it is.
-- entry_passages is made when a model is first bound, not by a migration; a store that has it
-- already gets the column here, its rows windows (and summaries' sentences), as they were.
ALTER TABLE IF EXISTS entry_passages ADD COLUMN IF NOT EXISTS sentence boolean NOT NULL DEFAULT false;
